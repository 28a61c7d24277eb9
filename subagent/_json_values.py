"""A value that a JSON schema accepts, made up from the schema alone (for ``TestLLM``).

:func:`value_for` writes the smallest plain value a schema accepts: the required properties
of an object, one item of an array (or ``minItems``), a number within its bounds, a
string of the right length or format. ``seed`` varies the choices (which ``enum`` member,
which number, which letter), so two seeds give two different valid values where the schema
allows it; of ``anyOf`` / ``oneOf`` the first branch is taken (the main one: pydantic writes
``X | None`` as ``[X, null]``). It covers the schemas pydantic writes for models, and the keywords
of hand-written tool schemas; a ``pattern`` is matched by trying a few short strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["SchemaValueError", "value_for"]

MAX_DEPTH: Final = 32
"""How deep a generated value may nest; a schema that needs more (a required recursive
field with no way out) is refused with :class:`SchemaValueError`."""

_FORMATS: Final[dict[str, str]] = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_LETTERS: Final = "abcdefghijklmnopqrstuvwxyz"
# Strings tried against a pattern, shortest and plainest first.
_PATTERN_TRIES: Final = (
    "a", "A", "0", "ab", "AB", "a0", "A0", "00", "abc", "ABC", "123", "a-b", "a_b", "a.b",
    "a b", "Abc", "abc123", "ABC-123", "user@example.com", "https://example.com/", "",
)  # fmt: skip


class SchemaValueError(ValueError):
    """No value could be made up for the schema; the message says where and why."""


def value_for(schema: Mapping[str, Any] | bool, seed: int = 0) -> Any:
    """A value ``schema`` accepts.

    Args:
        schema: A JSON schema (``$defs`` / ``definitions`` at its root resolve ``$ref``).
        seed: Varies the choices; 0 gives the plainest value.

    Raises:
        SchemaValueError: The schema asks for something this cannot write (a ``pattern``
            none of the tried strings matches, an unresolvable ``$ref``, nesting past
            :data:`MAX_DEPTH`); the message names the place in the value (``$.a.b``).
    """
    definitions: dict[str, Any] = {}
    if isinstance(schema, Mapping):
        definitions = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    return _Writer(definitions, seed).value(schema, "$", 0)


class _Writer:
    def __init__(self, definitions: Mapping[str, Any], seed: int):
        self._definitions = definitions
        self._seed = seed

    def value(self, schema: Mapping[str, Any] | bool, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise SchemaValueError(f"{path}: the value would nest deeper than {MAX_DEPTH} levels")
        if schema is True or schema == {}:
            return self._letters(1)
        if not isinstance(schema, Mapping):
            raise SchemaValueError(f"{path}: the schema {schema!r:.80} accepts no value")
        if "const" in schema:
            return schema["const"]
        for keyword in ("enum", "examples"):
            choices = schema.get(keyword)
            if isinstance(choices, list) and choices:
                return choices[self._seed % len(choices)]
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.value(self._resolve(ref, path), path, depth + 1)
        every = schema.get("allOf")
        if isinstance(every, list) and every:
            return self.value(_merged(schema, every), path, depth + 1)
        for keyword in ("anyOf", "oneOf"):
            options = schema.get(keyword)
            if isinstance(options, list) and options:
                return self.value(self._option(options, depth), path, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = self._option([k for k in kind if isinstance(k, str)] or ["string"], depth)
        if kind is None:
            kind = "object" if "properties" in schema else "string"
        if kind == "object":
            return self._object(schema, path, depth)
        if kind == "array":
            return self._array(schema, path, depth)
        if kind == "string":
            return self._string(schema, path)
        if kind in ("integer", "number"):
            return self._number(schema, integer=kind == "integer")
        if kind == "boolean":
            return self._seed % 2 == 1
        if kind == "null":
            return None
        raise SchemaValueError(f"{path}: unknown type {kind!r}")

    def _resolve(self, ref: str, path: str) -> Any:
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix) and ref[len(prefix) :] in self._definitions:
                return self._definitions[ref[len(prefix) :]]
        raise SchemaValueError(f"{path}: cannot resolve $ref {ref!r}")

    def _option(self, options: list[Any], depth: int) -> Any:
        # The first option: the main one (pydantic writes `X | None` as [X, null], a
        # Decimal as [number, string]). Deep down, null when there is one, so a recursive
        # model ends.
        if depth > MAX_DEPTH // 2:
            for option in options:
                if option == "null" or (
                    isinstance(option, Mapping) and option.get("type") == "null"
                ):
                    return option
        return options[0]

    def _object(self, schema: Mapping[str, Any], path: str, depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        required = [name for name in schema.get("required") or () if isinstance(name, str)]
        wanted = list(dict.fromkeys(required))
        extra = int(schema.get("minProperties") or 0) - len(wanted)
        for name in properties:
            if extra <= 0:
                break
            if name not in wanted:
                wanted.append(name)
                extra -= 1
        value: dict[str, Any] = {}
        for name in wanted:
            value[name] = self.value(properties.get(name, True), f"{path}.{name}", depth + 1)
        additional = schema.get("additionalProperties")
        while extra > 0:  # minProperties past the declared ones
            key = f"key{len(value)}"
            value[key] = self.value(
                additional if isinstance(additional, Mapping) else True, f"{path}.{key}", depth + 1
            )
            extra -= 1
        return value

    def _array(self, schema: Mapping[str, Any], path: str, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", True)
        low = int(schema.get("minItems") or 0)
        high = schema.get("maxItems")
        count = max(low, len(prefix), 0 if depth > MAX_DEPTH // 2 else 1)
        if isinstance(high, int):
            count = min(count, high)
        if items is False:
            count = min(count, len(prefix))
        unique = bool(schema.get("uniqueItems"))
        value: list[Any] = []
        for index in range(count):
            item_schema = prefix[index] if index < len(prefix) else items
            writer = _Writer(self._definitions, self._seed + index) if unique else self
            value.append(writer.value(item_schema, f"{path}[{index}]", depth + 1))
        return value

    def _string(self, schema: Mapping[str, Any], path: str) -> str:
        low = int(schema.get("minLength") or 0)
        high = schema.get("maxLength")
        high = int(high) if isinstance(high, int) else None
        pattern = schema.get("pattern")
        known = _FORMATS.get(str(schema.get("format")))
        tries = [known] if known else []
        if isinstance(pattern, str):
            written = _written_for(pattern, self._seed)
            tries.extend([written] if written is not None else [])
        tries.append(self._letters(max(low, 1 if high != 0 else 0)))
        if isinstance(pattern, str):
            tries.extend(_PATTERN_TRIES)
        for text in tries:
            if len(text) < low or (high is not None and len(text) > high):
                continue
            if isinstance(pattern, str) and not _matches(pattern, text):
                continue
            return text
        wanted = f"matching {pattern!r}" if isinstance(pattern, str) else "of that length"
        raise SchemaValueError(
            f"{path}: cannot write a string {wanted} (minLength={low}, maxLength={high})"
        )

    def _letters(self, length: int) -> str:
        if length == 0:
            return ""
        first = _LETTERS[self._seed % len(_LETTERS)]
        return first + "a" * (length - 1)

    def _number(self, schema: Mapping[str, Any], *, integer: bool) -> int | float:
        low = schema.get("minimum")
        high = schema.get("maximum")
        exclusive_low = schema.get("exclusiveMinimum")
        exclusive_high = schema.get("exclusiveMaximum")
        step = 1 if integer else 0.5
        if isinstance(exclusive_low, int | float) and not isinstance(exclusive_low, bool):
            candidate = exclusive_low + step
            low = candidate if low is None else max(low, candidate)
        if isinstance(exclusive_high, int | float) and not isinstance(exclusive_high, bool):
            candidate = exclusive_high - step
            high = candidate if high is None else min(high, candidate)
        if low is not None:
            value = low + self._seed
        elif high is not None:
            value = min(high, self._seed)
        else:
            value = self._seed
        if high is not None and value > high:
            value = high if low is None else low
        multiple = schema.get("multipleOf")
        if isinstance(multiple, int | float) and multiple > 0:
            value = -(-value // multiple) * multiple  # the next multiple up
            if high is not None and value > high:
                value -= multiple
        if integer:
            return int(-(-value // 1))
        return float(value)


def _merged(schema: Mapping[str, Any], parts: list[Any]) -> dict[str, Any]:
    """``allOf``: the parts' keywords together (properties and required lists joined)."""
    merged: dict[str, Any] = {key: value for key, value in schema.items() if key != "allOf"}
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, Mapping):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _written_for(pattern: str, seed: int) -> str | None:
    r"""The shortest string the regular expression's plain parts spell, or ``None``.

    Reads the pattern with the standard library's own parser (``re._parser``): literals,
    classes, ``\d`` / ``\w`` / ``\s``, repeats (at their minimum), groups and
    alternatives. Lookarounds and back-references are not written (``None``); the caller
    checks the result against the pattern anyway.
    """
    try:
        from re import _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern)
    except Exception:  # another Python, or a pattern Python does not read
        return None
    out: list[str] = []
    try:
        _spell(list(parsed), seed, out)
    except (_Unwritable, RecursionError):
        return None
    return "".join(out)


class _Unwritable(Exception):
    pass


_CATEGORY_CHARS: Final = {
    "CATEGORY_DIGIT": "0", "CATEGORY_NOT_DIGIT": "a", "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": "-", "CATEGORY_SPACE": " ", "CATEGORY_NOT_SPACE": "a",
}  # fmt: skip
_SET_CANDIDATES: Final = "a0A_-. xZ9"


def _spell(items: list[Any], seed: int, out: list[str]) -> None:
    for op, argument in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(argument))
        elif name == "NOT_LITERAL":
            out.append("a" if argument != ord("a") else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_in_set(argument))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _, inner = argument
            for _ in range(low):
                _spell(list(inner), seed, out)
        elif name == "SUBPATTERN":
            _spell(list(argument[-1]), seed, out)
        elif name == "ATOMIC_GROUP":
            _spell(list(argument), seed, out)
        elif name == "BRANCH":
            branches = argument[1]
            _spell(list(branches[seed % len(branches)]), seed, out)
        elif name != "AT":  # anchors write nothing; lookarounds, back-references...
            raise _Unwritable(name)


def _in_set(members: list[Any]) -> str:
    negated = any(str(op) == "NEGATE" for op, _ in members)
    if not negated:
        op, argument = members[0]
        name = str(op)
        if name == "LITERAL":
            return chr(argument)
        if name == "RANGE":
            return chr(argument[0])
        if name == "CATEGORY" and str(argument) in _CATEGORY_CHARS:
            return _CATEGORY_CHARS[str(argument)]
        raise _Unwritable(name)
    for candidate in _SET_CANDIDATES:
        if not any(_in_member(candidate, op, argument) for op, argument in members):
            return candidate
    raise _Unwritable("NEGATE")


def _in_member(char: str, op: Any, argument: Any) -> bool:
    name = str(op)
    if name == "LITERAL":
        return bool(ord(char) == argument)
    if name == "RANGE":
        return bool(argument[0] <= ord(char) <= argument[1])
    if name == "CATEGORY":
        category = str(argument)
        test = {"DIGIT": str.isdigit, "WORD": lambda c: c.isalnum() or c == "_",
                "SPACE": str.isspace}.get(category.split("_")[-1])  # fmt: skip
        if test is None:
            return True  # unknown: treat as taken
        return bool(test(char)) != category.startswith("CATEGORY_NOT_")
    return False


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False
