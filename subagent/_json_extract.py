"""Tolerant JSON extraction from a model's reply.

Models wrap JSON in prose and code fences. :func:`extract_json` finds the value the model
meant: the whole reply if it is JSON, else the last fenced block, else the last balanced
``{...}``/``[...]`` span in the prose. All scans are linear in the reply's length.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["JSONExtraction", "extract_json"]

_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\r?\n(.*?)```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class JSONExtraction:
    """The outcome of :func:`extract_json`.

    Attributes:
        found: Whether any JSON-looking text was found.
        value: The decoded value when ``error`` is ``None``.
        error: The decoder's message for the best candidate when it did not decode.
        line: 1-based line of the syntax error within the candidate.
        column: 1-based column of the syntax error.
        excerpt: The candidate's text around the error.
    """

    found: bool
    value: Any = None
    error: str | None = None
    line: int = 0
    column: int = 0
    excerpt: str = ""

    @property
    def ok(self) -> bool:
        """Whether a value was decoded."""
        return self.found and self.error is None


def extract_json(text: str) -> JSONExtraction:
    """Find and decode the JSON value in ``text``.

    Tries, in order: the whole text; fenced code blocks (last first); balanced
    ``{...}``/``[...]`` spans in the text (last first). Returns the first candidate that
    decodes, else the syntax error of the most plausible candidate.
    """
    stripped = text.strip()
    if not stripped:
        return JSONExtraction(found=False)
    first_error: json.JSONDecodeError | None = None
    first_candidate = ""
    if stripped[0] in '{["' or stripped[0].isdigit() or stripped[0] == "-":
        try:
            return JSONExtraction(found=True, value=json.loads(stripped))
        except json.JSONDecodeError as exc:
            first_error, first_candidate = exc, stripped
    candidates = [m.group(1).strip() for m in _FENCE.finditer(text)]
    candidates.reverse()
    candidates += reversed(_balanced_spans(text))
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return JSONExtraction(found=True, value=json.loads(candidate))
        except json.JSONDecodeError as exc:
            if first_error is None:
                first_error, first_candidate = exc, candidate
    if first_error is None:
        return JSONExtraction(found=False)
    return _syntax_error(first_error, first_candidate)


def _syntax_error(exc: json.JSONDecodeError, candidate: str) -> JSONExtraction:
    start = max(0, exc.pos - 30)
    excerpt = candidate[start : exc.pos + 30]
    return JSONExtraction(
        found=True, error=exc.msg, line=exc.lineno, column=exc.colno, excerpt=excerpt
    )


def _balanced_spans(text: str) -> list[str]:
    """Top-level ``{...}`` and ``[...]`` spans, ignoring brackets inside strings."""
    spans: list[str] = []
    depth = 0
    start = -1
    in_string = False
    escaped = False
    closing = {"}": "{", "]": "["}
    stack: list[str] = []
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            if depth:
                in_string = True
        elif char in "{[":
            if depth == 0:
                start = index
            stack.append(char)
            depth += 1
        elif char in "}]":
            if not depth:
                continue
            if stack[-1] != closing[char]:
                depth, stack = 0, []
                continue
            stack.pop()
            depth -= 1
            if depth == 0:
                spans.append(text[start : index + 1])
    return spans
