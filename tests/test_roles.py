"""Role workers with models: JSON-mode tool calls, answer schemas, the critic rule, the built-in roles."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import BaseModel

import planexec
from planexec import Engine, Plan, Registry, RoleWorker, StepCall, Usage, tool
from planexec.errors import ModelOutputError, ModelServerError, RegistryError
from planexec.models import ModelProfile, ModelRequest, ModelResponse, ToolDefinition
from planexec.testing import FunctionModel, ScriptedModel, count_tokens, scripted_tool, tool_call
from planexec.workers.roles import ROLES, builtin_roles, role_prompt
from planexec.workers.tool_calls import json_mode_schema
from planexec.workers.worker import UNJUDGED, VERDICT_SCHEMA, CriticWorker, Verdict, WorkerError
from test_sandbox import needs_bwrap

PROMPTS = Path(planexec.__file__).parent / "prompts" / "roles"


def _call(action="respond", instruction="add 2 and 3", *, requires_approval=False, worker="coder", capabilities=None):
    raw = {"id": "s", "action": action, "worker": worker, "instruction": instruction, "requires_approval": requires_approval}
    if capabilities is not None:
        raw["capabilities"] = capabilities
    step = Plan.model_validate({"plan_id": "p", "goal": "arithmetic", "steps": [raw]}).steps[0]
    return StepCall(run_id="r", plan_id="p", goal="arithmetic", step=step, worker=worker)


def _run(worker, call=None):
    return asyncio.run(worker.perform(call or _call()))


def _expected_usage(model):
    """What the doubles count: every request's words (+4 a message) in, every reply's words out."""
    return sum(sum(count_tokens(m.content) + 4 for m in r.messages) for r in model.requests)


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Point(BaseModel):
    x: int
    y: int


@tool(read_only=True)
def shift(p: Point, dx: int) -> Point:
    """Move a point right."""
    return Point(x=p.x + dx, y=p.y)


def _json_model(answers):
    return ScriptedModel(answers, name="test:no-tools", profile=ModelProfile(tool_calling=False))  # like the local model


# --- JSON mode -------------------------------------------------------------


def test_json_mode_offers_only_the_workers_tools_through_the_output_schema():
    model = _json_model(['{"tool": "add", "arguments": {"a": 2, "b": 3}}', '{"answer": {"sum": 5}}'])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="You add.", tools=[add, shift])
    assert worker.json_mode
    result = _run(worker)
    assert result.output == {"sum": 5}
    assert result.tools == ["add"]

    first = model.requests[0]
    assert first.tools == []  # nothing native is sent
    schema = first.output_schema
    consts = [b["properties"]["tool"]["const"] for b in schema["anyOf"] if "tool" in b["properties"]]
    assert consts == ["add", "shift"]
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"tool": "add", "arguments": {"a": 1, "b": 2}})
    assert validator.is_valid({"tool": "shift", "arguments": {"p": {"x": 1, "y": 2}, "dx": 1}})  # $defs hoisted
    assert not validator.is_valid({"tool": "rm", "arguments": {}})  # no other tool names
    assert not validator.is_valid({"tool": "add", "arguments": {"a": "x", "b": 2}})  # the tool's own schema
    assert not validator.is_valid({"tool": "add", "arguments": {"a": 1, "b": 2}, "answer": 3})
    assert validator.is_valid({"answer": "anything"}) and validator.is_valid({"answer": [1, {"k": None}]})

    system = first.messages[0].content
    assert system.startswith("You add.")
    assert "### add\nAdd two integers." in system and json.dumps(add.input_schema()) in system
    second = model.requests[1].messages
    assert second[-2].role == "assistant" and second[-2].content == '{"tool": "add", "arguments": {"a": 2, "b": 3}}'
    assert second[-1].role == "user" and second[-1].content == "Result of tool add:\n5"
    assert all(m.role != "tool" for m in second)


def test_json_mode_schema_namespaces_the_definitions_of_each_tool():
    point = {"type": "object", "properties": {"z": {"type": "string"}}, "required": ["z"]}
    label = ToolDefinition(  # its own "Point", of another shape than shift's
        name="label",
        parameters={"type": "object", "properties": {"p": {"$ref": "#/$defs/Point"}}, "required": ["p"], "$defs": {"Point": point}},
    )
    schema = json_mode_schema([shift.definition(), label], answer_schema=VERDICT_SCHEMA)
    assert set(schema["$defs"]) == {"shift__Point", "label__Point"}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"tool": "label", "arguments": {"p": {"z": "a"}}})
    assert not validator.is_valid({"tool": "label", "arguments": {"p": {"x": 1, "y": 2}}})
    assert validator.is_valid({"answer": {"approved": True, "reasons": []}})
    assert not validator.is_valid({"answer": "yes"})  # the answer schema holds in the union


def test_json_mode_schema_becomes_a_llama_cpp_grammar():
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="needs llama-cpp-python")
    schema = json_mode_schema([add.definition(), shift.definition()])
    gbnf = grammar.json_schema_to_gbnf(json.dumps(schema))
    assert '"\\"add\\""' in gbnf and '"\\"shift\\""' in gbnf  # each name is a literal of the grammar
    root = next(line for line in gbnf.splitlines() if line.startswith("root ::="))
    assert root.count("|") == 2  # two tools and the answer


def test_json_mode_feeds_a_malformed_reply_back_and_counts_its_usage():
    model = _json_model(["I will add them", '{"add": 1}', '{"answer": "5"}'])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[add])
    result = _run(worker)
    assert result.output == "5" and result.tools == []
    feedback = model.requests[1].messages[-1]
    assert feedback.role == "user" and "could not be used: the reply is not JSON" in feedback.content
    assert model.requests[1].messages[-2].content == "I will add them"
    assert 'either {"tool": ..., "arguments": {...}} or {"answer": ...}' in model.requests[2].messages[-1].content
    assert result.usage.model_calls == 3
    assert result.usage.input_tokens == _expected_usage(model)


def test_json_mode_gives_up_after_max_turns_of_unusable_replies():
    model = _json_model(["nope", "still nope"])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[add], max_turns=2)
    with pytest.raises(WorkerError, match=r"no usable answer in 2 turns; last problem: the reply is not JSON") as info:
        _run(worker)
    assert info.value.usage.model_calls == 2
    assert info.value.usage.input_tokens == _expected_usage(model)


def test_json_mode_unknown_tools_and_bad_arguments_go_back_as_tool_results():
    model = _json_model(['{"tool": "rm", "arguments": {}}', '{"tool": "add", "arguments": {"a": "x", "b": 1}}', '{"answer": 0}'])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[add])
    result = _run(worker)
    assert result.output == 0 and result.tools == []  # neither ran: an unknown tool, refused arguments
    assert (
        model.requests[1].messages[-1].content
        == "Result of tool rm:\nerror: the call to 'rm' was refused (unknown_tool: no tool 'rm'; available: add); it did not run"
    )
    assert (
        model.requests[2]
        .messages[-1]
        .content.startswith("Result of tool add:\nerror: the call to 'add' was refused (bad_arguments: tool 'add' refused its arguments")
    )


def test_json_mode_turn_limit_and_model_errors_keep_usage():
    looping = _json_model(['{"tool": "add", "arguments": {"a": 1, "b": 1}}'] * 3)
    worker = RoleWorker("coder", model=looping, description="d", system_prompt="s", tools=[add], max_turns=3)
    with pytest.raises(WorkerError, match=r"ran out of turns \(3\) with work left: it still asked for add\(a, b\)") as info:
        _run(worker)
    assert info.value.usage.model_calls == 3

    failing = _json_model(['{"tool": "add", "arguments": {"a": 1, "b": 1}}', ModelServerError("down", model="m")])
    worker = RoleWorker("coder", model=failing, description="d", system_prompt="s", tools=[add])
    with pytest.raises(WorkerError, match="ModelServerError: down") as info:
        _run(worker)
    assert info.value.usage.model_calls == 1


def test_tool_calling_mode_follows_the_model_or_the_option():
    assert not RoleWorker("w", model=ScriptedModel([]), description="d", system_prompt="s").json_mode
    assert RoleWorker("w", model=_json_model([]), description="d", system_prompt="s").json_mode
    forced = RoleWorker("w", model=ScriptedModel([]), description="d", system_prompt="s", tool_calling="json")
    assert forced.json_mode
    native = RoleWorker("w", model=_json_model([]), description="d", system_prompt="s", tool_calling="native")
    assert not native.json_mode
    with pytest.raises(RegistryError, match="tool_calling must be"):
        RoleWorker("w", model=ScriptedModel([]), description="d", system_prompt="s", tool_calling="xml")


def test_a_json_mode_worker_without_tools_asks_plainly():
    model = _json_model(["Just text."])
    worker = RoleWorker("writer", model=model, description="d", system_prompt="Write.")
    assert _run(worker).output == "Just text."
    request = model.requests[0]
    assert request.output_schema is None and request.tools == []
    assert request.messages[0].content == "Write."


# --- native mode and answer schemas ------------------------------------------


def test_native_mode_sends_tools_and_tool_role_messages():
    model = ScriptedModel([tool_call("add", a=2, b=3), "5"])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="You add.", tools=[add])
    result = _run(worker)
    assert result.output == "5"
    first, second = model.requests
    assert [t.name for t in first.tools] == ["add"] and first.output_schema is None
    assert first.messages[0].content == "You add."  # no JSON-mode protocol added
    assert second.messages[-1].role == "tool" and second.messages[-1].content == "5"
    assert second.messages[-2].tool_calls[0].name == "add"
    assert result.usage.input_tokens == _expected_usage(model)


def test_native_answer_schema_is_described_checked_and_fed_back():
    class Total(BaseModel):
        total: int

    model = ScriptedModel([tool_call("add", a=2, b=3), '{"total": "five"}', '```json\n{"total": 5}\n```'])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[add], answer_schema=Total)
    result = _run(worker)
    assert result.output == {"total": 5}  # a fenced JSON answer is accepted
    assert all(r.output_schema is None for r in model.requests)  # tools are offered: the schema is in the prompt
    assert json.dumps(Total.model_json_schema()) in model.requests[0].messages[0].content
    feedback = model.requests[2].messages[-1].content
    assert "the answer does not match its schema at total: 'five' is not of type 'integer'" in feedback
    assert result.usage.model_calls == 3


def test_native_answer_schema_without_tools_goes_as_output_schema():
    model = ScriptedModel(['{"total": 5}'])
    worker = RoleWorker("w", model=model, description="d", system_prompt="s", answer_schema={"type": "object"})
    assert _run(worker).output == {"total": 5}
    assert model.requests[0].output_schema == {"type": "object"}
    with pytest.raises(RegistryError, match="answer_schema is not a valid JSON Schema"):
        RoleWorker("w", model=model, description="d", system_prompt="s", answer_schema={"type": 3})


def test_a_tool_action_is_called_directly_without_the_model():
    model = ScriptedModel([])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[add])
    step = Plan.model_validate(
        {"plan_id": "p", "goal": "g", "steps": [{"id": "s", "action": "add", "worker": "coder", "parameters": {"a": 1, "b": 2}}]}
    ).steps[0]
    call = StepCall(run_id="r", plan_id="p", step=step, worker="coder", parameters={"a": 1, "b": 2})
    result = _run(worker, call)
    assert result.output == 3 and result.tools == ["add"] and model.requests == []


def test_a_tool_requiring_approval_runs_in_the_loop_only_in_an_approved_step():
    writes = []

    @tool(requires_approval=True)
    def write_file(path: str, text: str) -> str:
        writes.append(path)
        return "written"

    def run(requires_approval, capabilities=None):
        model = ScriptedModel([tool_call("write_file", path="a.txt", text="hi"), "done"])
        worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[write_file])
        _run(worker, _call("code", requires_approval=requires_approval, capabilities=capabilities))
        return model.requests[1].messages[-1].content

    # approving the step is not approving a call: with no one to ask about the call, it is refused
    assert "refused (approval_required" in run(True)
    assert writes == []
    # the reviewed plan pre-approved exactly this call's shape
    granted = [{"tool": "write_file", "arguments": {"path": {"values": ["a.txt"]}}, "approved": True}]
    assert run(False, granted) == "written"  # a string result reaches the model as text, not JSON-quoted
    assert writes == ["a.txt"]
    # outside the grant: refused with the rule, the tool never runs
    other = [{"tool": "write_file", "arguments": {"path": {"values": ["b.txt"]}}, "approved": True}]
    assert "refused (outside_grant: argument 'path'" in run(False, other)
    assert writes == ["a.txt"]


# --- the critic rule -----------------------------------------------------------


@tool(read_only=True)
def run_python(code: str) -> str:
    """Run Python code (a stand-in)."""
    return "3 passed"


def _critic(answers, *, json_mode=False, tools=None):
    model = _json_model(answers) if json_mode else ScriptedModel(answers)
    tools = tools if tools is not None else [run_python]
    return CriticWorker(model=model, description="reviews", system_prompt="Check.", tools=tools), model


def test_critic_approval_after_a_tool_call_is_a_judged_approval():
    critic, model = _critic([tool_call("run_python", code="pytest"), '{"approved": true, "reasons": ["3 tests pass"]}'])
    result = _run(critic, _call("review", worker="critic"))
    assert result.output == {"approved": True, "reasons": ["3 tests pass"], "judged": True, "tools_used": ["run_python"]}
    assert Verdict.model_validate(result.output).approved
    assert json.dumps(VERDICT_SCHEMA) in model.requests[0].messages[0].content


def test_critic_approval_without_a_tool_call_is_not_an_approval():
    critic, _ = _critic(['{"approved": true, "reasons": ["looks fine"]}'])
    verdict = Verdict.model_validate(_run(critic, _call("review", worker="critic")).output)
    assert verdict == Verdict(approved=False, judged=False, reasons=[UNJUDGED, "looks fine"], tools_used=[])


def test_critic_approval_after_only_refused_tool_calls_is_not_judged():
    @tool
    def calculator(expression: str) -> float:
        return 4.0

    critic, _ = _critic([tool_call("calculator", expr="2+2"), tool_call("rm"), '{"approved": true, "reasons": ["ok"]}'], tools=[calculator])
    result = _run(critic, _call("review", worker="critic"))
    assert result.tools == []  # tried, but neither ran
    assert [r["tool"] for r in result.refused] == ["calculator", "rm"]
    assert result.output["judged"] is False and result.output["approved"] is False


def test_critic_rejection_is_a_verdict_with_or_without_tools():
    critic, _ = _critic(['{"approved": false, "reasons": ["no tests"]}'])
    assert _run(critic, _call("review", worker="critic")).output == {
        "approved": False,
        "reasons": ["no tests"],
        "judged": True,
        "tools_used": [],
    }


def test_critic_in_json_mode_answers_through_the_verdict_branch():
    critic, model = _critic(
        [
            '{"tool": "run_python", "arguments": {"code": "1+1"}}',
            '{"answer": {"approved": "yes"}}',
            '{"answer": {"approved": true, "reasons": ["ran it"]}}',
        ],
        json_mode=True,
    )
    result = _run(critic, _call("review", worker="critic"))
    assert result.output["judged"] is True and result.output["approved"] is True
    answer_branch = model.requests[0].output_schema["anyOf"][-1]
    assert answer_branch["properties"]["answer"] == VERDICT_SCHEMA
    assert "does not match its schema" in model.requests[2].messages[-1].content
    assert result.usage.input_tokens == _expected_usage(model) and result.usage.model_calls == 3


def test_a_critic_without_tools_is_refused():
    with pytest.raises(RegistryError, match="could never approve"):
        _critic([], tools=[])


# --- the built-in roles --------------------------------------------------------------

TOOL_NAMES = ["read_file", "list_files", "search_files", "write_file", "run_python", "calculator"]


def _tools():
    return [scripted_tool(name) for name in TOOL_NAMES]


def test_builtin_roles_select_their_tools_by_name():
    roles = {w.name: w for w in builtin_roles(ScriptedModel([]), tools=_tools())}
    assert list(roles) == ["researcher", "coder", "critic", "writer"]
    assert set(roles["researcher"].tools) == {"read_file", "list_files", "search_files", "calculator"}
    assert set(roles["coder"].tools) == {"run_python", "read_file", "list_files", "write_file"}
    assert set(roles["critic"].tools) == {"run_python", "read_file", "calculator"}
    assert set(roles["writer"].tools) == set()  # it writes from what it is given
    assert isinstance(roles["critic"], CriticWorker) and type(roles["writer"]) is RoleWorker
    assert {w.name: sorted(w.tasks) for w in roles.values()} == {
        "researcher": ["research", "respond"],
        "coder": ["code", "respond"],
        "critic": ["respond", "review"],
        "writer": ["respond", "write"],
    }
    assert all(w.input_model(task) is None for w in roles.values() for task in w.tasks)


def test_builtin_roles_take_a_model_each_and_the_default_otherwise():
    cheap, strong = ScriptedModel([], name="test:cheap"), ScriptedModel([], name="test:strong")
    roles = {w.name: w for w in builtin_roles(cheap, models={"critic": strong}, tools=_tools())}
    assert roles["critic"].model is strong
    assert {roles[n].model for n in ("researcher", "coder", "writer")} == {cheap}
    with pytest.raises(RegistryError, match="no built-in role 'reviewer'"):
        builtin_roles(cheap, models={"reviewer": strong}, tools=_tools())


def test_role_prompts_are_the_files_in_prompts_roles():
    for spec in ROLES:
        text = (PROMPTS / f"{spec.name}.md").read_text(encoding="utf-8").strip()
        assert role_prompt(spec.name) == text and len(text) > 100
    model = ScriptedModel(["a summary"])
    (writer,) = builtin_roles(model, tools=_tools(), roles=["writer"])
    _run(writer, _call("write", worker="writer"))
    assert model.requests[0].messages[0].content == (PROMPTS / "writer.md").read_text(encoding="utf-8").strip()
    with pytest.raises(RegistryError, match="no built-in role 'poet'"):
        role_prompt("poet")


def test_the_catalog_shows_the_roles_descriptions_and_actions():
    registry = Registry()
    for worker in builtin_roles(ScriptedModel([]), tools={t.name: t for t in _tools()}):
        registry.add_worker(worker)
    entries = {e["name"]: e for e in registry.catalog()}
    critic = entries["critic"]
    assert "verdict" in critic["description"] and critic["description"].endswith("Tools: run_python, read_file, calculator.")
    assert {a["name"] for a in critic["actions"]} == {"review", "respond", "run_python", "read_file", "calculator"}
    assert next(a for a in critic["actions"] if a["name"] == "review")["parameters"] == {"type": "object"}
    assert entries["researcher"]["description"].startswith("Finds facts")


def test_roles_with_missing_tools_get_what_is_there_but_the_critic_needs_one():
    only_read = [scripted_tool("read_file")]
    roles = {w.name: w for w in builtin_roles(ScriptedModel([]), tools=only_read, roles=["coder", "critic"])}
    assert set(roles["coder"].tools) == {"read_file"} and "Tools: read_file." in roles["coder"].description
    with pytest.raises(RegistryError, match="role 'critic' needs at least one of the tools run_python, read_file, calculator"):
        builtin_roles(ScriptedModel([]), tools=[scripted_tool("list_files")], roles=["critic"])


def test_usage_of_a_role_is_summed_exactly_across_turns():
    def play(request: ModelRequest):
        if len(request.messages) == 2:  # the first turn calls a tool, the second answers
            return ModelResponse(
                tool_calls=[tool_call("calculator")], usage=Usage(input_tokens=10, output_tokens=3, model_calls=1, cost=0.5)
            )
        return ModelResponse(text="4", usage=Usage(input_tokens=20, output_tokens=1, model_calls=1, unpriced_calls=1))

    (researcher,) = builtin_roles(FunctionModel(play), tools=_tools(), roles=["researcher"])
    usage = _run(researcher, _call("research", worker="researcher")).usage
    assert usage == Usage(input_tokens=30, output_tokens=4, model_calls=2, cost=0.5, unpriced_calls=1)


# --- with the real embedded model -----------------------------------------------------


def test_json_mode_round_trip_with_the_local_model():
    """SmolLM2-135M, grammar-constrained to the union, calls the tool, reads its result and answers."""
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (pip install 'planexec[local]')")
    from planexec.errors import ModelError
    from planexec.models import LocalModel
    from planexec.models.local import default_model_path

    try:
        default_model_path()
    except ModelError as e:
        pytest.skip(str(e))
    calls = []

    @tool(read_only=True)
    def multiply(a: int, b: int) -> int:
        """Multiply two integers and return the product."""
        calls.append((a, b))
        return a * b

    class Recording:  # the local model, with its requests and replies kept
        def __init__(self):
            self.model, self.name, self.requests, self.replies = LocalModel(), "local:smollm2", [], []

        async def complete(self, request):
            self.requests.append(request)
            response = await self.model.complete(request)
            self.replies.append(response)
            return response

    model = Recording()
    worker = RoleWorker(
        "calc",
        model=model,
        description="d",
        system_prompt="You are a calculator assistant. Always use a tool to compute.",
        tools=[multiply],
        temperature=0,
        max_turns=3,
        tool_calling="json",
    )
    result = _run(worker, _call(instruction="What is 17 times 23? Call the multiply tool.", worker="calc"))
    assert model.requests[0].output_schema["anyOf"][0]["properties"]["tool"] == {"const": "multiply"}
    assert calls == [(17, 23)] and result.tools == ["multiply"]
    assert model.requests[1].messages[-1].content == "Result of tool multiply:\n391"
    assert result.output == 391
    assert result.usage == sum((r.usage for r in model.replies), Usage()) and result.usage.model_calls == 2


# --- with the toolkit ------------------------------------------------------------------


def test_builtin_roles_default_to_the_toolkit_of_the_workspace(tmp_path):
    pytest.importorskip("planexec.workers.toolkit")
    roles = {w.name: w for w in builtin_roles(ScriptedModel([]), workspace=tmp_path)}
    assert set(roles["researcher"].tools) == {"read_file", "list_files", "search_files", "calculator"}
    assert set(roles["coder"].tools) == {"run_python", "read_file", "list_files", "write_file"}
    assert roles["coder"].tools["write_file"].requires_approval
    assert set(roles["critic"].tools) == {"run_python", "read_file", "calculator"}
    assert set(roles["writer"].tools) == set()  # it writes from what it is given


@needs_bwrap  # it runs code in the sandbox
def test_a_critic_that_runs_the_code_gives_a_judged_verdict(tmp_path):
    pytest.importorskip("planexec.workers.toolkit")
    model = ScriptedModel([tool_call("run_python", code="print(6 * 7)"), '{"approved": true, "reasons": ["prints 42 as claimed"]}'])
    (critic,) = builtin_roles(model, workspace=tmp_path, roles=["critic"])
    assert critic.tools["run_python"].read_only  # a critic checks with a read-only sandbox: nothing to approve
    result = _run(critic, _call("review", worker="critic"))
    assert "42" in model.requests[1].messages[-1].content  # the sandbox's output went back to the model
    assert result.output == {"approved": True, "reasons": ["prints 42 as claimed"], "judged": True, "tools_used": ["run_python"]}


def test_default_tools_need_a_workspace():
    # the toolkit ships in the package (imported with the roles), so only a missing workspace can stop it
    with pytest.raises(RegistryError, match="needs a workspace"):
        builtin_roles(ScriptedModel([]))


def test_an_off_schema_reply_refused_by_the_provider_is_fed_back_with_its_usage():
    cost = Usage(input_tokens=7, output_tokens=2, model_calls=1)
    refused = ModelOutputError("structured output does not match output_schema", model="m", text='{"answer": 5}', usage=cost)
    model = ScriptedModel([refused, '{"answer": "5"}'])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[add], tool_calling="json")
    result = _run(worker)
    assert result.output == "5"
    retry = model.requests[1].messages
    assert retry[-2].content == '{"answer": 5}' and "could not be used: structured output does not match" in retry[-1].content
    assert result.usage.model_calls == 2 and result.usage.input_tokens == 7 + sum(
        count_tokens(m.content) + 4 for m in model.requests[1].messages
    )


def test_a_model_that_loops_on_tools_to_its_last_turn_leaves_the_step_incomplete_never_succeeded():
    import json as _json

    from planexec.testing import FunctionModel
    from planexec.workers.worker import IncompleteError

    def model_fn(request):
        branches = request.output_schema["anyOf"]
        if any("tool" in b["properties"] for b in branches):
            return _json.dumps({"tool": "read_file", "arguments": {}})  # it would call tools for ever
        return _json.dumps({"answer": "done at last"})

    model = FunctionModel(model_fn, name="test:looper", profile=ModelProfile(tool_calling=False))
    worker = RoleWorker("w", model=model, description="d", system_prompt="p", tools=[scripted_tool("read_file")], max_turns=3)
    with pytest.raises(IncompleteError, match=r"ran out of turns \(3\) with work left: it still asked for read_file\(\)") as info:
        asyncio.run(worker.perform(_call()))
    assert len(model.requests) == 3 and info.value.usage.model_calls == 3
    last = model.requests[-1].output_schema["anyOf"]
    assert ["tool", "arguments"] in [list(b["properties"]) for b in last]  # the tools are offered to the end


# --- long tool results -------------------------------------------------------------


@tool(read_only=True)
def dump_log() -> str:
    """Return the whole server log (30 MB)."""
    return "x" * 29_999_992 + "the end."


def test_a_30_mb_tool_result_reaches_the_model_cut_with_a_note_and_the_step_record_says_so():
    model = ScriptedModel([tool_call("dump_log"), "the log ends well"])
    registry = Registry()
    registry.add_worker(RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[dump_log]))
    plan = Plan.model_validate({"plan_id": "p", "goal": "read the log", "steps": [{"id": "s", "action": "respond", "worker": "coder"}]})
    result = asyncio.run(Engine(registry).run(plan))
    assert result.steps["s"].output.value == "the log ends well"
    seen = model.requests[1].messages[-1].content  # the tool's result as the model read it
    assert len(seen) < 20_500 and seen.startswith("x" * 20_000)
    assert "30,000,000 characters" in seen and "first 20,000" in seen and "29,980,000 were left out" in seen
    call = result.steps["s"].calls[0]
    assert call.ran and (call.result_chars, call.result_kept) == (30_000_000, 20_000)
    assert "the end." not in json.dumps([r.model_dump(mode="json") for r in model.requests])


def test_a_role_can_read_longer_or_shorter_results_and_json_mode_cuts_too():
    model = _json_model(['{"tool": "dump_log", "arguments": {}}', '{"answer": "read"}'])
    worker = RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[dump_log], max_result_chars=100)
    assert _run(worker).output == "read"
    seen = model.requests[1].messages[-1].content
    assert "x" * 100 in seen and "x" * 101 not in seen and "only the first 100 are shown" in seen
    coder = builtin_roles(ScriptedModel([]), tools=[dump_log], roles=["researcher"], max_result_chars=50_000)[0]
    assert coder.max_result_chars == 50_000 and RoleWorker("w", model=model, description="d", system_prompt="s").max_result_chars == 20_000
