"""The compact plan language: parsing, errors by line, printing, streaming, repair, replanning, its grammar, the oracle."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planexec import Engine, Plan, Registry, RunStatus
from planexec.errors import PlanningError, PlanParseError
from planexec.eval.oracle import OracleModel
from planexec.eval.suite import SolutionCall
from planexec.models import ModelProfile
from planexec.models.base import ModelDelta, ModelRequest, ModelResponse
from planexec.plan.compact import CompactReader, parse_compact, print_compact, read_compact
from planexec.plan.formats import parse_llmcompiler
from planexec.planning.compact_form import is_compact_request
from planexec.planning.draft_schema import draft_grammar
from planexec.planning.planner import Planner
from planexec.planning.replanner import PlannerReplanner
from planexec.planning.stream import PlanStream
from planexec.team.settings import PlanningOptions, ReviewOptions
from planexec.team.team import Team
from planexec.testing import ScriptedModel
from planexec.usage import Usage
from planexec.workers.toolkit import calculator
from planexec.workers.worker import RoleWorker

GOOD = '1. echo(value="hello")\n2. echo(value="world")\n3. concat(parts=[$1, $2], separator=" ") answer\n'


def lines_of(exc: PlanParseError) -> dict[str, str]:
    """The rule of each problem by its line field."""
    return {p.field.split(",")[0]: p.rule for p in exc.problems if p.field}


@pytest.fixture
def roles(registry):
    """The built-ins plus a writer role (its tasks: write, respond) and a researcher (research, respond)."""
    for name, task in (("writer", "write"), ("researcher", "research")):
        registry.add_worker(RoleWorker(name, model=ScriptedModel([]), description=f"a {name}", system_prompt="s", tasks=(task, "respond")))
    return registry


# --- parsing each construct ----------------------------------------------------------------------


def test_tool_calls_references_and_the_answer_mark_become_the_plan(registry):
    plan = parse_compact(GOOD, goal="greet", registry=registry)
    assert plan.step_ids == ["s1", "s2", "s3"]
    assert [s.worker for s in plan.steps] == ["tool"] * 3
    assert plan.step("s3").parameters == {"parts": ["${s1}", "${s2}"], "separator": " "}
    assert plan.step("s3").dependencies == ["s1", "s2"] and plan.answer_step == "s3"
    assert Engine(registry).run_sync(plan).answer == "hello world"


def test_positional_arguments_take_the_parameter_names_and_python_spellings_are_read(registry):
    plan = parse_compact("1. sleep(0, True)\n2. echo(value=None)\n3. echo(value={'a': [1, 2.5, false]})", goal="g", registry=registry)
    assert plan.step("s1").parameters == {"seconds": 0, "value": True}
    assert plan.step("s2").parameters == {"value": None}
    assert plan.step("s3").parameters == {"value": {"a": [1, 2.5, False]}}


def test_reference_forms_whole_values_templates_fields_braces_names_and_dollars():
    text = (
        "1. a()\n"
        'fetch. b(x=$1, y="$1", z="n=$1.items.0.name!", w=${1.k}, v="${fetch}")\n'
        '3. c(x="$$5 and $${literal} and $ alone", y=${fetch.rows.2}, z="sum: $1.")\n'
    )
    with pytest.raises(PlanParseError) as info:  # fetch refers to itself
        parse_compact(text, goal="g")
    assert lines_of(info.value) == {"line 2": "forward_reference"}
    plan = parse_compact(text.replace(', v="${fetch}"', ""), goal="g")
    b, c = plan.step("fetch"), plan.step("s3")
    assert b.parameters == {"x": "${s1}", "y": "${s1}", "z": "n=${s1.items.0.name}!", "w": "${s1.k}"}
    assert c.parameters == {"x": "$5 and $${literal} and $ alone", "y": "${fetch.rows.2}", "z": "sum: ${s1}."}
    assert c.dependencies == ["fetch", "s1"]


def test_role_tasks_in_words_worker_actions_and_the_short_form_with_one_task(roles):
    text = '1. echo(value="x")\n2. writer.write: "Say $1 nicely"\n3. researcher: "look into $2" answer\n4. writer.write(input="$1")  # a note\n'
    plan = parse_compact(text, goal="g", registry=roles)
    s2, s3, s4 = plan.step("s2"), plan.step("s3"), plan.step("s4")
    assert (s2.worker, s2.action, s2.instruction, s2.parameters) == ("writer", "write", "Say ${s1} nicely", {})
    assert (s3.worker, s3.action, s3.instruction) == ("researcher", "research", "look into ${s2}")
    assert (s4.worker, s4.action, s4.parameters, s4.instruction) == ("writer", "write", {"input": "${s1}"}, "a note")
    with pytest.raises(PlanParseError) as info:  # without a catalog the task cannot be guessed
        parse_compact('1. researcher: "x"', goal="g")
    assert "name the task" in info.value.problems[0].message


def test_annotations_set_the_steps_other_fields_in_any_order():
    text = (
        '1. a(x=1) approve tolerant timeout=30 on_fail=skip instruction="first\\nline"\n'
        '2. b() after 1 on_fail={"kind": "retry", "max_attempts": 5} criteria=["not_empty"] schema={"type": "object"}\n'
        '3. c() grants=[{"tool": "read_file", "approved": true}] after=$1, 2  # last one\n'
    )
    plan = parse_compact(text, goal="g")
    s1, s2, s3 = plan.steps
    assert s1.requires_approval and s1.accepts_failed_inputs and s1.timeout == 30 and s1.failure_action.kind == "skip"
    assert s1.instruction == "first\nline"
    assert s2.depends_on == ["s1"] and s2.failure_action.max_attempts == 5 and s2.output_schema == {"type": "object"}
    assert s2.success_criteria[0].kind == "not_empty"
    assert s3.capabilities is not None and s3.capabilities[0].tool == "read_file" and s3.depends_on == ["s1", "s2"]
    assert s3.instruction == "last one"


def test_join_end_marks_fences_blank_and_comment_lines_and_plan_fields():
    text = "```\n# the plan\n1. a()\n\n2. b(x=$1) <END_OF_PLAN>\n```\n"
    assert parse_compact(text, goal="g").step_ids == ["s1", "s2"]
    for end in ("join", "join()", "3. join()"):
        plan = parse_compact(f"1. a()\n2. b()\n{end}\n", goal="g")
        assert plan.step_ids == ["s1", "s2"]
    plan = parse_compact('1. a()\njoin risk=high rollback="undo-a"\n', goal="g")
    assert plan.risk_level == "high" and plan.rollback_plan == "undo-a"
    assert parse_compact("1. tool.join(x=1)", goal="g").step("s1").action == "join"  # a tool named join, through its worker


def test_a_parameter_named_like_a_python_keyword():
    plan = parse_compact('1. translate(text="hi", from="en", to="fr")', goal="g")
    assert plan.step("s1").parameters == {"text": "hi", "from": "en", "to": "fr"}
    assert parse_compact(print_compact(plan), goal="g", plan_id=plan.plan_id) == plan


# --- errors name the line ------------------------------------------------------------------------


def test_every_bad_line_is_reported_at_once_naming_its_line_and_quoting_it():
    text = (
        "1. a(x=1\n"  # unclosed
        "2. b(x=$20)\n"  # no step 20
        "c(x=1)\n"  # no number
        "4. d() frob\n"  # unknown annotation
        "5. e() answer\n"
        "6. f() answer\n"  # a second answer
        "7. g(x=$8)\n"  # forward
        "8. h()\n"
        "2. i()\n"  # duplicate id
        "Thought: hmm\n"
        "join\n"
        "10. j()\n"  # after the end
    )
    with pytest.raises(PlanParseError) as info:
        read_compact(text)
    assert lines_of(info.value) == {
        "line 1": "malformed_arguments",
        "line 2": "unknown_reference",
        "line 3": "malformed_line",
        "line 4": "unknown_annotation",
        "line 6": "duplicate_answer",
        "line 7": "forward_reference",
        "line 9": "duplicate_step_id",
        "line 10": "malformed_line",
        "line 12": "after_join",
    }
    rendered = [p.render() for p in info.value.problems]
    assert any("line 3" in r and "'c(x=1)'" in r and "number" in r for r in rendered)
    assert [int(p.field.split()[1].rstrip(",")) for p in info.value.problems] == sorted(
        int(p.field.split()[1].rstrip(",")) for p in info.value.problems
    )


def test_shape_errors_of_the_plan_name_the_line_too():
    with pytest.raises(PlanParseError) as info:
        parse_compact("1. a()\n2. b() on_fail=explode timeout=-1\n", goal="g")
    fields = {p.field for p in info.value.problems}
    assert fields == {"line 2, failure_action.kind", "line 2, timeout"}
    with pytest.raises(PlanParseError) as info:
        parse_compact('1. a() resources={"num_cpus": -1, "disks": 2}\n', goal="g")
    assert {p.field for p in info.value.problems} == {"line 1, resources.num_cpus", "line 1, resources.disks"}
    with pytest.raises(PlanParseError) as info:
        parse_compact("", goal="g")
    assert info.value.problems[0].rule == "empty_plan"


# --- printing: the same plan back ----------------------------------------------------------------


def _full_plan() -> Plan:
    steps = [
        {"id": "s1", "action": "fetch", "parameters": {"key": "a", "n": 3, "f": 2.5, "ok": True, "none": None}},
        {"id": "s2", "action": "fetch", "instruction": "price in $, say ${not a ref} or $$5", "parameters": {"key": "b"}},
        {
            "id": "named-3",
            "worker": "writer",
            "action": "write",
            "instruction": "Compare ${s1.items.0} with ${s2}x and ${s2}.",
            "depends_on": ["s1"],
            "failure_action": {"kind": "retry", "max_attempts": 4, "then": "skip"},
            "timeout": 12.5,
            "requires_approval": True,
            "accepts_failed_inputs": True,
            "success_criteria": ["not_empty", {"kind": "regex", "pattern": "\\d+", "path": "a.b"}],
            "output_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
            "capabilities": [{"tool": "read_file", "arguments": {"path": {"paths": ["docs/*"]}}, "approved": True}],
            "resources": {"num_cpus": 2, "memory": 1000000, "resources": {"accelerator": 1}},
        },
        {
            "id": "s4",
            "worker": "writer",
            "action": "write",
            "instruction": '  two\nlines \u2028 and a # and "quotes" ',
            "parameters": {"input": ["${s1}", {"k": "${named-3.x}", "$key": "v$"}, "\\ and \u0085"]},
            "failure_action": "replan",
        },
        {"id": "s5", "action": "join", "parameters": {}, "depends_on": ["s4", "s2"]},
    ]
    return Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": steps,
            "answer_step": "s4",
            "risk_level": "medium",
            "estimated_duration": "PT5M30S",
            "rollback_plan": {"steps": [steps[0]]},
        }
    )


def test_print_then_parse_is_the_same_plan_and_content_hash():
    plan = _full_plan()
    text = print_compact(plan)
    back = parse_compact(text, goal="g", plan_id="p")
    assert back == plan and back.content_hash == plan.content_hash
    assert back.steps[2].resources.num_cpus == 2 and back.estimated_duration.total_seconds() == 330  # not lost on the way
    assert 'resources={"num_cpus": 2' in text and 'duration="PT5M30S"' in text
    assert text.count("\n") == len(plan.steps) + 1  # one line per step, and the end line with the plan's fields


def test_printing_the_shipped_examples_and_an_llmcompiler_plan_round_trips(registry):
    plan = parse_compact(GOOD, goal="g", registry=registry)
    assert print_compact(plan) == GOOD  # the canonical form is the one a planner writes
    compiled = parse_llmcompiler('1. echo("a")\n2. concat([$1, "b"])\njoin()', goal="g", registry=registry)
    assert compiled.step_ids == ["1", "2"]
    with pytest.raises(ValueError, match="digits only"):
        print_compact(compiled)
    back = parse_compact(print_compact(compiled, step_prefix=""), goal="g", plan_id=compiled.plan_id, step_prefix="")
    assert back == compiled


_TEXT = st.text(alphabet=st.sampled_from(list("ab $${}.1_-#\"'\\\n\u2028 x")), max_size=24)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)  # the same examples in every CI run
@given(value=_TEXT, note=_TEXT, ref_at=st.integers(0, 24))
def test_any_text_round_trips(value, note, ref_at):
    value = value[:ref_at] + "${s1}" + value[ref_at:]  # a reference somewhere in the text
    assume(not re.search(r"(?<!\$)\$\{\d", value + note))  # a reference to an id of digits only has no label (a ValueError)
    steps = [{"id": "s1", "action": "a"}, {"id": "s2", "action": "b", "instruction": note, "parameters": {"v": value, "w": [value]}}]
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": steps})
    assume(plan.steps[1].references <= {"s1"})  # a reference to a step the plan lacks is refused when read, naming it
    back = parse_compact(print_compact(plan), goal="g", plan_id="p")
    assert back.content_hash == plan.content_hash


# --- the planner writing the compact form --------------------------------------------------------


def test_the_compact_planner_sends_no_schema_shows_the_catalog_as_calls_and_examples_as_lines(registry):
    from planexec.workers.toolkit import calculator

    registry.add_tool(calculator)
    model = ScriptedModel([GOOD])
    planner = Planner(model, registry, plan_format="compact")
    planning = asyncio.run(planner.draft("greet the world"))
    assert planning.plan.step_ids == ["s1", "s2", "s3"] and planning.plan.answer_step == "s3"
    request = model.requests[0]
    assert request.output_schema is None and is_compact_request(request)
    system = request.messages[0].content
    assert "    concat(parts: list of" in system and "action concat" not in system and "{{" not in system
    assert request.messages[2].content == '1. calculator(expression="12 * 7 + 3") answer'  # the shipped example, compact
    json_planner = Planner(ScriptedModel([]), registry)
    assert json_planner.request(json_planner.messages("g")).output_schema is not None  # JSON stays the default
    with pytest.raises(ValueError, match="plan_format"):
        Planner(model, registry, plan_format="yaml")


def test_the_repair_loop_sends_the_problems_by_line_and_takes_the_fixed_plan(registry):
    bad = '1. echo(value="hello")\n2. launch_rockets(count=3)\n3. concat(parts=[$1, $9])\n'
    model = ScriptedModel([bad, GOOD])
    planning = asyncio.run(Planner(model, registry, plan_format="compact").draft("greet"))
    assert planning.repairs == 1 and planning.plan.step_ids == ["s1", "s2", "s3"]
    first = planning.drafts[0].problems
    assert any("line 3" in p and "unknown_reference" in p for p in first)
    planning2 = asyncio.run(Planner(ScriptedModel([bad.replace("$9", "$2"), GOOD]), registry, plan_format="compact").draft("greet"))
    assert any("line 2" in p and "launch_rockets" in p for p in planning2.drafts[0].problems)  # validation problems name the line too
    repair = model.requests[1].messages
    assert repair[-2].content == bad and "line 3" in repair[-1].content and "one step per line" in repair[-1].content


def test_a_planner_that_never_writes_a_valid_compact_plan_fails_with_its_last_problems(registry):
    model = ScriptedModel(["here is the plan:", "1. nope()"])
    with pytest.raises(PlanningError) as info:
        asyncio.run(Planner(model, registry, plan_format="compact", max_repairs=1).draft("g"))
    assert info.value.attempts == 2 and info.value.problems[0].rule == "unknown_action"


# --- streaming: a step per completed line --------------------------------------------------------


class ChunkedModel:
    """Streams fixed chunks and counts how many it has handed out."""

    name = "test:chunked"

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks
        self.sent = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="".join(self.chunks), usage=Usage(model_calls=1))

    async def stream(self, request: ModelRequest):
        for chunk in self.chunks:
            self.sent += 1
            yield ModelDelta(text=chunk)
        yield ModelResponse(text="".join(self.chunks), usage=Usage(model_calls=1))


def test_streaming_yields_each_step_when_its_line_is_complete_from_chunks_split_mid_line(registry):
    chunks = ["1. echo(val", 'ue="hel', 'lo")\n2. echo(value="wo', 'rld")', "\n3. concat(parts=[$1, $2], ", 'separator=" ") answer']
    model = ChunkedModel(chunks)

    async def go():
        stream = PlanStream(Planner(model, registry, plan_format="compact"), "g")
        return [(s.step_id, model.sent) async for s in stream], stream.plan

    seen, plan = asyncio.run(go())
    # s1 once chunk 3 brought its newline, s2 with chunk 5's, s3 (no newline) when the text ended
    assert seen == [("s1", 3), ("s2", 5), ("s3", 6)]
    assert plan is not None and plan.answer_step == "s3"


def test_a_streamed_compact_plan_runs_and_a_bad_line_stops_it_naming_the_line(registry):
    async def go(text):
        run = Engine(registry).start_streaming(PlanStream(Planner(ScriptedModel([text]), registry, plan_format="compact"), "g"))
        return await run.result()

    result = asyncio.run(go(GOOD))
    assert result.status is RunStatus.SUCCEEDED and result.answer == "hello world"
    result = asyncio.run(go('1. echo(value="a")\n2. echo(value=\n3. noop()\n'))
    assert result.status is RunStatus.FAILED and "line 2" in result.reason


# --- replanning in the compact form --------------------------------------------------------------


@pytest.fixture
def divide_registry():
    reg = Registry.default()

    @reg.tool(read_only=True, untrusted_output=False)
    async def fetch(key: str) -> int:
        return {"a": 84, "b": 0, "c": 2}[key]

    @reg.tool(read_only=True, untrusted_output=False)
    async def divide(x: int, y: int) -> float:
        return x / y

    return reg


def test_a_replan_is_asked_and_answered_in_the_compact_form(divide_registry):
    steps = [
        {"id": "s1", "action": "fetch", "parameters": {"key": "a"}},
        {"id": "s2", "action": "fetch", "parameters": {"key": "b"}},
        {"id": "s3", "action": "divide", "parameters": {"x": "${s1}", "y": "${s2}"}, "failure_action": "replan"},
    ]
    plan = Plan.model_validate({"plan_id": "p", "goal": "a over b, or c", "steps": steps})
    revision = '4. fetch(key="c")\n5. divide(x=$1, y=$4) answer\n'
    model = ScriptedModel(["4. divide(x=$1, y=$9)\n", revision])  # the first draft refers to no step 9: repaired
    engine = Engine(divide_registry, replanner=PlannerReplanner(Planner(model, divide_registry, plan_format="compact")))
    result = engine.run_sync(plan)
    assert result.status is RunStatus.SUCCEEDED, result.reason
    assert result.answer == 42 and result.plan.step_ids == ["s1", "s2", "s4", "s5"]
    asked = model.requests[0].messages[-1].content
    assert '1. fetch(key="a")  [done]' in asked and "[FAILED: " in asked and "numbered from 4" in asked and "- $1: 84" in asked
    assert model.requests[0].output_schema is None
    assert "line 1" in model.requests[1].messages[-1].content


def test_a_json_revision_may_name_its_answer_as_the_shared_prompt_asks(divide_registry):
    """A hosted planner's system prompt asks for ``answer_step``, and a revision shares it: the revision's schema takes it
    (a provider that enforces the schema would refuse the reply otherwise), and the revision's last step is the answer."""
    import jsonschema

    steps = [
        {"id": "s1", "action": "fetch", "parameters": {"key": "a"}},
        {"id": "s2", "action": "fetch", "parameters": {"key": "b"}},
        {"id": "s3", "action": "divide", "parameters": {"x": "${s1}", "y": "${s2}"}, "failure_action": "replan"},
    ]
    plan = Plan.model_validate({"plan_id": "p", "goal": "a over b, or c", "steps": steps})
    revision = {
        "steps": [
            {"id": "s4", "worker": "tool", "action": "fetch", "instruction": "c", "parameters": {"key": "c"}, "depends_on": []},
            {"id": "s5", "worker": "tool", "action": "divide", "instruction": "x", "parameters": {"x": "${s1}", "y": "${s4}"},
             "depends_on": ["s1", "s4"]},
        ],
        "answer_step": "s4",
    }  # fmt: skip
    model = ScriptedModel([json.dumps(revision)])
    planner = Planner(model, divide_registry)
    assert planner.name_answer and '"answer_step"' in planner.messages("g")[0].content
    result = Engine(divide_registry, replanner=PlannerReplanner(planner)).run_sync(plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == 42 and result.plan.answer_step == "s5"
    schema = model.requests[0].output_schema
    assert schema["properties"]["answer_step"] == {
        "type": "string",
        "pattern": schema["properties"]["answer_step"]["pattern"],
        "maxLength": 64,
    }
    jsonschema.validate("s4", schema["properties"]["answer_step"])


# --- the grammar ---------------------------------------------------------------------------------


def test_the_grammar_names_only_the_catalog_and_numbers_earlier_references(registry):
    grammar = draft_grammar(registry, max_steps=3)
    assert '"echo("' in grammar and '"concat("' in grammar and "launch" not in grammar
    assert 'ref-3 ::= "$" ("1" | "2") path' in grammar and "ref-1 " not in grammar
    assert 'more-3 ::= step-3 end-3 | step-3 " answer" end-3' in grammar  # at most 3 lines, the answer last
    revision = draft_grammar(registry, max_steps=2, done=["s1", "fetch"], first=4)
    assert '"4. "' in revision and '"5. "' in revision and 'ref-1 ::= "$" ("1") path | "${" ("fetch") path "}"' in revision


class _GrammarModel(ScriptedModel):
    """A scripted model that says it decodes under a grammar, as `LocalModel` does."""

    def __init__(self, answers, **kwargs):
        super().__init__(answers, profile=ModelProfile(grammar=True), **kwargs)


def test_a_grammar_decoding_model_is_sent_the_compact_grammar_and_a_revision_its_own(divide_registry):
    """`ModelRequest.grammar`: the compact plan's GBNF for a model that decodes under one; a revision's numbers on from
    the steps kept and may refer to them; a hosted model and a JSON planner get none."""
    steps = [
        {"id": "s1", "action": "fetch", "parameters": {"key": "a"}},
        {"id": "s2", "action": "fetch", "parameters": {"key": "b"}},
        {"id": "s3", "action": "divide", "parameters": {"x": "${s1}", "y": "${s2}"}, "failure_action": "replan"},
    ]
    plan = Plan.model_validate({"plan_id": "p", "goal": "a over b, or c", "steps": steps})
    model = _GrammarModel(['1. fetch(key="a") answer\n', '4. fetch(key="c")\n5. divide(x=$1, y=$4) answer\n'])
    planner = Planner(model, divide_registry, plan_format="compact")
    asyncio.run(planner.draft("fetch a"))
    assert model.requests[0].grammar == planner.grammar and model.requests[0].output_schema is None
    result = Engine(divide_registry, replanner=PlannerReplanner(planner)).run_sync(plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == 42
    revision = model.requests[1].grammar
    assert revision == draft_grammar(divide_registry, max_steps=planner.max_steps, done=["s1", "s2"], first=4)
    assert '"4. "' in revision and revision != planner.grammar
    hosted = ScriptedModel(['1. fetch(key="a") answer\n'])
    asyncio.run(Planner(hosted, divide_registry, plan_format="compact").draft("fetch a"))
    assert hosted.requests[0].grammar is None  # a hosted model reads the rules, no grammar is sent
    assert Planner(_GrammarModel([]), divide_registry).request([]).grammar is None  # JSON drafts: the schema instead


def test_the_embedded_model_writes_a_compact_plan_under_the_grammar():
    """SmolLM2 decoding under the compact grammar: its first draft reads and validates, whatever its wisdom."""
    pytest.importorskip("llama_cpp", reason="needs pip install 'planexec[local]'")
    from planexec.models.local import LocalModel

    registry = Registry.default()
    registry.add_tool(calculator)
    planner = Planner(LocalModel(), registry, plan_format="compact", max_steps=4, max_repairs=0, max_tokens=256)
    planning = asyncio.run(planner.draft("What is 17 times 23, plus 5?"))
    [first] = planning.drafts
    assert first.problems == [] and planning.plan.steps, first.text
    assert re.match(r"1\. \w+\(", first.text), first.text  # numbered calls from the catalog, as the grammar says


@pytest.fixture(scope="module")
def vocabulary():
    """llama.cpp's grammar sampler over SmolLM2's vocabulary (the vocabulary only: no weights are loaded)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="needs pip install 'planexec[local]'")
    from planexec.errors import ModelError
    from planexec.models.local import default_model_path

    try:
        path = default_model_path()
    except ModelError as e:
        pytest.skip(str(e))
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    return llama_cpp, llm


def _accepts(vocabulary, grammar: str, text: str) -> bool:
    """Whether llama.cpp's sampler, under `grammar`, lets a model write `text` and then stop."""
    import ctypes

    llama_cpp, llm = vocabulary
    sampler = llama_cpp.llama_sampler_init_grammar(llama_cpp.llama_model_get_vocab(llm.model), grammar.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        for token in [*llm.tokenize(text.encode(), add_bos=False, special=False), llm.token_eos()]:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            candidates = llama_cpp.llama_token_data_array(data, 1, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if data[0].logit == float("-inf"):
                return False
            if token != llm.token_eos():
                llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


def test_llama_cpp_accepts_the_printers_output_and_rejects_what_the_catalog_lacks(vocabulary, roles):
    grammar = draft_grammar(roles, max_steps=4)
    plan = parse_compact(
        '1. echo(value="a $$5")\n2. sleep(seconds=1.5, value="$1") after 1 on_fail=skip  # wait\n'
        '3. writer.write: "Say $2 and $1.items.0"\n4. concat(parts=[$1, $3], separator=" ") answer\n',
        goal="g",
        registry=roles,
    )
    assert _accepts(vocabulary, grammar, print_compact(plan))
    assert _accepts(vocabulary, grammar, GOOD)
    assert not _accepts(vocabulary, grammar, "1. launch_rockets(count=3)\n")  # no such tool
    assert not _accepts(vocabulary, grammar, "1. echo(value=$2)\n2. noop()\n")  # a reference forward
    assert not _accepts(vocabulary, grammar, '1. echo(text="a")\n')  # no such parameter
    assert not _accepts(vocabulary, grammar, "1. noop() answer\n2. noop()\n")  # the answer is the last line
    assert not _accepts(vocabulary, grammar, "".join(f"{k}. noop()\n" for k in range(1, 6)))  # more than max_steps


# --- the oracle and the embedded model -------------------------------------------------------------


def test_the_oracle_writes_the_compact_form_when_asked_and_no_joiner_call_is_needed(registry):
    solution = [
        SolutionCall(call_id="a", tool="echo", args={"value": "hello"}),
        SolutionCall(call_id="b", tool="echo", args={"value": "world"}),
        SolutionCall(call_id="c", tool="concat", args={"parts": ["${a}", "${b}"], "separator": " "}),
    ]
    oracle = OracleModel(solution)
    planning = asyncio.run(Planner(oracle, registry, plan_format="compact").draft("greet"))
    assert planning.drafts[0].text == GOOD and planning.plan.answer_step == "s3"
    json_planning = asyncio.run(Planner(OracleModel(solution), registry).draft("greet"))  # its own ids (a, b, c)
    assert [s.action for s in json_planning.plan.steps] == [s.action for s in planning.plan.steps]
    assert json_planning.plan.answer_step == "c"  # the JSON draft names its answer too
    assert Engine(registry).run_sync(planning.plan).answer == "hello world"


def test_the_embedded_model_path_still_runs(tmp_path):
    """``planexec run`` on SmolLM2 (the JSON draft under its grammar): it plans and runs, whatever its answer."""
    pytest.importorskip("llama_cpp", reason="needs pip install 'planexec[local]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANEXEC_") and k != "OPENAI_API_KEY"}
    command = [sys.executable, "-m", "planexec", "run", "What is 17 times 23, plus 5?", "--yes", "--json", "--no-store"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] in ("succeeded", "failed")


def test_the_reader_takes_text_in_any_pieces():
    reader = CompactReader()
    got = []
    for piece in ["1. a(", "x=1)", "\n", "2. b(y=$1)\n3.", " c()"]:
        got += [s.step_id for s in reader.feed(piece)]
    assert got == ["s1", "s2"]
    assert [s.step_id for s in reader.close()] == ["s3"]
    assert reader.draft().lines == {"s1": 1, "s2": 2, "s3": 3}


def test_a_team_plans_in_the_compact_form_set_in_planexec_toml(tmp_path, monkeypatch):
    """``plan_format = "compact"`` in planexec.toml: the team's planner asks for lines, reads them, and the answer mark
    saves the joiner's call; the calculator's long docstring is cut to its first paragraph in the catalogue."""
    (tmp_path / "planexec.toml").write_text('[planexec]\nplan_format = "compact"\n')
    planned = ModelResponse(text='1. calculator(expression="17 * 23")\n2. calculator(expression="$1 + 5") answer\n')
    model = ScriptedModel([planned], name="test:compact")
    team = Team.from_config(
        tmp_path,
        model=model,
        tools=[calculator],
        mode="plan",
        store=None,
        planning=PlanningOptions(joiner=True),
        review=ReviewOptions(auto_approve=True),
    )
    assert team.plan_format == "compact" and team.planner.plan_format == "compact"
    result = team.run_sync("What is 17 times 23, plus 5?")
    assert result.status is RunStatus.SUCCEEDED and result.answer == 396
    assert len(model.requests) == 1  # the planner only: the answer step is the answer, no joiner call
    system = model.requests[0].messages[0].content
    assert "calculator(expression: string) - Evaluate an arithmetic expression" in system and "radians" not in system
    with pytest.raises(ValueError, match="plan_format must be 'json' or 'compact'"):
        Team(model, planning=PlanningOptions(plan_format="yaml"))  # type: ignore[arg-type]
