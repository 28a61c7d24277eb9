"""Small text helpers shared by prompts, feedback and records."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "fence",
    "first_non_finite",
    "nested_deeper_than",
    "objects_in_a_row",
    "scrub_surrogates",
    "scrub_surrogates_in",
    "shorten",
]

MAX_ARGUMENT_DEPTH = 100
"""Levels of objects and arrays a tool call's arguments may nest (the arguments object is
level 1). Deeper arguments are never walked by recursive code (scrubbing, validation,
records, spans): they are kept as text and fed back to the model as invalid arguments."""

_BACKTICK_RUNS = re.compile(r"`+")
_DECODER = json.JSONDecoder()
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def fence(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text``, so ``text`` cannot close it.

    Tool output and error text are shown to the model inside such a fence: data, not
    instructions.
    """
    longest = max((len(run) for run in _BACKTICK_RUNS.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def scrub_surrogates(text: str) -> str:
    r"""``text`` with every lone surrogate replaced by U+FFFD (the replacement character).

    A server may send ``"\ud800"`` as a JSON escape; Python decodes it to a lone surrogate,
    which no UTF-8 encoder accepts, so a record holding it could not be dumped as JSON. A
    surrogate pair left as two code points is joined into the character it encodes.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def scrub_surrogates_in(value: Any) -> Any:
    """``value`` with :func:`scrub_surrogates` applied to every string in dicts and lists."""
    if isinstance(value, str):
        return scrub_surrogates(value)
    if isinstance(value, dict):
        return {scrub_surrogates_in(key): scrub_surrogates_in(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(scrub_surrogates_in(item) for item in value)
    return value


def first_non_finite(value: Any, location: str = "", *, allowed: bool = False) -> str | None:
    """The location (``items.0.price``, ``(root)``) of the first NaN or infinity in ``value``.

    Looks through dicts, lists, tuples, sets, pydantic models and dataclasses. JSON has no
    such numbers: pydantic dumps them as ``null``, so they would not survive a round trip.
    A pydantic model whose config sets ``ser_json_inf_nan`` to ``"constants"`` or
    ``"strings"`` stores its own floats faithfully; those are not reported.

    Returns:
        The dotted location, or ``None`` when every number is finite.
    """
    if isinstance(value, float):
        return None if allowed or math.isfinite(value) else (location or "(root)")
    if isinstance(value, int | str | bytes | bool) or value is None:
        return None
    children: Any
    fields = getattr(type(value), "__pydantic_fields__", None)
    if fields is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [field.name for field in dataclasses.fields(value)]
    if fields is not None and not isinstance(value, type):  # a pydantic model or a dataclass
        config = getattr(value, "model_config", getattr(value, "__pydantic_config__", None))
        if config is not None:  # a plain dataclass is serialised with its parent's config
            allowed = config.get("ser_json_inf_nan", "null") in ("constants", "strings")
        children = [(name, getattr(value, name, None)) for name in fields]
        children += list((getattr(value, "__pydantic_extra__", None) or {}).items())
    elif isinstance(value, dict):
        children = value.items()
    elif isinstance(value, list | tuple | set | frozenset):
        children = enumerate(value)
    else:
        return None
    for key, child in children:
        found = first_non_finite(child, f"{location}.{key}" if location else str(key),
                                 allowed=allowed)  # fmt: skip
        if found is not None:
            return found
    return None


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether dicts, lists and tuples in ``value`` nest more than ``limit`` levels.

    Iterative (no recursion, whatever the depth) and it stops at the first level past
    ``limit``; a container at the top is level 1.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return False


def objects_in_a_row(text: str, *, commas: bool = False) -> list[Any] | None:
    """Two or more JSON objects making up ``text`` one after another, decoded; else ``None``.

    Only whitespace (and commas, with ``commas=True``) may stand before, between and after
    them. One pass: each step decodes one object where the last one ended.
    """
    values: list[Any] = []
    position, length = 0, len(text)
    while True:
        while position < length and (
            text[position].isspace() or (commas and text[position] == ",")
        ):
            position += 1
        if position == length:
            return values if len(values) > 1 else None
        if text[position] != "{":
            return None
        try:
            value, position = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            return None
        values.append(value)
