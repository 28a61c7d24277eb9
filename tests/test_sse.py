"""Server-sent events read off a response (subagent.llm._sse.SSEEvents)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import json_values

from subagent import ErrorKind, LLMError
from subagent.llm._sse import SSEEvents
from subagent.llm._wire import StreamAccumulator

pytestmark = pytest.mark.anyio


class Pieces(httpx.AsyncByteStream):
    """A body arriving in the given pieces, with no pause between them."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = list(pieces)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def events_of(pieces: Sequence[bytes]) -> SSEEvents:
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Pieces(pieces)
    )
    return SSEEvents(response)


async def read_all(pieces: Sequence[bytes]) -> list[str]:
    events = events_of(pieces)
    try:
        return [data async for data in events]
    finally:
        await events.aclose()


def cut(data: bytes, points: list[int]) -> list[bytes]:
    at = sorted({point % (len(data) + 1) for point in points})
    return [data[start:end] for start, end in zip([0, *at], [*at, len(data)], strict=True)]


# One event: its data lines (joined by "\n" when read), comments and a line-ending style.
event_parts = st.tuples(
    st.lists(
        st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=20),
        min_size=1,
        max_size=3,
    ),
    st.lists(st.text(alphabet="abc :", max_size=5), max_size=2),
    st.sampled_from([b"\n", b"\r\n"]),
)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(event_parts, max_size=6), points=st.lists(st.integers(0, 10**6)))
def test_any_chunking_of_a_stream_gives_the_same_events(
    events: list[tuple[list[str], list[str], bytes]], points: list[int]
) -> None:
    body = b""
    expected = []
    for lines, comments, end in events:
        for comment in comments:
            body += b":" + comment.encode() + end
        for line in lines:
            body += b"data: " + line.encode() + end
        body += end
        expected.append("\n".join(lines))
    assert anyio.run(read_all, cut(body, points)) == expected


def test_a_last_event_without_its_blank_line_is_still_read() -> None:
    assert anyio.run(read_all, [b"data: one\n\ndata: t", b"wo"]) == ["one", "two"]


def seconds_to_read(lines: int) -> float:
    """The best of three times to read one chunk of ``lines`` keep-alive comments."""
    chunk = b":\n" * lines + b"data: end\n\n"
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        assert anyio.run(read_all, [chunk]) == ["end"]
        best = min(best, time.perf_counter() - started)
    return best


def test_reading_the_lines_of_one_chunk_takes_linear_time() -> None:
    # Each line used to copy the rest of the chunk: 10 times the lines took 100 times as
    # long (a 1.5 MB chunk of keep-alives, 1.5 KB gzipped, blocked the loop for 20 s).
    small, large = seconds_to_read(10_000), seconds_to_read(100_000)
    assert large / small < 30, f"10k lines: {small:.4f} s, 100k lines: {large:.4f} s"


async def test_the_loop_gets_a_turn_between_chunks() -> None:
    chunks = [b":keep-alive\n" * 100] * 200 + [b"data: end\n\n"]
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await anyio.lowlevel.checkpoint()
            turns += 1

    async with anyio.create_task_group() as group:
        group.start_soon(count_turns)
        await anyio.lowlevel.checkpoint()
        assert await read_all(chunks) == ["end"]
        group.cancel_scope.cancel()
    # Without a turn between chunks the other task ran once, before the stream was read.
    assert turns >= 100


# -- chunks of unexpected shapes -------------------------------------------------------------

anything = json_values(max_leaves=6)
CLASSIFIED = {None, ErrorKind.INVALID_RESPONSE, ErrorKind.SERVER_ERROR, ErrorKind.CONTENT_FILTER,
              ErrorKind.CONTEXT_LENGTH, ErrorKind.CONNECTION}  # fmt: skip
call_shapes = st.fixed_dictionaries(
    {},
    optional={
        "index": anything | st.integers(0, 2),
        "id": anything,
        "function": anything
        | st.fixed_dictionaries({}, optional={"name": anything, "arguments": anything}),
    },
)
delta_shapes = st.fixed_dictionaries(
    {},
    optional={
        "content": anything,
        "reasoning_content": anything,
        "tool_calls": anything | st.lists(call_shapes | anything, max_size=3),
        "function_call": anything,
    },
)
chunk_shapes = st.fixed_dictionaries(
    {},
    optional={
        "choices": anything
        | st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "index": anything | st.just(0),
                    "delta": delta_shapes | anything,
                    "finish_reason": anything,
                },
            ),
            max_size=2,
        ),
        "usage": anything,
        "model": anything,
        "error": anything,
    },
)


@settings(max_examples=400, deadline=None)
@given(st.lists(chunk_shapes, min_size=1, max_size=4))
def test_chunks_of_any_shape_are_read_or_refused_as_a_classified_error(
    chunks: list[dict[str, Any]],
) -> None:
    accumulator = StreamAccumulator("m")
    try:
        for chunk in chunks:
            accumulator.add(json.dumps(chunk))
        reply = accumulator.build()
    except LLMError as error:
        kind = error.kind
    else:
        kind = None
        assert isinstance(reply.text, str)
    assert kind in CLASSIFIED


@pytest.mark.parametrize(
    "chunk",
    [
        json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": 1}}]}),
        json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": "call"}}]}),
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["tool_calls a number", "tool_calls a string", "100,000-deep"],
)
def test_a_malformed_chunk_is_an_invalid_response(chunk: str) -> None:
    with pytest.raises(LLMError) as caught:
        StreamAccumulator("m").add(chunk)
    assert caught.value.kind is ErrorKind.INVALID_RESPONSE
