"""The investigate example end to end: a failing test run in the sandbox, read with the code and the docs, fixed after approval.

The goal is planned by a scripted planner (it returns the example's plan),
the coder's diff is scripted, and the tools are the example's own
(``examples/investigate/tools.py``) on a copy of its project.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planexec import ReviewOptions, Step, Team, Toolbox
from planexec.policies import CallRequest, person
from planexec.testing import ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "investigate"
PLAN = EXAMPLE / "plan.json"
TOOLS = EXAMPLE / "tools.py"
PROJECT = EXAMPLE / "project"

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap (bwrap), the sandbox the tests run in: apt-get install bubblewrap"
)


def fix_diff() -> str:
    """The fix the docs call for (10 items or more get the discount), as a unified diff against the project."""
    old = (PROJECT / "shop" / "pricing.py").read_text().splitlines(keepends=True)
    new = [line.replace("quantity > BULK_QUANTITY", "quantity >= BULK_QUANTITY") for line in old]
    return "".join(difflib.unified_diff(old, new, "a/shop/pricing.py", "b/shop/pricing.py"))


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file of a folder and its hash: the checked-in project must never change."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INVESTIGATE_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "ws"


def team(answers: list[str], *, step_ok: bool = True, call_ok: bool = True, asked: list[Step | CallRequest] | None = None) -> Team:
    """The planner and the coder on one scripted model; people (not --yes) deciding the step and the call."""
    seen = asked if asked is not None else []

    def step_approver(step: Step) -> bool:
        seen.append(step)
        return step_ok

    def call_approver(request: CallRequest) -> bool:
        seen.append(request)
        return call_ok

    return Team(
        ScriptedModel(answers, name="script:planner"),
        mode="plan",
        toolbox=Toolbox(modules=[str(TOOLS)], roles=True, workspace="workspace"),
        review=ReviewOptions(approver=person(step_approver), call_approver=person(call_approver)),
    )


def test_the_goal_is_planned_the_fix_approved_applied_and_the_tests_pass(workspace: Path) -> None:
    before = fingerprint(PROJECT)
    asked: list[Step | CallRequest] = []
    result = team([PLAN.read_text(), fix_diff()], asked=asked).run_sync("Find why the shop's test fails, check the docs, fix it")

    assert result.status == "succeeded", result.error
    assert [s for s, r in result.steps.items() if r.state != "succeeded"] == []
    first = result.steps["test"].output.value
    assert first["passed"] is False and first["failures"] == ["test_ten_items_get_the_bulk_discount"]
    assert "AssertionError: 5000 != 4500" in first["output"]  # the traceback, from the sandbox
    assert "10 items or more" in result.steps["docs"].output.value[0]["text"]
    assert result.steps["apply"].output.value == {"files": ["shop/pricing.py"], "hunks": 1}
    assert result.answer["passed"] is True and result.answer["tests_run"] == 4  # the deliverable: the suite passes now
    # the person saw the step, then the call with the diff, flagged as coming from untrusted text
    assert isinstance(asked[0], Step) and asked[0].step_id == "apply"
    request = asked[-1]
    assert isinstance(request, CallRequest) and request.kind == "escalation" and request.arguments["diff"] == fix_diff()
    assert "run_tests in step 'test' (untrusted)" in " ".join(request.chain)
    assert "quantity >= BULK_QUANTITY" in (workspace / "project" / "shop" / "pricing.py").read_text()
    assert fingerprint(PROJECT) == before  # the checked-in example is never touched


def test_without_a_persons_approval_the_diff_is_not_applied_and_the_run_says_so(workspace: Path) -> None:
    result = team([PLAN.read_text(), fix_diff()], call_ok=False).run_sync("Fix the failing test of the shop")

    assert result.status != "succeeded"
    apply = result.steps["apply"]
    assert apply.state == "failed" and apply.error is not None and apply.error.rule == "untrusted_argument"
    assert result.steps["retest"].state == "cancelled"
    assert "quantity > BULK_QUANTITY" in (workspace / "project" / "shop" / "pricing.py").read_text()  # unchanged


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        (
            fix_diff().replace("a/shop/pricing.py", "a/../../outside.py").replace("b/shop/pricing.py", "b/../../outside.py"),
            "diff file '../../outside.py' is outside the project",
        ),
        (fix_diff().replace("shop/pricing.py", "/etc/passwd"), "diff file '/etc/passwd' is outside the project"),
        ("rm -rf /", "diff has no hunk to apply"),
        (
            fix_diff().replace("    total = unit_cents", "    total = unit_price"),
            "the hunk at line 9 of 'shop/pricing.py' does not match the file",
        ),
    ],
    ids=["parent", "absolute", "not-a-diff", "stale"],
)
def test_a_hostile_or_broken_diff_is_refused_naming_the_step_and_nothing_is_written(workspace: Path, diff: str, message: str) -> None:
    result = team([PLAN.read_text(), diff]).run_sync("Fix the failing test of the shop")

    apply = result.steps["apply"]
    assert apply.state == "failed" and apply.error is not None
    assert f"step 'apply': {message}" in apply.error.message
    assert "Traceback" not in apply.error.message
    assert result.steps["retest"].state == "cancelled"
    assert not (workspace.parent / "outside.py").exists()
    assert fingerprint(workspace / "project") == fingerprint(PROJECT)  # all or nothing: the copy is as checked out


def test_a_fix_that_does_not_fix_fails_the_retest_by_its_criterion(workspace: Path) -> None:
    old = (PROJECT / "shop" / "pricing.py").read_text().splitlines(keepends=True)
    wrong = [line.replace("BULK_DISCOUNT_PERCENT // 100", "BULK_DISCOUNT_PERCENT // 50") for line in old]
    diff = "".join(difflib.unified_diff(old, wrong, "a/shop/pricing.py", "b/shop/pricing.py"))
    result = team([PLAN.read_text(), diff]).run_sync("Fix the failing test of the shop")

    assert result.steps["apply"].state == "succeeded"  # a person approved it; the tests judge it
    retest = result.steps["retest"]
    assert retest.state == "failed" and retest.error is not None and retest.error.rule == "check_failed"
    assert "2 failing: test_a_large_order_gets_the_bulk_discount, test_ten_items_get_the_bulk_discount" in retest.error.message
    assert result.status != "succeeded"


def test_the_readme_command_with_yes_runs_everything_but_the_fix(tmp_path: Path) -> None:
    """``planexec run --plan examples/investigate/plan.json --tools examples/investigate/tools.py --yes``, from the checkout.

    The coder runs on a scripted model here (the README's command uses the
    configured one); ``--yes`` approves the plan and the step, never a call
    that untrusted text steered: the diff is not applied and the run says why.
    """
    driver = tmp_path / "drive.py"
    driver.write_text(
        "import sys\n"
        "from planexec.cli.main import main\n"
        "from planexec.models.providers import register_provider\n"
        "from planexec.testing import ScriptedModel\n"
        f"register_provider('script', lambda model, options: ScriptedModel([{fix_diff()!r}]), replace=True)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = ["run", "--plan", "examples/investigate/plan.json", "--tools", "examples/investigate/tools.py", "--yes", "--json"]
    env = {**os.environ, "INVESTIGATE_WORKSPACE": str(tmp_path / "ws"), "PLANEXEC_STORE": str(tmp_path / "runs.db")}
    proc = subprocess.run(
        [sys.executable, str(driver), *argv, "--model", "script:coder", "--workspace", str(tmp_path / "workspace")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "incomplete"
    assert result["steps"]["test"]["output"]["value"]["passed"] is False
    assert result["steps"]["apply"]["error"]["rule"] == "untrusted_argument"
    assert "an escalation needs a person" in result["steps"]["apply"]["error"]["message"]
    assert "quantity > BULK_QUANTITY" in (tmp_path / "ws" / "project" / "shop" / "pricing.py").read_text()


def test_the_readme_two_terminal_flow_applies_the_fix_once_a_person_approves(tmp_path: Path) -> None:
    """The README's ``planexec run ... --run-id fix-1`` waits; ``planexec approve fix-1 --step apply`` (the step, then the call) lets it finish."""
    driver = tmp_path / "drive.py"
    driver.write_text(
        "import sys\n"
        "from planexec.cli.main import main\n"
        "from planexec.models.providers import register_provider\n"
        "from planexec.testing import ScriptedModel\n"
        f"register_provider('script', lambda model, options: ScriptedModel([{fix_diff()!r}]), replace=True)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "INVESTIGATE_WORKSPACE": str(tmp_path / "ws"), "PLANEXEC_STORE": str(tmp_path / "runs.db")}
    argv = ["run", "--plan", "examples/investigate/plan.json", "--tools", "examples/investigate/tools.py", "--run-id", "fix-1", "--json"]
    run = subprocess.Popen(
        [sys.executable, str(driver), *argv, "--model", "script:coder", "--workspace", str(tmp_path / "workspace")],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    approved = 0
    try:
        deadline = time.monotonic() + 90
        while run.poll() is None and time.monotonic() < deadline:
            proc = subprocess.run(
                [sys.executable, "-m", "planexec", "approve", "fix-1", "--step", "apply"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
            )
            approved += proc.returncode == 0
            time.sleep(0.5)
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert approved == 2  # the step, then the call with the diff
    result = json.loads(out)
    assert result["status"] == "succeeded" and result["answer"]["passed"] is True
    assert "quantity >= BULK_QUANTITY" in (tmp_path / "ws" / "project" / "shop" / "pricing.py").read_text()
