"""The argument model of a tool declared by a JSON Schema (an MCP tool, another framework's tool).

Owns `SchemaInput`, which offers the part of a pydantic model class that
the planner's catalog, the draft schema and plan validation read of a
tool's `input_model` (see `InputModel`): ``model_validate`` (raising
pydantic's `ValidationError`, so its errors become the same `Problem`s a
function tool gives: ``missing_parameter``, ``unknown_parameter``,
``wrong_type``, each naming the field), ``model_json_schema`` and
``model_fields`` (each with ``is_required()``).

Arguments are checked with jsonschema as they are: no coercion (``"5"`` is
not an integer here, as JSON Schema says). ``model_validate`` returns the
arguments as given plus the ``default`` of each top-level property the
caller left out, and nothing else. A schema that does not say
``additionalProperties`` is closed (unknown arguments are refused, as a
function tool refuses them), and ``definitions`` (draft 7) become
``$defs``, so the schema nests in a plan's draft schema like a pydantic one.

Imports `errors` only.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Protocol

import jsonschema
from pydantic_core import PydanticCustomError, ValidationError

from planexec.errors import RegistryError

__all__ = ["InputModel", "SchemaField", "SchemaInput"]

_OPEN_KEYS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_NOT_NESTED = ("$schema", "$id")  # meaningful at a document's root only; the schema is embedded in others


class InputModel(Protocol):
    """What the planner, the validator and the catalog read of a tool's argument model (a pydantic model class is one).

    Readers that name parameters (plan text formats, evaluation suites) also
    read ``model_fields``: names in order, each with ``is_required()``.
    """

    def model_validate(self, obj: Any) -> Any: ...

    def model_json_schema(self) -> dict[str, Any]: ...


class SchemaField:
    """One top-level property of a JSON Schema input, read the way a pydantic field is read."""

    def __init__(self, name: str, schema: Any, *, required: bool) -> None:
        self.name = name
        self.json_schema = schema if isinstance(schema, dict) else {}
        self.required = required
        self.description: str | None = self.json_schema.get("description")

    def __repr__(self) -> str:
        return f"SchemaField({self.name!r}, required={self.required})"

    def is_required(self) -> bool:
        """True when the caller must give this argument."""
        return self.required

    @property
    def has_default(self) -> bool:
        """True when the schema gives this property a ``default``."""
        return "default" in self.json_schema


def _rewrite_definitions(node: Any) -> Any:
    """`node` with draft-7 ``definitions`` as ``$defs`` and their references rewritten."""
    if isinstance(node, list):
        return [_rewrite_definitions(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/definitions/"):
            value = "#/$defs/" + value.removeprefix("#/definitions/")
        out["$defs" if key == "definitions" else key] = _rewrite_definitions(value)
    return out


class SchemaInput:
    """The arguments of a JSON Schema tool: checked with jsonschema, reported like a pydantic model's."""

    def __init__(self, schema: Mapping[str, Any], *, name: str) -> None:
        if not isinstance(schema, Mapping):
            raise RegistryError(f"tool {name!r}: input_schema must be a JSON Schema object, not {type(schema).__name__}", name=name)
        given = copy.deepcopy(dict(schema))
        kind = given.setdefault("type", "object")
        if kind != "object":
            raise RegistryError(f"tool {name!r}: input_schema must describe an object (its arguments by name), not {kind!r}", name=name)
        validator_class = jsonschema.validators.validator_for(given, default=jsonschema.Draft202012Validator)
        document = {k: v for k, v in _rewrite_definitions(given).items() if k not in _NOT_NESTED}
        if not any(key in document for key in _OPEN_KEYS):
            document["additionalProperties"] = False  # like a function tool: an argument it does not declare is refused
        try:
            validator_class.check_schema(document)
        except jsonschema.SchemaError as exc:
            raise RegistryError(f"tool {name!r}: input_schema is not a valid JSON Schema: {exc.message}", name=name) from None
        self.name = name
        self.schema = document
        self._validator = validator_class(document)
        required = set(document.get("required", []))
        properties = document.get("properties", {})
        self.model_fields: dict[str, SchemaField] = {
            key: SchemaField(key, value, required=key in required) for key, value in properties.items()
        }

    def __repr__(self) -> str:
        return f"SchemaInput({self.name!r})"

    def model_json_schema(self) -> dict[str, Any]:
        """The schema as the planner and the model see it (a copy)."""
        return copy.deepcopy(self.schema)

    def model_validate(self, obj: Any) -> dict[str, Any]:
        """The arguments as given, plus the defaults of the properties left out; pydantic's `ValidationError` lists every problem."""
        line_errors: list[Any] = []
        if not isinstance(obj, dict):
            line_errors.append(_custom((), "Input should be an object of named arguments", obj))
        else:
            seen: set[tuple[str, tuple[Any, ...]]] = set()
            for error in self._validator.iter_errors(obj):
                for line in _line_errors(error):
                    seen_key = (str(line["type"]), line["loc"])
                    if seen_key not in seen:
                        seen.add(seen_key)
                        line_errors.append(line)
        if line_errors:
            raise ValidationError.from_exception_data(self.name, line_errors)
        out = dict(obj)
        for key, prop in self.model_fields.items():
            if key not in out and prop.has_default:
                out[key] = copy.deepcopy(prop.json_schema["default"])
        return out


def _custom(loc: tuple[Any, ...], message: str, value: Any) -> dict[str, Any]:
    # the message goes in as a value, not as the template, so braces in it are never read as fields
    return {"type": PydanticCustomError("json_schema", "{reason}", {"reason": message}), "loc": loc, "input": value}


def _line_errors(error: jsonschema.ValidationError) -> list[dict[str, Any]]:
    """One jsonschema error as pydantic line errors: missing and unknown arguments get pydantic's own types."""
    loc = tuple(error.absolute_path)
    instance = error.instance
    expected: Any = error.validator_value
    if error.validator == "required" and isinstance(instance, dict):
        return [{"type": "missing", "loc": (*loc, key), "input": instance} for key in expected if key not in instance]
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        declared = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extra = [key for key in instance if key not in declared and not any(re.search(p, key) for p in patterns)]
        if extra:
            return [{"type": "extra_forbidden", "loc": (*loc, key), "input": instance[key]} for key in extra]
    if error.validator == "type":
        types = expected if isinstance(expected, str) else " or ".join(expected)
        return [_custom(loc, f"Input should be of type {types}", instance)]
    return [_custom(loc, error.message, instance)]
