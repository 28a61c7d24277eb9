"""Response bodies decompressed in bounded pieces, so decoded bytes are counted as they come.

httpx decodes each network read whole: one 64 KiB read of a gzip bomb inflates to about
64 MiB at once, before any limit on the decoded size can look at it. :class:`DecodedChunks`
reads the raw body instead and inflates ``gzip`` and ``deflate`` (the encodings the adapter
asks for) :data:`PIECE` bytes at a time, so a reader that stops at its limit has held at
most the limit plus one piece. Other encodings (``br`` or ``zstd``, which the adapter never
asks for) are left to httpx's own decoders.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Final

import anyio
import httpx

__all__ = ["ACCEPT_ENCODING", "PIECE", "DecodedChunks", "decoded_chunks", "finish_response"]

PIECE: Final = 64 * 1024
"""The most decoded bytes produced at once."""

ACCEPT_ENCODING: Final = "gzip, deflate"
"""The encodings the adapter asks for: the ones decoded here in bounded pieces."""

_ZLIB_ENCODINGS: Final = frozenset({"gzip", "x-gzip", "deflate"})


class _Inflater:
    """One ``gzip`` or ``deflate`` layer, inflated at most ``PIECE`` bytes at a time."""

    def __init__(self, encoding: str) -> None:
        self._deflate = encoding == "deflate"
        wbits = zlib.MAX_WBITS if self._deflate else zlib.MAX_WBITS | 16
        self._zlib = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._deflate and not self._started and data:
            # "deflate" is zlib-wrapped by the standard, raw by some servers (as httpx
            # accepts): a raw stream fails on its first bytes.
            self._started = True
            try:
                probe = zlib.decompressobj(zlib.MAX_WBITS)
                probe.decompress(data[:2])
            except zlib.error:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        pending = data
        while True:
            out = self._zlib.decompress(pending, PIECE)
            if out:
                yield out
            pending = self._zlib.unconsumed_tail
            # A full piece with nothing left to feed may still have output waiting.
            if not pending and len(out) < PIECE:
                return

    def flush(self) -> Iterator[bytes]:
        # zlib's flush() inflates all input it still holds at once: feed it in pieces first.
        yield from self.feed(self._zlib.unconsumed_tail)
        rest = self._zlib.flush()
        if rest:
            yield rest


class DecodedChunks:
    """The decoded body of a streaming ``response``, in bounded pieces.

    ``gzip`` and ``deflate`` (several layers included) inflate at most :data:`PIECE` bytes
    at a time. A plain iterator rather than an async generator (see
    :class:`~subagent.llm._sse.SSEEvents` on why); a body that is not read to its end is
    finished by :func:`finish_response`.

    Raises:
        httpx.DecodingError: The body is not valid for its ``Content-Encoding`` (the adapter
            classifies it as ``invalid_response``).
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._raw: AsyncIterator[bytes] = response.aiter_raw()
        self._layers = [_Inflater(name) for name in reversed(_encodings(response))]
        self._ready: Iterator[bytes] = iter(())
        self._ended = False
        self._discard = False  # the response was closed early: read nothing more

    def __aiter__(self) -> DecodedChunks:
        return self

    async def __anext__(self) -> bytes:
        while True:
            if self._response.is_closed and not self._ended:
                # Closed by a reader that stopped (at its limit, say): nothing more is
                # inflated; the raw iterator is only run to its end.
                self._ready = iter(())
                self._layers = []
                self._discard = True
            try:
                piece = next(self._ready, None)
            except httpx.DecodingError:
                # The raw body was not read to its end: finish httpx's iterators, as a
                # reader does after an error of its own.
                self._ended = True
                with anyio.CancelScope(shield=True):
                    await finish_response(self._response, self._raw)
                raise
            if piece is not None:
                return piece
            if self._ended:
                raise StopAsyncIteration
            try:
                raw = await self._raw.__anext__()
            except StopAsyncIteration:
                self._ended = True
                if not self._discard:
                    self._ready = _guarded(self._through(0, None))
                continue
            if not self._discard:
                self._ready = _guarded(self._through(0, raw))

    def _through(self, layer: int, data: bytes | None) -> Iterator[bytes]:
        """``data`` through the layers from ``layer`` on; ``None`` flushes them."""
        if layer == len(self._layers):
            if data:
                yield data
            return
        inflater = self._layers[layer]
        pieces = inflater.flush() if data is None else inflater.feed(data)
        for piece in pieces:
            yield from self._through(layer + 1, piece)
        if data is None:
            yield from self._through(layer + 1, None)


async def finish_response(response: httpx.Response, chunks: AsyncIterator[bytes]) -> None:
    """Close ``response`` and finish ``chunks``, its byte iterator, when it was not read out."""
    await response.aclose()
    # The response is closed, so resuming its iterator fails at once (or returns what was
    # already buffered): either way every generator in httpx's chain finishes.
    for _ in range(10_000):
        try:
            await chunks.__anext__()
        except StopAsyncIteration:
            return
        except Exception:  # a read from the closed stream: expected
            return


def _guarded(pieces: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield from pieces
    except zlib.error as error:
        raise httpx.DecodingError(f"the body is not valid compressed data: {error}") from None


def _encodings(response: httpx.Response) -> list[str]:
    values = response.headers.get_list("content-encoding", split_commas=True)
    return [value.strip().lower() for value in values if value.strip().lower() != "identity"]


def decoded_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The decoded body of ``response``.

    In bounded pieces when every encoding is ``gzip`` or ``deflate`` (or none), else by
    httpx's own decoding.
    """
    if all(name in _ZLIB_ENCODINGS for name in _encodings(response)):
        return DecodedChunks(response)
    return response.aiter_bytes()
