"""Every refusal is visible, and a refusal that breaks the plan is not a success.

A side-effecting call the plan granted, which nobody can approve (no approver
configured) or a person denies, fails its step (`approval_required`,
`approval_denied`) and the failure action applies; a call off the plan (not
granted, quarantined) is the contract working and leaves the step alone. Every
refused call, a schema's refusal included, is on the step's record and in the
events; the run counts them by rule, and the CLI and the console say so.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from rich.console import Console

from planexec import Plan, RunStatus, Team
from planexec.cli.progress import print_summary
from planexec.engine.results import ErrorInfo, describe_refused
from planexec.plan.capabilities import Constraint
from planexec.team.settings import ReviewOptions, Toolbox
from planexec.testing import ScriptedModel, tool_call
from planexec.workers.gate import CallRecord

SRC = Path(__file__).resolve().parent.parent / "src" / "planexec"


def _team(tmp_path, answers, *, tools=(), store=None, **review):
    """A team of the built-in roles on a scripted model; `review` is `ReviewOptions`' (auto_approve, call_approver...)."""
    (tmp_path / "ws").mkdir(exist_ok=True)
    model = ScriptedModel(answers)
    return Team(
        model, tools=tools, store=store, toolbox=Toolbox(roles=True, workspace=tmp_path / "ws"), review=ReviewOptions(**review)
    ), model


def _plan(*steps):
    return Plan.model_validate({"plan_id": "p", "goal": "Write the report", "steps": list(steps)})


def _coder(**extra):
    return {"id": "c", "worker": "coder", "action": "code", "instruction": "Write hello to out.txt", **extra}


def test_the_plans_own_call_with_no_approver_fails_its_step_and_says_how_to_configure_one(tmp_path):
    team, model = _team(tmp_path, [tool_call("write_file", path="out.txt", content="hello"), "done, I think"])
    result = team.execute_sync(_plan(_coder()))
    rec = result.steps["c"]
    assert result.status is RunStatus.ABORTED and rec.state.value == "failed"  # the default failure action aborts
    assert rec.error.rule == "approval_required"
    for fix in ("--yes", "call_approver", "planexec approve"):
        assert fix in rec.error.message
    assert len(model.requests) == 1  # the worker was not asked to go on as if it had written the file
    assert [(c.tool, c.rule, c.decided_by, c.ran) for c in rec.calls] == [("write_file", "approval_required", "no approver", False)]
    assert not (tmp_path / "ws" / "out.txt").exists()
    assert result.refused_calls == {"approval_required": 1}


def test_the_failure_action_of_a_step_refused_approval_applies(tmp_path):
    team, _ = _team(tmp_path, [tool_call("write_file", path="out.txt", content="hello")])
    result = team.execute_sync(_plan(_coder(failure_action={"kind": "skip"}), {"id": "after", "action": "list_files", "depends_on": ["c"]}))
    assert result.steps["c"].state.value == "failed" and result.steps["c"].error.rule == "approval_required"
    assert result.status is not RunStatus.SUCCEEDED and result.refused_calls == {"approval_required": 1}


def test_a_persons_denial_of_the_plans_own_call_fails_the_step_too(tmp_path):
    def deny(request):
        return False

    team, _ = _team(tmp_path, [tool_call("write_file", path="out.txt", content="hello"), "done"], call_approver=deny)
    result = team.execute_sync(_plan(_coder()))
    assert result.steps["c"].error.rule == "approval_denied" and "not approved by deny" in result.steps["c"].error.message
    assert result.status is not RunStatus.SUCCEEDED and result.refused_calls == {"approval_denied": 1}


def test_a_call_off_the_plan_is_refused_and_the_step_goes_on(tmp_path):
    team, _ = _team(tmp_path, [tool_call("run_python", code="print(1)"), "no code then"], auto_approve=True)
    result = team.execute_sync(_plan(_coder(instruction="look around", capabilities=[{"tool": "list_files"}])))
    assert result.status is RunStatus.SUCCEEDED  # the contract working: the step's own outcome is the worker's
    assert result.refused_calls == {"not_granted": 1}


def test_a_call_the_tools_schema_refuses_is_recorded_with_an_event(tmp_path):
    team, model = _team(
        tmp_path, [tool_call("write_file", path="out.txt"), tool_call("write_file", path="out.txt", content="hi"), "written"]
    )
    events = []

    async def go():
        run = team.start(_plan(_coder()), call_approver=lambda request: True)
        run.subscribe(events.append)
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED and (tmp_path / "ws" / "out.txt").read_text() == "hi"
    first, second = result.steps["c"].calls
    assert (first.rule, first.allowed, first.ran, second.ran) == ("bad_arguments", False, False, True)
    assert "content" in first.reason and "bad_arguments" in model.requests[1].messages[-1].content  # the model is told why
    decided = [e.call for e in events if e.type == "tool_call_decided"]
    assert [(c.rule, c.ran) for c in decided] == [("bad_arguments", False), (None, True)]
    assert result.refused_calls == {"bad_arguments": 1}


def test_the_run_report_and_show_name_the_refused_calls_by_rule(tmp_path):
    team, _ = _team(tmp_path, [tool_call("write_file", path="out.txt", content="hello")])
    result = team.execute_sync(_plan(_coder()))
    console = Console(record=True, width=200)
    print_summary(console, result)
    assert "1 refused tool call: approval_required 1" in console.export_text()
    assert describe_refused({"quarantine": 2, "not_granted": 1}) == "3 refused tool calls: quarantine 2, not_granted 1"
    assert describe_refused({}) == ""


def test_a_long_argument_is_recorded_cut_and_says_so(tmp_path):
    long = "x" * 5_000
    team, _ = _team(tmp_path, [tool_call("write_file", path="out.txt", content=long), "written"], auto_approve=True)
    result = team.execute_sync(_plan(_coder()))
    (call,) = result.steps["c"].calls
    assert call.ran and call.truncated == ["content"]
    assert call.arguments["content"].endswith("… [truncated: 2,000 of 5,000 characters shown]")
    assert call.arguments["path"] == "out.txt" and (tmp_path / "ws" / "out.txt").read_text() == long  # only the record is cut
    uncut = CallRecord(step_id="s", attempt=1, worker="w", tool="t", allowed=True)
    assert "truncated" not in json.loads(uncut.to_json())


def test_bounds_compare_type_strictly():
    assert Constraint(values=[1]).admits(True) is not None and Constraint(values=[0]).admits(False) is not None
    assert Constraint(values=[True]).admits(1) is not None and Constraint(values=["1"]).admits(1) is not None
    assert Constraint(values=[1]).admits(1) is None and Constraint(values=[1]).admits(1.0) is None  # one number
    assert Constraint(values=[[1, "a"]]).admits([True, "a"]) is not None and Constraint(values=[[1, "a"]]).admits([1, "a"]) is None
    assert Constraint(values=[None]).admits(0) is not None and Constraint(values=[{"a": 0}]).admits({"a": False}) is not None


def test_every_rule_the_engine_and_gate_set_is_described():
    described = set(re.findall(r"[a-z]+(?:_[a-z]+)*", ErrorInfo.model_fields["rule"].description))
    engine = SRC / "engine"
    used = set()
    for path in [*engine.glob("*.py"), SRC / "workers" / "gate.py", SRC / "workers" / "worker.py"]:
        text = path.read_text()
        used |= set(re.findall(r'_error\("([a-z_]+)"', text)) | set(re.findall(r'ErrorInfo\(\s*rule="([a-z_]+)"', text))
        used |= set(re.findall(r'run_error\("([a-z_]+)"', text)) | set(re.findall(r'CallRefusedError\([^)]*?rule="([a-z_]+)"', text, re.S))
    used |= set(re.findall(r'"([a-z_]+)": "[A-Za-z]+Error"', (engine / "state.py").read_text()))  # the run's rules
    assert used and used <= described, used - described
    gate = (SRC / "workers" / "gate.py").read_text()
    call_rules = set(re.findall(r'_refused\(\s*tool(?:\.name)?, [a-z.]+, "([a-z_]+)"', gate)) | {"bad_arguments", "turn_limit"}
    record_doc = CallRecord.__doc__ or ""
    assert call_rules and all(f"``{rule}``" in record_doc for rule in call_rules), call_rules
