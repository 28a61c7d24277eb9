"""Streaming replies: server-sent events read off an httpx response and assembled into one reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import httpx

from subagent._errors import ErrorKind, LLMError
from subagent.llm._decode import decoded_chunks, finish_response
from subagent.llm._protocol import LLMResponse, ToolCall
from subagent.llm._wire import (
    UNREPORTED,
    content_text,
    decode_arguments,
    decode_usage,
    error_from_body,
    invalid_response,
    loads,
    reasoning_text,
    stop_reason,
)

__all__ = ["SSEEvents", "StreamAccumulator", "finish_response", "read_body"]


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Assembles chat-completion chunks into one reply."""

    def __init__(self, requested_model: str | None, max_chars: int | None = None) -> None:
        self.model = requested_model
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_added = ""  # the reasoning the last chunk added
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: object = None
        self.usage = UNREPORTED  # until a chunk reports it (stream_options.include_usage)
        self.done = False
        self.chunks = 0
        self.size = 0  # characters of text and tool-call arguments held
        self.max_chars = max_chars

    def add(self, data: str) -> str:
        """Take one ``data:`` payload; return the text it adds."""
        try:
            chunk = loads(data)
        except ValueError as error:
            raise invalid_response(f"a streamed chunk is not JSON ({error})", data, 200) from None
        if not isinstance(chunk, dict):
            raise invalid_response("a streamed chunk is not a JSON object", data, 200)
        if chunk.get("error") is not None:
            raise error_from_body(None, chunk, data, {})
        self.chunks += 1
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = decode_usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise invalid_response("a streamed chunk's choices is not a list", data, 200)
        added = ""
        self.reasoning_added = ""
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                continue
            piece = content_text(delta.get("content"))
            if piece:
                self._grow(len(piece))
                self.text.append(piece)
                added += piece
            thought = reasoning_text(delta)
            if thought:
                self._grow(len(thought))
                self.reasoning.append(thought)
                self.reasoning_added += thought
            raw_calls = delta.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise invalid_response("a streamed chunk's tool_calls is not a list", data, 200)
            for position, raw in enumerate(raw_calls):
                if isinstance(raw, dict):
                    self._add_call(position, raw)
            legacy = delta.get("function_call")
            if isinstance(legacy, dict):
                self._add_call(0, {"index": 0, "function": legacy})
        return added

    def _add_call(self, position: int, raw: dict[str, Any]) -> None:
        index = raw.get("index")
        key = index if isinstance(index, int) else position
        call = self.calls.setdefault(key, _PartialCall())
        if raw.get("id") and not call.id:
            call.id = str(raw["id"])
        function = raw.get("function") or {}
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"] and not call.name:
                call.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, dict):
                arguments = json.dumps(arguments)
            if isinstance(arguments, str):
                self._grow(len(arguments))
                call.arguments.append(arguments)

    def _grow(self, added: int) -> None:
        self.size += added
        if self.max_chars is not None and self.size > self.max_chars:
            raise LLMError(
                ErrorKind.RESPONSE_TOO_LARGE,
                f"the streamed reply is longer than max_response_bytes={self.max_chars:,} "
                f"(text and tool-call arguments)",
                status_code=200,
            )

    def build(self) -> LLMResponse:
        """The complete reply; raise when the stream ended before it was complete."""
        if not self.done and self.finish_reason is None:
            raise LLMError(
                ErrorKind.CONNECTION,
                f"the stream ended after {self.chunks} chunks without a finish reason or [DONE]",
            )
        calls: list[ToolCall] = []
        for _, partial in sorted(self.calls.items()):
            if not partial.name:
                raise invalid_response("a streamed tool call has no function name", "", 200)
            calls.append(
                ToolCall(
                    name=partial.name,
                    arguments=decode_arguments("".join(partial.arguments)),
                    id=partial.id,
                )
            )
        raw = self.finish_reason
        return LLMResponse(
            text="".join(self.text),
            reasoning="".join(self.reasoning),
            tool_calls=calls,
            stop_reason=stop_reason(raw),
            raw_stop_reason=None if raw is None else str(raw),
            usage=self.usage,
            model=self.model,
        )


class SSEEvents:
    """The ``data`` payloads of a server-sent-event response, one event at a time.

    A plain iterator rather than an async generator, and :meth:`aclose` finishes httpx's own
    byte iterators: an abandoned async generator is finalised by the garbage collector,
    which trio reports as a ResourceWarning (httpx's ``aiter_*`` are generators all the way
    down, see encode/httpx#3686).

    Args:
        response: The streaming response.
        max_event_bytes: The largest event (one line, or the data lines of one event) held
            in memory; ``None``: no limit.
        max_total_bytes: The most bytes read from the stream in all; ``None``: no limit.

    Raises:
        LLMError: ``response_too_large`` when a limit is passed (nothing more is read).
    """

    def __init__(
        self,
        response: httpx.Response,
        *,
        max_event_bytes: int | None = None,
        max_total_bytes: int | None = None,
    ) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] = decoded_chunks(response)
        self._buffer = bytearray()
        self._start = 0  # where the next line starts in the buffer
        self._scanned = 0  # the buffer holds no newline between _start and this
        self._data: list[str] = []
        self._data_size = 0
        self._body_done = False
        self._max_event = max_event_bytes
        self._max_total = max_total_bytes
        self.bytes_read = 0

    def __aiter__(self) -> SSEEvents:
        return self

    async def __anext__(self) -> str:
        # Linear in the bytes received: a line is read where it lies (the buffer is trimmed
        # once per chunk, not once per line), and the loop gets a turn between chunks.
        while True:
            newline = self._buffer.find(b"\n", max(self._start, self._scanned))
            if newline < 0:
                del self._buffer[: self._start]
                self._start = 0
                self._scanned = len(self._buffer)
                if self._body_done:
                    if self._data:
                        return self._event()
                    raise StopAsyncIteration
                self._check_event_size(len(self._buffer))
                await self._read()
                continue
            raw = self._buffer[self._start : newline]
            self._start = newline + 1
            if raw[:1] == b":":
                continue  # a comment, used as keep-alive
            line = raw.removesuffix(b"\r").decode("utf-8", "replace")
            if not line:
                if self._data:
                    return self._event()
                continue
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value.removeprefix(" "))
                self._data_size += len(raw)
                self._check_event_size(0)

    def _event(self) -> str:
        data, self._data, self._data_size = "\n".join(self._data), [], 0
        return data

    def _check_event_size(self, pending: int) -> None:
        if self._max_event is not None and self._data_size + pending > self._max_event:
            raise LLMError(
                ErrorKind.RESPONSE_TOO_LARGE,
                f"a streamed event is larger than max_response_bytes={self._max_event:,}",
                status_code=self._response.status_code,
            )

    async def _read(self) -> None:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._body_done = True
            if self._buffer:
                self._buffer += b"\n"  # a last line without its newline
        except BaseException:
            self._body_done = True  # the error finished httpx's iterators
            raise
        else:
            self.bytes_read += len(chunk)
            if self._max_total is not None and self.bytes_read > self._max_total:
                raise LLMError(
                    ErrorKind.RESPONSE_TOO_LARGE,
                    f"the stream went past max_stream_bytes={self._max_total:,}",
                    status_code=self._response.status_code,
                )
            self._buffer += chunk
            await anyio.lowlevel.checkpoint()  # a burst of chunks never holds the loop

    async def aclose(self) -> None:
        """Close the response; if it was not read to the end, finish httpx's iterators."""
        if self._body_done:
            await self._response.aclose()
            return
        self._body_done = True
        await finish_response(self._response, self._chunks)


async def read_body(response: httpx.Response, limit: int | None, *, truncate: bool = False) -> str:
    """The body of a streaming ``response`` as text, reading at most ``limit`` bytes.

    A declared ``Content-Length`` above the limit is refused before anything is read; a
    body that grows past it stops being read at the limit, so an oversized reply is never
    held whole.

    Args:
        response: A response opened with ``stream=True``.
        limit: The most bytes to read (after content decoding); ``None``: no limit.
        truncate: Keep the first ``limit`` bytes instead of raising (for error bodies, whose
            start is all that is kept).

    Raises:
        LLMError: ``response_too_large``, unless ``truncate``.
    """
    declared = response.headers.get("content-length", "").strip()
    if limit is not None and not truncate and declared.isdigit() and int(declared) > limit:
        raise _too_large(
            f"the server announced a reply of {int(declared):,} bytes, more than "
            f"max_response_bytes={limit:,}; it was not read",
            response.status_code,
        )
    chunks = decoded_chunks(response)
    parts: list[bytes] = []
    size = 0
    finished = False
    try:
        while True:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                finished = True
                break
            except BaseException:
                finished = True  # the error finished httpx's iterators
                raise
            size += len(chunk)
            if limit is not None and size > limit:
                if truncate:
                    parts.append(chunk[: len(chunk) - (size - limit)])
                    break
                raise _too_large(
                    f"the reply is larger than max_response_bytes={limit:,}; reading stopped there",
                    response.status_code,
                )
            parts.append(chunk)
    finally:
        if not finished:
            with anyio.CancelScope(shield=True):
                await finish_response(response, chunks)
    content = b"".join(parts)
    del parts
    try:
        return content.decode(response.charset_encoding or "utf-8", "replace")
    except LookupError:  # an unknown charset
        return content.decode("utf-8", "replace")


def _too_large(message: str, status: int) -> LLMError:
    return LLMError(ErrorKind.RESPONSE_TOO_LARGE, message, status_code=status)
