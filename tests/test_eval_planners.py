"""Planners compared (``planexec eval --planner``): the scripted planners, the per-planner figures, the table, the JSON
report, model planners at URLs of their own, the planner x workers matrix, and every bad option as a usage error."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from planexec.cli.main import main
from planexec.errors import PlanningError
from planexec.eval.harness import Contender, run_suite, scripted_models
from planexec.eval.oracle import OracleModel
from planexec.eval.planners import PLANNER_VARIANTS, ScriptedPlanner, parse_planners
from planexec.eval.report import write_report
from planexec.eval.scoring import DraftFigures, EvalReport
from planexec.eval.suite import load_suite
from planexec.models import providers
from planexec.planning.compact_form import is_compact_request
from planexec.planning.planner import Planner

PARALLEL = Path(__file__).resolve().parent.parent / "examples" / "eval" / "parallel.yaml"
GOALS = ["pop-sum", "density"]


@pytest.fixture(autouse=True)
def no_tool_latency(monkeypatch):
    """The example lookups sleep 50-300 ms each; the tests need their results, not their waits."""
    monkeypatch.setenv("PLANEXEC_EVAL_LATENCY", "0")


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    """The comparison table's rows by (planner, mode): its cells, stripped."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 10 and cells[1] in ("single", "plan", "stream"):
            rows[(cells[0], cells[1])] = cells
    return rows


def _eval(*args: str) -> int:
    return main(["eval", str(PARALLEL), *args])


# --- the scripted planners ----------------------------------------------------------------------


def _planning(variant: str, plan_format: str, goal_id: str = "elevation-mean"):
    suite = load_suite(PARALLEL)
    case = suite.goal(goal_id)
    model = ScriptedPlanner(case.solution, PLANNER_VARIANTS[variant])
    planner = Planner(model, suite.registry(), plan_format=plan_format)  # type: ignore[arg-type]  # the literal
    return case, model, asyncio.run(planner.draft(case.goal))


@pytest.mark.parametrize("plan_format", ["json", "compact"])
def test_the_oracle_plans_the_lookups_in_parallel_and_serial_chains_them(plan_format):
    case, _, oracle = _planning("oracle", plan_format)
    _, _, serial = _planning("serial", plan_format)
    assert len(oracle.drafts) == len(serial.drafts) == 1 and not oracle.drafts[0].problems and not serial.drafts[0].problems
    lookups = len(case.solution) - 1  # elevation-mean: four independent lookups, then the mean
    assert [s.dependencies for s in oracle.plan.steps[:lookups]] == [[]] * lookups
    chained = serial.plan.steps
    assert all(chained[k - 1].step_id in chained[k].dependencies for k in range(1, len(chained)))
    assert [s.action for s in chained] == [s.action for s in oracle.plan.steps]  # the same calls, one after another


@pytest.mark.parametrize("plan_format", ["json", "compact"])
def test_repair_fixes_its_first_draft_when_told_and_stubborn_never_does(plan_format):
    _, model, planning = _planning("repair", plan_format)
    first, second = planning.drafts
    assert first.problems and any("city_name" in p for p in first.problems), first.problems
    assert not second.problems and planning.repairs == 1
    assert len(model.requests) == 2
    with pytest.raises(PlanningError) as info:
        _planning("stubborn", plan_format)
    assert info.value.attempts == 3  # the first draft and max_repairs (2) more, every one refused


def test_draft_figures_count_repairs_per_plan_version():
    replanned = DraftFigures.of([(2, 1, False), (1, 2, True), (1, 1, False), (2, 2, False), (2, 3, True)])
    assert (replanned.drafts, replanned.first_draft_valid, replanned.repairs) == (5, False, 3)
    assert DraftFigures.of([(1, 1, True)]) == DraftFigures(drafts=1, first_draft_valid=True, repairs=0)
    assert DraftFigures.of([]).first_draft_valid is None  # a single agent: no planner, no draft
    assert DraftFigures.refused(3) == DraftFigures(drafts=3, first_draft_valid=False, repairs=2)


# --- the command ----------------------------------------------------------------------------------


def test_the_command_compares_two_scripted_planners_on_the_same_goals(tmp_path, capsys):
    out = tmp_path / "results"
    goals = [a for g in GOALS for a in ("--goal", g)]
    assert _eval("--scripted", "--planner", "oracle", "--planner", "repair", *goals, "-o", str(out)) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "[plan · repair]" in captured.err  # progress names the planner
    rows = _rows(captured.out)
    assert set(rows) == {("—", "single"), ("oracle", "plan"), ("oracle", "stream"), ("repair", "plan"), ("repair", "stream")}
    # planner, mode, 1st draft ok, repairs, success, model calls, tokens in/out, cost, wall time, failures
    assert rows[("oracle", "plan")][2:5] == ["2/2 (100%)", "0", "2/2 (100%)"]
    assert rows[("repair", "plan")][2:5] == ["0/2 (0%)", "2", "2/2 (100%)"]
    assert rows[("repair", "stream")][4] == "0/2 (0%)" and rows[("repair", "stream")][9] == "planner 2"  # a streamed plan is not repaired
    assert rows[("—", "single")][2:4] == ["n/a", "n/a"]
    assert "ReAct (single) / oracle plan: tokens" in captured.out and "ReAct (single) / repair plan: tokens" in captured.out

    data = json.loads((out / "eval-parallel.json").read_text(encoding="utf-8"))
    assert data["planners"] == ["oracle", "repair"] and data["worker_models"] == ["test:oracle (scripted)"]
    records = data["records"]
    assert len(records) == len(GOALS) * (1 + 2 * 2)  # single once a goal, not once a planner
    assert {r["planner"] for r in records if r["mode"] == "single"} == {None}
    by = {(s["planner"], s["mode"]): s for s in data["by_planner"]}
    oracle, repair = by[("oracle", "plan")], by[("repair", "plan")]
    assert (oracle["first_draft_rate"], oracle["repairs"], oracle["success_rate"]) == (1.0, 0, 1.0)
    assert (repair["first_draft_rate"], repair["repairs"], repair["success_rate"]) == (0.0, 2, 1.0)
    assert repair["model_calls"] == oracle["model_calls"] + repair["repairs"]  # a repair is one more planner call
    assert repair["input_tokens"] > oracle["input_tokens"]  # the repair prompt rereads the conversation
    for r in records:
        if r["mode"] == "plan":
            assert r["drafts"] == 1 + r["repairs"] and r["first_draft_valid"] is (r["planner"] == "oracle")
    assert by[(None, "single")]["first_draft_rate"] is None and by[(None, "single")]["planned_runs"] == 0
    assert (out / "eval-parallel.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_extends_the_old_one_and_reads_back(tmp_path):
    suite = load_suite(PARALLEL)
    planners = [Contender(name, scripted_models(planner=name)) for name in ("serial", "stubborn")]
    report = run_suite(suite, ["plan"], scripted_models(), goals=["pop-sum"], planners=planners, scripted=True)
    paths = write_report(report, tmp_path)
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    # what readers of the old report use is all there, as it was
    assert {"suite", "model", "scripted", "modes", "repeat", "records", "summaries", "notes"} <= set(data)
    assert [s["mode"] for s in data["summaries"]] == ["plan"] and data["summaries"][0]["runs"] == 2
    # and every record says its planner, its workers and the planner's drafts
    for r in data["records"]:
        assert {"planner", "workers", "drafts", "first_draft_valid", "repairs"} <= set(r)
    stubborn = report.planner_summary("stubborn", "plan")
    assert (stubborn.successes, stubborn.failures["planner"], stubborn.repairs) == (0, 1, 2)
    assert report.planner_summary("serial", "plan").first_draft_rate == 1.0
    assert EvalReport.from_json(paths["json"].read_text(encoding="utf-8")) == report
    # a report written before planners were compared reads as one: no planners, no drafts counted
    old = {k: v for k, v in data.items() if k not in ("planners", "worker_models", "by_planner")}
    old["records"] = [{k: v for k, v in r.items() if k not in ("planner", "workers", "drafts", "first_draft_valid", "repairs")}
                      for r in data["records"]]  # fmt: skip
    old["summaries"] = [{k: v for k, v in s.items() if k not in ("planner", "workers", "planned_runs", "first_draft_valid",
                         "first_draft_rate", "drafts", "repairs", "mean_repairs")} for s in data["summaries"]]  # fmt: skip
    read = EvalReport.from_dict(old)
    assert read.planners == [] and read.records[0].first_draft_valid is None


@pytest.fixture
def fake_models(monkeypatch):
    """Models ``fake:NAME`` (and ``openai:NAME``), each an oracle of the suite's first goal that records its requests;
    the models made and the URL each was given, by name."""
    suite = load_suite(PARALLEL)
    made: dict[str, OracleModel] = {}
    urls: dict[str, str | None] = {}

    def factory(provider: str):
        def make(model: str, options: providers.ProviderOptions) -> OracleModel:
            name = f"{provider}:{model}"
            made[name] = OracleModel(suite.goal("pop-sum").solution, name=name)
            urls[name] = options.base_url
            return made[name]

        return make

    monkeypatch.setitem(providers._registered, "fake", factory("fake"))  # as register_provider(..., replace=True), undone after
    monkeypatch.setitem(providers._registered, "openai", factory("openai"))
    return made, urls


def _planned(model: OracleModel) -> int:
    """The requests a model answered as planner (a draft schema, or the compact form's prompt)."""
    return sum(1 for r in model.requests if "steps" in ((r.output_schema or {}).get("properties") or {}) or is_compact_request(r))


def test_a_planner_on_a_server_of_its_own_is_priced_n_a_never_zero(tmp_path, capsys, fake_models):
    made, urls = fake_models
    url = "http://127.0.0.1:8000/v1"
    code = _eval("--scripted", "--planner", f"tuned=openai:my-ft@{url}", "--planner", "oracle", "--goal", "pop-sum", "--modes", "plan",
                 "-o", str(tmp_path))  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert urls == {"openai:my-ft": url} and made["openai:my-ft"].requests  # it planned, at its own URL
    assert f"planner tuned: openai:my-ft at {url}" in captured.err
    rows = _rows(captured.out)
    assert rows[("tuned", "plan")][4] == "1/1 (100%)" and rows[("tuned", "plan")][7] == "n/a"  # no price: not $0
    assert rows[("oracle", "plan")][7] == "$0.0000"
    data = json.loads((tmp_path / "eval-parallel.json").read_text(encoding="utf-8"))
    tuned = next(s for s in data["by_planner"] if s["planner"] == "tuned")
    assert tuned["cost_usd"] is None and tuned["cost_known"] is False and tuned["cost"] == "unknown"


def test_a_matrix_of_planners_and_workers_keeps_each_model_in_its_roles(tmp_path, capsys, fake_models):
    made, _ = fake_models
    code = _eval("--planner", "fake:planner-a", "--planner", "b=fake:planner-b", "--worker-model", "fake:workers-x",
                 "--worker-model", "fake:workers-y", "--goal", "pop-sum", "--modes", "single,plan", "-o", str(tmp_path))  # fmt: skip
    assert code == 0, capsys.readouterr().err
    for planner in ("fake:planner-a", "fake:planner-b"):
        assert _planned(made[planner]) == 2 and all(not r.tools for r in made[planner].requests)  # once per workers' model
    for workers in ("fake:workers-x", "fake:workers-y"):
        assert _planned(made[workers]) == 0 and any(r.tools for r in made[workers].requests)  # the single agent only
    data = json.loads((tmp_path / "eval-parallel.json").read_text(encoding="utf-8"))
    assert data["planners"] == ["fake:planner-a", "b"] and data["worker_models"] == ["fake:workers-x", "fake:workers-y"]
    cells = [(s["workers"], s["planner"], s["mode"]) for s in data["by_planner"]]
    assert cells == [(w, p, m) for w in data["worker_models"] for p, m in ((None, "single"), ("fake:planner-a", "plan"), ("b", "plan"))]
    assert all(s["successes"] == 1 for s in data["by_planner"])
    assert "workers" in capsys.readouterr().out  # a matrix's table has a workers column


# --- bad input ------------------------------------------------------------------------------------

BAD = [
    (["--scripted", "--planner", "A", "--planner", "B"], "--planner 'A' is neither a scripted planner nor PROVIDER:MODEL"),
    (["--scripted", "--planner", "oracle", "--planner", "oracle"], "--planner 'oracle' is given twice"),
    (["--scripted", "--planner", "x=oracle", "--planner", "y=oracle"], "--planner 'y=oracle' is the planner 'x' again"),
    (["--planner", "oracle"], "--planner 'oracle' is a scripted planner: add --scripted"),
    (["--scripted", "--planner", "nope:model"], "unknown provider 'nope'"),
    (["--scripted", "--planner", "anthropic:x@http://127.0.0.1:1/v1"], "a planner's own URL (@URL) is for openai: models"),
    (["--scripted", "--planner", "oracle", "--worker-model", "local:smollm2"], "under --scripted the oracle plays the workers"),
    (["--worker-model", "local:smollm2"], "--worker-model crosses workers' models with the planners: give --planner too"),
    (["--planner", "local:smollm2", "--model", "local:smollm2", "--worker-model", "local:smollm2"], "not both"),
    (["--planner", "local:smollm2", "--worker-model", "local:smollm2", "--worker-model", "local:smollm2"],
     "--worker-model 'local:smollm2' is given twice"),
]  # fmt: skip


@pytest.mark.parametrize("args, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_planner_options_are_usage_errors(capsys, args, message):
    assert _eval(*args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_gguf_file_and_the_injection_suite_are_usage_errors(tmp_path, capsys):
    missing = tmp_path / "tuned.gguf"
    assert _eval("--scripted", "--planner", "oracle", "--planner", f"local:{missing}") == 2
    err = capsys.readouterr().err
    assert f"--planner 'local:{missing}'" in err and f"no GGUF file at {missing}" in err
    assert main(["eval", "--injection", "--planner", "oracle"]) == 2
    assert "--planner compares planners on a suite's goals" in capsys.readouterr().err
    assert main(["eval", "--injection", "--worker-model", "local:smollm2"]) == 2


def test_help_documents_planner(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--planner [LABEL=]PLANNER" in text and "openai:NAME@URL" in text
    assert all(name in text for name in PLANNER_VARIANTS)


def test_planner_values_parse_with_labels_urls_and_at_signs_in_names():
    tuned, local, dated = parse_planners(
        ["tuned=openai:my-ft@http://127.0.0.1:8000/v1", "local:/models/planner.gguf", "openai:model@2024"], scripted=False
    )
    assert (tuned.label, tuned.model, tuned.base_url) == ("tuned", "openai:my-ft", "http://127.0.0.1:8000/v1")
    assert (local.label, local.model, local.base_url) == ("local:/models/planner.gguf", "local:/models/planner.gguf", None)
    assert (dated.model, dated.base_url) == ("openai:model@2024", None)  # an @ that starts no URL is the model's own
    (scripted,) = parse_planners(["A=repair"], scripted=True)
    assert (scripted.label, scripted.variant) == ("A", "repair")
    with pytest.raises(ValueError, match=re.escape("oracle (the reference solution")):
        parse_planners(["B"], scripted=True)  # the refusal lists every scripted planner


def test_a_local_gguf_planner_is_compared_with_the_oracle_on_the_real_model(tmp_path, capsys):
    """The embedded SmolLM2 file named as a planner (``local:/path/x.gguf``), run in-process, against the scripted oracle:
    its drafts are really made and counted, whatever it plans (it plans weakly)."""
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (pip install 'planexec[local]')")
    from planexec.errors import ModelError
    from planexec.models.local import default_model_path

    try:
        gguf = default_model_path()
    except ModelError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "results"
    code = _eval("--scripted", "--planner", "oracle", "--planner", f"smol=local:{gguf}", "--modes", "plan", "--goal", "pop-sum",
                 "-o", str(out))  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err
    rows = _rows(captured.out)
    assert set(rows) == {("oracle", "plan"), ("smol", "plan")}
    data = json.loads((out / "eval-parallel.json").read_text(encoding="utf-8"))
    (smol,) = [r for r in data["records"] if r["planner"] == "smol"]
    assert smol["drafts"] >= 1 and smol["drafts"] == 1 + smol["repairs"]  # what the GGUF model wrote, drafted and counted
    assert smol["usage"]["model_calls"] >= smol["drafts"] and smol["usage"]["input_tokens"] > 0
