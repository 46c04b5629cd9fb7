"""How a role worker asks its model for tool calls and reads the reply, turn by turn.

Owns the two tool-calling protocols of `RoleWorker`'s loop:

- `NativeToolCalls`: the tools go in ``request.tools`` and the provider
  returns `ToolCall`s; results go back as ``role="tool"`` messages.
- `JsonToolCalls` (JSON mode), for models without native tool calling
  (``supports_tools = False``, such as the embedded local model): no
  ``tools`` are sent; the tools' descriptions and schemas go in the system
  prompt and ``output_schema`` is a union (`json_mode_schema`) that admits
  exactly one call of one of the worker's tools, with that tool's own
  argument schema, or a final answer. A grammar-constrained decoder can then
  only produce valid calls. Results go back as user messages
  ``"Result of tool X: ..."``, since there is no tool role in that mode.

In both, a tool's result is the text `result_text` gives: a string result
as it is, any other value as JSON.

Both read a reply into a `Reply`: tool calls, a final answer, or a `problem`
(a reply that could not be used, fed back to the model by the worker).
The instructions the model reads are data files under ``prompts/toolcalls/``.
Imports `models.base` only; never the engine, planner or store.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

from planexec.models.base import Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition

__all__ = [
    "ANY_JSON",
    "JsonToolCalls",
    "NativeToolCalls",
    "Reply",
    "json_mode_schema",
    "prompt_file",
    "result_text",
]

# An explicit "any JSON value": llama.cpp's grammar builder reads an empty schema as "an object".
ANY_JSON: dict[str, Any] = {"type": ["string", "number", "boolean", "object", "array", "null"]}

_MARKER = re.compile(r"\{\{(\w+)\}\}")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


@cache
def _read_prompt(parts: tuple[str, ...]) -> str:
    return files("planexec").joinpath("prompts", *parts).read_text(encoding="utf-8").strip()


def prompt_file(*parts: str, **values: str) -> str:
    """A prompt file shipped in ``planexec/prompts/`` (``prompt_file("roles", "critic.md")``), its ``{{name}}`` markers filled.

    Plain braces stay literal (as in the planner's prompts), so JSON in a prompt needs no escaping.
    """
    # one pass, so a filled-in value that happens to contain a marker stays as it is
    return _MARKER.sub(lambda m: values.get(m[1], m[0]), _read_prompt(parts))


def result_text(result: Any) -> str:
    """A tool's result as the model reads it: a string as it is (no quotes, no escapes), anything else as JSON."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


@dataclass(frozen=True)
class Reply:
    """One model reply, read: tool calls to run, or a final answer, or why it could not be used."""

    calls: list[ToolCall] = field(default_factory=list)
    answer: Any = None
    problem: str | None = None


def _hoist_defs(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its ``$defs`` moved into `defs` under `prefix` (refs rewritten), so schemas can nest."""
    own = schema.get("$defs", {})
    if not own:
        return schema
    renamed = {name: f"{prefix}__{name}" for name in own}

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "$defs":
                    continue
                if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
                    name = value.removeprefix("#/$defs/")
                    value = f"#/$defs/{renamed.get(name, name)}"
                out[key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    for name, sub in own.items():
        defs[renamed[name]] = rewrite(sub)
    hoisted: dict[str, Any] = rewrite(schema)
    return hoisted


_SHAPING = {"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "properties", "items", "prefixItems", "not"}
_SUB = ("items", "additionalProperties", "not")
_SUBS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _close_open(node: Any) -> Any:
    """`node` with every subschema that allows any value (``Any`` parameters: ``{}``, ``{"title": ...}``) as `ANY_JSON`.

    llama.cpp's grammar builder rejects such a subschema (or reads ``{}`` as an
    object), so a tool taking ``Any`` could not be offered to a local model.
    """
    if not isinstance(node, dict):
        return node
    if not _SHAPING & node.keys():
        return {**node, **ANY_JSON}
    out = dict(node)
    for key in _SUB:
        if isinstance(out.get(key), dict):
            out[key] = _close_open(out[key])
    for key in _SUBS:
        if isinstance(out.get(key), list):
            out[key] = [_close_open(sub) for sub in out[key]]
    for key in ("properties", "$defs"):
        if isinstance(out.get(key), dict):
            out[key] = {name: _close_open(sub) for name, sub in out[key].items()}
    return out


def json_mode_schema(tools: list[ToolDefinition], answer_schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The output schema of a JSON-mode turn: one branch per tool, plus the final answer.

    Each tool branch is ``{"tool": <const name>, "arguments": <the tool's
    argument schema>}``; the answer branch is ``{"answer": <answer_schema,
    or any JSON value>}``. Every branch forbids other keys. Argument schemas'
    ``$defs`` are hoisted to the top, prefixed with the tool's name; an
    argument that takes any value is spelled out as `ANY_JSON`.
    """
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for t in tools:
        branches.append(
            {
                "type": "object",
                "properties": {"tool": {"const": t.name}, "arguments": _hoist_defs(_close_open(t.parameters), t.name, defs)},
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
        )
    answer = _hoist_defs(answer_schema, "answer", defs) if answer_schema is not None else ANY_JSON
    branches.append({"type": "object", "properties": {"answer": answer}, "required": ["answer"], "additionalProperties": False})
    schema: dict[str, Any] = {"anyOf": branches}
    if defs:
        schema["$defs"] = defs
    return schema


def _answer_instructions(answer_schema: dict[str, Any] | None) -> str:
    if answer_schema is None:
        return ""
    return prompt_file("toolcalls", "answer_schema.md", schema=json.dumps(answer_schema))


def _strip_fence(text: str) -> str:
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group(1).strip() if match else stripped


def _maybe_json(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
    return text


def _cut(response: ModelResponse) -> str:
    return " (the reply was cut off by the token limit)" if response.finish_reason == "length" else ""


class NativeToolCalls:
    """The provider's own tool calling: tools in the request, `ToolCall`s in the response.

    With an answer schema the final answer must be JSON matching it; the
    schema is described in the system prompt, and sent as ``output_schema``
    only when there are no tools (a provider checking structured output
    would otherwise refuse a turn that calls a tool).
    """

    def __init__(self, tools: list[ToolDefinition], answer_schema: dict[str, Any] | None = None) -> None:
        self.tools = tools
        self.answer_schema = answer_schema

    def system_prompt(self, role_prompt: str) -> str:
        """The role's prompt plus, with an answer schema, how to shape the final answer."""
        return "\n\n".join(p for p in (role_prompt, _answer_instructions(self.answer_schema)) if p)

    def request(self, messages: list[Message], temperature: float | None, *, final: bool = False) -> ModelRequest:
        """One turn's request; on the `final` turn no tools are offered, so the model must answer."""
        tools = [] if final else self.tools
        schema = self.answer_schema if not tools else None
        return ModelRequest(messages=messages, tools=tools, output_schema=schema, temperature=temperature)

    def read(self, response: ModelResponse, turn: int) -> Reply:
        """Tool calls when there are any; else the text (JSON when it parses, and it must with a schema)."""
        if response.tool_calls:
            return Reply(calls=list(response.tool_calls))
        if self.answer_schema is None:
            return Reply(answer=_maybe_json(response.text))
        try:
            return Reply(answer=json.loads(_strip_fence(response.text)))
        except json.JSONDecodeError as exc:
            return Reply(problem=f"the answer is not JSON{_cut(response)}: {exc}")

    def assistant_message(self, response: ModelResponse, reply: Reply) -> Message:
        """The model's turn as it goes back into the conversation."""
        return Message(role="assistant", content=response.text, tool_calls=reply.calls)

    def result_message(self, call: ToolCall, content: str) -> Message:
        """A tool's result, answering its call."""
        return Message(role="tool", call_id=call.call_id, content=content)


class JsonToolCalls:
    """JSON mode: every reply is one JSON object, a tool call or the final answer (see `json_mode_schema`)."""

    def __init__(self, tools: list[ToolDefinition], answer_schema: dict[str, Any] | None = None) -> None:
        self.tools = tools
        self.answer_schema = answer_schema
        self.names = {t.name for t in tools}
        self.output_schema = json_mode_schema(tools, answer_schema)
        self.final_schema = json_mode_schema([], answer_schema)  # the answer branch alone

    def system_prompt(self, role_prompt: str) -> str:
        """The role's prompt plus the reply protocol, each tool's description and argument schema."""
        listing = "\n\n".join(
            f"### {t.name}\n{t.description or '(no description)'}\nArguments (JSON Schema): {json.dumps(t.parameters)}" for t in self.tools
        )
        answer = (
            f'The value of "answer" must match this JSON Schema: {json.dumps(self.answer_schema)}'
            if self.answer_schema is not None
            else 'The value of "answer" is your result: text, or JSON data when the task asks for it.'
        )
        protocol = prompt_file("toolcalls", "json_mode.md", tools=listing, answer=answer)
        return f"{role_prompt}\n\n{protocol}" if role_prompt else protocol

    def request(self, messages: list[Message], temperature: float | None, *, final: bool = False) -> ModelRequest:
        """One turn's request: no tools, the union as output schema (only the answer on the `final` turn)."""
        schema = self.final_schema if final else self.output_schema
        return ModelRequest(messages=messages, output_schema=schema, temperature=temperature)

    def read(self, response: ModelResponse, turn: int) -> Reply:
        """Parse ``{"tool", "arguments"}`` into a `ToolCall` (id ``json_<turn>``) or ``{"answer"}`` into the answer."""
        try:
            data = json.loads(_strip_fence(response.text))
        except json.JSONDecodeError as exc:
            return Reply(problem=f"the reply is not JSON{_cut(response)}: {exc}")
        if isinstance(data, dict) and set(data) == {"answer"}:
            return Reply(answer=data["answer"])
        if isinstance(data, dict) and set(data) == {"tool", "arguments"}:
            name, arguments = data["tool"], data["arguments"]
            if not isinstance(name, str) or not isinstance(arguments, dict):
                return Reply(problem='"tool" must be a tool name and "arguments" a JSON object')
            # an unknown name still becomes a call: the worker answers it with the list of its tools
            return Reply(calls=[ToolCall(call_id=f"json_{turn + 1}", name=name, arguments=arguments)])
        return Reply(problem='the reply must be one JSON object, either {"tool": ..., "arguments": {...}} or {"answer": ...}')

    def assistant_message(self, response: ModelResponse, reply: Reply) -> Message:
        """The model's JSON reply, verbatim, as its turn."""
        return Message(role="assistant", content=response.text)

    def result_message(self, call: ToolCall, content: str) -> Message:
        """A tool's result as a user message the model can read (there is no tool role in this mode)."""
        return Message(role="user", content=f"Result of tool {call.name}:\n{content}")
