"""The stdio transport: a server's process, its messages read line by line within a bound.

The SDK's own transport (``mcp.client.stdio.stdio_client``, 2.3.0) has two faults a server
can use against its client: it keeps appending to a line until a newline comes, so one
line of gigabytes is held whole (and then parsed: 18.6 MB of tiny text blocks cost over
1 GiB), and it decodes strictly, so one byte that is not UTF-8 kills its reader while the
connection still looks open (every later call then waits its whole timeout). This one:

- reads bytes and cuts lines itself; a line past ``limit`` bytes is never held: its first
  and last few KiB are kept to find the request it answers, which then gets a JSON-RPC
  error (a tool error the model reads); a line answering no request it can tell is the
  server broken: the connection is closed and the server declared lost. A reply to
  ``tools/list`` past ``listing_limit`` is refused the same way before it is parsed
  (parsing holds the event loop about 70 ms per MiB of a listing);
- decodes with ``errors="replace"``: a bad byte becomes U+FFFD, the message goes on;
- keeps the server's stderr to itself unless asked (``errlog``): its last
  :data:`STDERR_TAIL` bytes are kept for ``MCPServerStdio.stderr_tail``.

Spawning (in a new session, so the whole tree can be stopped) and stopping the process (the
spec's sequence: stdin closed, a grace period, then the tree killed) are the SDK's own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.abc
import mcp_types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client import stdio as sdk_stdio
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.shared.message import SessionMessage

__all__ = ["STDERR_TAIL", "TOO_LARGE", "StderrTail", "stdio_transport"]

STDERR_TAIL = 64 * 1024
"""Bytes of a stdio server's stderr kept (the last ones) when no ``errlog`` is given."""

TOO_LARGE = -32050
"""The JSON-RPC error code a request gets when the server's answer was past the bound."""

_STDERR_DRAIN = 1.0  # seconds the rest of a stopped server's stderr is read for

_EDGE = 4096  # bytes kept of each end of a line past the bound, to find its request's id
_HEAD_ID = re.compile(
    rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,256}")'
)
_TAIL_ID = re.compile(
    rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,256}")\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z'
)


class StderrTail:
    """The last :data:`STDERR_TAIL` bytes a server wrote on its stderr."""

    def __init__(self) -> None:
        self._kept = bytearray()

    def add(self, chunk: bytes) -> None:
        self._kept += chunk
        if len(self._kept) > STDERR_TAIL:
            del self._kept[: len(self._kept) - STDERR_TAIL]

    def text(self) -> str:
        return self._kept.decode(errors="replace")


@asynccontextmanager
async def stdio_transport(
    parameters: StdioServerParameters,
    *,
    limit: int,
    listing_limit: int,
    errlog: TextIO | None,
    stderr: StderrTail,
    lost: Callable[[str], None],
) -> AsyncIterator[Any]:
    """Spawn the server and yield the SDK's ``(read stream, write stream)`` pair."""
    process = await _spawn(parameters, errlog)
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    bounds = _Bounds(limit, listing_limit)
    async with anyio.create_task_group() as group:
        group.start_soon(_read_stdout, process.stdout, to_session, bounds, lost)
        group.start_soon(_write_stdin, process.stdin, from_session, to_session, bounds)
        stderr_read = anyio.Event()
        if process.stderr is not None:
            group.start_soon(_read_stderr, process.stderr, stderr, stderr_read)
        else:
            stderr_read.set()
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):
                from_server.close()
                to_server.close()
                await sdk_stdio._stop_server_process(process)  # bounded: about 6 s at most
                with anyio.move_on_after(_STDERR_DRAIN):  # a child may hold the pipe open
                    await stderr_read.wait()
            group.cancel_scope.cancel()


async def _spawn(parameters: StdioServerParameters, errlog: TextIO | None) -> Any:
    env = get_default_environment() | (parameters.env or {})
    if sys.platform == "win32":  # pragma: no cover - the SDK's job objects; no capture
        return await sdk_stdio._create_platform_compatible_process(
            command=parameters.command, args=parameters.args, env=env,
            errlog=errlog or sys.stderr, cwd=parameters.cwd,
        )  # fmt: skip
    return await anyio.open_process(
        [parameters.command, *parameters.args],
        env=env,
        cwd=parameters.cwd,
        stderr=errlog if errlog is not None else subprocess.PIPE,
        start_new_session=True,
    )


class _Bounds:
    """The bounds of one connection's replies, and the listing requests in flight."""

    def __init__(self, limit: int, listing_limit: int):
        self.limit = limit
        self.listing_limit = listing_limit
        self.listings: set[str | int] = set()  # ids of tools/list requests not yet answered

    def sent(self, message: Any) -> None:
        if isinstance(message, mcp_types.JSONRPCRequest) and message.method == "tools/list":
            if len(self.listings) >= _LISTINGS_KEPT:
                self.listings.clear()  # requests never answered: their waits ended long ago
            self.listings.add(message.id)

    def received(self, line: bytes) -> SessionMessage | Exception:
        """A complete line within ``limit``: the message, or the error its request gets."""
        if len(line) > self.listing_limit and self.listings:
            request_id = _request_id(line[:_EDGE], line[-_EDGE:])
            if request_id in self.listings:
                self.listings.discard(request_id)
                return _too_large(request_id, "MCP_LISTING_BYTES", self.listing_limit)
        parsed = _parse(line)
        if isinstance(parsed, SessionMessage) and self.listings:
            answered = parsed.message
            if isinstance(answered, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
                self.listings.discard(answered.id)
        return parsed


_LISTINGS_KEPT = 1000


async def _read_stdout(
    stdout: anyio.abc.ByteReceiveStream,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    bounds: _Bounds,
    lost: Callable[[str], None],
) -> None:
    limit = bounds.limit
    line = bytearray()
    over: _Oversized | None = None
    try:
        async with to_session:
            async for chunk in stdout:
                start = 0
                while start <= len(chunk):
                    end = chunk.find(b"\n", start)
                    piece = chunk[start:] if end < 0 else chunk[start:end]
                    if over is None and len(line) + len(piece) > limit:
                        over = _Oversized(bytes(line))
                        line.clear()
                    if over is not None:
                        over.add(piece)
                    else:
                        line += piece
                    if end < 0:
                        break
                    start = end + 1
                    if over is not None:
                        request_id = _request_id(over.head, over.tail)
                        over = None
                        if request_id is None:
                            lost(f"it sent a message of more than {limit} bytes answering no "
                                 f"request (max_message_bytes)")  # fmt: skip
                            return  # closing the stream fails every call in flight at once
                        await to_session.send(_too_large(request_id, "max_message_bytes", limit))
                    elif line.strip():
                        await to_session.send(bounds.received(bytes(line)))
                    line.clear()
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
        pass  # our own shutdown, or the process gone: the session sees the stream end


def _parse(line: bytes) -> SessionMessage | Exception:
    """One line as a message (a byte that is not UTF-8 made U+FFFD), or why it is not one."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(
            line.decode("utf-8", errors="replace"), by_name=False
        )
    except ValueError as exc:  # the SDK's session logs it; the line is dropped
        return exc
    return SessionMessage(message)


class _Oversized:
    """A line past the bound, of which only both ends are kept."""

    def __init__(self, head: bytes):
        self.head = bytearray(head[:_EDGE])
        self.tail = bytearray(head[-_EDGE:])

    def add(self, piece: bytes) -> None:
        if len(self.head) < _EDGE:
            self.head += piece[: _EDGE - len(self.head)]
        self.tail += piece[-_EDGE:]
        del self.tail[: max(0, len(self.tail) - _EDGE)]


def _request_id(head: bytes | bytearray, tail: bytes | bytearray) -> str | int | None:
    """The id of the request a line answers, found in its first or last bytes (or None)."""
    found = _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    if found is None:
        return None
    raw = found.group(1)
    return raw[1:-1].decode(errors="replace") if raw[:1] == b'"' else int(raw)


def _too_large(request_id: str | int, bound: str, limit: int) -> SessionMessage:
    """The error a request gets instead of a reply past ``bound``."""
    error = mcp_types.ErrorData(
        code=TOO_LARGE,
        message=f"the server's reply was larger than {bound} ({limit} bytes) and was not read",
    )
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


async def _write_stdin(
    stdin: anyio.abc.ByteSendStream,
    from_session: Any,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    bounds: _Bounds,
) -> None:
    try:
        async with from_session:
            async for message in from_session:
                bounds.sent(message.message)
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send(data.encode() + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's stream, so no request waits on it.
        await to_session.aclose()


async def _read_stderr(
    stderr: anyio.abc.ByteReceiveStream, tail: StderrTail, done: anyio.Event
) -> None:
    try:
        async for chunk in stderr:
            tail.add(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass
    finally:
        done.set()
