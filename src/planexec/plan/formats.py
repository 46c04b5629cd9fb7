"""Text plan formats: LLMCompiler's numbered calls and ReWOO's ``#E`` lines, read into a `Plan`.

Owns `parse_llmcompiler` and `parse_rewoo`: the plain-text plans that
LLMCompiler- and ReWOO-style planners (prompts, fine-tuned models) write
become one step per call, their references rewritten as ``${step_id}`` so
dependencies follow from them as in any plan. Every bad line is reported at
once in one `PlanParseError` whose `Problem`s name the line (``field="line
3"``) and the rule, and quote the line. Arguments are read with `ast`, never
evaluated. A registry only names parameters here; checking the plan against
it stays with `validation`. Imports `plan` and `errors` (`validation.Catalog` for types).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planexec.errors import PlanParseError, Problem
from planexec.plan.model import Plan
from planexec.plan.references import find_references

if TYPE_CHECKING:
    from pydantic import BaseModel

    from planexec.plan.validation import Catalog

__all__ = ["parse_llmcompiler", "parse_rewoo"]

# "3. math(...)"; the number is optional only so that a bare "join()" is understood.
_CALL = re.compile(r"^(?:(\d+)\s*\.\s*)?([A-Za-z_][\w\-]*)\s*(\(.*)$")
_THOUGHT = re.compile(r"^Thought\s*:\s*(.*)$", re.IGNORECASE)
_END_MARK = "<END_OF_PLAN>"  # LLMCompiler's planner closes its output with this token
# $3, ${3}, ${3.path}, or a "${" that is no reference and must stay literal text.
_DOLLAR = re.compile(r"\$(\d+)|\$\{(\d+)((?:\.[^.}\s]+)*)\}|\$\{")
_EVIDENCE = re.compile(r"^#(E\d+)\s*=\s*([A-Za-z_][\w\-.]*)\s*\[(.*)\]$")
_PLAN_LINE = re.compile(r"^Plan\s*:\s*(.*?)\s*(#E\d+\s*=.*)?$", re.IGNORECASE)
_HASH_REF = re.compile(r"#(E\d+)|\$\{")
_BARE_REF = re.compile(r"\$\d+|\$\{\d+(?:\.[^.}\s]+)*\}")
_QUOTES = ('"""', "'''", '"', "'")  # longest first: a triple quote is not an empty string
_JSON_NAMES = {"true": True, "false": False, "null": None}


@dataclass
class _Call:
    step_id: str
    action: str
    parameters: dict[str, Any]
    instruction: str
    line: int


def line_problem(line: int, rule: str, message: str, text: str | None = None, step_id: str | None = None) -> tuple[int, Problem]:
    """A problem tied to its line (sorted by it later); `text` is the line, quoted so the message stands alone."""
    quoted = "" if text is None else ": " + repr(text if len(text) <= 120 else text[:120] + "...")
    return line, Problem(rule, message + quoted, step_id=step_id, field=f"line {line}" if line else None)


def parse_llmcompiler(
    text: str,
    *,
    goal: str,
    plan_id: str | None = None,
    registry: Catalog | None = None,
    worker: str = "tool",
    step_prefix: str = "",
) -> Plan:
    """Read an LLMCompiler plan (``1. search("x")`` lines) into a `Plan`.

    Each ``N. tool(args)`` line is a step with id ``step_prefix + "N"``, the
    tool as its action and `worker` as its worker. Arguments are Python-like
    literals (str, numbers, lists, dicts, True/False/None, JSON's true/false/
    null), positional or ``name=value``. Positional arguments take the tool's
    parameter names in order when `registry` knows the tool, else ``arg0``,
    ``arg1``, ... ``$N``, ``${N}`` and ``${N.path}`` in strings become
    references to step N (a whole ``"$1"`` keeps the output's type; in text it
    is a template; ``$1.50`` reads as one too); any other ``${`` stays text.
    A bare ``$1`` outside quotes (``[$1, $2]``) is read as ``"$1"``.

    ``Thought:`` lines become the `instruction` of the next step, verbatim
    (their ``$N`` are not references); a thought with no step after it is
    dropped. ``join()`` (numbered or not) or ``<END_OF_PLAN>`` ends the plan,
    is not a step and may be absent (so no tool can be named ``join``). A
    non-blank line after the end is an error (``after_join``), never silently
    dropped. The answer is the engine's default (the sinks' outputs);
    `plan_id` defaults to a hash of the text. Raises `PlanParseError` listing
    every malformed line and every reference to a missing step
    (``unknown_reference``) or one not earlier (``forward_reference``).
    """
    problems: list[tuple[int, Problem]] = []
    calls: list[_Call] = []
    thoughts: list[str] = []
    ended = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        marked = line.endswith(_END_MARK)
        line = line.removesuffix(_END_MARK).rstrip()
        if line and ended:
            problems.append(line_problem(n, "after_join", f"nothing may follow the end of the plan on line {ended}", line))
            continue
        thought = _THOUGHT.match(line)
        call = _CALL.match(line)
        if not line or thought:
            thoughts += [thought.group(1)] if thought and thought.group(1) else []
        elif call is None:
            problems.append(line_problem(n, "malformed_line", "expected 'N. tool(arguments)', 'Thought: ...' or 'join()'", line))
        elif call.group(2) == "join":
            ended = n
        elif call.group(1) is None:
            problems.append(line_problem(n, "malformed_line", "a call needs its step number, as in '1. tool(...)'", line))
        else:
            step_id = step_prefix + call.group(1)
            try:
                args, kwargs = call_arguments(call.group(3))
                model = parameter_model(registry, worker, call.group(2))
                parameters = name_arguments(args, kwargs, list(model.model_fields) if model is not None else None)
            except ValueError as exc:
                problems.append(line_problem(n, "malformed_arguments", str(exc), line, step_id=step_id))
                parameters = {}
            parameters = {k: rewrite_strings(v, lambda s: _dollar_refs(s, step_prefix)) for k, v in parameters.items()}
            calls.append(_Call(step_id, call.group(2), parameters, _literal_text("\n".join(thoughts)), n))
            thoughts = []
        if marked and not ended:
            ended = n
    return _build(calls, problems, goal=goal, plan_id=plan_id or _default_id("llmcompiler", text), worker=worker)


def parse_rewoo(
    text: str,
    *,
    goal: str,
    plan_id: str | None = None,
    registry: Catalog | None = None,
    worker: str = "tool",
    parameter: str = "input",
) -> Plan:
    """Read a ReWOO plan (``Plan: ...`` then ``#E1 = Tool[input]`` lines) into a `Plan`.

    Each ``#En = Tool[input]`` line is a step with id ``"En"``, the tool as its
    action and `worker` as its worker. The text between the first ``[`` and the
    last ``]`` (stripped) is one string parameter named `parameter`, or, when
    `registry` knows the tool and it has exactly one required parameter, that
    parameter's name. ``#En`` in the input becomes a reference to step En (a
    whole input ``#E1`` keeps the output's type); any ``${`` stays literal.

    The text of the ``Plan:`` lines before a step is its `instruction`,
    verbatim (``#En`` there is not a reference); a ``#En = ...`` may also
    follow the plan text on the same line. Plan text with no step after it is
    dropped. `plan_id` defaults to a hash of the text. Raises `PlanParseError`
    listing every malformed line and every ``#En`` that names no step
    (``unknown_reference``) or not an earlier one (``forward_reference``).
    """
    problems: list[tuple[int, Problem]] = []
    calls: list[_Call] = []
    notes: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        plan_line = _PLAN_LINE.match(line)
        if plan_line:
            notes += [plan_line.group(1)] if plan_line.group(1) else []
            line = plan_line.group(2) or ""
        if not line:
            continue
        evidence = _EVIDENCE.match(line)
        if evidence is None:
            problems.append(line_problem(n, "malformed_line", "expected 'Plan: ...' or '#En = Tool[input]'", raw.strip()))
            continue
        step_id, action, value = evidence.group(1), evidence.group(2), evidence.group(3).strip()
        model = parameter_model(registry, worker, action)
        required = [k for k, f in model.model_fields.items() if f.is_required()] if model is not None else []
        name = required[0] if len(required) == 1 else parameter
        calls.append(_Call(step_id, action, {name: _hash_refs(value)}, _literal_text("\n".join(notes)), n))
        notes = []
    return _build(calls, problems, goal=goal, plan_id=plan_id or _default_id("rewoo", text), worker=worker)


# --- shared: references, the plan ------------------------------------------


def order_problems(lines: list[tuple[int, str, list[str]]], known: Iterable[str] = ()) -> list[tuple[int, Problem]]:
    """Step ids defined twice, and references to no step or to one not earlier, for (line, step id, referenced ids) in text order.

    `known` are ids defined before the text (a revision's finished steps): referring to them is fine, defining them again is not.
    """
    problems: list[tuple[int, Problem]] = []
    before = set(known)
    line_of: dict[str, int] = {}
    for n, step_id, _ in lines:
        if step_id in line_of or step_id in before:
            where = f"defined on line {line_of[step_id]}" if step_id in line_of else "a finished step"
            problems.append(line_problem(n, "duplicate_step_id", f"step {step_id!r} is already {where}", step_id=step_id))
        else:
            line_of[step_id] = n
    for n, step_id, refs in lines:
        for ref in dict.fromkeys(refs):
            if ref in before:
                continue
            if ref not in line_of:
                message, rule = f"step {step_id!r} refers to step {ref!r}, which the plan does not define", "unknown_reference"
            elif line_of[ref] >= n:
                message, rule = f"step {step_id!r} refers to step {ref!r}, which does not come before it", "forward_reference"
            else:
                continue
            problems.append(line_problem(n, rule, message, step_id=step_id))
    return problems


def _build(calls: list[_Call], problems: list[tuple[int, Problem]], *, goal: str, plan_id: str, worker: str) -> Plan:
    """Check step ids and references across lines, then make the plan (or raise every problem)."""
    problems += order_problems([(c.line, c.step_id, [ref for ref, _ in find_references(c.parameters)]) for c in calls])
    if not calls and not problems:
        problems.append(line_problem(0, "empty_plan", "the text holds no step"))
    if problems:
        raise PlanParseError([p for _, p in sorted(problems, key=lambda item: item[0])], plan_id=plan_id)
    steps = [
        {"id": c.step_id, "action": c.action, "worker": worker, "instruction": c.instruction, "parameters": c.parameters} for c in calls
    ]
    return Plan.from_data({"plan_id": plan_id, "goal": goal, "steps": steps})


def _default_id(fmt: str, text: str) -> str:
    return f"{fmt}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _literal_text(text: str) -> str:
    # Thoughts and plan notes are read as prose: "$${" keeps a "${" in them from becoming a reference.
    return text.replace("${", "$${")


def rewrite_strings(value: Any, fix: Any) -> Any:
    """Apply `fix` to every string inside a value (not to dict keys)."""
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, list):
        return [rewrite_strings(v, fix) for v in value]
    if isinstance(value, dict):
        return {k: rewrite_strings(v, fix) for k, v in value.items()}
    return value


def _dollar_refs(text: str, prefix: str) -> str:
    return _DOLLAR.sub(lambda m: "${" + prefix + (m[1] or m[2]) + (m[3] or "") + "}" if m[1] or m[2] else "$${", text)


def _hash_refs(text: str) -> str:
    return _HASH_REF.sub(lambda m: "${" + m.group(1) + "}" if m.group(1) else "$${", text)


# --- arguments ---------------------------------------------------------------


class _JsonNames(ast.NodeTransformer):
    """Reads JSON's true/false/null as literals: planners trained on JSON write them."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
        return node


def call_arguments(call: str, bare: re.Pattern[str] = _BARE_REF) -> tuple[list[Any], dict[str, Any]]:
    """The literal positional and keyword arguments of ``(...)``; ValueError says what is wrong.

    A reference matching `bare` written outside any string is read as that string (`compact` passes its own forms).
    """
    try:
        node = ast.parse("_" + _quote_bare_refs(call, bare), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise ValueError(f"the arguments do not parse ({detail})") from None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_"):
        raise ValueError("expected a single call, as in 'tool(arg, name=value)', and nothing after it")
    args = [_literal(a, f"argument {i + 1}") for i, a in enumerate(node.args)]
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError("'**' arguments are not supported")
        if kw.arg in kwargs:
            raise ValueError(f"argument {kw.arg!r} is given twice")
        kwargs[kw.arg] = _literal(kw.value, f"argument {kw.arg!r}")
    return args, kwargs


def _quote_bare_refs(call: str, pattern: re.Pattern[str]) -> str:
    """``$1`` written outside any string (``[$1, $2]``, as planners do) becomes the string ``"$1"``."""
    out: list[str] = []
    i, quote = 0, ""
    while i < len(call):
        bare = None if quote else pattern.match(call, i)
        if bare:
            out.append(json.dumps(bare.group()))  # a braced path may hold a quote or a backslash
            i = bare.end()
            continue
        if not quote:
            piece = next((q for q in _QUOTES if call.startswith(q, i)), call[i])
            quote = piece if piece in _QUOTES else ""
        elif call[i] == "\\":
            piece = call[i : i + 2]  # an escaped character, a quote included, does not end the string
        elif call.startswith(quote, i):
            piece, quote = quote, ""
        else:
            piece = call[i]
        out.append(piece)
        i += len(piece)
    return "".join(out)


def _literal(node: ast.expr, what: str) -> Any:
    try:
        value = ast.literal_eval(_JsonNames().visit(node))
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise ValueError(f"{what} is not a literal value ({ast.unparse(node)[:60]})") from None
    return _plain(value, what)


def _plain(value: Any, what: str) -> Any:
    """The value in JSON's vocabulary (tuples become lists); sets, bytes, complex and non-string keys are refused."""
    if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, what) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, what) for k, v in value.items()}
    kind = type(value).__name__
    raise ValueError(f"{what} holds a {kind} value with no JSON form (use str, finite numbers, booleans, None, lists, dicts with str keys)")


def parameter_model(registry: Catalog | None, worker: str, action: str) -> type[BaseModel] | None:
    if registry is None:
        return None
    w = registry.workers.get(worker)
    model = w.input_model(action) if w is not None and action in w.actions else None
    if model is None:  # the tool under another worker: any worker that performs it knows its parameters
        model = next((o.input_model(action) for o in registry.workers.values() if action in o.actions), None)
    return model


def name_arguments(args: list[Any], kwargs: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
    """Positional arguments named after the tool's parameters (or arg0, arg1, ...), then the keywords."""
    if names is None:
        names = [f"arg{i}" for i in range(len(args))]
    if len(args) > len(names):
        raise ValueError(f"{len(args)} positional arguments, but the tool takes {len(names)} ({', '.join(names) or 'none'})")
    named = dict(zip(names, args))
    for key, value in kwargs.items():
        if key in named:
            raise ValueError(f"argument {key!r} is given twice")
        named[key] = value
    return named
