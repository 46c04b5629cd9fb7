"""A GBNF grammar of the compact plan language over a catalog, for models that decode under a grammar.

Owns `compact_grammar`: llama.cpp's GBNF (``llama_cpp.LlamaGrammar.from_string``)
for plans in the form `plan.compact` reads, built from the actions a planner
may use. As with the positional JSON draft schema, whatever the grammar
lets a model write is a plan that parses and names only what exists:

* line *k* is numbered ``first + k - 1`` and a plan has 1 to `max_steps` lines;
* each line calls one of the given actions, ``tool(...)`` for worker
  ``tool``, ``worker.action(...)`` otherwise, or ``worker.task: "text"`` for a
  task in words, with the action's parameters by name, required ones in
  order, then the optional ones, each typed after its JSON Schema;
* ``$N`` may name only an earlier line (or a finished step in `done`),
  as a whole value or inside a string; ``$$`` is a dollar sign;
* then, optionally, ``after N,M``, ``on_fail=...``, ``answer`` and a
  ``  # note``, in that order: `print_compact`'s order; the line marked
  ``answer`` is the last one (so there is one at most).

Strings are bounded (`string_max`, `note_max`) and lists too
(`items_max`): unbounded, a small model's string may never end. A value
with no type the grammar can follow is any JSON value. The printer's
output for a plan the grammar covers is accepted (a test feeds it to
llama.cpp). Imports nothing of ours.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["compact_grammar"]

_FAILURES = ("retry", "skip", "replan", "abort")
_SHARED = r"""
int ::= "-"? [0-9]+
num ::= "-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
bool ::= "true" | "false"
esc ::= "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
key ::= "\"" ([^"\\\x7F\x00-\x1F] | esc){1,64} "\""
path ::= ("." [A-Za-z0-9_-]+){0,4}
"""


def _lit(text: str) -> str:
    """A GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


class _Rules:
    """The grammar's rules, one set of value rules per line (its references differ)."""

    def __init__(self, defs: dict[str, Any], string_max: int, note_max: int, items_max: int) -> None:
        self.defs = defs
        self.string_max = string_max
        self.note_max = note_max
        self.items_max = items_max
        self.rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self.rules.setdefault(name, body)
        return name

    def line_values(self, k: int, numbers: list[str], names: list[str]) -> None:
        """The value rules of line `k`: references to `numbers` (``$N``) and `names` (``${name}``) are allowed."""
        refs = [f'"$" ({" | ".join(_lit(n) for n in numbers)}) path'] if numbers else []
        refs += [f'"${{" ({" | ".join(_lit(n) for n in names)}) path "}}"'] if names else []
        ref = self.add(f"ref-{k}", " | ".join(refs)) if refs else None
        extra = f" | {ref}" if ref else ""
        self.add(f"sc-{k}", r'[^"\\$\x7F\x00-\x1F] | esc | "$$"' + extra)
        self.add(f"str-{k}", f'"\\"" sc-{k}{{0,{self.string_max}}} "\\""')
        self.add(f"nc-{k}", r'[^\n$] | "$$"' + extra)
        self.add(f"val-{k}", f'str-{k} | num | bool | "null" | arr-{k} | obj-{k}' + extra)
        self.add(f"arr-{k}", f'"[" (val-{k} ("," " "? val-{k}){{0,{self.items_max - 1}}})? "]"')
        self.add(f"obj-{k}", f'"{{" (key ":" " "? val-{k} ("," " "? key ":" " "? val-{k})*)? "}}"')

    def value(self, schema: Any, k: int, depth: int = 0) -> str:
        """A GBNF expression for a value of `schema` on line `k` (a whole reference is always allowed)."""
        ref = f" | ref-{k}" if f"ref-{k}" in self.rules else ""
        if not isinstance(schema, dict) or depth > 6:
            return f"val-{k}"
        if isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/$defs/"):
            return self.value(self.defs.get(schema["$ref"][8:]), k, depth + 1)
        if "const" in schema:
            return f"({_lit(json.dumps(schema['const'], ensure_ascii=False))}{ref})"
        if isinstance(schema.get("enum"), list):
            return "(" + " | ".join(_lit(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]) + ref + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return "(" + " | ".join(self.value(s, k, depth + 1) for s in schema[key]) + ")"
        kind = schema.get("type")
        if isinstance(kind, list):
            return "(" + " | ".join(self.value({**schema, "type": t}, k, depth + 1) for t in kind) + ")"
        simple = {"string": f"str-{k}", "integer": "int", "number": "num", "boolean": "bool", "object": f"obj-{k}"}
        if kind in simple:
            return f"({simple[kind]}{ref})"
        if kind == "null":
            return '"null"'
        if kind == "array":
            item = self.value(schema.get("items"), k, depth + 1) if isinstance(schema.get("items"), dict) else f"val-{k}"
            most = max(int(schema.get("maxItems", self.items_max)), 1)
            return f'("[" ({item} ("," " "? {item}){{0,{most - 1}}})? "]"{ref})'
        return f"val-{k}"


def _arguments(rules: _Rules, schema: dict[str, Any], k: int) -> str:
    """``name=value, ...``: the required parameters in order, then each optional one or not."""
    props: dict[str, Any] = schema.get("properties") or {}
    required = [p for p in props if p in set(schema.get("required", []))]
    optional = [p for p in props if p not in required]

    def param(name: str) -> str:
        return f"{_lit(name + '=')} {rules.value(props[name], k)}"

    sep = '"," " "?'
    head = f" {sep} ".join(param(p) for p in required)
    if head:
        return " ".join([head, *(f"({sep} {param(p)})?" for p in optional)])
    if not optional:
        return ""
    # none required: the first one written may be any of them, then the later ones, each or not
    starts = [" ".join([param(p), *(f"({sep} {param(q)})?" for q in optional[i + 1 :])]) for i, p in enumerate(optional)]
    return "(" + " | ".join(f"({s})" for s in starts) + ")?"


def compact_grammar(
    actions: Iterable[tuple[str, str, dict[str, Any] | None]],
    *,
    defs: dict[str, Any] | None = None,
    max_steps: int = 8,
    first: int = 1,
    done: Iterable[str] = (),
    step_prefix: str = "s",
    string_max: int = 400,
    note_max: int = 200,
    items_max: int = 20,
) -> str:
    """The GBNF of compact plans over `actions`: (worker, action, its parameters' JSON Schema, or None for a task in words).

    `defs` resolves ``#/$defs/...`` references in those schemas. For a
    revision, `first` numbers the first new line and `done` names the
    finished steps new lines may refer to (``$N`` for ``s<N>``, else
    ``${id}``). Raises ValueError when there is no action or `max_steps` < 1.
    """
    actions = list(actions)
    if not actions:
        raise ValueError("a plan grammar needs at least one action")
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    rules = _Rules(defs or {}, string_max, note_max, items_max)
    number = re.compile(re.escape(step_prefix) + r"(\d+)")
    done_numbers = [m[1] for d in done if (m := number.fullmatch(d))]
    done_names = [d for d in done if not number.fullmatch(d)]
    for k in range(1, max_steps + 1):
        numbers = done_numbers + [str(first + j - 1) for j in range(1, k)]
        rules.line_values(k, numbers, done_names)
        calls = []
        for i, (worker, action, schema) in enumerate(actions):
            target = action if worker == "tool" and action != "join" else f"{worker}.{action}"
            if schema is None:
                body = f"{_lit(target + ': ')} str-{k}"
            else:
                args = _arguments(rules, schema, k)
                body = f"{_lit(target + '(')} {args} {_lit(')')}" if args else _lit(target + "()")
            calls.append(rules.add(f"a{i}-{k}", body))
        rules.add(f"call-{k}", " | ".join(calls))
        after = f'(" after " {" | ".join(_lit(n) for n in numbers)} ("," ({" | ".join(_lit(n) for n in numbers)}))*)? ' if numbers else ""
        fail = "(" + " | ".join(_lit(f" on_fail={f}") for f in _FAILURES) + ")? "
        rules.add(f"step-{k}", f"{_lit(f'{first + k - 1}. ')} call-{k} {after}{fail}".rstrip())
        rules.add(f"end-{k}", f'("  # " nc-{k}{{1,{note_max}}})? "\\n"')
    # the step marked answer is the last line: one answer at most, and the plan ends with it
    for k in range(1, max_steps + 1):
        more = f" more-{k + 1}?" if k < max_steps else ""
        rules.add(f"more-{k}", f'step-{k} end-{k}{more} | step-{k} " answer" end-{k}')
    root = "more-1"
    body = "\n".join(f"{name} ::= {rule}" for name, rule in rules.rules.items())
    return f"root ::= {root}\n{body}{_SHARED}"
