"""A JSON schema's shape written as an example, for the output instructions.

A small model given only a JSON schema often answers with the schema itself, or with its
values wrapped in the schema's keywords (``{"items": [...]}``, ``{"properties": {...}}``):
it reads the schema as an example. :func:`schema_example` writes the value the schema
describes with a placeholder where each of the model's values goes: ``<name>`` for a
string property called ``name``, ``<integer>``, ``<number>``, ``<true or false>``,
``<"a" or "b">`` for an ``enum``, a ``const`` as itself. The placeholders are not JSON, so
the shape copied as it is fails to parse and is corrected, never taken for an answer; the
prompt shows it beside the schema that states the rules.

Bounded: at most :data:`MAX_DEPTH` levels (deeper parts are written as ``...``), a
recursive ``$ref`` is written once, and an example longer than :data:`MAX_EXAMPLE_CHARS`
is not given at all (``None``): the schema alone says it then.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_EXAMPLE_CHARS", "schema_example"]

MAX_DEPTH = 6
"""How deep an example goes; deeper parts are written as ``null``."""

MAX_EXAMPLE_CHARS = 1500
"""The longest example given, as compact JSON; a longer one is left out."""

_SCALARS = {"integer": "<integer>", "number": "<number>", "boolean": "<true or false>",
            "null": "null"}  # fmt: skip
_MAX_CHOICES = 4  # an enum with more values is written <one of the schema's values>


class _Slot(str):
    """A placeholder, written as it is (not as a JSON string)."""


def schema_example(schema: Mapping[str, Any]) -> str | None:
    """The shape of the value ``schema`` describes, with placeholders; or ``None``.

    ``None`` when the shape would say nothing the schema does not (not an object or an
    array) or would be longer than :data:`MAX_EXAMPLE_CHARS`.
    """
    definitions = schema.get("$defs") or schema.get("definitions") or {}
    value = _example(schema, definitions if isinstance(definitions, Mapping) else {}, 0,
                     frozenset(), "value")  # fmt: skip
    if not isinstance(value, dict | list):
        return None
    text = _written(value)
    return text if len(text) <= MAX_EXAMPLE_CHARS else None


def _written(value: Any) -> str:
    if isinstance(value, _Slot):
        return str(value)
    if isinstance(value, dict):
        members = ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_written(v)}"
                            for k, v in value.items())  # fmt: skip
        return f"{{{members}}}"
    if isinstance(value, list):
        return f"[{', '.join(_written(item) for item in value)}]"
    return json.dumps(value, ensure_ascii=False)


def _example(
    schema: Any, definitions: Mapping[str, Any], depth: int, seen: frozenset[str], name: str
) -> Any:
    if not isinstance(schema, Mapping):
        return _Slot("<any>")
    if depth > MAX_DEPTH:
        return _Slot("...")
    reference = schema.get("$ref")
    if isinstance(reference, str):
        key = reference.rsplit("/", 1)[-1]
        if key in seen or key not in definitions:
            return _Slot("...")
        return _example(definitions[key], definitions, depth, seen | {key}, name)
    if "const" in schema:
        return schema["const"]
    choices = schema.get("enum")
    if isinstance(choices, list) and choices:
        if len(choices) > _MAX_CHOICES:
            return _Slot("<one of the schema's values>")
        return _Slot("<" + " or ".join(json.dumps(c, ensure_ascii=False) for c in choices) + ">")
    for keyword in ("anyOf", "oneOf", "allOf"):
        options = schema.get(keyword)
        if isinstance(options, list) and options:
            chosen = next((o for o in options if not _is_null(o)), options[0])
            return _example(chosen, definitions, depth, seen, name)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return _Slot("{...}")
        return {
            str(key): _example(value, definitions, depth + 1, seen, str(key))
            for key, value in properties.items()
        }
    if kind == "array":
        return [_example(schema.get("items"), definitions, depth + 1, seen, name)]
    if kind == "string":
        return _Slot(f"<{name}>")
    return _Slot(_SCALARS.get(str(kind), "<any>"))


def _is_null(option: Any) -> bool:
    return isinstance(option, Mapping) and option.get("type") == "null"
