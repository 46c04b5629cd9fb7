"""A run's history tells the truth: its duration sums every process that worked on it, a killed one included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from planexec.engine.events import RunFinished, RunResumed, RunStarted, StepStarted, StepSucceeded
from planexec.engine.replay import replay
from planexec.engine.results import RunStatus
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def _events():
    out = Output(value=1, provenance=Provenance(run_id="r", plan_id="p", plan_version=1, step_id="a", worker="tool", action="nap"))
    return [
        RunStarted(run_id="r", seq=0, at=T0, plan_id="p", plan_version=1, content_hash="h", goal="g", step_ids=["a"]),
        StepStarted(run_id="r", seq=1, at=T0 + timedelta(seconds=3), step_id="a", worker="tool", action="nap", attempt=1),
        # killed here, 3 s in; resumed 100 s later, and it took 5 s more
        RunResumed(run_id="r", seq=2, at=T0 + timedelta(seconds=103), plan_version=1, kept=[], rerun=["a"], held=[]),
        StepSucceeded(run_id="r", seq=3, at=T0 + timedelta(seconds=107), step_id="a", attempt=1, wall_time=4.0, usage=Usage(), output=out),
        RunFinished(run_id="r", seq=4, at=T0 + timedelta(seconds=108), status=RunStatus.SUCCEEDED, wall_time=5.0, usage=Usage()),
    ]


def test_the_time_worked_sums_every_process_not_only_the_last():
    view = replay(_events())
    assert view.processes == 2
    assert view.worked == 3.0 + 5.0  # the killed process's 3 s count; the 100 s between them do not
    assert view.wall_time == 5.0  # what the last process reported


def test_show_prints_the_time_worked_over_every_process(tmp_path, monkeypatch, capsys):
    from planexec.cli.main import main
    from planexec.store import open_store

    monkeypatch.chdir(tmp_path)
    store = open_store(str(tmp_path / "runs.db"))
    store.append(_events())
    store.close()
    assert main(["show", "r", "--store", str(tmp_path / "runs.db")]) == 0
    assert "8.00s worked over 2 processes, the last 5.00s" in capsys.readouterr().out
