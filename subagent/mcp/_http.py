"""The streamable HTTP transport's client: a dead server and an oversized reply made answers.

Over streamable HTTP, the SDK's transport (2.3.0) runs each request's POST in a task of its
own task group, and an HTTP error there (the server process gone before it answered) would
escape into that group and cancel everything inside ``async with server:``. The SDK also
reads a reply body whole, however large. The HTTP client is therefore given a transport
(:class:`_Guarded`) that, below the SDK:

- turns a connection error into the JSON-RPC error the SDK resolves the request with, and
  marks the server lost (a body cut off mid-way ends there);
- reads a JSON body within ``limit`` bytes, and a stream of server-sent events one event at
  a time within ``limit`` bytes each (``listing_limit`` for a ``tools/list`` request);
  past it, the request gets a JSON-RPC error (a tool error the model reads) and the rest
  is not read;
- asks for bodies uncompressed, and refuses a compressed one (its decoded size is unknown
  until it has been decoded).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from subagent.mcp._stdio import TOO_LARGE

__all__ = ["http_transport"]

_LOST_ERRORS = (httpx2.NetworkError, httpx2.RemoteProtocolError, httpx2.ConnectTimeout)
"""The HTTP errors that say the server is gone (refused, reset, closed before answering)."""

_EVENT_END = (b"\n\n", b"\r\n\r\n", b"\r\r")
_LISTING = b'"method":"tools/list"'  # as the SDK writes a request (compact JSON)


def http_transport(
    url: str,
    headers: dict[str, str],
    *,
    limit: int,
    listing_limit: int,
    lost: Callable[[str], None],
    on_response: Callable[[httpx2.Response], Any],
) -> Any:
    """The SDK's streamable HTTP transport over a guarded client it closes when done."""
    # The SDK's default client (create_mcp_http_client): the same timeouts.
    http = httpx2.AsyncClient(
        headers={**headers, "accept-encoding": "identity"},
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_Guarded(httpx2.AsyncHTTPTransport(), lost, limit, listing_limit),
        event_hooks={"request": [], "response": [on_response]},
    )
    return _OwnedHTTPTransport(url, http, limit)


class _Guarded(httpx2.AsyncBaseTransport):
    """An HTTP transport whose failures become answers the SDK resolves a request with."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, lost: Callable[[str], None],
                 limit: int, listing_limit: int):  # fmt: skip
        self._inner = inner
        self._lost = lost
        self._limit = limit
        self._listing_limit = listing_limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            gone = isinstance(exc, _LOST_ERRORS)
            reason = describe(exc)
            if gone:
                self._lost(reason)
            code = mcp_types.CONNECTION_CLOSED if gone else mcp_types.INTERNAL_ERROR
            return _error_response(request, None, code, reason)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            return _error_response(request, _request_id(request), TOO_LARGE,
                                   f"the server sent a {encoding}-compressed reply, "
                                   f"which is not accepted (it was asked for none)")  # fmt: skip
        limit, bound = self._limit, "max_message_bytes"
        if _is_listing(request):
            limit, bound = self._listing_limit, "MCP_LISTING_BYTES"
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind == "text/event-stream":
            response.stream = _BoundedEvents(response.stream, self._lost, limit, bound,
                                             lambda: _request_id(request))  # fmt: skip
            return response
        body = bytearray()
        try:
            async with _chunks(response.stream) as chunks:
                async for chunk in chunks:
                    body += chunk
                    if len(body) > limit:
                        return _error_response(request, _request_id(request), TOO_LARGE,
                                               _too_large(bound, limit))  # fmt: skip
        except _LOST_ERRORS as exc:  # cut off mid-way: what came is what the SDK reads
            self._lost(describe(exc))
        finally:
            await response.aclose()
        return httpx2.Response(response.status_code, headers=response.headers,
                               content=bytes(body), request=request)  # fmt: skip

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedEvents(httpx2.AsyncByteStream):
    """Server-sent events passed on whole, each within the bound; ends when the server goes."""

    def __init__(self, inner: Any, lost: Callable[[str], None], limit: int, bound: str,
                 request_id: Callable[[], Any]):  # fmt: skip
        self._inner = inner
        self._lost = lost
        self._limit = limit
        self._bound = bound
        self._request_id = request_id

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = bytearray()
        try:
            async with _chunks(self._inner) as chunks:
                async for chunk in chunks:
                    scan_from = max(0, len(pending) - 3)
                    pending += chunk
                    cut = _events_end(pending, scan_from)
                    if cut:
                        yield bytes(pending[:cut])
                        del pending[:cut]
                    if len(pending) > self._limit:
                        request_id = self._request_id()
                        if request_id is not None:
                            error = {
                                "jsonrpc": "2.0",
                                "id": request_id,
                                "error": {
                                    "code": TOO_LARGE,
                                    "message": _too_large(self._bound, self._limit),
                                },
                            }
                            yield b"event: message\ndata: " + json.dumps(error).encode() + b"\n\n"
                        return  # the rest of an oversized stream is not read
                if pending:
                    yield bytes(pending)
        except _LOST_ERRORS as exc:
            self._lost(describe(exc))

    async def aclose(self) -> None:
        await self._inner.aclose()


class _OwnedHTTPTransport:
    """The SDK's streamable HTTP transport over an HTTP client it closes when done."""

    def __init__(self, url: str, http: httpx2.AsyncClient, limit: int):
        self._url = url
        self._http = http
        self._limit = limit
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self._http)
            return await self._stack.enter_async_context(
                # The events reach it within our bound already; its own (1 MiB) would be a
                # second, undocumented one.
                streamable_http_client(
                    self._url, http_client=self._http, max_sse_event_size=self._limit
                )
            )
        except BaseException:
            await self._stack.aclose()
            raise

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


@contextlib.asynccontextmanager
async def _chunks(stream: Any) -> AsyncIterator[AsyncIterator[bytes]]:
    """The chunks of a body, the iterator closed however the reading ends."""
    chunks = stream.__aiter__()
    try:
        yield chunks
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


def _events_end(buffer: bytearray, start: int) -> int:
    """Where the last complete event of ``buffer`` ends (0: none), looking from ``start``."""
    ends = (buffer.rfind(end, start) for end in _EVENT_END)
    return max((found + len(end) for found, end in zip(ends, _EVENT_END, strict=True)
                if found >= 0), default=0)  # fmt: skip


def _is_listing(request: httpx2.Request) -> bool:
    """Whether a request is a ``tools/list`` (its reply is held to the listing's bound)."""
    try:
        return request.method == "POST" and _LISTING in request.content
    except httpx2.RequestNotRead:
        return False


def _request_id(request: httpx2.Request) -> Any:
    """The JSON-RPC id of the request a POST carries (None for anything else)."""
    try:
        sent = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    return sent.get("id") if isinstance(sent, dict) else None


def _error_response(
    request: httpx2.Request, request_id: Any, code: int, message: str
) -> httpx2.Response:
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    status = 503 if request_id is None else 200
    return httpx2.Response(status, headers={"content-type": "application/json"},
                           content=json.dumps(error).encode(), request=request)  # fmt: skip


def _too_large(bound: str, limit: int) -> str:
    return f"the server's reply was larger than {bound} ({limit} bytes) and was not read"


def describe(exc: BaseException) -> str:
    """``Type: text`` of an exception (the first one inside an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
