"""Exit codes say what happened: 130 only for Ctrl-C, 3 for a store that failed during a run, 4 for a --run-id that is taken."""

from __future__ import annotations

import json

from planexec.cli import _common as common
from planexec.cli.main import main
from planexec.errors import StoreError

PLAN = {
    "plan_id": "p",
    "goal": "g",
    "steps": [{"id": "a", "action": "echo", "parameters": {"value": 1}}, {"id": "b", "action": "echo", "parameters": {"value": "${a}"}}],
}


def _plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))


def test_a_run_id_the_store_already_has_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    _plan(tmp_path, monkeypatch)
    assert main(["run", "--plan", "plan.json", "--yes", "--run-id", "dup"]) == 0
    capsys.readouterr()
    assert main(["run", "--plan", "plan.json", "--yes", "--run-id", "dup"]) == common.EXIT_RUN_EXISTS == 4
    err = capsys.readouterr().err
    assert "run 'dup' is already in" in err and "planexec resume dup" in err
    assert main(["show", "dup", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["status"] == "succeeded"  # the first run is untouched


def test_a_run_id_that_would_forge_a_log_line_or_lose_its_page_is_refused_naming_the_rule(tmp_path, monkeypatch, capsys):
    import asyncio

    import pytest

    from planexec import Engine, Plan, Registry, check_run_id

    _plan(tmp_path, monkeypatch)
    for bad, rule in (("a\nplanexec: run ok", "control character"), ("..", "may not be '..'"), ("x" * 201, "at most 200")):
        try:
            code = main(["run", "--plan", "plan.json", "--yes", "--run-id", bad])
        except SystemExit as exc:  # argparse's usage error
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2 and "--run-id" in err and rule in err and "Traceback" not in err, err
        with pytest.raises(ValueError, match=rule):
            check_run_id(bad)
    assert not (tmp_path / ".planexec").exists()  # refused before anything: no store was even made
    assert check_run_id("r1/step") == "r1/step" and check_run_id("a b") == "a b"  # a sub-run's id, a space: fine

    registry = Registry()

    @registry.tool
    def echo(value: object) -> object:
        """Echo."""
        return value

    with pytest.raises(ValueError, match="control character"):  # the engine refuses it as the CLI does, before any step
        asyncio.run(_start(Engine(registry), Plan.model_validate(PLAN), "tab\there"))


async def _start(engine, plan, run_id):
    return await engine.start(plan, run_id=run_id).result()


def test_a_store_that_fails_during_the_run_exits_3_not_130(tmp_path, monkeypatch, capsys):
    _plan(tmp_path, monkeypatch)
    from planexec.store import sqlite

    real = sqlite.SqliteRunStore.append
    calls = {"n": 0}

    def failing(self, events, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:  # the run starts, then the disk goes away
            raise StoreError("cannot write the run store: disk I/O error")
        return real(self, events, **kwargs)

    monkeypatch.setattr(sqlite.SqliteRunStore, "append", failing)
    code = main(["run", "--plan", "plan.json", "--yes", "--run-id", "r1"])
    out, err = capsys.readouterr()
    assert code == common.EXIT_STORE_FAILED == 3, out + err
    assert "the run store failed" in out + err


def test_exit_codes_are_documented_in_the_readme():
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for words in ("`3`", "`4`", "`130`"):
        assert words in readme
