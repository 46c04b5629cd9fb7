"""The ``planexec`` command line, as a user runs it: real subprocesses, and `main(argv)` in-process."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from planexec import Plan
from planexec.cli.main import main
from planexec.config import Config, ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_PLAN = ROOT / "examples" / "deploy" / "plan.json"
DEPLOY_TOOLS = ROOT / "examples" / "deploy" / "tools.py"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m planexec ARGS`` (stdin closed, stdout a pipe: not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "planexec", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_plan(folder: Path, steps: list[dict], name: str = "plan.json", **extra: object) -> Path:
    path = folder / name
    path.write_text(json.dumps({"plan_id": "p", "goal": "test the CLI", "steps": steps, **extra}))
    return path


def actions(state_dir: Path) -> list[str]:
    """What the deploy example's tools did, in order."""
    log = state_dir / "actions.jsonl"
    if not log.exists():
        return []
    return [json.loads(line)["action"] for line in log.read_text().splitlines()]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in an empty folder (no planexec.toml) for in-process calls."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- validate -------------------------------------------------------------------


def test_validate_ok_prints_plan_id_step_count_and_hash(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS)])
    out = capsys.readouterr().out
    plan = Plan.from_json(DEPLOY_PLAN.read_text())
    assert code == 0
    assert out.startswith("ok")
    assert plan.plan_id in out and "3 steps" in out and plan.content_hash in out


def test_validate_lists_every_problem_and_exits_1(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_plan(
        in_tmp,
        [
            {"id": "a", "action": "echo", "depends_on": ["b"]},
            {"id": "b", "action": "echo", "depends_on": ["a"]},
            {"id": "c", "action": "launch_rockets"},
            {"id": "d", "action": "echo", "parameters": {"value": "${ghost}"}},
        ],
    )
    code = main(["validate", str(plan)])
    out = capsys.readouterr().out
    assert code == 1
    assert "3 problems" in out
    assert re.search(r"step '(a|b)' · depends_on · cycle: .*a.*b", out)
    assert "step 'c' · action · unknown_action" in out and "launch_rockets" in out
    assert "step 'd' · parameters.value · unknown_reference" in out and "${ghost}" in out


def test_validate_json_is_a_list_of_problems(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path,
        [
            {"id": "a", "action": "echo", "depends_on": ["b"]},
            {"id": "b", "action": "echo", "depends_on": ["a"]},
            {"id": "c", "action": "launch_rockets", "parameters": {"x": "${nowhere.field}"}},
        ],
    )
    proc = cli("validate", str(plan), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    problems = json.loads(proc.stdout)
    assert {p["rule"] for p in problems} >= {"cycle", "unknown_action", "unknown_reference"}
    assert all(set(p) == {"rule", "message", "step_id", "field"} for p in problems)


def test_validate_json_of_a_valid_plan_is_an_empty_list(tmp_path: Path) -> None:
    proc = cli("validate", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--json", cwd=tmp_path)
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == []


def test_validate_reports_shape_problems_with_exit_1(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_plan(in_tmp, [{"id": "a"}])
    assert main(["validate", str(plan)]) == 1
    assert "step 'a' · action · missing_field" in capsys.readouterr().out


# --- input errors: one message, exit 2, no traceback -------------------------------


def test_malformed_json_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"plan_id": "x",\n  "steps": [\n')
    for args in (["validate", str(bad)], ["run", "--plan", str(bad)]):
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 2
        assert "broken.json" in proc.stderr and "not valid JSON" in proc.stderr and "line" in proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout


def test_missing_plan_file_exits_2_naming_it(tmp_path: Path) -> None:
    proc = cli("run", "--plan", "no-such-plan.json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no-such-plan.json" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("module", ["no_such_tools_module", "missing_tools.py"])
def test_missing_tools_module_exits_2_naming_it(tmp_path: Path, module: str) -> None:
    proc = cli("run", "--plan", str(DEPLOY_PLAN), "--tools", module, "--yes", cwd=tmp_path)
    assert proc.returncode == 2
    assert module in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_tools_module_that_raises_on_import_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "broken_tools.py").write_text("raise RuntimeError('database unreachable')\n")
    proc = cli("validate", str(DEPLOY_PLAN), "--tools", "broken_tools.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "broken_tools.py" in proc.stderr and "database unreachable" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dotted_tools_module_is_found_in_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text("from planexec import tool\n\n@tool\ndef shout(text: str) -> str:\n    return text.upper()\n")
    plan = write_plan(tmp_path, [{"id": "s", "action": "shout", "parameters": {"text": "hi"}}])
    proc = cli("run", "--plan", str(plan), "--tools", "my_tools", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "HI"


@pytest.mark.parametrize("flag", [["--max-concurrency", "0"], ["--timeout", "-1"], ["--timeout", "soon"]])
def test_bad_option_values_are_usage_errors(in_tmp: Path, flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--plan", str(DEPLOY_PLAN), *flag])
    assert exc.value.code == 2
    assert flag[0] in capsys.readouterr().err


# --- schema and entry points ---------------------------------------------------------


def test_schema_prints_the_plan_json_schema(tmp_path: Path) -> None:
    proc = cli("schema", cwd=tmp_path)
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert "steps" in schema["properties"] and "plan_id" in schema["required"]
    compact = cli("schema", "--indent", "0", cwd=tmp_path)
    assert json.loads(compact.stdout) == schema and len(compact.stdout.strip().splitlines()) == 1


def test_python_m_planexec_without_a_command_is_a_usage_error(tmp_path: Path) -> None:
    proc = cli(cwd=tmp_path)
    assert proc.returncode == 2
    assert "usage: planexec" in proc.stderr


# --- run -------------------------------------------------------------------------------


def test_run_deploy_example_succeeds_with_summary(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = cli("run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--yes", cwd=tmp_path, env={"DEPLOY_STATE_DIR": str(state)})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # one line per event while it runs (stdout is not a terminal), then the summary
    assert "test: started (attempt 1, worker test-runner, action run_tests)" in out
    assert "deploy: succeeded" in out
    for sid in ("test", "backup", "deploy"):
        assert re.search(rf"│ {sid}\s+│ ✓ succeeded\s+│\s+1 │", out), out
    assert "status: succeeded" in out
    assert '"status": "live"' in out  # the answer, pretty JSON
    assert actions(state) == ["run_tests", "backup_database", "deploy_service"]


def test_run_json_prints_the_run_result(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = cli(
        "run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--yes", "--json",
        cwd=tmp_path, env={"DEPLOY_STATE_DIR": str(state)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # nothing but the JSON on stdout
    assert result["status"] == "succeeded"
    assert result["answer"] == {"service": "auth-service", "version": "v2.1.4", "strategy": "blue_green", "status": "live"}
    assert {sid: r["state"] for sid, r in result["steps"].items()} == {"test": "succeeded", "backup": "succeeded", "deploy": "succeeded"}


def test_run_with_failing_tests_aborts_and_backs_nothing_up(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = cli(
        "run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--yes", "--json",
        cwd=tmp_path, env={"DEPLOY_STATE_DIR": str(state), "DEPLOY_FAILING_TESTS": "2"},
    )  # fmt: skip
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["status"] == "aborted"
    assert result["steps"]["test"]["state"] == "failed"
    assert result["steps"]["test"]["error"]["rule"] == "check_failed"
    assert result["steps"]["backup"]["state"] == "cancelled"
    assert result["steps"]["deploy"]["state"] == "cancelled"
    assert actions(state) == ["run_tests"]


def test_run_with_failing_tests_summary_names_the_failure(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = cli(
        "run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--yes",
        cwd=tmp_path, env={"DEPLOY_STATE_DIR": str(state), "DEPLOY_FAILING_TESTS": "2"},
    )  # fmt: skip
    assert proc.returncode == 1
    assert "status: aborted" in proc.stdout
    assert "2 of 120 tests failed" in proc.stdout
    assert re.search(r"│ backup\s+│ ⊘ cancelled", proc.stdout)


def test_run_without_yes_and_without_a_terminal_denies_approval(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {"DEPLOY_STATE_DIR": str(state)}
    # unrecorded: a recorded run waits for `planexec approve` from another process instead (test_approvals_cli)
    proc = cli("run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS), "--json", "--no-store", cwd=tmp_path, env=env)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["steps"]["deploy"]["state"] == "failed"
    assert result["steps"]["deploy"]["error"]["rule"] == "approval_denied"
    assert "deploy_service" not in actions(state)


def test_run_of_an_invalid_plan_prints_problems_and_runs_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan = json.loads(DEPLOY_PLAN.read_text())
    plan["steps"].append({"id": "notify", "action": "page_everyone", "depends_on": ["deploy"]})
    path = write_plan(tmp_path, plan["steps"], name="bad-plan.json")
    proc = cli("run", "--plan", str(path), "--tools", str(DEPLOY_TOOLS), "--yes", cwd=tmp_path, env={"DEPLOY_STATE_DIR": str(state)})
    assert proc.returncode == 1
    assert "step 'notify' · action · unknown_action" in proc.stdout
    assert actions(state) == []  # not even the tests ran


def test_max_concurrency_limits_parallel_steps(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path,
        [{"id": "a", "action": "sleep", "parameters": {"seconds": 0.3}}, {"id": "b", "action": "sleep", "parameters": {"seconds": 0.3}}],
    )
    result = json.loads(cli("run", "--plan", str(plan), "--json", "--max-concurrency", "1", cwd=tmp_path).stdout)
    a, b = result["steps"]["a"], result["steps"]["b"]
    first, second = sorted([a, b], key=lambda r: r["started_at"])
    assert second["started_at"] >= first["finished_at"]


def test_run_interrupted_with_sigint_cancels_every_step_and_exits_130(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path,
        [
            {"id": "slow1", "action": "sleep", "parameters": {"seconds": 30}},
            {"id": "slow2", "action": "sleep", "parameters": {"seconds": 30}},
            {"id": "after", "action": "sleep", "parameters": {"seconds": 30}, "depends_on": ["slow1"]},
        ],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "planexec", "run", "--plan", str(plan)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen = []
    t0 = time.monotonic()
    try:
        while not any("started" in line and "slow" in line for line in seen):
            seen.append(lines.get(timeout=20))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    out = "".join(seen)
    assert proc.returncode == 130, out + proc.stderr.read()  # type: ignore[union-attr]
    assert time.monotonic() - t0 < 20  # it did not wait for the 30-second steps
    for sid in ("slow1", "slow2", "after"):
        assert re.search(rf"│ {sid}\s+│ ⊘ cancelled", out), out
    assert "slow1: cancelled while running (interrupted (Ctrl-C))" in out
    assert "status: cancelled (interrupted (Ctrl-C))" in out
    assert "Traceback" not in out


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 1)])
def test_run_on_a_terminal_asks_before_a_step_that_requires_approval(tmp_path: Path, answer: str, code: int) -> None:
    state = tmp_path / "state"
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "planexec", "run", "--plan", str(DEPLOY_PLAN), "--tools", str(DEPLOY_TOOLS)],
        cwd=tmp_path,
        env={**os.environ, "DEPLOY_STATE_DIR": str(state), "COLUMNS": "120", "TERM": "xterm"},
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    screen = b""
    answered = False
    deadline = time.monotonic() + 30
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            screen += chunk
            if not answered and b"Approve step 'deploy'" in screen:
                assert "backup_database" in actions(state)  # asked only when the step is due
                os.write(master, answer.encode() + b"\n")
                answered = True
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert answered, screen.decode(errors="replace")
    assert proc.returncode == code
    assert ("deploy_service" in actions(state)) is (answer == "y")


def test_run_of_a_plan_file_with_roles_uses_the_models_given(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan file that names a role runs on goal mode's team, with the --worker-model given (as `run GOAL` would)."""
    from planexec.models.providers import register_provider
    from planexec.testing import ScriptedModel

    register_provider("script", lambda model, options: ScriptedModel(["The answer is 42."], name=f"script:{model}"), replace=True)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    step = {"id": "say", "worker": "writer", "action": "write", "instruction": "say 42 in a sentence", "parameters": {}}
    write_plan(in_tmp, [step])
    code = main(["run", "--plan", "plan.json", "--worker-model", "script:worker", "--yes", "--no-store", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["answer"] == "The answer is 42."


# --- planexec.toml ---------------------------------------------------------------------


TOOLS_SOURCE = """\
from planexec import tool

@tool
def shout(text: str) -> str:
    return text.upper()
"""


def test_tools_listed_in_planexec_toml_are_loaded(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "shouting.py").write_text(TOOLS_SOURCE)
    plan = write_plan(tmp_path, [{"id": "s", "action": "shout", "parameters": {"text": "hi"}}])
    assert cli("validate", str(plan), cwd=tmp_path).returncode == 1  # no config: shout is unknown
    (tmp_path / "planexec.toml").write_text('[planexec]\ntools = ["lib/shouting.py"]\n')
    assert cli("validate", str(plan), cwd=tmp_path).returncode == 0
    proc = cli("run", "--plan", str(plan), "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["answer"] == "HI"


def test_default_timeout_from_planexec_toml_and_its_override(tmp_path: Path) -> None:
    (tmp_path / "planexec.toml").write_text("[planexec]\ndefault_timeout = 0.2\n")
    plan = write_plan(tmp_path, [{"id": "nap", "action": "sleep", "parameters": {"seconds": 1}}])
    timed_out = cli("run", "--plan", str(plan), "--json", cwd=tmp_path)
    assert timed_out.returncode == 1
    assert json.loads(timed_out.stdout)["steps"]["nap"]["error"]["rule"] == "timeout"
    overridden = cli("run", "--plan", str(plan), "--json", "--timeout", "5", cwd=tmp_path)
    assert overridden.returncode == 0, overridden.stdout


def test_malformed_planexec_toml_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "planexec.toml").write_text('[planexec]\ntools = ["a.py"\nmax_concurrency = 4\n')
    proc = cli("validate", str(DEPLOY_PLAN), cwd=tmp_path)
    assert proc.returncode == 2
    assert re.search(r"planexec\.toml:3: not valid TOML", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr


def test_load_config_reads_the_section_and_resolves_tool_paths(tmp_path: Path) -> None:
    assert load_config(tmp_path) == Config()
    (tmp_path / "planexec.toml").write_text(
        '[planexec]\ntools = ["t.py", "pkg.tools"]\nmax_concurrency = 3\ndefault_timeout = 1.5\n\n[other]\nx = 1\n'
    )
    config = load_config(tmp_path)
    assert config.tools == [str(tmp_path / "t.py"), "pkg.tools"]
    assert (config.max_concurrency, config.default_timeout) == (3, 1.5)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("[planexec]\nmax_concurency = 3\n", "max_concurency"),
        ("[planexec]\nmax_concurrency = 0\n", "max_concurrency"),
        ("[planexec]\ntools = 'a.py'\n", "tools"),
    ],
)
def test_load_config_rejects_unknown_keys_and_bad_values(tmp_path: Path, body: str, words: str) -> None:
    (tmp_path / "planexec.toml").write_text(body)
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path)
    assert "planexec.toml" in str(exc.value) and words in str(exc.value)
