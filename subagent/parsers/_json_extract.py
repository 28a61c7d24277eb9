"""Tolerant JSON extraction from a model's reply.

Models wrap JSON in prose and code fences, leave trailing commas and add ``//`` comments.
:func:`iter_json_candidates` lists every JSON-looking span of a reply in order of preference
-- the whole reply when it is JSON, then fenced code blocks (last first), then balanced
``{...}``/``[...]`` spans in the prose (last first), then the whole reply when it only
starts like JSON -- each decoded, or with its syntax error. :func:`extract_json` returns the
first that decodes, else the error of the most plausible candidate.

Repairs: when a candidate does not decode, ``//`` comments outside strings and trailing
commas before ``}``/``]`` are blanked out (replaced by spaces, so error positions still point
into the text the model wrote) and the candidate is decoded again.

Every scan is linear in the reply's length: the fence search, the bracket scan and the
repair are single regex-driven passes, and the candidates are disjoint spans of the reply
(plus the reply itself), so decoding all of them is linear too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from subagent._text import objects_in_a_row

__all__ = ["JSONExtraction", "extract_json", "iter_json_candidates", "object_sequence"]

_FENCE_OPEN = re.compile(r"```[ \t]*(?:json5?|jsonc|JSON)?[ \t]*\r?\n")
_DECODER = json.JSONDecoder()
_SCALAR_START = frozenset('"-0123456789')
_LITERALS = frozenset({"true", "false", "null"})
_OPENER = re.compile(r"[{\[]")
# Inside brackets: a string token (ending at its quote, or unterminated at a newline or the
# end), or a bracket. JSON strings cannot hold raw newlines, so a stray quote in prose
# cannot swallow more than the rest of its line.
_IN_BRACKETS = re.compile(r'"(?:[^"\\\n]|\\.)*(?:"|(?=\n)|\Z)|[{}\[\]]')
_REPAIRABLE = re.compile(
    r'(?P<string>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<comment>//[^\n]*)"
    r"|(?P<comma>,)(?=(?:\s|//[^\n]*)*[}\]])"
    r"|(?P<single>'[^'\"\\\n]*')"
    r"|(?P<literal>(?<![\w.])(?:True|False|None)(?![\w.]))"
)
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_CLOSERS = {"}": "{", "]": "["}
_EXCERPT_RADIUS = 40


@dataclass(frozen=True, slots=True)
class JSONExtraction:
    """The outcome of :func:`extract_json` (or one candidate of :func:`iter_json_candidates`).

    Attributes:
        found: Whether any JSON-looking text was found.
        value: The decoded value when ``error`` is ``None``.
        error: The decoder's message for the candidate when it did not decode.
        line: 1-based line of the syntax error within the candidate.
        column: 1-based column of the syntax error.
        excerpt: The candidate's line around the error, with a ``^`` under the error.
        text: The candidate's JSON text (after repairs, when ``repaired``).
        repaired: Whether comments or trailing commas had to be removed to decode it.
    """

    found: bool
    value: Any = None
    error: str | None = None
    line: int = 0
    column: int = 0
    excerpt: str = ""
    text: str = ""
    repaired: bool = False

    @property
    def ok(self) -> bool:
        """Whether a value was decoded."""
        return self.found and self.error is None


def extract_json(text: str) -> JSONExtraction:
    """Find and decode the JSON value in ``text``.

    Returns the first candidate of :func:`iter_json_candidates` that decodes; when none
    does, the syntax error of the first (most plausible) candidate; when there is no
    candidate at all, ``found=False``.
    """
    first: JSONExtraction | None = None
    for candidate in iter_json_candidates(text):
        if candidate.ok:
            return candidate
        if first is None:
            first = candidate
    return first if first is not None else JSONExtraction(found=False)


def iter_json_candidates(text: str) -> Iterator[JSONExtraction]:
    """Every JSON-looking span of ``text``, best first, each decoded or with its error.

    Order: the whole reply if it decodes (a JSON scalar counts only when the whole reply
    is one); fenced code blocks (untagged or tagged ``json``/``json5``/``jsonc``), last
    first; maximal balanced ``{...}``/``[...]`` spans, last first; finally the whole reply
    when it starts with ``{`` or ``[`` but did not decode (its error is the least
    informative: often "Extra data" after a value followed by prose). Candidates with the
    same text are yielded once. Lazy: stop iterating as soon as a candidate suits you.
    """
    stripped = text.strip()
    if not stripped:
        return
    seen: set[str] = set()
    whole: JSONExtraction | None = None
    if stripped[0] in "{[":
        whole = _decode(stripped)
        seen.add(stripped)
        if whole.ok:
            yield whole
            return
    elif stripped[0] in _SCALAR_START or stripped in _LITERALS:
        scalar = _decode(stripped)
        if scalar.ok:  # a failed scalar is prose that starts with a digit or a quote
            yield scalar
            return
    fenced = _fenced_blocks(text)
    for candidate in reversed(fenced):
        if candidate and candidate not in seen:
            seen.add(candidate)
            yield _decode(candidate)
    for start, end in reversed(_balanced_spans(text)):
        candidate = text[start:end]
        if candidate not in seen:
            seen.add(candidate)
            yield _decode(candidate)
    if whole is not None:
        yield whole


def object_sequence(text: str) -> JSONExtraction | None:
    """Several JSON objects written one after another, read as the list of them.

    How a small model often writes a list it was asked for (each item on its own line, the
    brackets left out): the whole reply, or the one fenced block it holds, must be two or
    more objects separated only by whitespace or commas. ``None`` otherwise. Linear: each
    object is decoded once, where the previous one ended.
    """
    stripped = text.strip()
    if stripped.startswith("```"):
        blocks = _fenced_blocks(stripped)
        if len(blocks) != 1 or not stripped.endswith("```"):
            return None
        stripped = blocks[0]
    items = objects_in_a_row(stripped, commas=True)
    return (
        None if items is None else JSONExtraction(found=True, value=items, text=json.dumps(items))
    )


def _decode(candidate: str) -> JSONExtraction:
    try:
        return JSONExtraction(found=True, value=json.loads(candidate), text=candidate)
    except json.JSONDecodeError as exc:
        error = exc
    except RecursionError:
        return _too_deep(candidate)
    repaired = repair_json(candidate)
    if repaired != candidate:
        try:
            return JSONExtraction(
                found=True, value=json.loads(repaired), text=repaired, repaired=True
            )
        except json.JSONDecodeError as exc:
            error = exc  # positions are the same: repairs keep every character's place
        except RecursionError:
            return _too_deep(candidate)
    return JSONExtraction(
        found=True,
        error=error.msg,
        line=error.lineno,
        column=error.colno,
        excerpt=_excerpt(candidate, error.pos),
        text=candidate,
    )


def _too_deep(candidate: str) -> JSONExtraction:
    return JSONExtraction(
        found=True,
        error="Nesting too deep",
        line=1,
        column=1,
        excerpt=_excerpt(candidate, 0),
        text=candidate,
    )


def repair_json(candidate: str) -> str:
    """Blank out ``//`` comments and trailing commas outside strings; read Python literals.

    Small models often write a Python literal where JSON is asked for: ``'single-quoted'``
    strings (without a double quote or backslash inside) become double-quoted, and
    ``True``/``False``/``None`` outside strings become ``true``/``false``/``null``. Every
    repair keeps the length (a removed character becomes a space), so every remaining
    character keeps its line and column.
    """

    def blank(match: re.Match[str]) -> str:
        kind = match.lastgroup
        if kind == "string":
            return match.group()
        if kind == "single":
            return f'"{match.group()[1:-1]}"'
        if kind == "literal":
            return _PYTHON_LITERALS[match.group()]
        return " " * (match.end() - match.start())

    return _REPAIRABLE.sub(blank, candidate)


def _excerpt(candidate: str, pos: int) -> str:
    """The line holding ``pos``, cut to a window around it, and a caret under ``pos``."""
    line_start = candidate.rfind("\n", 0, pos) + 1
    line_end = candidate.find("\n", pos)
    if line_end < 0:
        line_end = len(candidate)
    low = max(line_start, pos - _EXCERPT_RADIUS)
    high = min(line_end, pos + _EXCERPT_RADIUS)
    prefix = "…" if low > line_start else ""
    suffix = "…" if high < line_end else ""
    snippet = candidate[low:high].replace("\t", " ").replace("\r", " ")
    caret = " " * (len(prefix) + pos - low) + "^"
    return f"{prefix}{snippet}{suffix}\n{caret}"


def _fenced_blocks(text: str) -> list[str]:
    """The stripped contents of fenced code blocks (untagged or JSON-tagged), in order."""
    blocks: list[str] = []
    pos = 0
    while (opening := _FENCE_OPEN.search(text, pos)) is not None:
        closing = text.find("```", opening.end())
        if closing < 0:
            break
        blocks.append(text[opening.end() : closing].strip())
        pos = closing + 3
    return blocks


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    """Maximal balanced ``{...}``/``[...]`` spans, as ``(start, end)`` in text order.

    Brackets inside strings are ignored (strings are only recognised inside brackets, so an
    apostrophe or quote in prose is harmless). A closer without an open bracket of its kind
    is ignored; a closer of the wrong kind closes the nearest open bracket of its kind,
    abandoning the brackets opened since (so malformed JSON still yields a span whose error
    can be reported). An unclosed bracket in prose does not hide spans completed after it.

    Fast path: at an outermost opener the C decoder tries to read a whole value; when it
    succeeds its end is the span's end and the scan jumps there. When it fails, the scan
    walks the same region token by token, so the total work stays linear.
    """
    spans: list[tuple[int, int]] = []
    stack: list[tuple[str, int]] = []
    open_count = {"{": 0, "[": 0}
    pos = 0
    while True:
        match = (_IN_BRACKETS if stack else _OPENER).search(text, pos)
        if match is None:
            return spans
        token = match.group()
        pos = match.end()
        char = token[0]
        if char == '"':
            continue
        if char in "{[":
            if not stack:
                try:
                    end = _DECODER.raw_decode(text, match.start())[1]
                except (json.JSONDecodeError, RecursionError):
                    pass
                else:
                    spans.append((match.start(), end))
                    pos = end
                    continue
            stack.append((char, match.start()))
            open_count[char] += 1
            continue
        opener = _CLOSERS[char]
        if not open_count[opener]:
            continue
        while True:
            kind, start = stack.pop()
            open_count[kind] -= 1
            if kind == opener:
                break
        while spans and spans[-1][0] > start:
            spans.pop()
        spans.append((start, pos))
