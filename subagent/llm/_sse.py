"""Streaming replies: server-sent events read off an httpx response and assembled into one reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from subagent._errors import ErrorKind, LLMError
from subagent.llm._protocol import LLMResponse, ToolCall, Usage
from subagent.llm._wire import (
    content_text,
    decode_arguments,
    decode_usage,
    error_from_body,
    invalid_response,
    stop_reason,
)

__all__ = ["SSEEvents", "StreamAccumulator"]


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Assembles chat-completion chunks into one reply."""

    def __init__(self, requested_model: str | None) -> None:
        self.model = requested_model
        self.text: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: object = None
        self.usage = Usage()
        self.done = False
        self.chunks = 0

    def add(self, data: str) -> str:
        """Take one ``data:`` payload; return the text it adds."""
        try:
            chunk = json.loads(data)
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
                self.text.append(piece)
                added += piece
            for position, raw in enumerate(delta.get("tool_calls") or []):
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
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif isinstance(arguments, dict):
                call.arguments.append(json.dumps(arguments))

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
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] = response.aiter_bytes()
        self._buffer = b""
        self._data: list[str] = []
        self._body_done = False

    def __aiter__(self) -> SSEEvents:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                if self._body_done:
                    if self._data:
                        data, self._data = "\n".join(self._data), []
                        return data
                    raise StopAsyncIteration
                await self._read()
                continue
            raw, self._buffer = self._buffer[:newline], self._buffer[newline + 1 :]
            line = raw.removesuffix(b"\r").decode("utf-8", "replace")
            if not line:
                if self._data:
                    data, self._data = "\n".join(self._data), []
                    return data
                continue
            if line.startswith(":"):
                continue  # a comment, used as keep-alive
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value.removeprefix(" "))

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
            self._buffer += chunk

    async def aclose(self) -> None:
        """Close the response; if it was not read to the end, finish httpx's iterators."""
        await self._response.aclose()
        if self._body_done:
            return
        self._body_done = True
        # The response is closed, so resuming its iterator fails at once (or returns what
        # was already buffered): either way every generator in httpx's chain finishes.
        for _ in range(10_000):
            try:
                await self._chunks.__anext__()
            except StopAsyncIteration:
                return
            except Exception:  # a read from the closed stream: expected
                return
