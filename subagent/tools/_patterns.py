r"""The regular expressions of a JSON schema, matched in linear time or not at all.

A schema given as data (:meth:`Tool.from_schema`, so every MCP tool) is written by someone
the runtime may not trust (an MCP server), and the strings its patterns are matched against
come from the model. Python's ``re`` backtracks: ``^(a+)+$`` against 30 characters takes
seconds, and even ``[a-z]+[a-z]+-`` against 1,000 characters takes most of one. The match is
C code that keeps the GIL, so a worker thread would not spare the event loop either.

So a pattern is matched by RE2 (``google-re2``, the ``re2`` extra, which the ``mcp`` extra
brings), whose time is linear in the text whatever the pattern. Without RE2, or for a pattern
RE2 does not accept (look-around, backreferences), there is no safe engine: the tool is
refused when it is built (:class:`UnsafePatternError`, made a ``ConfigurationError`` naming
the tool), never matched by a backtracking one.

RE2's syntax is closer to the ECMA 262 dialect JSON Schema names than ``re``'s: ``\d`` and
``\w`` are ASCII, ``$`` is the end of the text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

try:
    import re2 as _re2  # type: ignore[import-untyped]  # no stubs
except ImportError:  # the extra is not installed: patterns are refused, never backtracked
    _re2 = None

__all__ = [
    "LINEAR_ENGINE",
    "UnsafePatternError",
    "compiled_pattern",
    "pattern_search",
    "schema_patterns",
]

LINEAR_ENGINE = _re2 is not None
"""Whether RE2 is installed (``pip install "subagent-runtime[re2]"``)."""

_CACHE_LIMIT = 4096
_compiled: dict[str, Any] = {}

# Keywords whose values are data, not subschemas: a "pattern" key inside them is not one.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})


class UnsafePatternError(ValueError):
    """A pattern cannot be matched in linear time: RE2 is missing or refuses it."""


def compiled_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached).

    Raises:
        UnsafePatternError: RE2 is not installed, or does not accept the pattern.
    """
    found = _compiled.get(pattern)
    if found is not None:
        return found
    if _re2 is None:
        raise UnsafePatternError(
            f"pattern {pattern!r:.120} needs a linear-time regex engine: "
            f'pip install "subagent-runtime[re2]"'
        )
    options = _re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.never_capture = True
    try:
        found = _re2.compile(pattern, options)
    except _re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args else "refused"
        raise UnsafePatternError(
            f"pattern {pattern!r:.120} is not one RE2 matches in linear time ({reason}); "
            f"look-around and backreferences are not supported"
        ) from None
    if len(_compiled) >= _CACHE_LIMIT:
        _compiled.pop(next(iter(_compiled)))
    _compiled[pattern] = found
    return found


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's sense), by RE2.

    Raises:
        UnsafePatternError: The pattern cannot be matched in linear time.
    """
    return compiled_pattern(pattern).search(text) is not None


def schema_patterns(schema: Any) -> Iterator[tuple[str, str]]:
    """Every regular expression of ``schema``, with where it is (``properties/code/pattern``).

    The values of ``pattern`` and the keys of ``patternProperties``.
    """
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{where}/{index}") for index, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            here = f"{where}/{key}" if where else str(key)
            if key == "pattern" and isinstance(value, str):
                yield value, here
            elif key == "patternProperties" and isinstance(value, Mapping):
                for pattern in value:
                    yield str(pattern), f"{here}/{pattern}"
            if key not in _DATA_KEYWORDS and isinstance(value, Mapping | list):
                stack.append((value, here))
