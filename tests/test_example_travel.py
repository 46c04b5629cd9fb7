"""The travel example end to end: the cheapest flight landing before 5 p.m. Friday, after the first search fails.

The planner is a scripted model: it writes the plan for the goal, then the
revision the monitor asks for when the Boston search is down (search the
nearby airports, pick again). The finished steps are kept: their tools run
once. The pick is computed by a tool, so the deliverable is checkable: WN2290
from Manchester, $139 (a cheaper flight from Providence lands at 17:35, and
the cheapest of all flies on Saturday).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from planexec import Plan, RunStatus, Team, Toolbox
from planexec.cli.main import main
from planexec.models.providers import register_provider
from planexec.testing import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "travel"
PLAN = EXAMPLE / "plan.json"
TOOLS = EXAMPLE / "tools.py"
GOAL = "Find the cheapest flight from Boston to Chicago O'Hare that arrives before 5 p.m. on Friday, December 4, 2026"


def _step(sid: str, worker: str, action: str, parameters: dict, *, depends_on: list[str] = (), **extra: object) -> dict:
    return {
        "id": sid,
        "worker": worker,
        "action": action,
        "instruction": action,
        "parameters": parameters,
        "depends_on": list(depends_on),
        **extra,
    }


# what a capable planner writes for the goal: the deadline and the alternatives first, then the search, then the pick
DRAFT = {
    "steps": [
        _step("s1", "trip-planner", "arrival_deadline", {"weekday": "Friday", "week_of": "2026-11-30", "before": "17:00"}),
        _step("s2", "trip-planner", "nearby_airports", {"airport": "BOS", "max_miles": 80}),
        _step(
            "s3", "flight-search", "search_flights", {"origin": "BOS", "destination": "ORD", "day": "${s1.date}"},
            depends_on=["s1", "s2"], failure_action="replan",
        ),
        _step(
            "s4", "trip-planner", "cheapest_arriving_before", {"searches": ["${s3}"], "arrive_by": "${s1.arrive_by}"},
            depends_on=["s1", "s3"],
        ),
    ],
    "answer_step": "s4",
}  # fmt: skip


def revision(deadline: str) -> dict:
    """What the planner writes when told the Boston search is down: search the nearby airports it found, pick again."""
    return {
        "steps": [
            _step("s5", "flight-search", "search_flights", {"origin": "MHT", "destination": "ORD", "day": f"${{{deadline}.date}}"}),
            _step("s6", "flight-search", "search_flights", {"origin": "PVD", "destination": "ORD", "day": f"${{{deadline}.date}}"}),
            _step(
                "s7", "trip-planner", "cheapest_arriving_before",
                {"searches": ["${s5}", "${s6}"], "arrive_by": f"${{{deadline}.arrive_by}}"}, depends_on=["s5", "s6"],
            ),
        ],
        "answer_step": "s7",
    }  # fmt: skip


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tools' call log in a fresh folder; Boston's search is down (the example's default)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAVEL_STATE_DIR", str(tmp_path / "state"))
    for key in ("TRAVEL_DOWN_AIRPORTS", "TRAVEL_FLIGHTS", "OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path / "state"


def calls(state: Path) -> Counter[str]:
    """How often each tool ran (searches by origin)."""
    log = [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]
    return Counter(c["tool"] if c["tool"] != "search_flights" else f"search_flights:{c['origin']}" for c in log)


def test_the_goal_is_planned_the_failed_search_replanned_over_nearby_airports_and_the_finished_steps_kept(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planner = ScriptedModel([json.dumps(DRAFT), json.dumps(revision("s1"))], name="travel:planner")
    register_provider("travel", lambda model, options: planner, replace=True)
    code = main(["run", GOAL, "--tools", str(TOOLS), "--model", "travel:planner", "--yes", "--json", "--no-store"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    result = json.loads(out)
    assert result["status"] == "succeeded"
    # the deliverable: the cheapest flight landing before 17:00 on Friday, computed by the pick tool
    assert result["answer"]["flight_id"] == "WN2290" and result["answer"]["price"] == 139
    assert "WN2290 from MHT" in result["answer"]["summary"]
    # version 2 kept the finished steps and replaced the failed search and what depended on it
    v1, v2 = result["versions"]
    assert v1["plan"]["steps"][2]["step_id"] == "s3" and "flight search for BOS is down" in v2["reason"]
    assert v2["diff"]["kept"] == ["s1", "s2"] and v2["diff"]["removed"] == ["s3", "s4"] and v2["diff"]["added"] == ["s5", "s6", "s7"]
    assert {sid: r["state"] for sid, r in result["steps"].items()} == {
        "s1": "succeeded", "s2": "succeeded", "s5": "succeeded", "s6": "succeeded", "s7": "succeeded",
    }  # fmt: skip
    # the finished steps never ran again: one call each; the failed search once; each nearby airport once
    assert calls(state) == {
        "arrival_deadline": 1, "nearby_airports": 1, "search_flights:BOS": 1, "search_flights:MHT": 1,
        "search_flights:PVD": 1, "cheapest_arriving_before": 1,
    }  # fmt: skip
    # the replanner was shown the failure and the nearby airports the kept step found (its own data: trusted)
    told = planner.requests[1].messages[-1].content
    assert "the flight search for BOS is down" in told and '"code": "MHT"' in told and '"code": "PVD"' in told


def test_the_plan_file_replans_when_a_planner_is_there_and_keeps_its_finished_steps(state: Path) -> None:
    planner = ScriptedModel([json.dumps(revision("deadline"))])
    team = Team(planner, toolbox=Toolbox(modules=[str(TOOLS)]))
    result = team.execute_sync(Plan.from_json(PLAN.read_text()))
    assert result.status is RunStatus.SUCCEEDED, result.reason
    assert result.answer["flight_id"] == "WN2290" and result.answer["price"] == 139
    assert result.versions[1].diff.kept == ["deadline", "airports"]
    assert calls(state)["arrival_deadline"] == 1 and calls(state)["nearby_airports"] == 1
    assert result.steps["deadline"].output.provenance.plan_version == 1  # kept from version 1


def test_the_plan_file_from_the_command_line_replans_on_the_planner_model_given(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``planexec run --plan`` gives a plan whose step asks to replan a replanner on goal mode's planner model (--model),
    over the plan's own tools: the README's command, with a scripted model in place of a real one."""
    planner = ScriptedModel([json.dumps(revision("deadline"))], name="travel:replanner")
    register_provider("travel", lambda model, options: planner, replace=True)
    code = main(["run", "--plan", str(PLAN), "--tools", str(TOOLS), "--model", "travel:replanner", "--yes", "--json", "--no-store"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    result = json.loads(out)
    assert result["status"] == "succeeded" and result["answer"]["flight_id"] == "WN2290" and result["answer"]["price"] == 139
    assert result["versions"][1]["diff"]["kept"] == ["deadline", "airports"]
    assert calls(state)["arrival_deadline"] == 1 and calls(state)["nearby_airports"] == 1 and calls(state)["search_flights:BOS"] == 1
    assert len(planner.requests) == 1  # one call: the revision (the plan file itself was not planned)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m planexec ARGS`` from the checkout's root, as the example's README writes it."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRAVEL_")}
    return subprocess.run(
        [sys.executable, "-m", "planexec", *args], cwd=ROOT, env={**environment, **env}, capture_output=True, text=True, timeout=120
    )


def test_the_readme_commands_run_from_the_checkout(tmp_path: Path) -> None:
    command = ["run", "--plan", "examples/travel/plan.json", "--tools", "examples/travel/tools.py", "--yes", "--json"]
    store = ["--store", str(tmp_path / "runs.db")]
    # with no replans allowed, the Boston search is down and the run says it wants a new plan
    down = cli(*command, "--max-replans", "0", *store, env={"TRAVEL_STATE_DIR": str(tmp_path / "a")})
    assert down.returncode == 1 and "Traceback" not in down.stderr
    result = json.loads(down.stdout)
    assert result["status"] == "replan_requested" and result["replan"]["step_id"] == "search"
    assert "the flight search for BOS is down" in result["steps"]["search"]["error"]["message"]
    # with Boston's search up, the same plan finds Boston's cheapest flight landing in time
    up = cli(*command, *store, env={"TRAVEL_STATE_DIR": str(tmp_path / "b"), "TRAVEL_DOWN_AIRPORTS": ""})
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["answer"]["flight_id"] == "AA2210"


def test_bad_inputs_name_the_step_and_field(state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = json.loads(PLAN.read_text())
    plan["steps"][0]["parameters"]["before"] = "5pm"
    plan["steps"][1]["parameters"]["airport"] = "Boston"
    (tmp_path / "bad.json").write_text(json.dumps(plan))
    assert main(["validate", "bad.json", "--tools", str(TOOLS)]) == 1
    out = capsys.readouterr().out
    assert "step 'deadline' · parameters.before · wrong_type" in out and "(got '5pm')" in out
    assert "step 'airports' · parameters.airport · wrong_type" in out and "(got 'Boston')" in out
    # a damaged dataset fails the first step that reads it, naming the file; nothing else runs
    (tmp_path / "broken.json").write_text('{"airports": ')
    env = {"TRAVEL_STATE_DIR": str(tmp_path / "c"), "TRAVEL_FLIGHTS": str(tmp_path / "broken.json"), "TRAVEL_DOWN_AIRPORTS": ""}
    proc = cli("run", "--plan", "examples/travel/plan.json", "--tools", "examples/travel/tools.py", "--yes", "--no-store", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "airports: failed" in proc.stdout and "broken.json' is not valid JSON" in proc.stdout
    assert "status: aborted" in proc.stdout
