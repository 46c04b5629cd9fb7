"""The compact plan language: one line per step, read into the same `Plan` and printed back.

Owns `parse_compact` (text -> `Plan`), `read_compact` (text -> `CompactDraft`:
the steps as plan data and the line of each, for a planner that still has
checks to apply), `CompactReader` (the same a line at a time, for a plan
streamed while it is written: a step is read when its newline arrives) and
`print_compact` (a `Plan` as this text: few-shot examples, a replanner's plan
so far). Its grammar for grammar-decoding models is `plan.grammar`. Imports
`plan.model`, `plan.formats` (the argument reader of LLMCompiler's calls,
which this builds on) and `errors`.

Why: a JSON step costs a planner about 15 words of keys, quotes and
brackets around 3 that decide anything; on ``benchmarks/react_vs_plan.py``
the JSON plan took 29.4 output tokens per planner call against ReAct's 2.5.
The same steps in this form, in the spirit of LLMCompiler's numbered calls::

    1. population(city="Avalon")
    2. population(city="Brightwater")
    3. calculator(expression="$1 + $2") answer
    4. writer.write: "Say in one sentence what $3 people need" after 3  # optional note

A line is ``label. call [annotations] [# instruction]``:

* label: a number ``N`` names step ``s<N>`` (`step_prefix`); a name
  (``fetch. ...``) is the step id itself. Labels need not be in order, but
  a step may refer only to steps on earlier lines.
* call: ``tool(name=value, ...)`` calls a tool (worker ``tool``);
  ``worker.action(...)`` another worker's action; ``worker.task: "text"`` a
  role's task in words (the text is the instruction; no parameters), and
  ``worker: "text"`` when the catalog gives that role one task besides
  ``respond``. Values are JSON (strings, numbers, true/false/null, lists,
  objects; Python's spellings are read too). Positional values take the
  action's parameter names in order when the catalog is given.
* references: ``$N`` is step N's output and ``$N.field.0`` a part of it;
  ``${N}``, ``${name}`` and ``${name.field}`` the same, braced. A whole value
  (``expression=$1`` or ``"$1"``) keeps the output's type; inside text it is
  written into the text. They become the plan's ``${s1}`` / ``${s1.field}``
  references. ``$$`` is a dollar sign (``$${`` the plan's escape, a literal
  ``${``), and so is a ``$`` that starts no reference.
* annotations, in any order (printed in this one): ``after 1,2`` (ordering
  only: data flows through references), ``on_fail=skip`` (a kind, or a
  JSON failure action), ``timeout=30``, ``criteria=[...]``, ``grants=[...]``
  (capabilities), ``schema={...}`` (output schema), ``resources={...}`` (what
  the step needs of a machine, for a cluster), ``not_before="2026-12-05T02:00-05:00"``
  (the earliest time it may start, with its zone), ``models=["openai:a", "openai:b"]``
  (the models its worker tries, in order), ``difficulty=hard``, ``tolerant`` (runs when
  an input failed), ``approve``, ``answer`` (this step's output is the
  run's answer, so no joiner call is needed to assemble it) and
  ``instruction="..."`` (for an instruction a comment cannot hold).
* ``# text`` to the end of the line is the step's instruction (references
  work there too).
* ``join`` (or ``join()``, numbered or not, or ``<END_OF_PLAN>`` at a line's
  end) ends the plan and may be left out; it may carry ``risk=high``,
  ``duration="PT5M"`` (the estimated duration), ``rollback=...`` and
  ``windows={"deploy": "Sat 02:00-04:00 America/New_York"}`` (tools' maintenance windows). Blank lines, lines that start with ``#`` and code fences
  are skipped; anything else after the end is an error.

Errors: every bad line is a `Problem` whose field is ``line N`` and whose
message quotes the line; `PlanParseError` carries them all at once (a
planner sends them back to its model to repair). Round trip:
``parse_compact(print_compact(plan), ...)`` is the same plan (content hash
included) for every plan whose ids the labels can name.
"""

from __future__ import annotations

import ast
import hashlib
import json
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planexec.errors import PlanParseError, Problem
from planexec.plan.formats import call_arguments, line_problem, name_arguments, order_problems, parameter_model, rewrite_strings
from planexec.plan.model import FailureAction, Plan, Step
from planexec.plan.references import find_references, is_whole_reference

if TYPE_CHECKING:
    from planexec.plan.validation import Catalog

__all__ = ["CompactDraft", "CompactReader", "CompactStep", "parse_compact", "print_compact", "read_compact", "with_lines"]

_SEG = r"[A-Za-z0-9_\-]"
_ID = r"[A-Za-z0-9_][A-Za-z0-9_\-]*"
_NAME = r"[A-Za-z_][\w\-]*"
_LABEL = re.compile(rf"^(?:(\d+)\s*\.\s*|({_ID})\.\s+)")
_TARGET = re.compile(rf"({_NAME})(?:\.({_NAME}))?\s*([(:])")
# in a compact string: "$$", "$3" / "$3.a.0", "${3}" / "${name.path}", or a lone "$"
_DOLLAR = re.compile(rf"\$\$|\$(\d+)((?:\.{_SEG}+)*)|\$\{{({_ID})((?:\.[^.}}\s]+)*)\}}|\$")
# a reference written as a whole value outside quotes: $3, $3.path, ${name.path}
_BARE = re.compile(rf"\$\d+(?:\.{_SEG}+)*|\$\{{{_ID}(?:\.[^.}}\s]+)*\}}")
# in a plan string: the escape "$${", a reference, or another "$"
_PLAN_DOLLAR = re.compile(rf"\$\$\{{|\$\{{({_ID})((?:\.[^.}}\s]+)*)\}}|\$")
_AFTER = re.compile(rf"after(?:\s+|\s*=\s*)(\$?\{{?{_ID}\}}?(?:\s*,\s*\$?\{{?{_ID}\}}?)*)")
_KEY = re.compile(r"([A-Za-z_]\w*)(=?)")
_KEYWORD_ARG = re.compile(r"(\s*)([A-Za-z_]\w*)(\s*=)(?!=)")
_JOIN = re.compile(r"join(?![\w.\-])")
_END_MARK = "<END_OF_PLAN>"
_FENCE = re.compile(r"^```[\w-]*$")
_FLAGS = {"answer": None, "approve": "requires_approval", "tolerant": "accepts_failed_inputs"}
_KEYS = {
    "on_fail": "failure_action",
    "timeout": "timeout",
    "criteria": "success_criteria",
    "grants": "capabilities",
    "schema": "output_schema",
    "resources": "resources",
    "not_before": "not_before",
    "models": "models",
    "difficulty": "difficulty",
    "instruction": "instruction",
}
_END_KEYS = {"risk": "risk_level", "duration": "estimated_duration", "rollback": "rollback_plan", "windows": "windows"}
_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})  # line breaks json.dumps leaves raw
_EXPECTED = "expected 'N. tool(name=value, ...)', 'N. worker.task: \"text\"' or 'join'"


class _LineError(ValueError):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True, slots=True)
class CompactStep:
    """One step line, read: its line number, the step as plan data, and whether it is the answer."""

    line: int
    data: dict[str, Any]
    answer: bool = False

    @property
    def step_id(self) -> str:
        """The step's id (``s<N>`` for line label ``N``)."""
        return str(self.data["id"])


@dataclass(frozen=True, slots=True)
class CompactDraft:
    """A compact plan read into plan data: the steps in order, the line of each, the answer and the end line's fields."""

    steps: list[dict[str, Any]]
    lines: dict[str, int]
    answer_step: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def plan_data(self, goal: str, plan_id: str) -> dict[str, Any]:
        """The data of a `Plan` (for `Plan.from_data`)."""
        data: dict[str, Any] = {"plan_id": plan_id, "goal": goal, "steps": self.steps, **self.extras}
        if self.answer_step is not None:
            data["answer_step"] = self.answer_step
        return data


# --- reading -------------------------------------------------------------------------------------


class CompactReader:
    """Reads compact text as it arrives: `feed` returns the steps whose lines are complete.

    Problems are collected in `problems` (sorted by line in `draft`), never
    raised by `feed`: a stream stops at the first, a whole text reports all.
    `registry` names positional arguments; `known` are ids defined before
    the text (a revision's finished steps).
    """

    def __init__(self, *, registry: Catalog | None = None, step_prefix: str = "s", known: Iterable[str] = ()) -> None:
        self.registry = registry
        self.step_prefix = step_prefix
        self.known = list(known)
        self.steps: list[CompactStep] = []
        self.problems: list[tuple[int, Problem]] = []
        self.answer_step: str | None = None
        self.extras: dict[str, Any] = {}
        self._refs: list[tuple[int, str, list[str]]] = []
        self._buffer = ""
        self._line = 0
        self._ended = 0
        self._answer_line = 0

    def feed(self, text: str) -> list[CompactStep]:
        """Take more text; return the steps of the lines it completed (a line is complete at its newline)."""
        self._buffer += text
        *complete, self._buffer = self._buffer.split("\n")
        return [s for line in complete if (s := self._read(line)) is not None]

    def close(self) -> list[CompactStep]:
        """The text has ended: read its last line (if it had no newline)."""
        rest, self._buffer = self._buffer, ""
        found = self._read(rest) if rest.strip() else None
        return [found] if found is not None else []

    def draft(self) -> CompactDraft:
        """Every step read, checked across lines; `PlanParseError` listing every problem, each naming its line."""
        problems = self.problems + order_problems(self._refs, self.known)
        if not self.steps and not problems:
            problems.append(line_problem(0, "empty_plan", "the text holds no step; " + _EXPECTED))
        if problems:
            raise PlanParseError([p for _, p in sorted(problems, key=lambda item: item[0])])
        return CompactDraft([s.data for s in self.steps], {s.step_id: s.line for s in self.steps}, self.answer_step, self.extras)

    def _read(self, raw: str) -> CompactStep | None:
        self._line += 1
        n, line = self._line, raw.strip()
        marked = line.endswith(_END_MARK)
        line = line.removesuffix(_END_MARK).rstrip()
        if not line or line.startswith("#") or _FENCE.match(line):
            self._ended = self._ended or (n if marked else 0)
            return None
        if self._ended:
            self.problems.append(line_problem(n, "after_join", f"nothing may follow the end of the plan on line {self._ended}", line))
            return None
        try:
            step = self._step(line, n)
        except _LineError as exc:
            self.problems.append(line_problem(n, exc.rule, str(exc), line))
            step = None
        self._ended = self._ended or (n if marked else 0)
        return step

    def _step(self, line: str, n: int) -> CompactStep | None:
        label = _LABEL.match(line)
        body = line[label.end() :] if label else line
        if _JOIN.match(body):  # "join", "join()", "4. join()", "join risk=high"
            self._end(body[4:], n)
            return None
        target = _TARGET.match(body)
        if label is None:
            raise _LineError("malformed_line", "a step needs its number first, as in '1. tool(...)'" if target else _EXPECTED)
        if target is None:
            raise _LineError("malformed_line", _EXPECTED)
        step_id = self.step_prefix + label[1] if label[1] else label[2]
        data, rest = self._call(body, target, step_id)
        answer = self._annotations(rest, data)
        if answer:
            if self.answer_step is not None:
                raise _LineError(
                    "duplicate_answer", f"step {step_id!r} is marked answer, but so is {self.answer_step!r} on line {self._answer_line}"
                )
            self.answer_step, self._answer_line = step_id, n
        refs = [ref for ref, _ in find_references([data.get("parameters", {}), data.get("instruction", "")])]
        self._refs.append((n, step_id, refs + list(data.get("depends_on", []))))
        step = CompactStep(n, data, answer)
        self.steps.append(step)
        return step

    def _end(self, rest: str, n: int) -> None:
        rest = rest.lstrip()
        if rest.startswith("()"):
            rest = rest[2:]
        data: dict[str, Any] = {}
        for key, value in _tail(rest):
            if key == "#":
                continue
            if key not in _END_KEYS or value is _FLAG:
                raise _LineError("unknown_annotation", f"the end line takes only {', '.join(k + '=' for k in _END_KEYS)}; not {key!r}")
            data[_END_KEYS[key]] = value
        self.extras.update(data)
        self._ended = n

    def _call(self, body: str, target: re.Match[str], step_id: str) -> tuple[dict[str, Any], str]:
        """The step data of the call at the start of `body`, and the text after the call."""
        first, second, kind = target[1], target[2], target[3]
        worker, action = (first, second) if second is not None else ("tool", first)
        start = target.end() - 1
        if kind == ":":
            if second is None:
                worker, action = first, self._only_task(first)
            i = _skip_space(body, start + 1)
            end = _value_end(body, i)
            text = _literal_string(body[i:end])
            data: dict[str, Any] = {"id": step_id, "worker": worker, "action": action, "instruction": self._text(text)}
            return data, body[end:]
        end = _value_end(body, start)
        call, renamed = _safe_keywords(body[start:end])
        try:
            args, kwargs = call_arguments(call, _BARE)
            parameters = name_arguments(args, {renamed.get(k, k): v for k, v in kwargs.items()}, self._names(worker, action))
        except ValueError as exc:
            raise _LineError("malformed_arguments", str(exc)) from None
        parameters = {k: rewrite_strings(v, self._text) for k, v in parameters.items()}
        return {"id": step_id, "worker": worker, "action": action, "parameters": parameters}, body[end:]

    def _annotations(self, rest: str, data: dict[str, Any]) -> bool:
        answer = False
        for key, value in _tail(rest):
            if key == "#":
                if "instruction" in data:
                    raise _LineError(
                        "duplicate_annotation", "the instruction is given twice (a task's text, or instruction=, and a comment)"
                    )
                data["instruction"] = self._text(value)
            elif key == "after":
                data["depends_on"] = [self._label_id(x) for x in value]
            elif key in _FLAGS:
                if value is not _FLAG:
                    raise _LineError("malformed_annotation", f"{key!r} takes no value")
                if key == "answer":
                    answer = True
                else:
                    data[str(_FLAGS[key])] = True
            elif key in _KEYS and value is not _FLAG:
                name = _KEYS[key]
                if name in data:
                    raise _LineError("duplicate_annotation", f"{key!r} is given twice")
                data[name] = self._text(value) if name == "instruction" and isinstance(value, str) else value
            else:
                known = ", ".join([*(f"{k}=" for k in _KEYS), "after N", *_FLAGS, "# note"])
                raise _LineError("unknown_annotation", f"unknown annotation {key!r} (known: {known})")
        return answer

    def _names(self, worker: str, action: str) -> list[str] | None:
        model = parameter_model(self.registry, worker, action)
        if model is not None:
            return list(model.model_fields)
        w = self.registry.workers.get(worker) if self.registry is not None else None
        return ["input"] if w is not None and action in w.actions else None  # a role's task takes one text input

    def _only_task(self, worker: str) -> str:
        w = self.registry.workers.get(worker) if self.registry is not None else None
        tasks: list[str] = sorted(getattr(w, "tasks", None) or []) if w is not None else []
        chosen = [t for t in tasks if t != "respond"]
        if len(chosen) == 1:
            return chosen[0]
        named = f"one of {worker}.{f', {worker}.'.join(tasks)}" if tasks else f"'{worker}.task'"
        raise _LineError("malformed_line", f"name the task: {named}, as in '1. {worker}.{(tasks or ['task'])[0]}: \"...\"'")

    def _label_id(self, label: str) -> str:
        label = label.strip().lstrip("$").strip("{}")
        return self.step_prefix + label if label.isdigit() else label

    def _text(self, text: str) -> str:
        """A compact string as plan text: ``$N`` -> ``${sN}``, ``$${`` -> the escape ``$${``, any other ``$$`` or lone ``$`` -> ``$``."""
        out: list[str] = []
        pos = 0
        for m in _DOLLAR.finditer(text):
            out.append(text[pos : m.start()])
            pos = m.end()
            if m[1] is not None:
                out.append("${" + self.step_prefix + m[1] + m[2] + "}")
            elif m[3] is not None:
                out.append("${" + self._label_id(m[3]) + m[4] + "}")
            else:  # "$$" before "{" is the plan's escape "$${"; any other "$$", or a lone "$", a dollar sign
                out.append("$$" if m[0] == "$$" and text.startswith("{", m.end()) else "$")
        out.append(text[pos:])
        return "".join(out)


def read_compact(text: str, *, registry: Catalog | None = None, step_prefix: str = "s", known: Iterable[str] = ()) -> CompactDraft:
    """Read a whole compact plan into a `CompactDraft`; `PlanParseError` lists every bad line (see the module docstring)."""
    reader = CompactReader(registry=registry, step_prefix=step_prefix, known=known)
    reader.feed(text)
    reader.close()
    return reader.draft()


def parse_compact(text: str, *, goal: str, plan_id: str | None = None, registry: Catalog | None = None, step_prefix: str = "s") -> Plan:
    """Read a compact plan into a `Plan`; `PlanParseError` lists every problem, each naming its line.

    `registry` names positional arguments (checking the plan against it
    stays with `validation`); `plan_id` defaults to a hash of the text.
    """
    plan_id = plan_id or f"compact-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    draft = read_compact(text, registry=registry, step_prefix=step_prefix)
    try:
        return Plan.from_data(draft.plan_data(goal, plan_id))
    except PlanParseError as exc:
        raise PlanParseError(with_lines(exc.problems, draft.lines), plan_id=plan_id) from None


def with_lines(problems: list[Problem], lines: dict[str, int]) -> list[Problem]:
    """Problems that name a step, also naming its line (``line 3`` or ``line 3, parameters.x``)."""
    out = []
    for p in problems:
        n = lines.get(p.step_id) if p.step_id is not None else None
        if n is not None and not (p.field or "").startswith("line "):
            p = Problem(p.rule, p.message, step_id=p.step_id, field=f"line {n}, {p.field}" if p.field else f"line {n}")
        out.append(p)
    return out


# --- the tail of a line: annotations and the note ------------------------------------------------

_FLAG = object()  # an annotation written without a value


def _tail(rest: str) -> list[tuple[str, Any]]:
    """The annotations after a call: ("after", [labels]), (flag, _FLAG), (key, value) and ("#", note) last."""
    out: list[tuple[str, Any]] = []
    i = _skip_space(rest, 0)
    while i < len(rest):
        if rest[i] == "#":
            out.append(("#", rest[i + 1 :].strip()))
            break
        after = _AFTER.match(rest, i)
        if after:
            out.append(("after", after[1].split(",")))
            i = _skip_space(rest, after.end())
            continue
        key = _KEY.match(rest, i)
        if key is None:
            raise _LineError(
                "malformed_annotation", f"unexpected {rest[i : i + 20]!r} after the call (annotations are words or name=value)"
            )
        if not key[2]:
            out.append((key[1], _FLAG))
            i = key.end()
        else:
            end = _value_end(rest, key.end())
            out.append((key[1], _annotation_value(key[1], rest[key.end() : end])))
            i = end
        if i < len(rest) and not rest[i].isspace():
            raise _LineError("malformed_annotation", f"annotations are separated by spaces; unexpected {rest[i : i + 20]!r}")
        i = _skip_space(rest, i)
    return out


def _annotation_value(key: str, text: str) -> Any:
    if not text:
        raise _LineError("malformed_annotation", f"{key}= needs a value")
    try:
        return json.loads(text)
    except ValueError:
        if re.fullmatch(_NAME, text):
            return text  # a bare word: on_fail=skip, risk=high
        raise _LineError("malformed_annotation", f"the value of {key}= is not JSON: {text[:60]!r}") from None


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _value_end(text: str, i: int) -> int:
    """Where the value starting at `i` ends: a bracketed or quoted value at its matching close, else at the next space."""
    if i >= len(text):
        return i
    if text[i] not in "([{\"'":
        while i < len(text) and not text[i].isspace():
            i += 1
        return i
    stack: list[str] = []
    quote = ""
    j = i
    while j < len(text):
        c = text[j]
        bare = None if quote else _BARE.match(text, j)
        if bare:  # a reference written bare: its braces and path are no brackets or quotes
            j = bare.end()
            continue
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in _CLOSE:
            stack.append(_CLOSE[c])
        elif stack and c == stack[-1]:
            stack.pop()
        elif c in ")]}":
            raise _LineError("malformed_arguments", f"{c!r} closes nothing at column {j + 1}")
        j += 1
        if not stack and not quote:
            return j
    raise _LineError("malformed_arguments", "unclosed " + (f"string ({quote})" if quote else f"bracket (expected {stack[-1]!r})"))


def _safe_keywords(call: str) -> tuple[str, dict[str, str]]:
    """``(from="a")``: a parameter named like a Python keyword, renamed so the call parses; the new names -> the real ones."""
    renamed: dict[str, str] = {}
    out: list[str] = []
    depth, quote, i = 0, "", 0
    while i < len(call):
        c = call[i]
        if quote:
            if c == "\\":
                out.append(call[i : i + 2])
                i += 2
                continue
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if not quote and depth == 1 and c in "(,":
            m = _KEYWORD_ARG.match(call, i + 1)
            if m and keyword.iskeyword(m[2]):
                alias = f"_kw_{m[2]}"
                renamed[alias] = m[2]
                out.append(c + m[1] + alias + m[3])
                i = m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out), renamed


def _literal_string(text: str) -> str:
    try:
        value = ast.literal_eval(text) if text[:1] in "\"'" else None
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, str):
        raise _LineError("malformed_line", f"a task's text is a quoted string, as in 'writer.write: \"...\"'; got {text[:40]!r}")
    return value


# --- printing --------------------------------------------------------------------------------------


def print_compact(plan: Plan, *, step_prefix: str = "s") -> str:
    """The plan as compact text, one line per step (see the module docstring); `parse_compact` reads it back the same.

    Raises ValueError naming the step when an id or a name cannot be written
    (an id of digits only, unless `step_prefix` is ``""``; a worker or
    action that is not a name).
    """
    printer = _Printer(plan, step_prefix)
    lines = [printer.step(s) for s in plan.steps]
    end = []
    if plan.risk_level != "low":
        end.append(f"risk={plan.risk_level}")
    if plan.windows:
        end.append("windows=" + _json(plan.windows))
    if plan.estimated_duration is not None:
        end.append("duration=" + _json(plan.model_dump(mode="json", include={"estimated_duration"})["estimated_duration"]))
    if plan.rollback_plan is not None:
        rollback = plan.rollback_plan
        value = rollback if isinstance(rollback, str) else rollback.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        end.append("rollback=" + _json(value))
    if end:
        lines.append(" ".join(["join", *end]))
    return "\n".join(lines) + "\n"


class _Printer:
    def __init__(self, plan: Plan, prefix: str) -> None:
        self.plan = plan
        self.prefix = prefix
        self.number = re.compile(re.escape(prefix) + r"(\d+)")

    def label(self, step_id: str) -> str:
        m = self.number.fullmatch(step_id)
        if m:
            return m[1]
        if step_id.isdigit():
            raise ValueError(
                f"step {step_id!r}: an id of digits only cannot be a label with step_prefix={self.prefix!r}; use step_prefix=''"
            )
        return step_id

    def step(self, s: Step) -> str:
        label = self.label(s.step_id)
        for name in (s.worker, s.action):
            if not re.fullmatch(_NAME, name):
                raise ValueError(f"step {s.step_id!r}: {name!r} is not a name the compact form can write")
        target = s.action if s.worker == "tool" and s.action != "join" else f"{s.worker}.{s.action}"
        note = self.text(s.instruction)
        as_comment = s.instruction == s.instruction.strip() and "\n" not in note and "\r" not in note
        if s.worker != "tool" and not s.parameters and s.instruction:
            parts = [f"{label}. {target}: {self.string(s.instruction)}"]
            note = ""
        else:
            bad = [k for k in s.parameters if not k.isidentifier()]
            if bad:
                raise ValueError(f"step {s.step_id!r}: parameter {bad[0]!r} is not a name the compact form can write")
            args = ", ".join(f"{k}={self.value(v)}" for k, v in s.parameters.items())
            parts = [f"{label}. {target}({args})"]
        parts += self.annotations(s)
        if note and not as_comment:
            parts.append(f"instruction={self.string(s.instruction)}")
        line = " ".join(parts)
        return f"{line}  # {note}" if note and as_comment else line

    def annotations(self, s: Step) -> list[str]:
        out = []
        if s.depends_on:
            out.append("after " + ",".join(self.label(d) for d in s.depends_on))
        fa = s.failure_action
        if fa != FailureAction():
            short = fa == FailureAction(kind=fa.kind)
            out.append("on_fail=" + (fa.kind if short else _json(fa.model_dump(mode="json", exclude_defaults=True) | {"kind": fa.kind})))
        if s.timeout is not None:
            out.append(f"timeout={_json(s.timeout)}")
        if s.success_criteria:
            out.append("criteria=" + _json([c.model_dump(mode="json", by_alias=True) for c in s.success_criteria]))
        if s.capabilities is not None:
            out.append("grants=" + _json([g.model_dump(mode="json", by_alias=True, exclude_defaults=True) for g in s.capabilities]))
        if s.output_schema is not None:
            out.append("schema=" + _json(s.output_schema))
        if s.resources is not None:
            out.append("resources=" + _json(s.resources.model_dump(mode="json", exclude_defaults=True)))
        if s.not_before is not None:
            out.append("not_before=" + _json(s.not_before.isoformat()))
        if s.models is not None:
            out.append("models=" + _json(s.models))
        if s.difficulty is not None:
            out.append(f"difficulty={s.difficulty}")
        out += ["tolerant"] * s.accepts_failed_inputs + ["approve"] * s.requires_approval
        out += ["answer"] * (self.plan.answer_step == s.step_id)
        return out

    def value(self, value: Any) -> str:
        if is_whole_reference(value):
            return self.text(value)  # bare: expression=$1
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, list):
            return "[" + ", ".join(self.value(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{_json(k)}: {self.value(v)}" for k, v in value.items()) + "}"
        return _json(value)

    def string(self, text: str) -> str:
        return _json(self.text(text))

    def text(self, text: str) -> str:
        """Plan text as compact text: references as ``$N`` (braced when text follows that could extend them), ``$`` as ``$$``."""
        out: list[str] = []
        pos = 0
        for m in _PLAN_DOLLAR.finditer(text):
            out.append(text[pos : m.start()])
            pos = m.end()
            if m[0] == "$":  # a dollar sign: "$$", or a bare "$" before a "{" that starts no reference (as in the plan)
                out.append("$" if text.startswith("{", m.end()) else "$$")
                continue
            if m[1] is None:  # the escape "$${" (a literal "${")
                out.append(m[0])
                continue
            label = self.label(m[1])
            after = text[m.end() : m.end() + 2]
            short = (
                label.isdigit()
                and all(re.fullmatch(f"{_SEG}+", part) for part in m[2].split(".")[1:])
                and not re.match(_SEG, after[:1])
                and not re.match(rf"\.{_SEG}", after)
            )
            out.append(f"${label}{m[2]}" if short else "${" + label + m[2] + "}")
        out.append(text[pos:])
        return "".join(out)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False).translate(_BREAKS)
