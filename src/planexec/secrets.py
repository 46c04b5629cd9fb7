"""Secrets that must never leave the process: which values they are, and hiding them in what does leave.

Owns `Secrets` (the set of values to hide: every environment variable whose
name says it holds one, ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``,
``PASSWD``, ``CREDENTIAL`` or ``AUTH`` in any case, but not ``AUTHOR``, with
a value of at least `MIN_LENGTH` characters, read once and re-read by
`refresh`; plus the values registered with `register_secret`, such as the
model providers' api keys where they are resolved), `redact`, which
replaces every occurrence of one in a value with ``[redacted:NAME]``, and
`RedactingFilter`, the `logging.Filter` that does the same to log records.

An occurrence is the secret written any of the ways that give it away: in
any case, reversed, in hex, in base64 (standard or URL-safe, padded or not,
alone or inside a longer base64 text at any byte alignment), URL-encoded,
and, for a secret of `SLICE` characters or more, any `SLICE` characters of
it or of it reversed (so either half of a 32-character key). A secret
shorter than `SLICE` is hidden only whole (as is, upper- or lower-case,
reversed, encoded): a part of it would match ordinary text.

Where it applies: the run store redacts what it writes (events, plan
versions, approvals, and so the run summaries made from them), the CLI's
consoles redact what they print, and the workers redact tool results
before a model reads them. Shorter values are not hidden: they would match
ordinary text (and a short key is no secret anyway).

`redact` is on every store write, so it costs nothing when there are no
secrets (one attribute test) and, when there are, costs a substring search
per anchor (`_Matcher`: ~20 ms for 1 MB of text and three secrets), and
leaves values without one untouched (the same objects come back, so a caller can tell by
identity that nothing changed). Log records: a filter on a logger sees
only the records logged on that very logger, never those propagated from
its children (``planexec.store``, ``planexec.engine``, ...), so the filter
is installed on the ``planexec`` logger and also runs, through the log
record factory, on every record a ``planexec.*`` logger makes (the message
is formatted and redacted then, tracebacks too). Imports nothing from
planexec: it sits at the lowest layer, beside `errors` and `records`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import re
import threading
import traceback
import urllib.parse
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from pydantic import BaseModel

__all__ = [
    "MIN_LENGTH",
    "SECRET_NAME",
    "SLICE",
    "RedactingFilter",
    "Secrets",
    "install_log_filter",
    "redact",
    "refresh_secrets",
    "register_secret",
    "secrets",
]

T = TypeVar("T")
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')  # what json.dumps(ensure_ascii=False) escapes in a string

MIN_LENGTH = 8
# a variable whose name says it holds a secret; AUTHOR (GIT_AUTHOR_NAME) says no such thing
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH(?!OR)", re.IGNORECASE)


SLICE = 16  # a run of this many characters of a long secret is hidden wherever it appears (either half of a 32-character key)
_ANCHOR = 8  # the length of the substrings searched for first; a run found is then grown character by character


@dataclasses.dataclass(frozen=True, slots=True)
class _Form:
    """One way a secret may be written (as is, reversed, in hex, in base64 at one alignment, URL-encoded).

    `needle` is searched for in the text, case-folded when `folded`; any run
    of it at least `shortest` characters long is hidden. `spellings`, when
    set, are the only original-case texts that count (a short secret is
    hidden as is, upper- or lower-case, never in any mixed case).
    """

    needle: str
    name: str
    shortest: int
    folded: bool
    spellings: frozenset[str] | None = None

    def anchors(self) -> list[tuple[str, int]]:
        """Substrings of `needle`, with their offsets, such that every run of `shortest` characters holds one."""
        if self.shortest == len(self.needle) or self.shortest < 2 * _ANCHOR:
            return [(self.needle[: self.shortest], 0)] if self.shortest == len(self.needle) else self._every(self.shortest)
        return self._every(_ANCHOR, stride=self.shortest - _ANCHOR + 1)

    def _every(self, size: int, stride: int = 1) -> list[tuple[str, int]]:
        return [(self.needle[i : i + size], i) for i in range(0, len(self.needle) - size + 1, stride)]


def _fold(text: str) -> str:
    """`text` in lower case, each character where it was (a character whose lower case is longer stays as it is)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _base64_forms(secret: bytes, name: str) -> list[_Form]:
    """The secret in base64 (standard and URL-safe), at each of the three byte alignments it may have inside a
    longer encoded text: only the characters that depend on the secret's bytes alone, plus the next character as
    it is when the secret ends the data (so a secret encoded alone is hidden to its padding)."""
    forms = []
    for k in range(3):
        low = base64.b64encode(bytes(k) + secret + bytes(2)).decode()
        high = base64.b64encode(b"\xff" * k + secret + b"\xff\xff").decode()
        fixed = [i for i, (a, b) in enumerate(zip(low, high, strict=True)) if a == b != "="]
        first, last = fixed[0], fixed[-1]
        alone = base64.b64encode(bytes(k) + secret).decode().rstrip("=")
        needle = alone[first : last + 2]
        for text in {needle, needle.translate(_URLSAFE)}:
            forms.append(_Form(text, name, last + 1 - first, folded=False))
    return forms


_URLSAFE = str.maketrans("+/", "-_")


def _forms(secret: str, name: str) -> list[_Form]:
    """Every form of `secret` that is hidden: itself in any case and reversed (any `SLICE` characters of either
    when it is long; whole, as is, upper- or lower-case when short), in hex, in base64, URL-encoded."""
    raw = secret.encode("utf-8", "surrogateescape")
    long = len(secret) >= SLICE
    forms = []
    for text in (secret, secret[::-1]):
        spellings = None if long else frozenset({text, text.upper(), text.lower()})
        forms.append(_Form(_fold(text), name, SLICE if long else len(text), folded=True, spellings=spellings))
        if not text.isascii():  # a text folded around it may not fold it alike: look for it as it is too
            forms.append(_Form(text, name, SLICE if long else len(text), folded=False))
    forms.append(_Form(raw.hex(), name, 2 * len(raw), folded=True))
    forms.extend(_base64_forms(raw, name))
    quoted = urllib.parse.quote(secret, safe="")
    if quoted != secret:
        for text in {quoted, re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted)}:
            forms.append(_Form(text, name, len(text), folded=False))
    return forms


class _Matcher:
    """Finds every form of every secret in a text: a substring search per anchor (`str.find`, which is fast),
    each hit grown to the whole run of the form it belongs to.

    Built once per set of secrets (`Secrets._rebuild`). Measured on 1 MB of text
    with three 40-character secrets: ~20 ms (36 anchors, a substring search of
    1 MB takes ~0.5 ms); one compiled regex of the same anchors took three
    times as long.
    """

    def __init__(self, names: dict[str, str]) -> None:
        # the longest first: where two secrets overlap, the longer one names the run hidden
        forms = [f for secret in sorted(names, key=len, reverse=True) for f in _forms(secret, names[secret])]
        self.anchors: dict[tuple[str, bool], list[tuple[int, _Form, int]]] = {}
        for order, form in enumerate(forms):
            for anchor, offset in form.anchors():
                self.anchors.setdefault((anchor, form.folded), []).append((order, form, offset))
        self.shortest = min(len(anchor) for anchor, _ in self.anchors)
        self.names = names

    def may_be_in(self, text: str) -> bool:
        """Whether an anchor is in `text` (a run may then be found)."""
        if len(text) < self.shortest:
            return False
        folded = _fold(text)
        return any(anchor in (folded if fold else text) for anchor, fold in self.anchors)

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """The runs of `text` to hide, as (start, end, name), in order and not overlapping."""
        if len(text) < self.shortest:
            return []
        folded: str | None = None
        found: list[tuple[int, int, int, str]] = []
        for (anchor, fold), owners in self.anchors.items():
            if fold and folded is None:
                folded = _fold(text)
            hay = folded if fold and folded is not None else text
            at = hay.find(anchor)
            while at >= 0:
                for order, form, offset in owners:
                    start, end = _grow(hay, at, form.needle, offset, len(anchor))
                    if end - start >= form.shortest and (form.spellings is None or text[start:end] in form.spellings):
                        found.append((start, -end, order, form.name))
                at = hay.find(anchor, at + 1)
        found.sort()
        merged: list[tuple[int, int, str]] = []
        for start, neg_end, _, name in found:
            if merged and start < merged[-1][1]:
                if -neg_end > merged[-1][1]:
                    merged[-1] = (merged[-1][0], -neg_end, merged[-1][2])
                continue
            merged.append((start, -neg_end, name))
        return merged

    def sub(self, text: str) -> str:
        """`text` with every run found replaced by ``[redacted:NAME]``; `text` itself when there is none."""
        spans = self.spans(text)
        if not spans:
            return text
        parts, done = [], 0
        for start, end, name in spans:
            parts += [text[done:start], f"[redacted:{name}]"]
            done = end
        parts.append(text[done:])
        return "".join(parts)


def _grow(hay: str, at: int, needle: str, offset: int, size: int) -> tuple[int, int]:
    """The run of `hay` around `hay[at : at + size] == needle[offset : offset + size]` that matches `needle`."""
    left = 0
    while left < offset and left < at and hay[at - left - 1] == needle[offset - left - 1]:
        left += 1
    right = size
    while offset + right < len(needle) and at + right < len(hay) and hay[at + right] == needle[offset + right]:
        right += 1
    return at - left, at + right


class Secrets:
    """The secret values to hide, each with the name shown in its place, and `redact` over them.

    `environ` (default: ``os.environ``) is read at the first use and again
    by `refresh`; `register` adds a value for the life of the object.
    Thread-safe: a change builds a new matcher, swapped in at once.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._lock = threading.Lock()
        self._from_env: dict[str, str] = {}  # value -> name
        self._registered: dict[str, str] = {}
        self._loaded = False
        self._matcher: _Matcher | None = None
        self._escapable = False  # a secret that JSON text would show escaped (see `may_be_in`)

    def refresh(self) -> None:
        """Read the environment again (a key set or changed since the first use)."""
        environ = os.environ if self._environ is None else self._environ
        found = {
            value: name
            for name, value in sorted(environ.items())
            if SECRET_NAME.search(name) and len(value) >= MIN_LENGTH and not _names_a_place(name)
        }
        with self._lock:
            self._from_env = found
            self._loaded = True
            self._rebuild()

    def register(self, value: str | None, name: str) -> None:
        """Hide `value` (shown as ``[redacted:NAME]``); None, empty and short values are ignored."""
        if not value or len(value) < MIN_LENGTH:
            return
        if not self._loaded:
            self.refresh()
        with self._lock:
            if self._registered.get(value) == name:
                return
            self._registered[value] = name
            self._rebuild()

    def _rebuild(self) -> None:
        names = {**self._from_env, **self._registered}
        self._escapable = any(_JSON_ESCAPED.search(v) for v in names)
        # a secret with a quote or a backslash is written escaped in JSON text held in a string (a planner's draft, a
        # tool's JSON answer): that form is hidden too, under the same name
        escaped = {json.dumps(v, ensure_ascii=False)[1:-1]: n for v, n in names.items() if _JSON_ESCAPED.search(v)}
        names.update({v: n for v, n in escaped.items() if v not in names})
        if not names:
            self._matcher = None
            return
        self._matcher = _Matcher(names)

    def names(self) -> list[str]:
        """The names of the values hidden (never the values)."""
        if not self._loaded:
            self.refresh()
        matcher = self._matcher
        return sorted(set(matcher.names.values())) if matcher else []

    def may_be_in(self, text: str) -> bool:
        """False only when no secret is in `text`, nor in any string of the JSON `text` may be (a cheap test before `redact`).

        A secret with a character that JSON escapes (a quote, a backslash, a
        control character) could hide in JSON text: then this says True.
        """
        if not self._loaded:
            self.refresh()
        matcher = self._matcher
        if matcher is None:
            return False
        return self._escapable or matcher.may_be_in(text)

    def __bool__(self) -> bool:
        if not self._loaded:
            self.refresh()
        return self._matcher is not None

    def redact(self, value: T) -> T:
        """`value` with every secret replaced by ``[redacted:NAME]`` (see `redact`)."""
        if not self._loaded:
            self.refresh()
        matcher = self._matcher
        if matcher is None:
            return value
        return cast(T, _redact(value, matcher))


def _redact(value: Any, matcher: _Matcher) -> Any:
    """`value` with the secrets replaced; the very same object when it holds none."""
    kind = type(value)
    if kind is str or isinstance(value, str):
        return matcher.sub(value)
    if kind in _ATOMS or value is None:
        return value
    if kind is dict or isinstance(value, dict):
        for k, v in value.items():
            if _redact(k, matcher) is not k or _redact(v, matcher) is not v:
                break
        else:
            return value  # the usual case: nothing to hide, nothing rebuilt
        return {_redact(k, matcher): _redact(v, matcher) for k, v in value.items()}
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        for v in value:
            if _redact(v, matcher) is not v:
                break
        else:
            return value
        items = [_redact(v, matcher) for v in value]
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a named tuple takes its fields one by one
    if isinstance(value, bytes):
        text = value.decode("utf-8", "surrogateescape")
        hidden = _redact(text, matcher)
        return value if hidden is text else hidden.encode("utf-8", "surrogateescape")
    if isinstance(value, BaseModel):
        fields = {k: getattr(value, k) for k in type(value).model_fields}
        update = {k: r for k, v in fields.items() if (r := _redact(v, matcher)) is not v}
        return value.model_copy(update=update) if update else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        changes = {k: r for k, v in parts.items() if (r := _redact(v, matcher)) is not v}
        return dataclasses.replace(value, **changes) if changes else value
    return value  # another object: nothing we can rebuild safely


_ATOMS = frozenset({int, float, bool})


def _names_a_place(name: str) -> bool:
    """True for a variable that says where a key is kept (``RAY_AUTH_TOKEN_PATH``), not the key: hiding its value, and
    every 16 characters of it, would hide the folders it shares with other paths (a tools file's, a store's)."""
    return name.upper().endswith(("_PATH", "_FILE", "_DIR", "_DIRECTORY"))


secrets = Secrets()  # the process's secrets: the environment's and every registered value


def redact(value: T) -> T:
    """`value` with every occurrence of a secret replaced by ``[redacted:NAME]``.

    Strings, and nested in dicts (keys too), lists, tuples, bytes, pydantic
    models and dataclasses (records); other objects come back unchanged.
    A value without a secret comes back as the very same object.
    """
    return secrets.redact(value)


def register_secret(value: str | None, name: str) -> None:
    """Hide `value` from now on, shown as ``[redacted:NAME]`` (a resolved api key, a token given in code)."""
    secrets.register(value, name)


def refresh_secrets() -> None:
    """Read the environment's secrets again."""
    secrets.refresh()


class RedactingFilter(logging.Filter):
    """A `logging.Filter` that redacts a record's message, arguments, traceback and stack (never drops one)."""

    def __init__(self, source: Secrets | None = None) -> None:
        super().__init__()
        self.source = source if source is not None else secrets

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact `record` in place; always True."""
        if not self.source:
            return True
        message = record.getMessage()
        hidden = self.source.redact(message)
        if hidden is not message:
            record.msg, record.args = hidden, None
        if record.exc_info and record.exc_info[1] is not None:
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            shown = self.source.redact(text)
            if shown is not text:  # the traceback held a secret: keep only its redacted text
                record.exc_text, record.exc_info = shown, None
        elif record.exc_text:
            record.exc_text = self.source.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.source.redact(record.stack_info)
        return True


_FILTER = RedactingFilter()
_installed = False
_install_lock = threading.Lock()


def install_log_filter() -> None:
    """Install the redacting filter on the ``planexec`` logger and on every record its children make (once)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True
        logging.getLogger("planexec").addFilter(_FILTER)
        previous = logging.getLogRecordFactory()

        def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            name = record.name
            if name.startswith("planexec.") and secrets:
                _FILTER.filter(record)
            return record

        logging.setLogRecordFactory(make)


install_log_filter()
