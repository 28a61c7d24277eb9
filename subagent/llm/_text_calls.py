"""Tool calls written as text, read back as calls.

Some servers return a model's tool-call syntax as plain text (llama-cpp-python with a model's
own chat template: Qwen writes ``{"name": "lookup", "arguments": {...}}``).
:func:`tool_calls_in_text` recognises the forms small models write, when they make up the
whole reply, in time linear in the reply. Any adapter may use it; no I/O happens here.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Final

from subagent._text import objects_in_a_row
from subagent.llm._http import decode_arguments, loads
from subagent.llm._protocol import ToolCall

__all__ = ["tool_calls_in_text"]

_OPEN_TAG: Final = "<tool_call>"
_CLOSE_TAG: Final = "</tool_call>"
_FENCE: Final = "```"
_FUNCTIONS_PREFIX: Final = "functions."
_DECODER: Final = json.JSONDecoder()


def tool_calls_in_text(text: str, tool_names: Collection[str]) -> list[ToolCall]:
    """Tool calls written as text by a model whose server did not parse them.

    Recognises, when they make up the whole reply: one JSON object
    ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for ``arguments``),
    a JSON list of them, or several such objects one after another (one per line, as small
    models write several calls), optionally inside a code fence, one or more Hermes/Qwen
    ``<tool_call>{...}</tool_call>`` blocks, and one or more ``functions.NAME:`` lines each
    followed by its arguments as a JSON object (the syntax of llama-cpp-python's
    ``chatml-function-calling`` format, which small models also write as plain text). Every
    name must be one of ``tool_names``; otherwise nothing is recognised and the reply stays
    text.

    Args:
        text: The reply's text.
        tool_names: The names of the tools offered in this turn.

    Returns:
        The calls (ids left empty for the runtime to assign), or ``[]``.
    """
    stripped = text.strip()
    if not stripped:
        return []
    candidates: list[object] = []
    if stripped.startswith(_FUNCTIONS_PREFIX):
        prefixed = _prefixed_calls(stripped, tool_names)
        if prefixed is None:
            return []
        candidates = [{"name": name, "arguments": arguments} for name, arguments in prefixed]
    elif _OPEN_TAG in stripped:
        blocks = _tagged_blocks(stripped)
        if blocks is None:
            return []  # text besides the calls: leave it to the output contract
        for block in blocks:
            try:
                candidates.append(loads(block))
            except (ValueError, RecursionError):
                return []
    else:
        body = _unfenced(stripped)
        if not body.startswith(("{", "[")):
            return []
        try:
            decoded = loads(body)
        except (ValueError, RecursionError):
            decoded = objects_in_a_row(body)
            if decoded is None:
                return []
        candidates = decoded if isinstance(decoded, list) else [decoded]
    calls: list[ToolCall] = []
    for candidate in candidates:
        if not isinstance(candidate, dict) or set(candidate) - {"name", "arguments", "parameters"}:
            return []
        name = candidate.get("name")
        arguments = candidate.get("arguments", candidate.get("parameters", {}))
        if name not in tool_names or not isinstance(arguments, dict | str):
            return []
        calls.append(ToolCall(name=str(name), arguments=decode_arguments(arguments)))
    return calls


def _prefixed_calls(text: str, tool_names: Collection[str]) -> list[tuple[str, object]] | None:
    """The ``functions.NAME:`` calls making up ``text``: each name and its decoded arguments.

    ``None`` when anything else is in the text, or a name is not one of ``tool_names`` (read
    no further). One pass: each step decodes one JSON value where the last one ended.
    """
    calls: list[tuple[str, object]] = []
    position, length = 0, len(text)
    while True:
        position = _after_space(text, position)
        if position == length:
            return calls or None
        if not text.startswith(_FUNCTIONS_PREFIX, position):
            return None
        colon = text.find(":", position)
        if colon < 0:
            return None
        name = text[position + len(_FUNCTIONS_PREFIX) : colon].strip()
        if name not in tool_names:
            return None
        position = _after_space(text, colon + 1)
        try:
            arguments, position = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            return None
        calls.append((name, arguments))


def _after_space(text: str, position: int) -> int:
    """The first position at or after ``position`` that is not whitespace (or the end)."""
    length = len(text)
    while position < length and text[position].isspace():
        position += 1
    return position


def _tagged_blocks(text: str) -> list[str] | None:
    """The bodies of ``<tool_call>...</tool_call>`` blocks making up ``text``, stripped.

    The last block may lack its closing tag (it runs to the end). ``None`` when anything but
    whitespace lies outside the blocks. One pass of ``str.find``: linear in the text, where
    a regular expression with lazy and greedy whitespace backtracked quadratically.
    """
    blocks: list[str] = []
    position = 0
    while (start := text.find(_OPEN_TAG, position)) >= 0:
        if text[position:start].strip():
            return None
        body = start + len(_OPEN_TAG)
        end = text.find(_CLOSE_TAG, body)
        if end < 0:
            blocks.append(text[body:].strip())
            return blocks
        blocks.append(text[body:end].strip())
        position = end + len(_CLOSE_TAG)
    if text[position:].strip():
        return None
    return blocks


def _unfenced(text: str) -> str:
    """``text`` out of its code fence (```` ```json ... ``` ````), stripped; else ``text``.

    Linear: the fence is the text's first and last three backticks, the language tag the
    letters after the first.
    """
    if len(text) < 2 * len(_FENCE) or not (text.startswith(_FENCE) and text.endswith(_FENCE)):
        return text
    inner = text[len(_FENCE) : -len(_FENCE)]
    letters = len(inner) - len(inner.lstrip(_LETTERS))
    return inner[letters:].strip()


_LETTERS: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
