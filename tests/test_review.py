"""The plan review: a person at a (scripted) terminal, a fake editor, --yes, and ``planexec run`` with policies."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from rich.console import Console

from planexec import Plan, Registry
from planexec.cli.main import main
from planexec.cli.review_terminal import ReviewTerminal, run_review
from planexec.governance.policies import PolicyContext
from planexec.governance.review import ReviewOutcome
from planexec.governance.rules import MaxSteps, RequiresOrder, ToolsNeedPerson
from planexec.models.providers import register_provider
from planexec.testing import ScriptedModel, scripted_tool

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_PLAN = ROOT / "examples" / "deploy" / "plan.json"
DEPLOY_TOOLS = ROOT / "examples" / "deploy" / "tools.py"

# Each run of the fake editor writes the next queued text over the file it was given.
FAKE_EDITOR = """\
import json, sys
queue_path, target = sys.argv[1], sys.argv[2]
queue = json.load(open(queue_path))
text = queue.pop(0)
json.dump(queue, open(queue_path, "w"))
if text == "FAIL":
    sys.exit(3)
open(target, "w").write(text)
"""


def plan_data(*steps: tuple[str, str, list[str]]) -> dict:
    return {"plan_id": "p", "goal": "ship it", "steps": [{"id": s, "action": a, "depends_on": d} for s, a, d in steps]}


THREE = plan_data(("test", "run_tests", []), ("backup", "backup_db", ["test"]), ("deploy", "deploy_service", ["backup"]))
TWO = plan_data(("backup", "backup_db", []), ("deploy", "deploy_service", ["backup"]))


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    for name in ("run_tests", "backup_db", "deploy_service"):
        reg.add_tool(scripted_tool(name))
    return reg


class Session:
    """A scripted terminal: answers in order (then end of input), output captured, a fake editor."""

    def __init__(self, tmp_path: Path, answers: Iterable[str], edits: Iterable[str] = ()) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.out = io.StringIO()
        self.queue = tmp_path / "edits.json"
        self.queue.write_text(json.dumps(list(edits)))
        script = tmp_path / "fake_editor.py"
        script.write_text(FAKE_EDITOR)
        self.terminal = ReviewTerminal(
            Console(file=self.out, width=160, color_system=None),
            ask=self.ask,
            editor=f"{sys.executable} {script} {self.queue}",
        )

    def ask(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)

    @property
    def text(self) -> str:
        return self.out.getvalue()

    def edits_left(self) -> int:
        return len(json.loads(self.queue.read_text()))


def review(session: Session, registry: Registry, policies=(), plan: dict = THREE, **options) -> ReviewOutcome:
    return run_review(Plan.from_data(plan), policies, PolicyContext(registry=registry), terminal=session.terminal, **options)


# --- a person at the terminal ------------------------------------------------------------


def test_approve_shows_the_plan_its_dag_and_the_verdicts(tmp_path, registry) -> None:
    s = Session(tmp_path, ["a"])
    outcome = review(s, registry, [ToolsNeedPerson("deploy_*")])
    assert outcome.approved and outcome.by == "person" and not outcome.edited
    assert (
        outcome.reason
        == "approved by a person after escalation: needs_person: step 'deploy' calls 'deploy_service' (matches 'deploy_*'): a person must approve it"
    )
    assert "plan p · 3 steps" in s.text  # the table
    assert "└── deploy tool.deploy_service" in s.text  # the DAG
    assert "needs_person" in s.text and "policies ask a person to approve the whole plan" in s.text
    assert s.prompts == ["approve, edit, reject or quit? [a/e/r/q] "]


def test_reject_asks_for_a_reason_and_records_it(tmp_path, registry) -> None:
    s = Session(tmp_path, ["x", "r", "not during the freeze"])
    outcome = review(s, registry)
    assert not outcome.approved and outcome.by == "person" and outcome.reason == "not during the freeze"
    assert "answer a (approve), e (edit), r (reject) or q (quit)" in s.text
    assert s.prompts[-1] == "reason for rejecting: "


@pytest.mark.parametrize("answers", [["q"], []])
def test_quit_or_end_of_input_rejects_without_running(tmp_path, registry, answers) -> None:
    outcome = review(Session(tmp_path, answers), registry)
    assert outcome.decision == "reject" and outcome.reason == "the person quit the review without running the plan"


def test_a_valid_edit_is_re_reviewed_by_the_policies_and_approved(tmp_path, registry) -> None:
    s = Session(tmp_path, ["a", "e", "a"], edits=[json.dumps(TWO)])
    outcome = review(s, registry, [MaxSteps(2)])
    # the first 'a' is refused: max_steps rejected the 3-step plan; the edit drops a step
    assert "a policy rejected this plan: it cannot be approved as it is" in s.text
    assert s.prompts[:2] == ["edit, reject or quit? [e/r/q] "] * 2
    assert outcome.approved and outcome.edited and outcome.plan.step_ids == ["backup", "deploy"]
    assert (outcome.plan.version, outcome.plan.revises) == (2, 1)
    assert [v.decision for v in outcome.verdicts] == ["approve"]  # the verdicts on the edited plan
    assert "the edited plan is valid (v2); the policies review it again" in s.text
    assert "changes since the plan before the edit:\nplan v1 -> v2\n- test\n~ backup (depends_on)" in s.text


def test_an_invalid_edit_shows_every_problem_and_can_be_fixed(tmp_path, registry) -> None:
    broken = plan_data(("backup", "backup_db", ["nowhere"]), ("deploy", "launch_rockets", ["backup"]))
    s = Session(tmp_path, ["e", "e", "a"], edits=[json.dumps(broken), json.dumps(TWO)])
    outcome = review(s, registry)
    assert "the edited plan is not valid:\nplan 'p' has 2 problems:" in s.text
    assert "step 'backup' · depends_on · unknown_dependency: depends on 'nowhere'" in s.text
    assert "step 'deploy' · action · unknown_action" in s.text
    assert "edit again or discard the edit? [e/d] " in s.prompts
    assert outcome.approved and outcome.plan.step_ids == ["backup", "deploy"] and s.edits_left() == 0


def test_an_edit_that_is_not_json_names_the_line(tmp_path, registry) -> None:
    s = Session(tmp_path, ["e", "d", "a"], edits=['{"plan_id": "p",\n  "goal": }'])
    outcome = review(s, registry)
    assert "malformed_json: Expecting value at line 2 column 11" in s.text
    assert outcome.approved and not outcome.edited


def test_an_edit_can_be_discarded(tmp_path, registry) -> None:
    s = Session(tmp_path, ["e", "d", "a"], edits=[json.dumps(plan_data(("a", "nope", [])))])
    outcome = review(s, registry)
    assert "the edit is discarded; the plan is as it was" in s.text
    assert outcome.approved and not outcome.edited and outcome.plan == Plan.from_data(THREE)


def test_an_editor_that_fails_or_changes_nothing_leaves_the_plan(tmp_path, registry) -> None:
    s = Session(tmp_path, ["e", "e", "a"], edits=["FAIL", Plan.from_data(THREE).to_json(indent=4)])
    outcome = review(s, registry)
    assert "exited with status 3: the edit is discarded" in s.text
    assert "the edit changes nothing the plan does" in s.text
    assert outcome.approved and not outcome.edited


def test_a_missing_editor_is_reported(tmp_path, registry) -> None:
    s = Session(tmp_path, ["e", "q"])
    s.terminal.editor = str(tmp_path / "no-such-editor")
    outcome = review(s, registry)
    assert "cannot start the editor" in s.text and "set $EDITOR" in s.text and not outcome.approved


def test_a_revision_shows_the_diff_against_the_approved_version(tmp_path, registry) -> None:
    approved = Plan.from_data(TWO)
    revised = Plan.from_data({**THREE, "version": 2, "revises": 1})
    s = Session(tmp_path, ["a"])
    outcome = run_review(revised, [ToolsNeedPerson("run_*")], PolicyContext(registry=registry, previous=approved), terminal=s.terminal)
    assert "changes since the approved version v1:\nplan v1 -> v2\n+ test\n~ backup (depends_on)" in s.text
    assert "policies ask a person to approve the new or changed steps: test" in s.text
    assert outcome.approved


# --- without a person ------------------------------------------------------------------------


def test_yes_approves_an_escalation_and_records_it(tmp_path, registry) -> None:
    s = Session(tmp_path, [])
    outcome = review(s, registry, [ToolsNeedPerson("deploy_*")], yes=True)
    assert outcome.approved and outcome.by == "--yes"
    assert outcome.reason.startswith("escalation approved by --yes: needs_person: step 'deploy' calls 'deploy_service'")
    assert s.prompts == []


def test_yes_never_overrides_a_reject(tmp_path, registry) -> None:
    s = Session(tmp_path, [])
    order = RequiresOrder(before="backup_*", then="deploy_*")
    parallel = plan_data(("backup", "backup_db", []), ("deploy", "deploy_service", []))
    outcome = review(s, registry, [order, ToolsNeedPerson("deploy_*")], plan=parallel, yes=True)
    assert not outcome.approved and outcome.by == "policy"
    assert outcome.reason.startswith("rejected by policy: order(backup_* before deploy_*): step 'deploy' calls 'deploy_service'")
    assert "policies: reject" in s.text  # the verdicts are shown


def test_without_a_terminal_or_yes_a_plan_that_needs_a_person_does_not_run(tmp_path, registry) -> None:
    s = Session(tmp_path, [])
    s.terminal.interactive = False
    outcome = review(s, registry)
    assert not outcome.approved and outcome.by == "nobody" and outcome.reason.endswith("approve it with --yes")
    # a plan file its author wrote needs a person only when a policy escalates
    assert review(s, registry, [MaxSteps(5)], person_required=False).by == "policy"
    escalated = review(s, registry, [ToolsNeedPerson("deploy_*")], person_required=False)
    assert escalated.by == "nobody" and "a policy asks for a person (needs_person: step 'deploy'" in escalated.reason


def test_an_outcome_has_a_stable_json_form(tmp_path, registry) -> None:
    outcome = review(Session(tmp_path, ["a"]), registry, [MaxSteps(5)])
    data = json.loads(outcome.to_json())
    assert data["decision"] == "approve" and data["by"] == "person" and data["edited"] is False
    assert data["plan"]["steps"][0]["id"] == "test" and data["plan"]["content_hash"].startswith("sha256:")
    assert data["verdicts"][0]["policy"] == "max_steps"
    assert ReviewOutcome.from_dict(data) == outcome


# --- planexec run with policies ------------------------------------------------------------------

GOAL_PLAN = json.dumps(
    {
        "steps": [
            {
                "id": "s1",
                "worker": "tool",
                "action": "calculator",
                "instruction": "multiply",
                "parameters": {"expression": "17 * 23"},
                "depends_on": [],
            },
            {
                "id": "s2",
                "worker": "tool",
                "action": "calculator",
                "instruction": "add",
                "parameters": {"expression": "4 + 1"},
                "depends_on": ["s1"],
            },
        ]
    }
)


def plan_mode() -> list[str]:
    """``--mode plan`` where the CLI has modes (without it, a goal is always planned)."""
    from planexec.cli import goals

    return ["--mode", "plan"] if hasattr(goals, "MODES") else []


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """A provider ``script:NAME`` answering from `answers`; the test runs in tmp_path."""
    answers: list = []
    register_provider("script", lambda model, options: ScriptedModel(answers, name=f"script:{model}"), replace=True)
    monkeypatch.chdir(tmp_path)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    return answers


def test_run_goal_with_yes_runs_unless_a_policy_rejects(scripted, tmp_path, capsys) -> None:
    (tmp_path / "policies.yaml").write_text("max_steps: 1\n")
    scripted.append(GOAL_PLAN)
    argv = ["run", "multiply, then add", "--model", "script:planner", *plan_mode(), "--yes", "--policies", "policies.yaml"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "planexec: the plan was not run: rejected by policy: max_steps: the plan has 2 steps, more than max_steps 1" in err
    assert "policies: reject" in out and "status:" not in out  # the verdicts are shown; nothing ran

    (tmp_path / "planexec.toml").write_text('[planexec]\npolicies = "calc.yaml"\n')
    (tmp_path / "calc.yaml").write_text("needs_person: [calculator]\n")
    scripted.append(GOAL_PLAN)
    assert main(["run", "multiply, then add", "--model", "script:planner", *plan_mode(), "--yes"]) == 0
    out, err = capsys.readouterr()
    assert "plan approved by --yes: escalation approved by --yes: needs_person: step 's1' calls 'calculator'" in err
    assert "status: succeeded" in out


def test_run_goal_on_a_terminal_asks_the_person(scripted, tmp_path, capsys, monkeypatch) -> None:
    scripted.append(GOAL_PLAN)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt="": (_ for _ in ()).throw(EOFError))
    assert main(["run", "multiply, then add", "--model", "script:planner", *plan_mode()]) == 1
    out, err = capsys.readouterr()
    assert "└── s2 tool.calculator" in out  # the DAG is shown for the review
    assert "planexec: the plan was not run: the person quit the review without running the plan" in err


def test_a_bad_policy_file_is_a_usage_error_before_any_planning(scripted, tmp_path, capsys) -> None:
    (tmp_path / "policies.yaml").write_text("max_steps: 3\nmax_stpes: 2\n")
    assert main(["run", "g", "--model", "script:planner", *plan_mode(), "--policies", "policies.yaml"]) == 2
    err = capsys.readouterr().err
    assert "policies.yaml:2: unknown rule 'max_stpes'" in err and "planning with" not in err


def test_run_plan_file_is_reviewed_by_the_policies(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "policies.yaml").write_text("order: [{before: deploy_*, then: backup_*}]\n")
    argv = ["run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--yes", "--policies", "policies.yaml"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "planexec: the plan was not run: rejected by policy: order(deploy_* before backup_*): step 'backup' calls 'backup_database'" in err
    )
    assert not (tmp_path / "state").exists()  # nothing ran

    (tmp_path / "policies.yaml").write_text("order: [{before: backup_*, then: deploy_*}]\nmax_steps: 5\n")
    assert main([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["status"] == "succeeded"


@pytest.mark.parametrize(
    ("decision", "yes", "person_required", "expected"),
    [
        ("reject", "--yes", False, ("reject", "policy", "rejected by policy: ")),
        ("escalate", "--yes", True, ("approve", "--yes", "escalation approved by --yes: ")),
        ("escalate", None, False, ("reject", "nobody", "a policy asks for a person (")),
        ("approve", "--yes", True, ("approve", "--yes", "approved with --yes")),
        ("approve", None, False, ("approve", "policy", "every policy approved")),
        ("approve", None, True, ("reject", "nobody", "no one can be asked")),
    ],
)
def test_the_decision_without_a_person_is_written_once(decision, yes, person_required, expected):
    """`decide_review` is what the CLI without a terminal, `Team` without a reviewer and the MCP server all decide."""
    from planexec.governance.policies import PolicyVerdict, Review
    from planexec.policies import decide_review

    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "s1", "action": "echo", "parameters": {"value": 1}}]})
    verdict = PolicyVerdict(policy="rule", decision=decision, reasons=["because"])
    review = Review(decision=decision, plan_hash=plan.content_hash, plan_version=1, verdicts=[verdict])
    outcome = decide_review(plan, review, policies_configured=True, yes=yes, person_required=person_required)
    assert (outcome.decision, outcome.by) == expected[:2] and outcome.reason.startswith(expected[2])
    assert outcome.plan is plan and outcome.verdicts == [verdict]
