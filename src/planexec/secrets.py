"""Secrets that must never leave the process: which values they are, and hiding them in what does leave.

Owns `Secrets` (the set of values to hide: every environment variable whose
name says it holds one, ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``,
``PASSWD``, ``CREDENTIAL`` or ``AUTH`` in any case, but not ``AUTHOR``, with
a value of at least `MIN_LENGTH` characters, read once and re-read by
`refresh`; plus the values registered with `register_secret`, such as the
model providers' api keys where they are resolved), `redact`, which
replaces every occurrence of one in a value with ``[redacted:NAME]``, and
`RedactingFilter`, the `logging.Filter` that does the same to log records.

Where it applies: the run store redacts what it writes (events, plan
versions, approvals, and so the run summaries made from them), the CLI's
consoles redact what they print, and the workers redact tool results
before a model reads them. Shorter values are not hidden: they would match
ordinary text (and a short key is no secret anyway).

`redact` is on every store write, so it costs nothing when there are no
secrets (one attribute test) and, when there are, leaves values without
one untouched (the same objects come back, so a caller can tell by
identity that nothing changed). Log records: a filter on a logger sees
only the records logged on that very logger, never those propagated from
its children (``planexec.store``, ``planexec.engine``, ...), so the filter
is installed on the ``planexec`` logger and also runs, through the log
record factory, on every record a ``planexec.*`` logger makes (the message
is formatted and redacted then, tracebacks too). Imports nothing from
planexec: it sits at the lowest layer, beside `errors` and `records`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import traceback
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from pydantic import BaseModel

__all__ = [
    "MIN_LENGTH",
    "SECRET_NAME",
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
_FEW = 4  # up to this many secrets, a string is searched for each in turn before the regex

MIN_LENGTH = 8
# a variable whose name says it holds a secret; AUTHOR (GIT_AUTHOR_NAME) says no such thing
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH(?!OR)", re.IGNORECASE)


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
        self._matcher: tuple[re.Pattern[str], dict[str, str]] | None = None
        self._escapable = False  # a secret that JSON text would show escaped (see `may_be_in`)

    def refresh(self) -> None:
        """Read the environment again (a key set or changed since the first use)."""
        environ = os.environ if self._environ is None else self._environ
        found = {value: name for name, value in sorted(environ.items()) if SECRET_NAME.search(name) and len(value) >= MIN_LENGTH}
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
        if not names:
            self._matcher = None
            return
        # the longest first: a secret that contains another is hidden whole
        alternatives = "|".join(re.escape(v) for v in sorted(names, key=len, reverse=True))
        self._matcher = (re.compile(alternatives), names)

    def names(self) -> list[str]:
        """The names of the values hidden (never the values)."""
        if not self._loaded:
            self.refresh()
        matcher = self._matcher
        return sorted(set(matcher[1].values())) if matcher else []

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
        names = matcher[1]
        return self._escapable or any(secret in text for secret in names)

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
        return cast(T, _redact(value, matcher[0], matcher[1]))


def _redact(value: Any, pattern: re.Pattern[str], names: dict[str, str]) -> Any:
    """`value` with the secrets replaced; the very same object when it holds none."""
    kind = type(value)
    if kind is str or isinstance(value, str):
        for secret in names if len(names) <= _FEW else ():  # a substring test per secret beats the regex when there are few
            if secret in value:
                break
        else:
            if len(names) <= _FEW or pattern.search(value) is None:
                return value
        return pattern.sub(lambda m: f"[redacted:{names[m.group()]}]", value)
    if kind in _ATOMS or value is None:
        return value
    if kind is dict or isinstance(value, dict):
        for k, v in value.items():
            if _redact(k, pattern, names) is not k or _redact(v, pattern, names) is not v:
                break
        else:
            return value  # the usual case: nothing to hide, nothing rebuilt
        return {_redact(k, pattern, names): _redact(v, pattern, names) for k, v in value.items()}
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        for v in value:
            if _redact(v, pattern, names) is not v:
                break
        else:
            return value
        items = [_redact(v, pattern, names) for v in value]
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a named tuple takes its fields one by one
    if isinstance(value, bytes):
        text = value.decode("utf-8", "surrogateescape")
        hidden = _redact(text, pattern, names)
        return value if hidden is text else hidden.encode("utf-8", "surrogateescape")
    if isinstance(value, BaseModel):
        fields = {k: getattr(value, k) for k in type(value).model_fields}
        update = {k: r for k, v in fields.items() if (r := _redact(v, pattern, names)) is not v}
        return value.model_copy(update=update) if update else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        changes = {k: r for k, v in parts.items() if (r := _redact(v, pattern, names)) is not v}
        return dataclasses.replace(value, **changes) if changes else value
    return value  # another object: nothing we can rebuild safely


_ATOMS = frozenset({int, float, bool})


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
