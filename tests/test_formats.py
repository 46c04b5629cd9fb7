"""LLMCompiler and ReWOO text plans read into planexec plans: steps, parameters, references, errors."""

from __future__ import annotations

import re

import pytest

from planexec import Engine, Plan, Registry, RunStatus, validate_plan
from planexec.errors import PlanParseError
from planexec.plan.formats import parse_llmcompiler, parse_rewoo
from planexec.plan.references import resolve_references

LLMCOMPILER = """\
Thought: I need both populations.
1. search("population of France")
2. search("population of Germany")
3. math("$1 + $2", ["$1", "$2"])
Thought: done
4. join()
"""

REWOO = """\
Plan: Search for the 2016 Olympics host city.
#E1 = Wikipedia[2016 Summer Olympics]
Plan: Find the country of that city.
#E2 = LLM[What country is the city in #E1 in?]
"""

POPULATIONS = {"population of France": 68, "population of Germany": 84}


@pytest.fixture
def reg():
    reg = Registry()

    @reg.tool
    def search(query: str) -> int:
        return POPULATIONS[query]

    @reg.tool
    def math(problem: str, context: list[int] | None = None) -> float:
        # "a + b" read by hand: the sum of the numbers around "+", no eval
        left, plus, right = problem.partition("+")
        if not plus:
            raise ValueError(f"not an addition: {problem!r}")
        return float(left) + float(right)

    @reg.tool(name="Wikipedia")
    def wikipedia(query: str) -> str:
        return {"2016 Summer Olympics": "Rio de Janeiro"}[query]

    @reg.tool(name="LLM")
    def llm(prompt: str, temperature: float = 0.0) -> str:
        return {"What country is the city in Rio de Janeiro in?": "Brazil"}[prompt]

    return reg


def problems(text, parse=parse_llmcompiler, **kw):
    with pytest.raises(PlanParseError) as info:
        parse(text, goal="g", **kw)
    return [(p.field, p.rule, p.step_id) for p in info.value.problems], info.value


# --- LLMCompiler ---------------------------------------------------------------


def test_llmcompiler_example_without_registry():
    plan = parse_llmcompiler(LLMCOMPILER, goal="compare populations", plan_id="pop")
    assert (plan.plan_id, plan.goal) == ("pop", "compare populations")
    assert plan.step_ids == ["1", "2", "3"]  # join() is the end, not a step
    assert [(s.action, s.worker) for s in plan.steps] == [("search", "tool")] * 2 + [("math", "tool")]
    assert plan.step("1").parameters == {"arg0": "population of France"}
    assert plan.step("3").parameters == {"arg0": "${1} + ${2}", "arg1": ["${1}", "${2}"]}
    assert plan.step("3").dependencies == ["1", "2"]
    assert plan.step("1").dependencies == plan.step("2").dependencies == []
    # the thought goes to the step after it; the one before join() has no step and is dropped
    assert [s.instruction for s in plan.steps] == ["I need both populations.", "", ""]
    assert plan.sinks() == ["3"]
    assert Plan.from_json(plan.to_json()) == plan


def test_llmcompiler_positional_arguments_take_the_tools_parameter_names(reg):
    plan = parse_llmcompiler(LLMCOMPILER, goal="g", registry=reg)
    assert plan.step("1").parameters == {"query": "population of France"}
    assert plan.step("3").parameters == {"problem": "${1} + ${2}", "context": ["${1}", "${2}"]}
    assert validate_plan(plan, reg) == []


def test_llmcompiler_plan_runs_to_the_right_answer(reg):
    plan = parse_llmcompiler(LLMCOMPILER, goal="sum the populations", registry=reg)
    result = Engine(reg).run_sync(plan)
    assert result.status == RunStatus.SUCCEEDED
    assert result.answer == 152.0


def test_llmcompiler_without_registry_names_fail_validation(reg):
    # arg0 is no parameter of search: the registry is what maps positions to names
    plan = parse_llmcompiler(LLMCOMPILER, goal="g")
    rules = {(p.step_id, p.rule) for p in validate_plan(plan, reg)}
    assert ("1", "unknown_parameter") in rules and ("1", "missing_parameter") in rules


def test_llmcompiler_keywords_braced_references_paths_and_prefix(reg):
    text = '1. search(query="population of France")\n2. math(problem="${1} + 1", context=["${1.value}"])'
    plan = parse_llmcompiler(text, goal="g", registry=reg, step_prefix="s", worker="calc")
    assert plan.step_ids == ["s1", "s2"]
    assert plan.step("s2").parameters == {"problem": "${s1} + 1", "context": ["${s1.value}"]}
    assert plan.step("s2").dependencies == ["s1"]
    assert {s.worker for s in plan.steps} == {"calc"}


def test_llmcompiler_strings_with_commas_brackets_and_quotes():
    text = (
        r"""1. search("a, b [c] (d) \"quoted\" 'single' # not a comment", ['x]', "y,z"], """
        r"""{"k": [1, -2.5, True, None], "j": (1, 2)}, flag=false, n=null)  # a real comment"""
        "\n"
        r"""2. search('it\'s $1, not ${name} or $$', "${1}")"""
    )
    plan = parse_llmcompiler(text, goal="g")
    assert plan.step("1").parameters == {
        "arg0": "a, b [c] (d) \"quoted\" 'single' # not a comment",
        "arg1": ["x]", "y,z"],
        "arg2": {"k": [1, -2.5, True, None], "j": [1, 2]},
        "flag": False,
        "n": None,
    }
    p2 = plan.step("2").parameters
    assert p2 == {"arg0": "it's ${1}, not $${name} or $$", "arg1": "${1}"}
    assert plan.step("2").references == {"1"}  # ${name} is text, not a reference
    assert resolve_references(p2, {"1": 7}) == {"arg0": "it's 7, not ${name} or $$", "arg1": 7}


def test_llmcompiler_bare_references_outside_quotes_are_read_as_strings():
    lines = [
        '1. search("population of France")',
        "2. search('population of Germany')",
        '3. math("$1 + $2", [$1, ${2.value}])  # a comment with $1',
        r"""4. search("say \"$1\" [$2], '''$3'''", n=$3, s='''it's [$1]''')""",
    ]
    text = "\n".join(lines)
    plan = parse_llmcompiler(text, goal="g")
    assert plan.step("3").parameters == {"arg0": "${1} + ${2}", "arg1": ["${1}", "${2.value}"]}
    assert plan.step("4").parameters == {"arg0": "say \"${1}\" [${2}], '''${3}'''", "n": "${3}", "s": "it's [${1}]"}
    found, _ = problems("1. search(query=$2)\n2. search(query=[$1, $7])")
    assert found == [("line 1", "forward_reference", "1"), ("line 2", "unknown_reference", "2")]


def test_llmcompiler_thoughts_are_instructions_kept_verbatim():
    plan = parse_llmcompiler("Thought: use $1 and ${x}\nThought: then more\n1. search('a')", goal="g")
    step = plan.step("1")
    assert step.references == set()
    assert resolve_references(step.instruction, {}) == "use $1 and ${x}\nthen more"


def test_llmcompiler_join_and_end_of_plan_are_optional_markers():
    assert parse_llmcompiler("1. search('a')", goal="g").step_ids == ["1"]
    assert parse_llmcompiler("1. search('a')\n\n  join()  \n\n", goal="g").step_ids == ["1"]
    assert parse_llmcompiler("1. search('a')\n2. join()<END_OF_PLAN>", goal="g").step_ids == ["1"]
    assert parse_llmcompiler("1. search('a')<END_OF_PLAN>", goal="g").step_ids == ["1"]


def test_llmcompiler_lines_after_join_are_errors():
    found, _ = problems("1. search('a')\n2. join()\n\n3. search('b')\nThought: late")
    assert found == [("line 4", "after_join", None), ("line 5", "after_join", None)]


def test_llmcompiler_reports_every_malformed_line_with_its_number():
    lines = [
        "Thought: fine",  # 1
        "this is not a call",  # 2
        "1. search('ok')",  # 3
        '2. search("unterminated)',  # 4
        "3 search('no dot')",  # 5
        "4. math(foo)",  # 6
        "",  # 7
        "5. search('x') + 1",  # 8
        "6. search({1, 2})",  # 9
        "search('no number')",  # 10
        "7. search(**opts)",  # 11
        "8. search(a=1, a=2)",  # 12
        "9. search(1e999)",  # 13
    ]
    text = "\n".join(lines)
    found, err = problems(text)
    assert [(f, r) for f, r, _ in found] == [
        ("line 2", "malformed_line"),
        ("line 4", "malformed_arguments"),
        ("line 5", "malformed_line"),
        ("line 6", "malformed_arguments"),
        ("line 8", "malformed_arguments"),
        ("line 9", "malformed_arguments"),
        ("line 10", "malformed_line"),
        ("line 11", "malformed_arguments"),
        ("line 12", "malformed_arguments"),
        ("line 13", "malformed_arguments"),
    ]
    by_line = {p.field: p for p in err.problems}
    assert "'this is not a call'" in by_line["line 2"].message
    assert by_line["line 6"].step_id == "4" and "argument 1 is not a literal value (foo)" in by_line["line 6"].message
    assert "set" in by_line["line 9"].message
    assert "given twice" in by_line["line 12"].message and "float" in by_line["line 13"].message
    assert "line 10" in str(err) and "10 problems" in str(err)


def test_llmcompiler_unknown_and_forward_references_are_reported():
    text = '1. search("$2")\n2. search("$9 and $1")\n3. math("$3", ["${1}"])'
    found, err = problems(text)
    assert found == [
        ("line 1", "forward_reference", "1"),
        ("line 2", "unknown_reference", "2"),
        ("line 3", "forward_reference", "3"),
    ]
    assert "'9'" in err.problems[1].message


def test_llmcompiler_argument_count_and_duplicates_against_the_registry(reg):
    found, err = problems("1. search('a', 'b')\n2. search('a', query='b')\n1. search('c')", registry=reg)
    assert found == [
        ("line 1", "malformed_arguments", "1"),
        ("line 2", "malformed_arguments", "2"),
        ("line 3", "duplicate_step_id", "1"),
    ]
    assert "takes 1 (query)" in err.problems[0].message and "given twice" in err.problems[1].message


def test_empty_text_is_an_error():
    found, _ = problems("\n  \nThought: nothing to do\njoin()")
    assert found == [(None, "empty_plan", None)]


def test_default_plan_id_is_stable_and_bad_ids_are_parse_errors():
    a = parse_llmcompiler(LLMCOMPILER, goal="g")
    assert a.plan_id == parse_llmcompiler(LLMCOMPILER, goal="other").plan_id
    assert re.fullmatch(r"llmcompiler-[0-9a-f]{12}", a.plan_id)
    with pytest.raises(PlanParseError):
        parse_llmcompiler("1. search('a')", goal="g", step_prefix="bad prefix ")


# --- ReWOO -----------------------------------------------------------------------


def test_rewoo_example_without_registry():
    plan = parse_rewoo(REWOO, goal="where were the 2016 Olympics", plan_id="olympics")
    assert plan.step_ids == ["E1", "E2"]
    assert [s.action for s in plan.steps] == ["Wikipedia", "LLM"]
    assert [s.instruction for s in plan.steps] == ["Search for the 2016 Olympics host city.", "Find the country of that city."]
    assert plan.step("E1").parameters == {"input": "2016 Summer Olympics"}
    assert plan.step("E2").parameters == {"input": "What country is the city in ${E1} in?"}
    assert plan.step("E2").dependencies == ["E1"]
    assert plan.plan_id == "olympics"


def test_rewoo_parameter_name_from_option_or_registry(reg):
    assert parse_rewoo(REWOO, goal="g", parameter="query").step("E1").parameters == {"query": "2016 Summer Olympics"}
    plan = parse_rewoo(REWOO, goal="g", registry=reg)
    # LLM has one required parameter (prompt) besides an optional one
    assert plan.step("E1").parameters == {"query": "2016 Summer Olympics"}
    assert plan.step("E2").parameters == {"prompt": "What country is the city in ${E1} in?"}
    assert validate_plan(plan, reg) == []


def test_rewoo_plan_runs_to_the_right_answer(reg):
    plan = parse_rewoo(REWOO, goal="g", registry=reg)
    result = Engine(reg).run_sync(plan)
    assert result.status == RunStatus.SUCCEEDED
    assert result.answer == "Brazil"


def test_rewoo_whole_input_reference_and_same_line_plan():
    text = "Plan: look it up #E1 = Search[x [1], y]\n#E2 = Echo[  #E1  ]\nPlan: compare #E1 and #E2\n#E3 = LLM[#E1 vs #E2, ${lit}]"
    plan = parse_rewoo(text, goal="g")
    assert plan.step("E1").parameters == {"input": "x [1], y"}
    assert plan.step("E1").instruction == "look it up"
    assert plan.step("E2").parameters == {"input": "${E1}"}  # whole reference: the output's own type
    assert plan.step("E3").parameters == {"input": "${E1} vs ${E2}, $${lit}"}
    assert plan.step("E3").dependencies == ["E1", "E2"]
    assert plan.step("E3").instruction == "compare #E1 and #E2"


def test_rewoo_reports_every_malformed_line_and_bad_reference():
    lines = [
        "Plan: start",  # 1
        "#E1 = Search[ok]",  # 2
        "E2 = Search[no hash]",  # 3
        "#E3 = Search(parens)",  # 4
        "",  # 5
        "#E4 = Search[#E5 and #E1]",  # 6
        "#E5 = Search[#E7]",  # 7
        "Plan: fine #E8 = bad(id)",  # 8
        "#E6 = Search[unclosed",  # 9
    ]
    text = "\n".join(lines)
    found, err = problems(text, parse=parse_rewoo)
    assert found == [
        ("line 3", "malformed_line", None),
        ("line 4", "malformed_line", None),
        ("line 6", "forward_reference", "E4"),
        ("line 7", "unknown_reference", "E5"),
        ("line 8", "malformed_line", None),
        ("line 9", "malformed_line", None),
    ]
    assert "'E2 = Search[no hash]'" in err.problems[0].message
