"""Planning with real models: the embedded SmolLM2 in-process, and the openai: provider against a real llama_cpp.server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from planexec import Engine, Plan, Registry, RunStatus
from planexec.models.profile import ProfileTable
from planexec.models.providers import ProviderOptions, resolve_model
from planexec.planning.planner import Planner
from planexec.planning.stream import PlanStream

pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (pip install 'planexec[local]')")

GOAL = "Say hello, say world, then join the two greetings with a space."
# SmolLM2 behind llama.cpp's server is a small model: it says so, as a user would in planexec.toml
SMALL = {"openai:smollm2": {"size": "small", "compact_plans": False}}


def _registry() -> Registry:
    """Text tools only: a 135M model must not be offered `sleep`, which it likes to call for minutes."""
    from planexec.workers import builtins
    from planexec.workers.tools import Tool

    registry = Registry()
    for fn in (builtins.echo, builtins.concat):
        registry.add_tool(Tool(fn))
    return registry


def _check_run(registry: Registry, plan: Plan) -> None:
    result = Engine(registry, default_timeout=5).run_sync(plan)
    assert result.status in (RunStatus.SUCCEEDED, RunStatus.PARTIAL), result.reason
    assert all(rec.state.terminal for rec in result.steps.values())


def test_the_embedded_model_writes_a_valid_plan_that_runs(allow_requests):
    registry = _registry()
    model = resolve_model("local:smollm2")
    planner = Planner(model, registry, max_steps=3, max_tokens=400)
    assert planner.positional  # a grammar-decoding model gets the DAG-by-construction schema
    planning = asyncio.run(planner.draft(GOAL))
    assert planning.plan.steps and planning.plan.goal == GOAL
    first = planning.drafts[0]
    assert first.usage.input_tokens > 500 and first.usage.output_tokens > 10  # exact counts from llama
    _check_run(registry, planning.plan)


def test_the_openai_provider_plans_against_a_real_server_and_the_plan_runs(allow_requests, llama_server):
    registry = _registry()
    model = resolve_model("openai:smollm2", ProviderOptions(base_url=llama_server), profiles=ProfileTable(SMALL))
    planning = asyncio.run(Planner(model, registry, max_steps=3, positional=True, max_tokens=400).draft(GOAL))
    assert planning.usage.model_calls == len(planning.drafts)
    assert planning.usage.input_tokens > 500
    assert planning.usage.unpriced_calls == planning.usage.model_calls  # a self-hosted model has no price: unknown, not $0
    _check_run(registry, planning.plan)


def test_a_plan_streams_from_a_real_server_into_the_engine(allow_requests, llama_server):
    registry = _registry()
    model = resolve_model("openai:smollm2", ProviderOptions(base_url=llama_server), profiles=ProfileTable(SMALL))

    async def go():
        stream = PlanStream(Planner(model, registry, max_steps=3, positional=True, max_tokens=400), GOAL)
        run = Engine(registry, default_timeout=5).start_streaming(stream)
        return await run.result(), stream

    result, stream = asyncio.run(go())
    assert result.status in (RunStatus.SUCCEEDED, RunStatus.PARTIAL, RunStatus.FAILED), result.reason
    assert all(rec.state.terminal for rec in result.steps.values())
    if result.status is not RunStatus.FAILED:
        assert stream.plan is not None and result.plan.content_hash == stream.plan.content_hash
        assert set(stream.parsed_at) == set(result.plan.step_ids)


def test_planexec_plan_with_a_server_url_writes_a_plan_file(llama_server, tmp_path):
    """The model behind the server is marked small in planexec.toml, so it gets the short prompt and JSON plans."""
    out = tmp_path / "plan.json"
    (tmp_path / "planexec.toml").write_text('[planexec.model_profiles."openai:smollm2"]\nsize = "small"\ncompact_plans = false\n')
    env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "1", "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "plan", GOAL, "--base-url", llama_server, "--model", "openai:smollm2",
         "--max-steps", "3", "-o", str(out), "--workspace", str(tmp_path / "ws")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "planner: openai:smollm2 (--model openai:smollm2)" in proc.stderr
    assert "planner profile: small, tool calls, structured output (model_profiles in planexec.toml over its provider's)" in proc.stderr
    plan = Plan.from_json(out.read_text())
    assert plan.goal == GOAL and 1 <= len(plan.steps) <= 3
    assert json.loads(out.read_text())["content_hash"] == plan.content_hash


def test_the_embedded_model_revises_a_failed_plan_and_the_run_goes_on(allow_requests):
    """A real replan: the grammar lets new steps depend only on finished ones, so whatever it writes runs."""
    from planexec.planning.replanner import PlannerReplanner
    from planexec.workers.tools import Tool

    registry = _registry()

    def flaky(text: str) -> str:
        """Fails: the service is down."""
        raise RuntimeError("service down")

    registry.add_tool(Tool(flaky))
    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": GOAL,
            "steps": [
                {"id": "s1", "action": "echo", "parameters": {"value": "hello"}},
                {"id": "s2", "action": "flaky", "parameters": {"text": "world"}, "failure_action": "replan"},
                {"id": "s3", "action": "concat", "parameters": {"parts": ["${s1}", "${s2}"], "separator": " "}},
            ],
        }
    )
    model = resolve_model("local:smollm2")
    planner = Planner(model, registry, max_steps=3, max_tokens=400)
    result = Engine(registry, default_timeout=120, replanner=PlannerReplanner(planner), max_replans=1).run_sync(plan)
    # whatever a 135M model writes, the outcome is recorded and typed; s1 never ran again
    assert result.status is not RunStatus.RUNNING and all(rec.state.terminal for rec in result.steps.values())
    assert result.steps["s1"].attempts == 1 and result.steps["s1"].output.value == "hello"
    assert len(result.versions) >= 2 or result.error is not None
    if len(result.versions) >= 2:
        revised = result.versions[1].plan
        assert revised.step_ids[0] == "s1" and all(int(sid[1:]) >= 4 for sid in revised.step_ids[1:])
    assert result.usage_by_role()["planner"].model_calls >= 1
