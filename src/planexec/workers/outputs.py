"""A step's output as JSON data, strictly and within bounds.

Owns `encode` and `encode_inline`, which turn what a worker returned into
the JSON data the engine keeps, hands downstream and stores, and
`DEFAULT_MAX_OUTPUT_BYTES`. Imports `errors` and pydantic only (the engine
runs the encoder in a thread; see `engine.attempt`).

Why a walker of our own rather than pydantic's `to_jsonable_python`:
measured on the version before this one, an infinite generator returned by
a worker was consumed on the event loop until the process held 3.5 GB (the
step's timeout could not fire), a 100 MB string was stored whole, NaN and
infinity were stored as ``null`` and a generator or a set as a list (a
set's order changes between processes, so a resumed run saw another value).
Here nothing is consumed: an iterator, a set or an object that is not data
is refused where it stands, the running size (compact UTF-8 JSON, escapes
aside) is counted as the walk goes and the walk stops as soon as it passes
the limit, and a string longer than the limit is refused by its length
before a byte of it is read. Every refusal is a `ToolOutputError` whose
message names the step, the tool, where in the value (``output.rows[3]``)
and the type or size, with one `Problem` (rule ``not_json``,
``not_finite``, ``output_too_large`` or ``output_timeout``).

Accepted as before: dicts (keys str, int, float, bool or None, written as
JSON writes them), lists and tuples, str, int, float, bool, None, pydantic
models (by alias, as pydantic serialises them), dataclasses, enums (their
value), and the scalars pydantic writes as text (datetimes, UUID, Decimal,
paths, URLs, IP addresses, UTF-8 bytes).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import ipaddress
import math
import pathlib
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Set
from threading import Event
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, Url, to_jsonable_python

from planexec.errors import Problem, ToolOutputError

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "MAX_DEPTH", "SHORT_BYTES", "SHORT_TEXT", "encode", "encode_inline"]

DEFAULT_MAX_OUTPUT_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 200  # deeper than any real output; JSON writers recurse, and a value that contains itself never ends

# what encode_inline may do on the event loop before the work is handed to a thread
_INLINE_NODES = 2048
_INLINE_BYTES = 256 * 1024
_CHECK_EVERY = 1024  # nodes between two looks at the clock and the stop flag

# scalars pydantic writes as JSON text (or numbers); never containers, so converting one is bounded
_TEXT_LIKE: tuple[type, ...] = (
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    pathlib.PurePath,
    re.Pattern,
    Url,
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def encode(
    value: Any,
    *,
    step_id: str | None,
    tool: str,
    label: str | None = None,
    max_bytes: int | None = DEFAULT_MAX_OUTPUT_BYTES,
    deadline: float | None = None,
    stop: Event | None = None,
) -> Any:
    """`value` as JSON data (dicts, lists, str, int, float, bool, None), or `ToolOutputError` naming the step, tool, place and type.

    `tool` is the tool (or worker) answerable for the value, `label` how
    the message names it (default ``tool 'name'``). `max_bytes` bounds its
    size as compact JSON (None or 0: no bound). `deadline` (a
    `time.perf_counter()` value) and `stop` (set by whoever gave up
    waiting) end the walk early, so a thread running it does not outlive
    the step that asked.
    """
    walker = _Walker(max_bytes or None, deadline=deadline, stop=stop)
    try:
        return walker.walk(value, 0)
    except _Refused as refused:
        raise _error(refused, walker, step_id, tool, label, max_bytes) from None


def encode_inline(
    value: Any, *, step_id: str | None, tool: str, label: str | None = None, max_bytes: int | None = DEFAULT_MAX_OUTPUT_BYTES
) -> tuple[bool, Any]:
    """`(True, data)` when `value` is small enough to encode on the event loop, else `(False, None)`: call `encode` in a thread.

    Refusals found before the budget is spent (a generator, NaN, a long
    string) are raised at once, as `encode` raises them.
    """
    kind = type(value)
    if value is None or kind is bool or (kind is str and len(value) <= SHORT_TEXT and (not max_bytes or max_bytes >= SHORT_BYTES)):
        return True, value  # JSON already, and within any limit: no walk (most tools' outputs on the engine's hot path)
    walker = _Walker(max_bytes or None, inline=True)
    try:
        return True, walker.walk(value, 0)
    except _Offload:
        return False, None
    except _Refused as refused:
        raise _error(refused, walker, step_id, tool, label, max_bytes) from None


SHORT_TEXT = 256  # characters: a text this short is stored as it is ...
SHORT_BYTES = 4 * SHORT_TEXT + 2  # ... when the limit allows its longest UTF-8 form with its quotes


class _Refused(Exception):
    """Internal: the walk found what cannot be stored; `path` fills in (innermost first) as the walk unwinds."""

    def __init__(self, rule: str, detail: str) -> None:
        self.rule = rule
        self.detail = detail
        self.path: list[str | int] = []
        super().__init__(detail)


class _Offload(Exception):
    """Internal: an inline walk spent its budget; the work belongs in a thread."""


class _Walker:
    """One walk over one value: counts nodes and bytes, knows the containers it is inside."""

    __slots__ = ("cap", "deadline", "inline", "inside", "limit", "next_check", "nodes", "size", "stop")

    def __init__(self, limit: int | None, *, deadline: float | None = None, stop: Event | None = None, inline: bool = False) -> None:
        self.limit = limit
        self.deadline = deadline
        self.stop = stop
        self.inline = inline
        self.size = 0
        self.nodes = 0
        self.inside: set[int] = set()
        # one test on the hot path (`size > cap`) serves the limit and the inline budget
        self.cap = (min(limit, _INLINE_BYTES) if limit is not None else _INLINE_BYTES) if inline else limit
        self.next_check = _INLINE_NODES if inline else _CHECK_EVERY

    def add(self, n: int) -> None:
        self.size += n
        if self.cap is not None and self.size > self.cap:
            self.over()

    def over(self) -> None:
        if self.limit is not None and self.size > self.limit:
            raise _Refused("output_too_large", "")
        raise _Offload  # only the inline budget is spent

    def tick(self) -> None:
        self.nodes += 1
        if self.nodes >= self.next_check:
            if self.inline:
                raise _Offload
            self.next_check += _CHECK_EVERY
            if self.stop is not None and self.stop.is_set():
                raise _Refused("output_timeout", "the step stopped waiting for it")
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise _Refused("output_timeout", "it did not finish within the step's timeout")

    def walk(self, value: Any, depth: int) -> Any:
        """The JSON data of `value`; `_Refused` (with its path) for what cannot be stored."""
        self.tick()
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is int:
            return self.integer(value)
        if kind is bool or value is None:
            self.add(5 if value is False else 4)
            return value
        if kind is float:
            return self.number(value)
        if kind is dict or kind is list or kind is tuple:
            return self.container(value, depth)
        return self.other(value, depth)

    def text(self, value: str) -> str:
        if self.cap is not None and len(value) + 2 + self.size > self.cap:
            self.size += len(value) + 2  # at least this much: every character is a byte or more
            self.over()
        self.add((len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))) + 2)
        return value

    def number(self, value: float) -> float:
        if not math.isfinite(value):
            raise _Refused("not_finite", f"is {value!r}, which JSON cannot hold (return None or a string for a missing value)")
        self.add(len(repr(value)))
        return value

    def integer(self, value: int) -> int:
        try:
            self.add(len(repr(value)))
        except ValueError:  # more digits than Python converts to text: no JSON writer could store it
            raise _Refused("not_json", f"is an integer of about {int(value.bit_length() * 0.30103):,} digits, too long to write") from None
        return value

    def container(self, value: Any, depth: int) -> Any:
        marker = id(value)
        if marker in self.inside:
            raise _Refused("not_json", "contains itself, so it has no JSON form")
        if depth >= MAX_DEPTH:
            raise _Refused("not_json", f"is nested more than {MAX_DEPTH} levels deep")
        self.inside.add(marker)
        try:
            if isinstance(value, Mapping):
                return self.mapping(value, depth)
            self.add(1 + max(len(value), 1))  # brackets and commas
            out = []
            for index, item in enumerate(value):
                try:
                    out.append(self.walk(item, depth + 1))
                except _Refused as refused:
                    refused.path.append(index)
                    raise
            return out
        finally:
            self.inside.discard(marker)

    def mapping(self, value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
        self.add(1 + max(len(value), 1))  # braces and commas
        out = {}
        for key, item in value.items():
            name = key if type(key) is str else _key(key)
            self.add(len(name) + 3)  # quotes and colon
            try:
                out[name] = self.walk(item, depth + 1)
            except _Refused as refused:
                refused.path.append(name)
                raise
        return out

    def other(self, value: Any, depth: int) -> Any:
        """Everything but the exact JSON types: subclasses, records, models, and what is refused."""
        if isinstance(value, enum.Enum):
            return self.walk(value.value, depth)
        if isinstance(value, int):
            return self.integer(int(value))
        if isinstance(value, float):
            return self.number(float(value))
        if isinstance(value, str):
            return self.text(str.__str__(value))
        if isinstance(value, (list, tuple, Mapping)):
            return self.container(value, depth)
        if isinstance(value, BaseModel):
            return self.model(value, depth)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return self.container(fields, depth)
        if isinstance(value, (bytes, bytearray)):
            if self.cap is not None and len(value) + 2 + self.size > self.cap:
                self.size += len(value) + 2
                self.over()
            try:
                return self.text(bytes(value).decode("utf-8"))
            except UnicodeDecodeError:
                raise _Refused("not_json", f"is {_kind(value)} that is not UTF-8 text (return it as base64 or hex)") from None
        if isinstance(value, _TEXT_LIKE):
            return self.walk(to_jsonable_python(value), depth)
        raise _Refused(*_refusal(value))

    def model(self, value: BaseModel, depth: int) -> Any:
        if self.inline:
            raise _Offload  # dumping a model copies it: never on the event loop
        try:
            # python mode: an iterator stays one (pydantic wraps it lazily) and NaN stays NaN, so the walk sees them
            data = value.model_dump(mode="python", by_alias=True)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise _Refused("not_json", f"is {_kind(value)} that pydantic cannot serialise: {exc}") from None
        return self.container(data, depth)


def _key(key: Any) -> str:
    """A dict key as JSON writes it (``json.dumps``: true, false, null, numbers); `_Refused` for any other."""
    if isinstance(key, enum.Enum):
        key = key.value
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, int):
        return repr(int(key))
    if isinstance(key, float):
        if not math.isfinite(key):
            raise _Refused("not_finite", f"has the key {key!r}, which JSON cannot hold")
        return repr(float(key))
    raise _Refused("not_json", f"has {_kind(key)} as a key; JSON object keys are strings")


def _refusal(value: Any) -> tuple[str, str]:
    """(rule, why) for a value that is not JSON data, with what to return instead."""
    kind = _kind(value)
    if isinstance(value, Set):
        return "not_json", f"is {kind}, whose order is not the same from one process to the next (return a sorted list)"
    if isinstance(value, (Iterator, AsyncIterator)):
        return "not_json", f"is {kind}, an iterator, which would have to be consumed to be stored (return a list)"
    if isinstance(value, Awaitable):
        return "not_json", f"is {kind}, which was never awaited"
    return (
        "not_json",
        f"is {kind}, which is not JSON data and cannot be stored as JSON (return a dict, list, str, number, bool, None, a dataclass or a pydantic model)",
    )


def _kind(value: Any) -> str:
    """``a set``, ``an app.tools.Handle object``: the type as a sentence names it."""
    cls = type(value)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__} object"
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def _where(path: list[str | int]) -> str:
    """``output.rows[3]["a key"]`` from the path the walk collected (innermost first)."""
    parts = ["output"]
    for step in reversed(path):
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER.match(step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{step!r}]")
    return "".join(parts)


def _size(n: int) -> str:
    """``104,857,602 bytes (100.0 MiB)``."""
    return f"{n:,} bytes ({n / 1024 / 1024:.1f} MiB)" if n >= 1024 * 1024 else f"{n:,} bytes"


def _error(refused: _Refused, walker: _Walker, step_id: str | None, tool: str, label: str | None, max_bytes: int | None) -> ToolOutputError:
    """The step's `ToolOutputError`: who, where, what, with one `Problem` naming the rule and the place."""
    where = _where(refused.path)
    if refused.rule == "output_too_large":
        detail = f"is larger than the limit (max_output_bytes = {_size(max_bytes or 0)}): at least {_size(walker.size)} of JSON"
        if refused.path:
            detail += f", passed at {where}"
        where = "output"
    elif refused.rule == "output_timeout":
        detail = f"could not be encoded: {refused.detail} ({_size(walker.size)} encoded so far)"
        where = "output"
    else:
        detail = refused.detail
    who = label or f"tool {tool!r}"
    if step_id is not None:
        who = f"step {step_id!r} ({who})"
    message = f"{who}: {where} {detail}"
    problem = Problem(rule=refused.rule, message=f"{where} {detail}", step_id=step_id, field=where)
    return ToolOutputError(message, tool=tool, problems=[problem])
