"""The text tool-call reader (subagent.llm._text_calls.tool_calls_in_text).

Fuzzed against the regular expressions it replaced (on short texts, where their backtracking
is cheap), round-tripped, and timed as growth ratios on the patterns that made them quadratic.
"""

from __future__ import annotations

import gc
import json
import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_values

from subagent import ErrorKind, LLMError
from subagent.llm import ToolCall
from subagent.llm._http import decode_arguments, status_error
from subagent.llm._text_calls import tool_calls_in_text
from subagent.llm._wire import parse_completion

TOOLS = {"a", "b"}

# The reader as it was: right, but quadratic on whitespace (kept as the fuzzing reference).
_OLD_TAG_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_OLD_FENCE_RE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
# the objects of PIECES' alphabet: no nesting past one level of braces
_OLD_SEQUENCE_RE = re.compile(r"\{(?:[^{}]|\{[^{}]*\})*\}")


def old_tool_calls_in_text(text: str, tool_names: set[str]) -> list[ToolCall]:
    stripped = text.strip()
    if not stripped:
        return []
    candidates: list[object] = []
    if "<tool_call>" in stripped:
        blocks = _OLD_TAG_RE.findall(stripped)
        if _OLD_TAG_RE.sub("", stripped).strip():
            return []
        for block in blocks:
            try:
                candidates.append(json.loads(block))
            except ValueError:
                return []
    else:
        fenced = _OLD_FENCE_RE.match(stripped)
        body = fenced.group(1).strip() if fenced else stripped
        if not body.startswith(("{", "[")):
            return []
        try:
            decoded = json.loads(body)
        except ValueError:
            # several objects one after another: split where each one ends
            objects = _OLD_SEQUENCE_RE.findall(body)
            try:
                decoded = [json.loads(o) for o in objects]
            except ValueError:
                return []
            if len(decoded) < 2 or _OLD_SEQUENCE_RE.sub("", body).strip():
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


PIECES = [
    "<tool_call>",
    "</tool_call>",
    "```",
    "json",
    "py",
    " ",
    "\n",
    "\t",
    "\u2003",
    '{"name": "a", "arguments": {"x": 1}}',
    '{"name": "b"}',
    '{"name": "c"}',
    "[",
    "]",
    ",",
    "{",
    "}",
    "x",
    "`",
    "<tool",
]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14).map("".join))
def test_the_reader_agrees_with_the_regular_expressions_it_replaced(text: str) -> None:
    assert tool_calls_in_text(text, TOOLS) == old_tool_calls_in_text(text, TOOLS)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_read_without_an_error(text: str) -> None:
    for call in tool_calls_in_text(text, TOOLS):
        assert call.name in TOOLS


calls_drawn = st.lists(
    st.tuples(st.sampled_from(sorted(TOOLS)), st.dictionaries(st.text(max_size=5), json_values())),
    min_size=1,
    max_size=4,
)


def call_json(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": arguments})


@settings(max_examples=200, deadline=None)
@given(
    calls=calls_drawn,
    form=st.sampled_from(["tags", "list", "fenced", "prefixed"]),
    pad=st.text(" \n\t"),
)
def test_calls_written_in_any_form_read_back_as_themselves(
    calls: list[tuple[str, dict[str, Any]]], form: str, pad: str
) -> None:
    if form == "tags":
        text = pad.join(f"<tool_call>{pad}{call_json(*call)}{pad}</tool_call>" for call in calls)
    elif form == "prefixed":
        text = "\n".join(f"functions.{name}:{pad}\n{json.dumps(args)}" for name, args in calls)
    else:
        listed = "[" + ", ".join(call_json(*call) for call in calls) + "]"
        text = f"```json{pad}\n{listed}{pad}\n```" if form == "fenced" else listed
    read = tool_calls_in_text(pad + text + pad, TOOLS)
    assert [(call.name, call.arguments) for call in read] == [
        (name, ToolCall(name=name, arguments=arguments).arguments) for name, arguments in calls
    ]


# Each pattern at n characters; the regular expressions took O(n^2) on every one of them
# (a 24 KB reply of the first held the loop for seconds, 64 KB for about a minute).
WORST = {
    "whitespace inside a tag": lambda n: "<tool_call>{" + " " * n + "}x",
    "newlines inside a tag": lambda n: "<tool_call>[" + "\n" * n + "]x",
    "runaway whitespace after a tag": lambda n: "<tool_call>" + " \n" * (n // 2) + "x</tool",
    "open tags only": lambda n: "<tool_call>" * (n // 11),
    "whitespace after a fence": lambda n: "```" + " " * n + "{",
    "newlines after a fenced language": lambda n: "```json" + "\n" * n + "[",
    "fences only": lambda n: "`" * n,
    "functions prefixes only": lambda n: "functions.a:{}" * (n // 14),
    "whitespace after a known functions prefix": lambda n: "functions.a:" + " " * n + "{",
}


def seconds(text: str) -> float:
    """The best of three times to read ``text``, each averaged over enough calls to last.

    The garbage collector is paused while timing: a text that reads as thousands of calls
    leaves thousands of objects, and a collection's cost grows with every object alive in
    the process (the whole test session's), which is not the reader's complexity. Under CI's
    load that made a linear reader measure 30 times for 10 times the text.
    """
    calls = max(1, 2_000_000 // len(text))
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(calls):
                tool_calls_in_text(text, TOOLS)
            best = min(best, (time.perf_counter() - started) / calls)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("pattern", sorted(WORST))
def test_the_worst_patterns_take_linear_time(pattern: str) -> None:
    make = WORST[pattern]
    # Linear: each step is 10 times the text, about 10 times the time; quadratic is 100.
    small, medium = seconds(make(10_000)), seconds(make(100_000))
    assert medium / small < 30, f"10 KB {small:.6f} s, 100 KB {medium:.6f} s"
    large = seconds(make(1_000_000))
    assert large / medium < 30, f"100 KB {medium:.6f} s, 1 MB {large:.6f} s"


# -- replies of unexpected shapes ------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000

anything = json_values(max_leaves=6)
CLASSIFIED = {None, ErrorKind.INVALID_RESPONSE, ErrorKind.SERVER_ERROR, ErrorKind.CONTENT_FILTER,
              ErrorKind.CONTEXT_LENGTH}  # fmt: skip
message_shapes = st.fixed_dictionaries(
    {},
    optional={
        "role": anything,
        "content": anything,
        "tool_calls": anything
        | st.lists(
            st.fixed_dictionaries(
                {}, optional={"id": anything, "type": anything, "function": anything}
            )
            | st.fixed_dictionaries(
                {
                    "function": st.fixed_dictionaries(
                        {"name": anything}, optional={"arguments": anything}
                    )
                }
            ),
            max_size=3,
        ),
        "function_call": anything,
        "refusal": anything,
        "reasoning_content": anything,
    },
)
reply_shapes = st.fixed_dictionaries(
    {},
    optional={
        "choices": anything
        | st.lists(
            st.fixed_dictionaries(
                {}, optional={"message": message_shapes | anything, "finish_reason": anything}
            ),
            max_size=2,
        ),
        "usage": anything
        | st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens"]), anything),
        "model": anything,
        "error": anything,
    },
)


@settings(max_examples=400, deadline=None)
@given(reply_shapes)
def test_a_reply_of_any_shape_is_read_or_refused_as_a_classified_error(
    body: dict[str, Any],
) -> None:
    text = json.dumps(body)
    try:
        reply = parse_completion(text, "m", 200)
    except LLMError as error:
        kind = error.kind
    else:
        kind = None
        assert isinstance(reply.text, str)
    assert kind in CLASSIFIED


def test_json_nested_past_the_parsers_depth_is_an_invalid_response() -> None:
    with pytest.raises(LLMError) as caught:
        parse_completion(DEEP, "m", 200)
    assert caught.value.kind is ErrorKind.INVALID_RESPONSE
    assert "nested too deeply" in caught.value.message
    # An error body nested that deep keeps the classification of its status.
    assert status_error(503, {}, DEEP).kind is ErrorKind.SERVER_ERROR
    # Tool-call arguments nested that deep are kept as text: invalid arguments, told the model.
    body = completion_with_arguments(DEEP)
    (call,) = parse_completion(body, "m", 200).tool_calls
    assert call.arguments == DEEP


def completion_with_arguments(arguments: str) -> str:
    function = {"name": "a", "arguments": arguments}
    message = {"role": "assistant", "content": None, "tool_calls": [{"function": function}]}
    return json.dumps({"choices": [{"message": message, "finish_reason": "tool_calls"}]})


def test_calls_in_the_tools_chat_formats_syntax_are_read() -> None:
    text = 'functions.get_weather:\n{"city": "Paris"}\nfunctions.get_weather:\n{"city": "Oslo"}'
    assert tool_calls_in_text(text, {"get_weather"}) == [
        ToolCall(name="get_weather", arguments={"city": "Paris"}),
        ToolCall(name="get_weather", arguments={"city": "Oslo"}),
    ]
    assert tool_calls_in_text("functions.get_weather: {} and more", {"get_weather"}) == []
    assert tool_calls_in_text('functions.other: {"a": 1}', {"get_weather"}) == []
