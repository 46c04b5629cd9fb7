"""The base of planexec's hot-path records: frozen, slotted dataclasses with a stable JSON form.

Owns `Record`. The engine builds several records per step (the call, the
result, the output and its provenance, events); as plain dataclasses they
cost a microsecond each instead of a pydantic validation, and leave the
garbage collector one object to trace instead of three. They are validated
where they come from outside: `from_dict`/`from_json` (and any pydantic model
that holds them) check every field through pydantic. Imports nothing from planexec.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pydantic import ConfigDict, TypeAdapter
from pydantic_core import SchemaSerializer

__all__ = ["Record"]

R = TypeVar("R", bound="Record")


@functools.cache
def _cached_adapter(cls: Any) -> TypeAdapter[Any]:
    return TypeAdapter(cls)


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    """One `TypeAdapter` per record class, built once."""
    key: Any = cls  # a class is hashable; typeshed's `Hashable` does not see it through a slotted dataclass
    return _cached_adapter(key)


_SERIALIZERS: dict[type[Any], SchemaSerializer] = {}


def _serializer(cls: type[Any]) -> SchemaSerializer:
    """The record class's pydantic-core serializer, found once: `TypeAdapter.dump_json` without its Python
    wrapper (which resolves every option per call); the same text, byte for byte."""
    found = _SERIALIZERS[cls] = _adapter(cls).serializer
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """A typed, immutable record; `to_dict`/`to_json` give its stable JSON form."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data."""
        data: dict[str, Any] = _adapter(type(self)).dump_python(self, mode="json")
        return data

    def to_json(self, *, indent: int | None = None) -> str:
        """The JSON form as text."""
        if indent is None:  # the store's hot path (two events a step): pydantic-core's serializer itself, 1-2 µs less an event
            return (_SERIALIZERS.get(type(self)) or _serializer(type(self))).to_json(self).decode()
        return _adapter(type(self)).dump_json(self, indent=indent).decode()

    @classmethod
    def from_dict(cls: type[R], data: Any) -> R:
        """Validate decoded JSON (or Python data) as this record."""
        record: R = _adapter(cls).validate_python(data)
        return record

    @classmethod
    def from_json(cls: type[R], text: str | bytes) -> R:
        """Validate JSON text as this record."""
        record: R = _adapter(cls).validate_json(text)
        return record
