"""Streamed replies read off an httpx response: server-sent events, and bodies within a bound.

:class:`SSEEvents` yields the ``data`` payload of each event, within a size bound per event
and in all; :func:`read_body` reads a whole body within a bound. Both are the provider's
format's business no further: each adapter reads the payloads in its own format.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import httpx

from subagent._errors import ErrorKind, LLMError
from subagent.llm._decode import decoded_chunks, finish_response

__all__ = ["SSEEvents", "finish_response", "read_body"]


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
