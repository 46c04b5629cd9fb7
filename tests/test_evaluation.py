"""The evaluation harness: suites and their errors, the oracle, scoring, failure attribution, the report files, the CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from rich.console import Console

from planexec.cli.main import main
from planexec.eval.harness import EvalOptions, parse_modes, run_goal, run_suite, scripted_models
from planexec.eval.oracle import LatencyModel, OracleModel
from planexec.eval.report import goals_table, ratio_notes, react_ratios, summary_table, write_report
from planexec.eval.suite import Checker, SolutionCall, SuiteError, answer_text, load_suite, run_solution
from planexec.models.base import ModelRequest, ModelResponse
from planexec.testing import FunctionModel

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "eval"
SUITES = [EXAMPLES / "parallel.yaml", EXAMPLES / "multihop.yaml"]
MODES = ["single", "plan", "stream"]


@pytest.fixture(autouse=True)
def no_tool_latency(monkeypatch):
    """The example lookups sleep 50-300 ms each; the tests need their results, not their waits."""
    monkeypatch.setenv("PLANEXEC_EVAL_LATENCY", "0")


TOOLS = '''
from planexec.errors import ToolError
from planexec.workers.tools import tool

@tool(read_only=True)
def lookup(key: str) -> int:
    """A number by key."""
    return {"a": 2, "b": 3}[key]

@tool(read_only=True)
def broken(key: str) -> int:
    """Always raises."""
    raise ToolError(f"broken: cannot look up {key}", tool="broken")
'''

CHECKS = """
def is_five(answer):
    return str(answer).strip() == "5"

def near(answer, goal):
    return abs(float(answer) - goal.expected) < 0.5, f"{answer} is not near {goal.expected}"

def crashes(answer):
    raise RuntimeError("checker bug")
"""

GOOD_GOAL = {
    "id": "sum",
    "goal": "Add a and b",
    "exact": "5",
    "solution": [
        {"id": "x", "tool": "lookup", "args": {"key": "a"}},
        {"id": "y", "tool": "lookup", "args": {"key": "b"}},
        {"id": "total", "tool": "calculator", "args": {"expression": "${x} + ${y}"}},
    ],
}


def write_suite(folder: Path, goals: list[dict] | None = None, **top) -> Path:
    """A suite file in `folder` with the test tools and checkers next to it."""
    (folder / "tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "checks.py").write_text(CHECKS, encoding="utf-8")
    data = {"name": "tiny", "description": "a test suite", "tools": "tools.py", "goals": goals if goals is not None else [GOOD_GOAL], **top}
    path = folder / "suite.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")  # JSON is YAML
    return path


# --- loading ------------------------------------------------------------------------------------


def test_the_example_suites_load_with_their_tools_and_goals():
    parallel, multihop = (load_suite(p) for p in SUITES)
    assert (parallel.name, multihop.name) == ("parallel", "multihop")
    assert 6 <= len(parallel.goals) <= 8 and 6 <= len(multihop.goals) <= 8
    registry = parallel.registry()
    assert {"population", "area", "capital", "mayor", "calculator"} <= set(registry.tools)
    kinds = {c.checker.kind for s in (parallel, multihop) for c in s.goals}
    assert kinds == {"exact", "regex", "python"}
    # multi-hop: every call after the first needs an earlier answer
    assert all(call.references for case in multihop.goals for call in case.solution[1:])
    # parallel: the lookups are independent; only the last call combines them
    assert all(not call.references for case in parallel.goals for call in case.solution[:-1])


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem)
def test_every_reference_solution_passes_its_own_checker(path):
    suite = load_suite(path)
    registry = suite.registry()
    for case in suite.goals:
        outputs = asyncio.run(run_solution(case, registry))
        ok, why = case.checker.check(outputs[case.solution[-1].call_id], case)
        assert ok, f"{case.goal_id}: {why}"


BAD_GOALS = [
    ({**GOOD_GOAL, "exact": None}, "sum", "exact", "non-empty text"),
    ({k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "sum", "checker", "exactly one checker"),
    ({**GOOD_GOAL, "regex": "5"}, "sum", "checker", "it has exact, regex"),
    ({**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "regex": "(unclosed"}, "sum", "regex", "not a valid regular expression"),
    ({**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "python": "checks"}, "sum", "python", "'module:function'"),
    ({**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "python": "checks:missing"}, "sum", "python", "no function 'missing'"),
    ({**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "python": "no_such_module:f"}, "sum", "python", "cannot load module"),
    ({k: v for k, v in GOOD_GOAL.items() if k != "goal"}, "sum", "goal", "non-empty text (missing)"),
    ({**GOOD_GOAL, "solution": []}, "sum", "solution", "non-empty list"),
    ({**GOOD_GOAL, "solution": [{"id": "x", "tool": "lookpu", "args": {"key": "a"}}]}, "sum", "solution[0].tool", "no tool 'lookpu'"),
    ({**GOOD_GOAL, "solution": [{"id": "x", "tool": "lookup", "args": {"name": "a"}}]}, "sum", "solution[0].args", "no argument 'name'"),
    ({**GOOD_GOAL, "solution": [{"id": "x", "tool": "lookup", "args": {}}]}, "sum", "solution[0].args", "needs key"),
    (
        {**GOOD_GOAL, "solution": [{"id": "x", "tool": "calculator", "args": {"expression": "${y} + 1"}}]},
        "sum",
        "solution[0].args",
        "${y} names no earlier call",
    ),
    ({**GOOD_GOAL, "solution": [{"id": "x y", "tool": "lookup", "args": {"key": "a"}}]}, "sum", "solution[0].id", "not a step id"),
    ({**GOOD_GOAL, "solution": [GOOD_GOAL["solution"][0], GOOD_GOAL["solution"][0]]}, "sum", "solution[1].id", "used by an earlier call"),
    ({**GOOD_GOAL, "solution": [{"id": "x", "tool": "lookup", "args": {"key": "a"}, "note": 1}]}, "sum", None, "unknown key(s) note"),
    ({**GOOD_GOAL, "checker": "x"}, "sum", None, "unknown key(s) checker"),
]


@pytest.mark.parametrize("goal, goal_id, field, message", BAD_GOALS, ids=[m for *_, m in BAD_GOALS])
def test_a_bad_goal_is_reported_with_its_goal_and_field(tmp_path, goal, goal_id, field, message):
    with pytest.raises(SuiteError) as info:
        load_suite(write_suite(tmp_path, [goal]))
    assert info.value.goal_id == goal_id
    if field is not None:
        assert info.value.field == field
    assert message in str(info.value)
    assert f"goal {goal_id!r}" in str(info.value)


def test_bad_suites_are_reported_by_file_and_field(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        load_suite(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ngoals: [\n", encoding="utf-8")
    with pytest.raises(SuiteError, match="not valid YAML at line"):
        load_suite(broken)
    with pytest.raises(SuiteError, match="top level must be a mapping"):
        broken.write_text("- a\n- b\n", encoding="utf-8")
        load_suite(broken)
    with pytest.raises(SuiteError) as info:
        load_suite(write_suite(tmp_path, []))
    assert info.value.field == "goals"
    with pytest.raises(SuiteError) as info:
        load_suite(write_suite(tmp_path, tools="nowhere.py"))
    assert info.value.field == "tools" and "does not exist" in str(info.value)
    with pytest.raises(SuiteError) as info:
        load_suite(write_suite(tmp_path, name=""))
    assert info.value.field == "name"
    with pytest.raises(SuiteError, match="unknown key"):
        load_suite(write_suite(tmp_path, model="x"))
    with pytest.raises(SuiteError) as info:
        load_suite(write_suite(tmp_path, [GOOD_GOAL, GOOD_GOAL]))
    assert (info.value.goal_id, info.value.field) == ("sum", "id")
    with pytest.raises(SuiteError) as info:
        load_suite(write_suite(tmp_path, builtin_tools=["teleport"]))
    assert info.value.field == "builtin_tools"
    (tmp_path / "bad_tools.py").write_text("raise RuntimeError('boom')\n", encoding="utf-8")
    with pytest.raises(SuiteError, match="boom") as info:
        load_suite(write_suite(tmp_path, tools="bad_tools.py"))
    assert info.value.field == "tools"


# --- checkers -----------------------------------------------------------------------------------


def test_checker_kinds_exact_regex_and_python(tmp_path):
    suite = load_suite(
        write_suite(
            tmp_path,
            [
                {**GOOD_GOAL, "id": "e"},
                {**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "id": "r", "regex": r"^\d$"},
                {**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "id": "p1", "python": "checks:is_five"},
                {**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "id": "p2", "python": "checks:near", "expected": 5},
                {**{k: v for k, v in GOOD_GOAL.items() if k != "exact"}, "id": "p3", "python": "checks:crashes"},
            ],
        )
    )
    e, r, p1, p2, p3 = (suite.goal(g) for g in ("e", "r", "p1", "p2", "p3"))
    assert e.checker.check(5, e) == (True, "")
    assert e.checker.check(5.0, e)[0] and e.checker.check(" 5 ", e)[0]  # numbers compare as numbers
    assert not e.checker.check("five", e)[0] and "expected exactly '5'" in e.checker.check("five", e)[1]
    assert r.checker.check(7, r)[0] and not r.checker.check(17, r)[0]
    assert p1.checker.check(5, p1)[0] and not p1.checker.check(6, p1)[0]
    assert p2.checker.check("5.2", p2) == (True, "")
    assert p2.checker.check("7", p2) == (False, "7 is not near 5")
    ok, why = p3.checker.check(5, p3)
    assert not ok and "RuntimeError: checker bug" in why
    assert Checker("exact", "Tobias Quill").check("Tobias Quill")[0]


def test_answer_text_is_what_checkers_compare():
    assert answer_text(None) == ""
    assert answer_text(520.0) == "520"
    assert answer_text(2.5) == "2.5"
    assert answer_text(True) == "true"
    assert answer_text({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    assert answer_text("  Avalon\n") == "Avalon"


# --- the oracle ---------------------------------------------------------------------------------


def test_the_oracle_writes_the_solution_as_a_plan_in_either_schema_shape():
    solution = [
        SolutionCall(call_id="a", tool="population", args={"city": "Avalon"}),
        SolutionCall(call_id="b", tool="population", args={"city": "Brightwater"}),
        SolutionCall(call_id="total", tool="calculator", args={"expression": "${a} + ${b}"}),
    ]
    oracle = OracleModel(solution)
    open_draft = oracle.plan_draft(positional=False)
    assert [s["id"] for s in open_draft["steps"]] == ["a", "b", "total"]
    assert open_draft["steps"][2]["parameters"] == {"expression": "${a} + ${b}"}
    assert open_draft["steps"][2]["depends_on"] == ["a", "b"]
    positional = oracle.plan_draft(positional=True)
    assert [s["id"] for s in positional["steps"]] == ["s1", "s2", "s3"]
    assert positional["steps"][2]["parameters"] == {"expression": "${s1} + ${s2}"}
    assert positional["steps"][2]["depends_on"] == ["s1", "s2"]
    assert {s["worker"] for s in positional["steps"]} == {"tool"}


def test_a_positional_planner_gets_s_ids_and_the_run_still_succeeds():
    suite = load_suite(SUITES[1])
    case = suite.goal("capital-mayor-home")
    model = scripted_models()(case)
    record = asyncio.run(run_goal(suite, case, "plan", model, suite.registry(), options=EvalOptions(positional=True)))
    assert record.success, record.reason
    assert record.steps == 4 and record.answer == "84200"


# --- scripted runs ------------------------------------------------------------------------------


def _counts(report):
    return [(r.goal_id, r.mode, r.success, r.stage, r.answer, r.steps, r.usage, r.usage_by_role) for r in report.records]


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem)
def test_scripted_runs_succeed_in_every_mode_with_exact_reproducible_counts(path):
    suite = load_suite(path)
    first = run_suite(suite, MODES, scripted_models(), scripted=True)
    second = run_suite(suite, MODES, scripted_models(), scripted=True)
    assert [s.success_rate for s in first.summaries] == [1.0, 1.0, 1.0]
    assert _counts(first) == _counts(second)  # calls, tokens, answers: the same on every run
    assert [s.to_dict() | {"wall_time": 0, "mean_wall_time": 0} for s in first.summaries] == [
        s.to_dict() | {"wall_time": 0, "mean_wall_time": 0} for s in second.summaries
    ]
    goals = len(suite.goals)
    single, plan, stream = first.summaries
    # ReAct: one call per tool call, then the answer; a plan: the planner's one call (its draft names the answer
    # step, so no joiner call assembles the answer)
    assert single.model_calls == sum(len(c.solution) + 1 for c in suite.goals)
    assert plan.model_calls == stream.model_calls == goals
    assert (plan.input_tokens, plan.output_tokens) == (stream.input_tokens, stream.output_tokens)
    for r in first.records:
        if r.mode != "single":
            assert set(r.usage_by_role) == {"planner"}
            assert r.steps == len(suite.goal(r.goal_id).solution)
    assert all(s.cost == "$0.0000" and s.cost_known for s in first.summaries)  # test:* is priced, at zero


def test_a_repeated_evaluation_records_every_repeat():
    suite = load_suite(SUITES[1])
    report = run_suite(suite, ["plan"], scripted_models(), repeat=2, goals=["capital-mayor", "mayor-age"])
    assert [(r.goal_id, r.repeat) for r in report.records] == [
        ("capital-mayor", 1),
        ("mayor-age", 1),
        ("capital-mayor", 2),
        ("mayor-age", 2),
    ]
    assert report.summary("plan").runs == 4


def test_the_latency_model_keeps_the_inner_answers_and_usage():
    suite = load_suite(SUITES[0])
    latency = {"overhead": 0.0, "per_input_token": 0.0, "per_output_token": 0.0}
    plain = run_suite(suite, MODES, scripted_models(), goals=["pop-sum"])
    slowed = run_suite(suite, MODES, scripted_models(latency), goals=["pop-sum"], latency="none")
    assert _counts(plain) == _counts(slowed)
    model = LatencyModel(FunctionModel(lambda r: "one two three"), overhead=0.5, per_input_token=0.01, per_output_token=0.1)
    response = ModelResponse(text="x", usage=plain.records[0].usage.model_copy(update={"input_tokens": 10, "output_tokens": 3}))
    assert model.latency(response) == pytest.approx(0.5 + 0.1 + 0.3)
    assert model.describe() == "0.5 s + 0.01 s x input tokens + 0.1 s x output tokens per call"

    async def streamed():
        quick = LatencyModel(FunctionModel(lambda r: "one two three"), overhead=0, per_input_token=0, per_output_token=0)
        return [item async for item in quick.stream(ModelRequest(messages=[]))]

    *deltas, final = asyncio.run(streamed())
    assert [d.text for d in deltas] == ["one", " two", " three"] and final.text == "one two three"
    assert final.usage.output_tokens == 3


# --- failure attribution ------------------------------------------------------------------------


def _garbage_planner(oracle: OracleModel) -> FunctionModel:
    """The oracle in every role but the planner's, where it writes garbage."""

    def answer(request: ModelRequest):
        if "steps" in ((request.output_schema or {}).get("properties") or {}):
            return "I would rather not write JSON today."
        return oracle.answer(request)

    return FunctionModel(answer, name="test:garbage")


def test_a_planner_that_writes_garbage_is_a_planner_failure(tmp_path):
    suite = load_suite(write_suite(tmp_path))
    case = suite.goals[0]
    registry = suite.registry()
    for mode in ("plan", "stream"):
        record = asyncio.run(run_goal(suite, case, mode, _garbage_planner(OracleModel(case.solution)), registry))
        assert (record.success, record.stage) == (False, "planner"), (mode, record.reason)
        assert record.usage.model_calls >= 1  # the drafts it wrote are counted
    plan = asyncio.run(run_goal(suite, case, "plan", _garbage_planner(OracleModel(case.solution)), registry))
    assert plan.usage.model_calls == 3 and "no valid plan" in plan.reason  # the first draft and two repairs


def test_a_tool_that_raises_is_a_worker_failure(tmp_path):
    goal = {
        **GOOD_GOAL,
        "solution": [
            {"id": "x", "tool": "broken", "args": {"key": "a"}},
            {"id": "total", "tool": "calculator", "args": {"expression": "${x} + 1"}},
        ],
    }
    suite = load_suite(write_suite(tmp_path, [goal]))
    case = suite.goals[0]
    for mode in ("plan", "stream"):
        record = asyncio.run(run_goal(suite, case, mode, OracleModel(case.solution), suite.registry()))
        assert (record.success, record.stage) == (False, "worker"), (mode, record.reason)
        assert "broken: cannot look up a" in record.reason
    single = asyncio.run(run_goal(suite, case, "single", OracleModel(case.solution), suite.registry()))
    assert not single.success and single.stage in ("worker", "answer")  # the agent reads the error and goes on


def test_a_wrong_answer_is_an_answer_failure_and_a_broken_joiner_a_joiner_failure(tmp_path):
    suite = load_suite(write_suite(tmp_path, [{**GOOD_GOAL, "exact": "6"}]))
    case = suite.goals[0]
    for mode in MODES:
        record = asyncio.run(run_goal(suite, case, mode, OracleModel(case.solution), suite.registry()))
        assert (record.success, record.stage, record.answer) == (False, "answer", "5"), mode
    oracle = OracleModel(case.solution)

    def bad_joiner(request: ModelRequest):
        properties = (request.output_schema or {}).get("properties") or {}
        if "action" in properties:
            return json.dumps({"action": "maybe"})
        if "steps" in properties:  # a plan that does not name its answer: the joiner assembles it
            return json.dumps({k: v for k, v in json.loads(oracle.answer(request)).items() if k != "answer_step"})
        return oracle.answer(request)

    record = asyncio.run(run_goal(suite, case, "plan", FunctionModel(bad_joiner), suite.registry()))
    assert (record.success, record.stage, record.error_rule) == (False, "joiner", "joiner")


def _always_replanning(oracle: OracleModel, *, fresh_steps: bool) -> FunctionModel:
    """The oracle, but its joiner always asks for a new plan; as replanner it repeats the solution, or writes fresh steps."""
    revisions = iter(range(1, 100))

    def answer(request: ModelRequest):
        schema = request.output_schema or {}
        if "action" in (schema.get("properties") or {}):
            return json.dumps({"action": "replan", "reason": "I am never satisfied"})
        if "steps" in (schema.get("properties") or {}) and "has to be revised" in request.messages[-1].content and fresh_steps:
            n = next(revisions)
            step = {
                "id": f"again{n}",
                "worker": "tool",
                "action": "calculator",
                "instruction": "Add again.",
                "parameters": {"expression": f"{n} + 5"},
                "depends_on": [],
            }
            return json.dumps({"steps": [step]})
        if "steps" in (schema.get("properties") or {}):  # plans that do not name their answer: the joiner is asked each time
            return json.dumps({k: v for k, v in json.loads(oracle.answer(request)).items() if k != "answer_step"})
        return oracle.answer(request)

    return FunctionModel(answer, name="test:never-satisfied")


def test_exhausted_replanning_is_a_joiner_failure_and_an_invalid_replan_a_planner_failure(tmp_path):
    suite = load_suite(write_suite(tmp_path))
    case = suite.goals[0]
    model = _always_replanning(OracleModel(case.solution), fresh_steps=True)
    record = asyncio.run(run_goal(suite, case, "plan", model, suite.registry(), options=EvalOptions(max_replans=2)))
    assert (record.success, record.stage, record.error_rule) == (False, "joiner", "replan_limit"), record.reason
    assert record.plan_versions == 3  # the first plan and two revisions
    # the oracle as replanner writes the finished steps again: every draft is refused, the replan stays invalid
    model = _always_replanning(OracleModel(case.solution), fresh_steps=False)
    record = asyncio.run(run_goal(suite, case, "plan", model, suite.registry()))
    assert (record.success, record.stage, record.error_rule) == (False, "planner", "replan_invalid"), record.reason


def test_a_run_that_crashes_or_times_out_is_recorded_not_raised(tmp_path):
    suite = load_suite(write_suite(tmp_path))
    case = suite.goals[0]

    async def slow(request: ModelRequest):
        await asyncio.sleep(5)

    record = asyncio.run(run_goal(suite, case, "plan", FunctionModel(slow), suite.registry(), options=EvalOptions(timeout=0.05)))
    assert (record.stage, record.status) == ("error", "timeout")
    with pytest.raises(ValueError, match="unknown mode"):
        asyncio.run(run_goal(suite, case, "team", OracleModel(case.solution), suite.registry()))
    assert parse_modes("plan, single,plan") == ["plan", "single"]
    with pytest.raises(ValueError, match="choose from single, plan, stream"):
        parse_modes("single,solo")


# --- the report ---------------------------------------------------------------------------------


def test_the_tables_json_and_png_are_written(tmp_path):
    suite = load_suite(SUITES[0])
    report = run_suite(suite, MODES, scripted_models(), goals=["pop-sum", "density"], scripted=True, model_name="test:oracle")
    paths = write_report(report, tmp_path / "out")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["suite"] == "parallel" and data["modes"] == MODES and data["scripted"] is True
    assert len(data["records"]) == 2 * 3
    assert {r["mode"] for r in data["records"]} == set(MODES)
    assert [s["mode"] for s in data["summaries"]] == MODES
    assert data["summaries"][0]["failures"] == {"planner": 0, "worker": 0, "joiner": 0, "answer": 0, "error": 0}
    console = Console(record=True, width=200)
    console.print(summary_table(report))
    console.print(goals_table(report))
    text = console.export_text()
    assert "2/2 (100%)" in text and "stream" in text and "density" in text and "$0.0000" in text
    ratios = react_ratios(report)
    assert set(ratios) == {"plan", "stream"} and ratios["plan"]["model_calls"] == (4 + 4) / (1 + 1)  # a plan: one call each
    notes = ratio_notes(report)
    assert notes[0].startswith("ReAct (single) / plan: tokens ") and "model calls 4.00x" in notes[0]
    assert "ReWOO" in notes[-1] and "LLMCompiler" in notes[-1]


def test_the_eval_command_prints_the_table_and_writes_the_files(tmp_path, capsys):
    out = tmp_path / "results"
    code = main(["eval", str(SUITES[1]), "--scripted", "--modes", "plan,single", "--goal", "capital-mayor", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "multihop" in printed and "1/1 (100%)" in printed
    assert "ReAct (single) / plan: tokens" in printed  # the closing note
    assert (out / "eval-multihop.json").is_file() and (out / "eval-multihop.png").is_file()
    assert main(["eval", str(SUITES[1]), "--scripted", "--modes", "solo"]) == 2
    assert main(["eval", str(tmp_path / "missing.yaml"), "--scripted"]) == 2
    assert main(["eval", str(SUITES[1]), "--latency", "0.1,0,0"]) == 2  # a latency is for the scripted model
    assert main(["eval", str(SUITES[1]), "--scripted", "--goal", "nope", "-o", str(out)]) == 2
    assert "no goal 'nope'" in capsys.readouterr().err


# --- the embedded model ---------------------------------------------------------------------------


def test_one_goal_runs_on_the_embedded_model_and_records_an_outcome(allow_requests, tmp_path):
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (pip install 'planexec[local]')")
    from planexec.eval.harness import configured_models
    from planexec.models.settings import ModelSettings

    suite = load_suite(SUITES[1])
    settings = ModelSettings(planner="local:smollm2", env={}, seed=0)
    options = EvalOptions(max_steps=3, planner_max_tokens=400, max_replans=1, timeout=600)
    report = run_suite(suite, ["plan"], configured_models(settings), goals=["capital-mayor"], options=options)
    (record,) = report.records
    assert record.mode == "plan" and record.goal_id == "capital-mayor"
    assert record.success or record.stage in ("planner", "worker", "joiner", "answer", "error")
    assert record.stage != "error", record.reason  # it ran to an outcome of its own, not a crash or timeout
    assert record.usage.model_calls >= 1 and record.usage.input_tokens > 100
