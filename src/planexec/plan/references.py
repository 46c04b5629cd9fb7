"""References: how a step's parameters and instruction name earlier outputs, found and filled in.

Owns the reference syntax (``${step_id}``, ``${step_id.path.to.value}``;
``$${`` writes a literal ``${``), `find_references` (every step id and path a
value names), `resolve_references` (the value with outputs put in: a whole
reference keeps the output's type, one inside a text is written as text,
JSON for structures), `lookup` (a dotted path into an output) and
`is_whole_reference`. A string with a reference is parsed once (`_PARSED`,
bounded): a plan's references repeat, one for each step that reads an
output. Imports nothing from planexec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Mapping
from functools import partial
from typing import Any

__all__ = ["find_references", "is_whole_reference", "lookup", "resolve_references"]

# ${step_id} or ${step_id.path.to.value}; "$${" escapes a literal "${".
_REF = re.compile(r"(?<!\$)\$\{([A-Za-z0-9_][A-Za-z0-9_\-]*)((?:\.[^.}\s]+)*)\}")
_REF_OR_ESCAPE = re.compile(r"\$\$\{|\$\{([A-Za-z0-9_][A-Za-z0-9_\-]*)((?:\.[^.}\s]+)*)\}")
_WHOLE_REF = re.compile(r"^\$\{([A-Za-z0-9_][A-Za-z0-9_\-]*)((?:\.[^.}\s]+)*)\}$")


def find_references(value: Any) -> list[tuple[str, str]]:
    """Every (step_id, path) referenced anywhere inside a parameter value."""
    found: list[tuple[str, str]] = []
    if isinstance(value, str):
        if "${" in value:
            _text_references(value, found)
    elif isinstance(value, dict):
        _collect_references(value.values(), found)
    elif isinstance(value, (list, tuple)):
        _collect_references(value, found)
    return found


def _collect_references(items: Iterable[Any], found: list[tuple[str, str]]) -> None:
    for v in items:
        if type(v) is str:  # the usual item: a text, most often with no reference at all
            if "${" in v:
                _text_references(v, found)
        elif isinstance(v, (str, dict, list, tuple)):
            found += find_references(v)


def _text_references(text: str, found: list[tuple[str, str]]) -> None:
    """Add the references of one text holding ``${``: a whole reference read once (`_parsed`), any other by the regex."""
    parsed = _parsed(text)
    if parsed is not None:
        found.append(parsed)
    else:
        found += [(m.group(1), m.group(2).lstrip(".")) for m in _REF.finditer(text)]


def lookup(value: Any, path: str) -> Any:
    """Follow a dotted path (`items.0.name`) into nested mappings and lists."""
    if not path:
        return value
    for part in path.split("."):
        if isinstance(value, dict):
            if part not in value:
                raise LookupError(f"no key {part!r} (keys: {', '.join(map(str, list(value)[:10]))})")
            value = value[part]
        elif isinstance(value, (list, tuple)):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                raise LookupError(f"no index {part!r} in a list of {len(value)}") from None
        else:  # outputs are JSON data: mappings, lists and scalars only
            raise LookupError(f"cannot index {type(value).__name__} with {part!r}")
    return value


def resolve_references(value: Any, outputs: Mapping[str, Any], missing: Container[str] = frozenset()) -> Any:
    """Replace references with outputs: a whole-string reference keeps the output's type,
    a reference inside a template is formatted as text (JSON for structures). References
    to steps in `missing` (failed inputs a tolerant step accepts) resolve to None."""
    if isinstance(value, str):
        return _resolve_text(value, outputs, missing) if "${" in value else value
    if isinstance(value, dict):
        return {
            k: _resolve_text(v, outputs, missing) if type(v) is str else resolve_references(v, outputs, missing) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_resolve_text(v, outputs, missing) if type(v) is str else resolve_references(v, outputs, missing) for v in value]
    return value


# a string with a reference, read once: (step id, path) when it is one whole reference, None for a template
# (a regex match cost ten times this lookup); at most _PARSED_MAX strings, emptied when full
_PARSED: dict[str, tuple[str, str] | None] = {}
_PARSED_MAX = 4096


def _parsed(text: str) -> tuple[str, str] | None:
    """(step id, path) when `text` (holding ``${``) is one whole reference, else None (a template); see `_PARSED`."""
    try:
        return _PARSED[text]
    except KeyError:
        whole = _WHOLE_REF.match(text)
        parsed = None if whole is None else (whole.group(1), whole.group(2).lstrip("."))
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = parsed
        return parsed


def _resolve_text(value: str, outputs: Mapping[str, Any], missing: Container[str]) -> Any:
    """One string of a step's parameters or instruction, its references resolved (see `resolve_references`)."""
    try:
        parsed = _PARSED[value]
    except KeyError:
        if "${" not in value:
            return value
        parsed = _parsed(value)
    if parsed is None:
        return _REF_OR_ESCAPE.sub(partial(_as_text, outputs, missing), value)
    step_id, path = parsed
    if step_id in missing:
        return None
    return lookup(outputs[step_id], path) if path else outputs[step_id]


def _as_text(outputs: Mapping[str, Any], missing: Container[str], m: re.Match[str]) -> str:
    """One reference inside a template, as text; ``$${`` (a literal ``${``) in the same pass, so outputs are never unescaped."""
    step_id = m.group(1)
    if step_id is None:
        return "${"
    v = None if step_id in missing else lookup(outputs[step_id], m.group(2).lstrip("."))
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def is_whole_reference(value: Any) -> bool:
    """True when the value is exactly one reference (its type is the output's)."""
    return isinstance(value, str) and _WHOLE_REF.match(value) is not None
