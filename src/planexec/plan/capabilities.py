"""Capabilities: what a plan grants a step, and whether a call or a revision stays inside it.

Owns `Constraint` (the values one argument may take: a value set, a
pattern, workspace paths, hosts, a range), `Grant` (one tool a step may
call, with constraints on its arguments, whether the reviewed plan
pre-approved calls of that shape, and how many calls), and the pure checks
on them: `Constraint.admits`, `Grant.admits`, `Grant.within` (one grant no
wider than another) and `widened_grants` (what a revision grants that the
version it revises did not). No registry, no I/O: validation checks grants
against the registry, and the worker's gate applies them. Imports `errors`
only through `plan.model`'s base record.
"""

from __future__ import annotations

import fnmatch
import math
import posixpath
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["Constraint", "Grant", "grant_label", "widened_grants"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Constraint(_Frozen):
    """The values one argument may take; every bound given must hold.

    `values`: one of these exact values. `pattern`: the text matches this
    regular expression as a whole. `paths`: a workspace-relative path that
    matches one of these globs (``notes.txt``, ``reports/*.md``; no ``..``).
    `hosts`: a URL or host name whose host is one of these (``*.example.com``
    admits sub-domains); a user or credentials before ``@``, a backslash, a
    scheme other than http(s)/ws(s) or a port that is not the scheme's
    default are refused unless the port is listed (``example.com:8443``).
    `paths` refuse a backslash. `minimum` / `maximum`: a number in this range.
    """

    values: list[Any] | None = None
    pattern: str | None = None
    paths: list[str] | None = None
    hosts: list[str] | None = None
    minimum: float | None = None
    maximum: float | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> Constraint:
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError("a constraint needs at least one of values, pattern, paths, hosts, minimum, maximum")
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is above maximum {self.maximum}")
        return self

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"pattern {value!r} is not a regular expression: {exc}") from None
        return value

    @field_validator("paths")
    @classmethod
    def _relative(cls, value: list[str] | None) -> list[str] | None:
        for glob in value or ():
            if glob.startswith("/") or ".." in glob.split("/"):
                raise ValueError(f"path {glob!r} must be relative to the workspace, without '..'")
        return value

    def admits(self, value: Any) -> str | None:
        """None when `value` is inside every bound; otherwise which bound it breaks."""
        if self.values is not None and not any(_same_value(value, allowed) for allowed in self.values):
            return f"{_show(value)} is not one of {', '.join(map(_show, self.values))}"
        if self.pattern is not None and not (isinstance(value, str) and re.fullmatch(self.pattern, value)):
            return f"{_show(value)} does not match the pattern {self.pattern!r}"
        if self.paths is not None:
            if isinstance(value, str) and "\\" in value:
                return f"path {_show(value)} contains a backslash, which one tool reads as a separator and another as part of a name"
            path = _normal_path(value)
            if path is None or not any(fnmatch.fnmatchcase(path, glob) for glob in self.paths):
                return f"path {_show(value)} is not among the granted paths {', '.join(self.paths)}"
        if self.hosts is not None:
            host, port, problem = _destination(value)
            if problem is not None:
                return f"{_show(value)} {problem}"
            if host is None or not any(_host_matches(host, allowed) for allowed in self.hosts):
                return f"host of {_show(value)} is not among the granted hosts {', '.join(self.hosts)}"
            if port is not None and not any(_host_matches(host, allowed) and _port_of(allowed) == port for allowed in self.hosts):
                return f"port {port} of {_show(value)} is not granted (list it with the host, e.g. {host}:{port})"
        if self.minimum is not None or self.maximum is not None:
            number = _number(value)
            if number is None:
                return f"{_show(value)} is not a number"
            if self.minimum is not None and number < self.minimum:
                return f"{_show(value)} is below the granted minimum {self.minimum:g}"
            if self.maximum is not None and number > self.maximum:
                return f"{_show(value)} is above the granted maximum {self.maximum:g}"
        return None

    def within(self, other: Constraint) -> bool:
        """True when every value this constraint admits, `other` admits too (this one is no wider)."""
        if other.values is not None and (self.values is None or any(other.admits(v) is not None for v in self.values)):
            return False
        if (
            other.pattern is not None
            and self.pattern != other.pattern
            and not (self.values is not None and _all_admitted(other, self.values))
        ):
            return False
        if other.paths is not None and not (
            (self.paths is not None and all(any(_glob_within(g, o) for o in other.paths) for g in self.paths))
            or (self.values is not None and _all_admitted(other, self.values))
        ):
            return False
        if other.hosts is not None and not (
            (self.hosts is not None and all(_host_within(h, other.hosts) for h in self.hosts))
            or (self.values is not None and _all_admitted(other, self.values))
        ):
            return False
        if other.minimum is not None and (self.minimum is None or self.minimum < other.minimum):
            return self.values is not None and _all_admitted(other, self.values)
        if other.maximum is not None and (self.maximum is None or self.maximum > other.maximum):
            return self.values is not None and _all_admitted(other, self.values)
        return True

    def label(self) -> str:
        """The bounds in a few words, for a review or a denial."""
        parts = []
        if self.values is not None:
            parts.append("one of " + ", ".join(map(_show, self.values)))
        if self.pattern is not None:
            parts.append(f"matching {self.pattern!r}")
        if self.paths is not None:
            parts.append("paths " + ", ".join(self.paths))
        if self.hosts is not None:
            parts.append("hosts " + ", ".join(self.hosts))
        if self.minimum is not None:
            parts.append(f">= {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum:g}")
        return "; ".join(parts)


class Grant(_Frozen):
    """One tool a step may call, and within what.

    `arguments` bounds the named arguments (others are free). With
    `approved`, the reviewed plan pre-approves calls of this shape: they run
    without a per-call approval (a side-effecting call otherwise asks).
    `max_calls` bounds how many calls of it one attempt makes.
    """

    tool: str = Field(min_length=1)
    arguments: dict[str, Constraint] = Field(default_factory=dict)
    approved: bool = False
    max_calls: int | None = Field(None, ge=1)

    def admits(self, arguments: dict[str, Any]) -> tuple[str, str] | None:
        """None when the call's arguments are inside the grant; else (argument, why not)."""
        for name, constraint in self.arguments.items():
            if name not in arguments:
                continue  # the tool's own default: the tool's schema decides whether it may be left out
            reason = constraint.admits(arguments[name])
            if reason is not None:
                return name, reason
        return None

    def bounds(self, argument: str) -> bool:
        """True when the grant constrains this argument (so untrusted data may choose a value inside it)."""
        return argument in self.arguments

    def within(self, other: Grant) -> bool:
        """True when this grant allows nothing `other` does not: same tool, each bound at least as narrow."""
        if self.tool != other.tool or (self.approved and not other.approved):
            return False
        if other.max_calls is not None and (self.max_calls is None or self.max_calls > other.max_calls):
            return False
        for name, bound in other.arguments.items():
            mine = self.arguments.get(name)
            if mine is None or not mine.within(bound):
                return False
        return True


def grant_label(grant: Grant) -> str:
    """``write_file(path: one of 'out.txt') pre-approved``: a grant as a reviewer reads it."""
    args = ", ".join(f"{name}: {c.label()}" for name, c in grant.arguments.items())
    extra = [" pre-approved" if grant.approved else "", f" at most {grant.max_calls}x" if grant.max_calls else ""]
    return f"{grant.tool}({args}){''.join(extra)}"


def widened_grants(new: Iterable[Grant], old: Iterable[Grant]) -> list[Grant]:
    """The grants of `new` that no grant of `old` covers: what a revision would newly allow."""
    before = list(old)
    return [g for g in new if not any(g.within(o) for o in before)]


def _same_value(a: Any, b: Any) -> bool:
    """JSON equality that keeps types apart: ``True`` is not ``1``, ``"1"`` is not ``1`` (``1`` and ``1.0`` are one number)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is not type(b) and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _all_admitted(constraint: Constraint, values: list[Any]) -> bool:
    return all(constraint.admits(v) is None for v in values)


def _glob_within(inner: str, outer: str) -> bool:
    """True when every path `inner` matches, `outer` matches too (exact, or `outer` matches it as a name)."""
    return inner == outer or (not any(ch in inner for ch in "*?[") and fnmatch.fnmatchcase(inner, outer)) or outer in ("*", "**", "**/*")


def _host_within(host: str, others: list[str]) -> bool:
    if host.startswith("*."):
        return any(o.startswith("*.") and _host_matches(host[2:], o) for o in others)
    return any(_host_matches(host, o) for o in others)


def _normal_path(value: Any) -> str | None:
    if not isinstance(value, str) or not value or "\x00" in value:
        return None
    path = posixpath.normpath(value.replace("\\", "/"))
    if path.startswith(("/", "../")) or path == "..":
        return None
    return path.removeprefix("./")


_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "": None}
_HOST_NAME = re.compile(r"[a-z0-9.-]+|[0-9a-f:.]+")  # a name, or an IP address (IPv6 without its brackets)


def _destination(value: Any) -> tuple[str | None, int | None, str | None]:
    """(host, port when it is not the scheme's default, problem) of a URL or a host name, parsed as a browser would.

    A problem is anything that lets the text name one host and reach
    another: a user or credentials before an ``@``, a backslash, white
    space, a scheme without a host, a host in other than plain ASCII.
    """
    if not isinstance(value, str) or not value:
        return None, None, "is not a URL or a host name"
    if any(ch.isspace() or ord(ch) < 32 or ch == "\\" for ch in value):
        return None, None, "contains white space, a control character or a backslash"
    text = value if "//" in value else "//" + value
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return None, None, f"is not a URL: {exc}"
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None, None, f"has the scheme {scheme!r}; only http, https, ws and wss reach a granted host"
    if "@" in parts.netloc:
        return None, None, "names a user or credentials before '@', which hides the host it reaches"
    host = (parts.hostname or "").rstrip(".")
    if not host or not _HOST_NAME.fullmatch(host):
        return None, None, "has no plain ASCII host name (write an international name in its xn-- form)"
    if port is not None and port == _DEFAULT_PORTS[scheme]:
        port = None
    if port is not None and not scheme and port in (80, 443):
        port = None
    return host, port, None


def _port_of(allowed: str) -> int | None:
    """The port a granted host names (``example.com:8443``), else None."""
    head, _, port = allowed.rpartition(":")
    return int(port) if head and port.isdigit() else None


def _host_matches(host: str, allowed: str) -> bool:
    allowed = allowed.lower()
    if _port_of(allowed) is not None:
        allowed = allowed.rpartition(":")[0]
    allowed = allowed.rstrip(".")
    if allowed.startswith("*."):
        return host == allowed[2:] or host.endswith(allowed[1:])
    return host == allowed


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None
