"""A tool's documented defaults are values it accepts: :func:`admitting_defaults`.

A JSON schema may declare a parameter's ``default`` outside what the parameter's own keywords
accept: ``{"type": "string", "default": null}``, or an ``enum`` that leaves out its documented
``"dontcare"``. The function takes that value when the argument is left out, so a model that
writes it out made a right call, and refusing it corrects the model away from that call
(BFCL's answer keys accept such defaults in more than one case in ten of some categories).

The schema the model is shown stays as given; the one arguments are checked against (and a
grammar built from it) accepts each such default too: the parameter's schema becomes
``{"anyOf": [<its schema>, {"const": <default>}]}``, only where the default fails it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import jsonschema

__all__ = ["admitting_defaults"]

# Keywords whose value is one subschema, a list of them, or a mapping of them.
_ONE: Final = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_LISTS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPPINGS: Final = ("properties", "patternProperties", "$defs", "definitions")


def admitting_defaults(schema: Mapping[str, Any], validator_class: Any = None) -> dict[str, Any]:
    """``schema`` with every property whose ``default`` it refuses widened to accept it.

    Args:
        schema: A JSON schema (not changed: the result shares its unchanged parts).
        validator_class: The ``jsonschema`` validator class that judges a default against
            its property's schema (the latest draft by default).

    Returns:
        The schema to validate with; equal to ``schema`` when every default fits.
    """
    checker = validator_class or jsonschema.Draft202012Validator
    return _widened(schema, checker)


def _widened(schema: Mapping[str, Any], checker: Any) -> dict[str, Any]:
    widened = dict(schema)
    for keyword in _ONE:
        value = schema.get(keyword)
        if isinstance(value, Mapping):
            widened[keyword] = _widened(value, checker)
    for keyword in _LISTS:
        value = schema.get(keyword)
        if isinstance(value, list):
            widened[keyword] = [
                _widened(item, checker) if isinstance(item, Mapping) else item for item in value
            ]
    for keyword in _MAPPINGS:
        value = schema.get(keyword)
        if isinstance(value, Mapping):
            widened[keyword] = {
                name: _widened(item, checker) if isinstance(item, Mapping) else item
                for name, item in value.items()
            }
    properties = widened.get("properties")
    if isinstance(properties, dict):
        for name, item in properties.items():
            refused = (
                isinstance(item, Mapping)
                and "default" in item
                and not _accepts(item, item["default"], checker)
            )
            if refused:
                properties[name] = {"anyOf": [item, {"const": item["default"]}]}
    return widened


def _accepts(schema: Mapping[str, Any], value: Any, checker: Any) -> bool:
    """Whether ``schema`` alone accepts ``value`` (a schema that refers outside itself: no)."""
    try:
        return bool(checker(schema).is_valid(value))
    except Exception:  # a $ref it cannot resolve alone (referencing's errors): not judged here
        return False
