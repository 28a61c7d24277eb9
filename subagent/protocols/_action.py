"""Reading a ReAct reply: one action (a tool and its arguments), or a final answer.

The ReAct protocol asks the model to think, then end its reply with exactly one of::

    Thought: <reasoning>
    Action: {"tool": "<tool name>", "input": {<arguments>}}

    Thought: <reasoning>
    Final Answer: <the answer>

:func:`read_react_reply` reads such a reply into a :class:`ReactReply` and never raises;
:func:`format_action` writes the canonical action the prompt shows. Split ``<think>``
blocks off first (``subagent.llm.split_reasoning``): this module reads the answer text.

What is tolerated, and how:

- Markers in any case, with markdown around them (``**Action:**``, ``Action :``,
  ``### Final Answer`` on a line of its own). They count at the start of a line; only when
  a reply has no ``Action``/``Final Answer`` there are they looked for inside lines
  (``Thought: x. Action: {...}``, written on one line).
- The first ``Action`` or ``Final Answer`` decides; everything after the action's JSON is
  ignored (a hallucinated ``Observation:``, a second action, a final answer). Further
  actions are counted in :attr:`ReactReply.extra_actions`, never taken: one tool per step.
  The text after ``Final Answer:`` is all answer, whatever it holds.
- The action's JSON in a code fence or inline code; with raw newlines or tabs inside
  strings (code passed as an argument); with trailing commas and ``//``
  comments (the parsers room's repair); with single quotes and Python's ``True``/``False``/
  ``None`` (converted only when the result decodes, so an apostrophe inside a double-quoted
  string is never touched); cut off at the end of the reply (open strings and brackets
  closed when that is the only way to finish it: not after a key with no value, nor inside
  a key or a partial number).
- Key names: ``tool``, ``name``, ``action`` or ``tool_name`` for the tool; ``input``,
  ``inputs``, ``arguments``, ``args``, ``parameters``, ``action_input`` or ``tool_input`` for
  the arguments, which may also be a JSON string holding the object; with none of them, the
  object's other keys are the arguments (``{"tool": "search", "q": "x"}``). A JSON list of
  actions gives its first, the rest counted as extra actions.
- LangChain's form: ``Action: search`` then ``Action Input: {"q": "x"}``; and a tool name
  before the object, ``Action: search {"q": "x"}``.
- A reply with no markers that holds only the explicit fail ``{"fail": "<reason>"}`` is an
  answer: the caller detects fails on answers.

Bounds: only the last :data:`MAX_REACT_REPLY_CHARS` characters of a longer reply are read
(:attr:`ReactReply.clipped` says so); a ReAct reply ends with its action or answer. Every
scan is linear in the text's length: each regular expression is built so a failed attempt
backtracks over at most the run it matched (no nested or adjacent overlapping repeats, and
the string patterns cannot fail once started), JSON is decoded by the C decoder, and every
Python loop visits each marker or token once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from subagent._text import shorten
from subagent.parsers._contract import detect_explicit_fail
from subagent.parsers._json_extract import JSONExtraction, iter_json_candidates

__all__ = ["MAX_REACT_REPLY_CHARS", "ReactReply", "format_action", "read_react_reply"]

#: How many characters at the end of a reply :func:`read_react_reply` reads (256 KiB).
MAX_REACT_REPLY_CHARS = 256 * 1024

_MAX_PROBLEM_QUOTE = 80
_EXPECTED_ACTION = 'Action: {"tool": "<tool name>", "input": {<arguments>}}'
_TOOL_KEYS = ("tool", "name", "action", "tool_name")
_INPUT_KEYS = ("input", "inputs", "arguments", "args", "parameters", "action_input", "tool_input")

_KEYWORD = r"(?P<kw>action[ \t_]*input|action|final[ \t_]*answer|thought|observation)"
# A marker at the start of a line: decoration, the keyword, decoration, an optional colon.
# Only the keyword can fail, right after a single-class run; everything after it is optional.
_LINE_MARKER = re.compile(
    r"^[ \t>#*_]*" + _KEYWORD + r"[ \t*_#]*(?P<colon>:?)[ \t]*\**[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
# A marker inside a line needs its colon. It starts at the keyword (decoration before it is
# taken off in Python: a leading repeat here would make runs of "*" quadratic).
_INLINE_MARKER = re.compile(
    r"(?<![A-Za-z0-9])(?P<kw>action[ \t_]*input|action|final[ \t_]*answer)[ \t*_]*:[ \t]*\**[ \t]*",
    re.IGNORECASE,
)
# Between a marker and the action's JSON: whitespace, a fence opener or a backtick. Every
# part is optional, so the match never fails and never backtracks.
_JSON_LEAD = re.compile(r"\s*(?P<fence>```[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n?|`)?\s*")
# A tool name written bare after "Action:", as in LangChain's form (decoration taken off).
_BARE_NAME = re.compile(r"[A-Za-z_][\w.\-]{0,127}")
_NAME_DECORATION = "`'\"* \t"
# Tokens for finding the end of a broken object: strings in either quote (ending at their
# quote, a newline or the end: they cannot fail once started) and brackets.
_SCAN_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.?)*"?|\'(?:[^\'\\\n]|\\.?)*\'?|[{}\[\]]')
# For the quote repair: double-quoted strings (kept), single-quoted ones (converted), and
# Python's literals outside strings.
_PYTHONISH = re.compile(
    r'"(?:[^"\\\n]|\\.?)*"?'
    r"|'(?P<single>(?:[^'\\\n]|\\.?)*)(?P<closed>'?)"
    r"|(?<![\w.])(?P<literal>True|False|None)(?![\w.])"
)
_SINGLE_ESCAPES = re.compile(r"\\.?|\"")
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
# For closing a cut-off object: every character belongs to exactly one token.
_JSON_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\\n]|\\.?)*(?P<closed>"?))'
    r"|(?P<comment>//[^\n]*)"
    r"|(?P<space>\s+)"
    r"|(?P<punct>[{}\[\]:,])"
    r'|(?P<word>[^\s"{}\[\]:,/]+)'
    r"|(?P<slash>/)"
)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_START = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_MAX_CLOSED_DEPTH = 200
_HEX_DIGITS = "0123456789abcdefABCDEF"
_DECODER = json.JSONDecoder()
_LENIENT_DECODER = json.JSONDecoder(strict=False)

_Kind = Literal["action", "input", "answer", "thought", "observation"]


@dataclass(frozen=True, slots=True)
class ReactReply:
    """What a ReAct reply asks for: a tool call, a final answer, or nothing readable.

    Attributes:
        kind: ``"action"`` (call :attr:`tool` with :attr:`arguments`), ``"answer"`` (the
            reply returns :attr:`answer`) or ``"invalid"`` (:attr:`problem` says why).
        tool: The tool's name, for an action.
        arguments: The tool's arguments, for an action.
        answer: The text after ``Final Answer:``, stripped; possibly the explicit fail
            ``{"fail": "<reason>"}``, which is the caller's to detect.
        thought: The text before the action or the answer, without its ``Thought:`` marker.
        problem: For ``invalid``: what is wrong, quoting the offending part and naming what
            was expected, in words meant for the model (under 300 characters).
        extra_actions: How many further actions followed the one taken.
        repaired: The action's JSON decoded only after repairs (comments, trailing commas,
            quotes, or closing a cut-off block).
        truncated: The reply ended inside the action's JSON and it was closed: its last
            argument may be cut short.
        clipped: The reply was longer than ``max_chars``; only its end was read.
    """

    kind: Literal["action", "answer", "invalid"]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    answer: str = ""
    thought: str = ""
    problem: str = ""
    extra_actions: int = 0
    repaired: bool = False
    truncated: bool = False
    clipped: bool = False


def format_action(tool: str, arguments: Mapping[str, Any]) -> str:
    """The canonical action line, as the ReAct prompt shows it.

    Args:
        tool: The tool's name.
        arguments: The tool's arguments; JSON-serialisable.

    Returns:
        ``Action: {"tool": "<tool>", "input": {...}}`` on one line.

    Raises:
        TypeError: If an argument cannot be serialised to JSON.
    """
    action = {"tool": tool, "input": dict(arguments)}
    return "Action: " + json.dumps(action, ensure_ascii=False)


def read_react_reply(text: str, *, max_chars: int = MAX_REACT_REPLY_CHARS) -> ReactReply:
    """Read a ReAct reply into the action it takes, or its final answer.

    Never raises for any text: what cannot be read is an ``invalid`` reply whose
    :attr:`~ReactReply.problem` is feedback for the model. See the module docstring for
    what is tolerated.

    Args:
        text: The reply's text, with reasoning blocks already split off.
        max_chars: How many characters at the end of the reply are read.

    Returns:
        The reply's :class:`ReactReply`.

    Raises:
        ValueError: If ``max_chars`` is less than 1.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    clipped = len(text) > max_chars
    if clipped:
        text = text[-max_chars:]
    reply = _read(text)
    return replace(reply, clipped=True) if clipped else reply


# --- markers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Marker:
    kind: _Kind
    start: int  # where the marker's text begins (the previous segment ends here)
    end: int  # where the text it introduces begins


def _kind(keyword: str) -> _Kind:
    word = keyword.lower()
    if word.startswith("final"):
        return "answer"
    if word.startswith("action"):
        return "input" if word.endswith("input") else "action"
    return "thought" if word == "thought" else "observation"


def _line_markers(text: str) -> list[_Marker]:
    markers: list[_Marker] = []
    for match in _LINE_MARKER.finditer(text):
        end = match.end()
        # Without a colon the keyword must end its line (a heading: "### Final Answer").
        if not match.group("colon") and end < len(text) and text[end] not in "\r\n":
            continue
        markers.append(_Marker(_kind(match.group("kw")), match.start(), end))
    return markers


def _inline_markers(text: str, line_markers: list[_Marker]) -> list[_Marker]:
    """Markers for a reply written on one line: line markers plus the decisive inline ones."""
    found = [m for m in line_markers if m.kind in ("thought", "observation")]
    previous_end = 0
    for match in _INLINE_MARKER.finditer(text):
        start = match.start()
        while start > previous_end and text[start - 1] in "*_":
            start -= 1  # "**Action:**": the decoration belongs to the marker
        previous_end = match.end()
        found.append(_Marker(_kind(match.group("kw")), start, previous_end))
    found.sort(key=lambda marker: marker.start)
    return found


# --- the reply ----------------------------------------------------------------------------


def _read(text: str) -> ReactReply:
    markers = _line_markers(text)
    if not any(marker.kind in ("action", "answer") for marker in markers):
        markers = _inline_markers(text, markers)
    index = next((i for i, m in enumerate(markers) if m.kind in ("action", "answer")), None)
    if index is None:
        return _without_decision(text, markers)
    marker = markers[index]
    thought = _thought(text, markers, marker.start)
    if marker.kind == "answer":
        answer = text[marker.end :].strip()
        if not answer:
            problem = 'your "Final Answer:" is empty; write the answer right after "Final Answer:"'
            return ReactReply(kind="invalid", problem=problem, thought=thought)
        return ReactReply(kind="answer", answer=answer, thought=thought)
    reply, consumed = _read_action(text, markers, index)
    if reply.kind != "action":
        return replace(reply, thought=thought)
    later = sum(1 for m in markers[index + 1 :] if m.kind == "action" and m.start >= consumed)
    return replace(reply, thought=thought, extra_actions=reply.extra_actions + later)


def _without_decision(text: str, markers: list[_Marker]) -> ReactReply:
    if any(marker.kind == "input" for marker in markers):
        return _invalid(
            'your reply has an "Action Input:" but no "Action:" naming the tool; '
            f"expected {_EXPECTED_ACTION}"
        )
    if detect_explicit_fail(text) is not None:
        return ReactReply(kind="answer", answer=text.strip())
    return _invalid(
        'your reply has no "Action:" and no "Final Answer:"; end it with '
        f"{_EXPECTED_ACTION} or with Final Answer: <your answer>"
    )


def _thought(text: str, markers: list[_Marker], end: int) -> str:
    first = next((m for m in markers if m.kind == "thought" and m.start < end), None)
    if first is None:
        return text[:end].strip()
    return (text[: first.start] + text[first.end : end]).strip()


# --- the action ---------------------------------------------------------------------------


def _read_action(text: str, markers: list[_Marker], index: int) -> tuple[ReactReply, int]:
    """The action introduced by ``markers[index]``, and where the text it used ends."""
    following = markers[index + 1] if index + 1 < len(markers) else None
    limit = following.start if following is not None else len(text)
    start, fenced = _skip_lead(text, markers[index].end, limit)
    if start < limit and text[start] in "{[":
        return _action_from_json(text, start, limit, fenced=fenced)
    line_end = text.find("\n", start, limit)
    line = text[start : limit if line_end < 0 else line_end].strip()
    name = _bare_name(line)
    if following is not None and following.kind == "input":
        return _langchain_action(text, markers, index + 1, name, line)
    brace = text.find("{", start, limit)
    if brace >= 0:  # "Action: search {...}", or prose before the object
        before = text[start:brace]
        fence = before.rfind("```")
        if fence >= 0:
            before = before[:fence]
        name = _bare_name(before.strip().removesuffix("("))
        return _action_from_json(text, brace, limit, fenced=fence >= 0, name=name)
    if name is not None:
        problem = f'"Action: {name}" gives no input; expected {_action_for(name)}'
    else:
        got = f"got {_quote(line)}" if line else 'nothing follows "Action:"'
        problem = f"the Action has no JSON object: {got}; expected {_EXPECTED_ACTION}"
    return _invalid(problem), limit


def _langchain_action(
    text: str, markers: list[_Marker], index: int, name: str | None, line: str
) -> tuple[ReactReply, int]:
    """``Action: <name>`` followed by ``Action Input: {...}`` (``markers[index]``)."""
    limit = markers[index + 1].start if index + 1 < len(markers) else len(text)
    if name is None:
        got = _quote(line) if line else "nothing"
        problem = (
            f'the Action must name one tool before "Action Input:", got {got}; '
            f"expected {_EXPECTED_ACTION}"
        )
        return _invalid(problem), limit
    start, fenced = _skip_lead(text, markers[index].end, limit)
    if start >= limit or text[start] != "{":
        got = _quote(text[start:limit]) if start < limit else "nothing"
        problem = f"the Action Input is not a JSON object: got {got}; expected {_action_for(name)}"
        return _invalid(problem), limit
    decoded = _decode_at(text, start, limit, fenced=fenced, what="the Action Input")
    if isinstance(decoded, str):
        return _invalid(decoded), limit
    value, consumed, repaired, truncated = decoded
    if not isinstance(value, dict):
        problem = f"the Action Input must be a JSON object of named arguments, got {_quote(value)}"
        return _invalid(problem), consumed
    reply = ReactReply(
        kind="action", tool=name, arguments=value, repaired=repaired, truncated=truncated
    )
    return reply, consumed


def _skip_lead(text: str, start: int, limit: int) -> tuple[int, bool]:
    """Where the action's JSON may start after ``start``, and whether a fence opened."""
    lead = _JSON_LEAD.match(text, start, max(start, limit))
    if lead is None:  # cannot happen: every part of the pattern is optional
        return start, False
    return lead.end(), (lead.group("fence") or "").startswith("```")


def _bare_name(line: str) -> str | None:
    if len(line) > 160:
        return None
    name = line.strip(_NAME_DECORATION).removesuffix("()").rstrip(".:").strip(_NAME_DECORATION)
    return name if _BARE_NAME.fullmatch(name) else None


def _action_for(name: str) -> str:
    return f'Action: {{"tool": "{name}", "input": {{<arguments>}}}}'


def _action_from_json(
    text: str, start: int, limit: int, *, fenced: bool, name: str | None = None
) -> tuple[ReactReply, int]:
    decoded = _decode_at(text, start, limit, fenced=fenced, what="the Action")
    if isinstance(decoded, str):
        return _invalid(decoded), limit
    value, consumed, repaired, truncated = decoded
    extra = 0
    if isinstance(value, list) and value and isinstance(value[0], dict):
        extra = len(value) - 1  # a list of actions: the first is taken
        value = value[0]
    if not isinstance(value, dict):
        problem = f"the Action must be one JSON object, got {_quote(value)}; "
        return _invalid(problem + f"expected {_EXPECTED_ACTION}"), consumed
    if truncated and name is None and not any(key in value for key in _INPUT_KEYS):
        # Cut before its arguments began: the tool's name itself may be cut short.
        problem = (
            "the Action is cut off: your reply ends inside its JSON before the tool's input, "
            f"at {_quote(text[start:consumed], tail=True)}; write a shorter Action that is complete"
        )
        return _invalid(problem), consumed
    reply = _action_from_object(value, name)
    if reply.kind != "action":
        return reply, consumed
    return replace(reply, extra_actions=extra, repaired=repaired, truncated=truncated), consumed


def _action_from_object(value: dict[str, Any], name: str | None) -> ReactReply:
    tool_key = next((key for key in _TOOL_KEYS if key in value), None)
    if tool_key is None:
        if name is not None:  # "Action: search {"q": "x"}": the object is the arguments
            return ReactReply(kind="action", tool=name, arguments=value)
        problem = (
            'the Action names no tool: expected a "tool" key with the tool\'s name, '
            f"got {_quote(value)}"
        )
        return _invalid(problem)
    tool = value[tool_key]
    if not isinstance(tool, str) or not tool.strip():
        return _invalid(f"the Action's \"{tool_key}\" must be a tool's name, got {_quote(tool)}")
    input_key = next((key for key in _INPUT_KEYS if key in value), None)
    if input_key is None:  # {"tool": "search", "q": "x"}: the other keys are the arguments
        arguments = {key: item for key, item in value.items() if key != tool_key}
        return ReactReply(kind="action", tool=tool.strip(), arguments=arguments)
    arguments_or_problem = _arguments(value[input_key], input_key)
    if isinstance(arguments_or_problem, str):
        return _invalid(arguments_or_problem)
    return ReactReply(kind="action", tool=tool.strip(), arguments=arguments_or_problem)


def _arguments(raw: Any, key: str) -> dict[str, Any] | str:
    """The arguments given under ``key``, or a problem."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        stripped = raw.strip()
        if not stripped:
            return {}
        if stripped[0] == "{":  # the arguments as a JSON string, as OpenAI sends them
            decoded = _decode_whole(stripped)
            if decoded is not None and isinstance(decoded.value, dict):
                return decoded.value
    return (
        f'the Action\'s "{key}" must be a JSON object of named arguments, got {_quote(raw)}; '
        f'expected "{key}": {{"<parameter>": <value>}}'
    )


# --- decoding the action's JSON -----------------------------------------------------------

_Decoded = tuple[Any, int, bool, bool]  # value, end in the text, repaired, truncated


def _decode_at(text: str, start: int, limit: int, *, fenced: bool, what: str) -> _Decoded | str:
    """Decode the JSON value at ``text[start]`` tolerantly; else a problem about ``what``.

    Valid JSON may run past ``limit`` (the next marker). A broken value is read to the end
    of its brackets, else to ``limit`` or its closing fence; it is cut off when that is the
    end of the reply.
    """
    try:
        value, end = _DECODER.raw_decode(text, start)
    except (json.JSONDecodeError, RecursionError):
        pass
    else:
        return value, end, False, False
    try:  # raw newlines and tabs inside strings, as in code written as an argument
        value, end = _LENIENT_DECODER.raw_decode(text, start)
    except (json.JSONDecodeError, RecursionError):
        pass
    else:
        return value, end, True, False
    if fenced:
        closing = text.find("```", start, limit)
        if closing >= 0:
            limit = closing
    balanced = _balanced_end(text, start, limit)
    candidate = text[start : balanced if balanced is not None else limit].rstrip()
    end = start + len(candidate)
    first = _decode_whole(candidate)
    if first is not None:
        return first.value, end, first.repaired, False
    requoted = _requote(candidate)
    if requoted != candidate and (second := _decode_whole(requoted)) is not None:
        return second.value, end, True, False
    cut_off = False
    if balanced is None and limit == len(text):  # the reply ends inside the value
        for base in dict.fromkeys((requoted, candidate)):
            closed, beginning = _close(base)
            if closed is not None and (third := _decode_whole(closed)) is not None:
                return third.value, end, True, True
            cut_off = cut_off or beginning
    if cut_off:
        return (
            f"{what} is cut off: your reply ends inside its JSON, at "
            f"{_quote(candidate[-_MAX_PROBLEM_QUOTE:], tail=True)}; "
            f"write a shorter {what.removeprefix('the ')} that is complete"
        )
    error = _whole_error(candidate)
    where = f"line {error.line} column {error.column}: {error.error}"
    near = error.excerpt.split("\n", 1)[0]
    return f"{what} is not valid JSON: {where} near {_quote(near)}"


def _decode_whole(candidate: str) -> JSONExtraction | None:
    """``candidate`` (stripped, starting with a bracket) decoded as a whole, or ``None``.

    The parsers room's repairs apply. :func:`iter_json_candidates` yields the whole text
    first when it decodes (repairs keep its length) and the inner candidates after, so the
    first candidate tells, without scanning the rest.
    """
    first = next(iter_json_candidates(candidate), None)
    if first is not None and first.ok and len(first.text) == len(candidate):
        return first
    return None


def _whole_error(candidate: str) -> JSONExtraction:
    """The syntax error of ``candidate`` as a whole: the candidate of its length."""
    for extraction in iter_json_candidates(candidate):
        if len(extraction.text) == len(candidate):
            return extraction
    return JSONExtraction(found=False, error="no JSON value", line=1, column=1)


def _balanced_end(text: str, start: int, limit: int) -> int | None:
    """The end of the brackets opened at ``text[start]``, or ``None`` before ``limit``."""
    depth = 0
    pos = start
    while (match := _SCAN_TOKEN.search(text, pos, limit)) is not None:
        pos = match.end()
        char = match.group()[0]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return pos
    return None


def _requote(candidate: str) -> str:
    """Single-quoted strings as double-quoted ones, Python's literals as JSON's."""
    if "'" not in candidate and not any(word in candidate for word in _PYTHON_LITERALS):
        return candidate

    def convert(match: re.Match[str]) -> str:
        literal = match.group("literal")
        if literal is not None:
            return _PYTHON_LITERALS[literal]
        single = match.group("single")
        if single is None:
            return match.group()  # a double-quoted string: kept as it is
        body = _SINGLE_ESCAPES.sub(_convert_escape, single)
        return '"' + body + ('"' if match.group("closed") else "")

    return _PYTHONISH.sub(convert, candidate)


def _convert_escape(match: re.Match[str]) -> str:
    token = match.group()
    if token == '"':
        return '\\"'
    return "'" if token == "\\'" else token


def _close(candidate: str) -> tuple[str | None, bool]:
    """``candidate`` completed, if it is a cut-off JSON value with one obvious ending.

    Reads ``candidate`` as the beginning of a JSON object or array (comments and trailing
    commas allowed: the parsers room repairs them) and appends what finishes it: the
    closing quote of a string value, the rest of a literal, the closing brackets.

    Returns:
        ``(completed, beginning)``: ``completed`` is ``None`` when the text is not such a
        beginning (``beginning`` is false), or when any ending would be a guess: inside a
        key, after a key or its colon, inside a number (``beginning`` is true).
    """
    if not candidate or candidate[0] not in "{[":
        return None, False
    stack: list[str] = []  # the open brackets
    expect = "value"  # what may come next: "value", "key" (or "}"), "colon", or "next"
    suffix = ""
    last = ""
    for token in _JSON_TOKEN.finditer(candidate):
        kind = token.lastgroup
        part = token.group()
        if kind == "space":
            continue
        last = kind or ""
        at_end = token.end() == len(candidate)
        if kind == "comment":
            continue
        if kind == "slash" or (not stack and token.start()):
            return None, False
        if kind == "string":
            if expect not in ("value", "key"):
                return None, False
            if not token.group("closed"):
                if not at_end:
                    return None, False
                if expect != "value":
                    return None, expect == "key"  # cut inside a key
                candidate = candidate[: token.start()] + _without_partial_escape(part)
                suffix = '"'
            expect = "colon" if expect == "key" else "next"
        elif kind == "word":
            if expect != "value":
                return None, False
            if part not in _LITERALS and _NUMBER.fullmatch(part) is None:
                completion = next((word for word in _LITERALS if word.startswith(part)), None)
                if not at_end or completion is None or part == "-":
                    return None, at_end and _NUMBER_START.fullmatch(part) is not None
                suffix = completion[len(part) :]
            expect = "next"
        elif part in "{[":
            if expect != "value" or len(stack) >= _MAX_CLOSED_DEPTH:
                return None, False  # (deeper than the decoder goes: nothing to gain)
            stack.append(part)
            expect = "key" if part == "{" else "value"
        elif part in "}]":
            allowed = ("key", "next") if part == "}" else ("value", "next")
            if stack[-1] != ("{" if part == "}" else "[") or expect not in allowed:
                return None, False
            stack.pop()
            if not stack:
                return None, False  # the value ended before the text did: not a cut-off
            expect = "next"
        elif part == ":":
            if expect != "colon":
                return None, False
            expect = "value"
        elif expect == "next":  # ","
            expect = "key" if stack[-1] == "{" else "value"
        else:
            return None, False
    if expect == "colon" or (expect == "value" and stack[-1] == "{"):
        return None, True  # after a key, or after its colon: the value is missing
    closers = "".join("}" if opener == "{" else "]" for opener in reversed(stack))
    return candidate + suffix + ("\n" if last == "comment" else "") + closers, True


def _without_partial_escape(string: str) -> str:
    """A cut-off string token without an escape sequence cut in the middle."""
    hex_tail = len(string) - len(string.rstrip(_HEX_DIGITS))
    if hex_tail <= 3 and string[: len(string) - hex_tail].endswith("u"):
        before_u = len(string) - hex_tail - 1
        backslashes = before_u - len(string[:before_u].rstrip("\\"))
        if backslashes % 2:
            return string[: before_u - 1]
    backslashes = len(string) - len(string.rstrip("\\"))
    return string[:-1] if backslashes % 2 else string


# --- small helpers ------------------------------------------------------------------------


def _quote(value: Any, *, tail: bool = False) -> str:
    """``value`` quoted for a problem: on one line, shortened (keeping its end if ``tail``)."""
    if isinstance(value, str):
        text = value[-_MAX_PROBLEM_QUOTE * 4 :] if tail else value[: _MAX_PROBLEM_QUOTE * 4]
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)[: _MAX_PROBLEM_QUOTE * 4]
        except (TypeError, ValueError, RecursionError):
            text = type(value).__name__
    text = " ".join(text.split())
    if tail and len(text) > _MAX_PROBLEM_QUOTE:
        return "'…" + text[-(_MAX_PROBLEM_QUOTE - 1) :] + "'"
    return "'" + shorten(text, _MAX_PROBLEM_QUOTE) + "'"


def _invalid(problem: str, thought: str = "") -> ReactReply:
    return ReactReply(kind="invalid", problem=problem, thought=thought)
