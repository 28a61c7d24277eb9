"""MCP servers as tool sources: one connection, its cached tool list, and the calls.

A server object is the user's to open and close (``async with server:``). Opening it
connects (spawning the command for stdio, or reaching the URL for streamable HTTP),
negotiates the protocol and fetches the tool list once. The list is cached: every run of
every agent that lists the server reads it from the cache when the run starts; it is
fetched again when the server says it changed (``tools/list_changed``, through a
``subscriptions/listen`` stream on connections that have one, else the notification) or
when :meth:`MCPServer.refresh_tools` is awaited. A run under way keeps the list it started
with.

One connection serves every run at once: calls are JSON-RPC requests told apart by their
ids, so the runs of a batch share it. Every wait is bounded: the handshake and each
listing by ``connect_timeout``, each call by ``timeout`` (the tool's own time limit, fed
back to the model like any tool's). A server that dies fails the calls in flight and every
later one at once with :class:`MCPServerLostError`, a tool error the model reads, and the
run that met it ends ``failed(tool_server_lost)``; nothing waits on a dead server.

Over streamable HTTP, the SDK's transport runs each request's POST in a task of its own
task group, and an HTTP error there (the server process gone before it answered) would
escape into that group and cancel everything inside ``async with server:``. The HTTP
client is therefore given a transport (:class:`_Guarded`) that turns a connection error
into the JSON-RPC error the SDK resolves the request with, and marks the server lost.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import urlsplit

import anyio
import anyio.abc
import httpx2
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from subagent._checks import check_seconds
from subagent._errors import ConfigurationError, SubAgentError
from subagent.mcp._results import result_text
from subagent.tools import SourceNotReadyError, Tool, ToolSourceLostError

__all__ = [
    "MCP_PAGE_LIMIT",
    "MCPServer",
    "MCPServerError",
    "MCPServerHTTP",
    "MCPServerLostError",
    "MCPServerStdio",
    "MCPToolError",
    "MCPTools",
]

MCP_PAGE_LIMIT = 100
"""Pages of one ``tools/list`` walk: a server whose cursor never ends cannot hang it."""

_REVISIONS = itertools.count(1)  # one sequence for all servers: revisions never collide


class MCPServerError(SubAgentError):
    """The MCP server cannot answer: not connected, or its reply broke the protocol.

    A tool call that meets it is a tool error the model reads
    (``error_type="MCPServerError"``); the run goes on and ends as the model decides. A
    server that went away raises the subclass :class:`MCPServerLostError`.
    """


class MCPServerLostError(MCPServerError, ToolSourceLostError):
    """The MCP server went away mid-run.

    Its process exited, its endpoint stopped answering, or it was closed while a run was
    using it.
    A tool call that meets it is a tool error the model would read
    (``error_type="tool_server_lost"``), and the run then ends ``failed`` with
    ``FailReason.TOOL_SERVER_LOST`` (``retryable``). Open the server again to reconnect.
    """


class MCPToolError(SubAgentError):
    """The MCP server ran the tool and reported an error (``isError``).

    A tool error the model reads (``error_type="MCPToolError"``), with the server's text.
    """


ToolFilter = Callable[[mcp_types.Tool], bool]
"""A predicate over the server's tool descriptions: ``True`` keeps the tool."""


class MCPServer:
    """An MCP server whose tools an agent may call: put it in ``SubAgent(tools=[...])``.

    Use :class:`MCPServerStdio` or :class:`MCPServerHTTP`. The object is a tool source:
    each run reads its cached tool list when it starts. :meth:`select` gives a filtered,
    optionally prefixed view of the same connection for one agent.

    Args:
        name: The server's name in messages, records and spans.
        prefix: Offer each tool as ``{prefix}_{name}`` (opt-in; without it a name shared
            with another tool of the agent is an error).
        timeout: Seconds one tool call may take (a number: every wait is bounded); past
            it the model is told the tool timed out and the request is cancelled.
        connect_timeout: Seconds the handshake and each tool listing may take.
    """

    def __init__(
        self,
        *,
        name: str,
        prefix: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 30.0,
    ):
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("name", f"must be a non-empty string, got {name!r}")
        _check_prefix(prefix)
        for field, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if value is None:
                raise ConfigurationError(field, "must be a number of seconds (waits are bounded)")
            check_seconds(field, value)
        self.name = name
        self.prefix = prefix
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self._client: Client | None = None
        self._stack: AsyncExitStack | None = None
        self._listing: tuple[mcp_types.Tool, ...] = ()
        self._revision = 0
        self._lost: str | None = None
        self._changed: anyio.Event | None = None
        self._refreshed: anyio.Event | _LazyEvent = _LazyEvent()
        self._attributes: dict[str, AttributeValue] = {}
        self._all = MCPTools(self, prefix=prefix)

    # --- the connection, the user's to open and close ---

    async def __aenter__(self) -> MCPServer:
        """Connect, negotiate, fetch the tool list, and watch it for changes.

        Raises:
            RuntimeError: The server is connected already.
            MCPServerError: The server could not be reached or did not answer in
                ``connect_timeout`` seconds.
        """
        if self._stack is not None:
            raise RuntimeError(f"{self.source_name} is connected already")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._lost = None
            self._changed = anyio.Event()
            client = Client(
                self._transport(),
                read_timeout_seconds=self.connect_timeout,
                message_handler=self._on_message,
            )
            try:
                await stack.enter_async_context(client)
            except Exception as exc:
                raise MCPServerError(
                    f"{self.source_name} could not be connected: {_describe(exc)}"
                ) from exc
            self._client = client
            self._attributes = self._span_attributes(client)
            await self.refresh_tools()
            group = await stack.enter_async_context(anyio.create_task_group())
            await group.start(self._watch, client)
            stack.callback(group.cancel_scope.cancel)  # runs first on the way out
        except BaseException:
            self._client = None
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the connection (stopping a stdio server's process)."""
        stack, self._stack = self._stack, None
        self._client = None
        self._lost = "closed"
        if stack is not None:
            # Not shielded: the task group in the stack must close in its own scope. The
            # SDK bounds the closing (a stdio server is terminated after 2 s).
            await stack.__aexit__(exc_type, exc, traceback)

    @property
    def connected(self) -> bool:
        """Whether the server is connected and has not gone away."""
        return self._client is not None and self._lost is None

    async def refresh_tools(self) -> None:
        """Fetch the tool list again; runs that start afterwards see the new list.

        Raises:
            MCPServerError: The server is not connected, or did not answer.
        """
        client = self._connected_client()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(MCP_PAGE_LIMIT):
                with anyio.fail_after(self.connect_timeout):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:
            raise MCPServerError(
                f"{self.source_name} did not list its tools: {_describe(exc)}"
            ) from exc
        self._listing = tuple(tools)
        self._revision = next(_REVISIONS)
        refreshed, self._refreshed = self._refreshed, anyio.Event()
        refreshed.set()

    @property
    def revision(self) -> int:
        """The revision of the cached tool list: it moves each time the list is fetched."""
        return self._revision

    async def wait_for_tools(self, *, after: int) -> int:
        """Wait until the tool list is fetched again after revision ``after``.

        Bound the wait yourself (``with anyio.fail_after(...)``). Returns the new revision.
        """
        while self._revision == after:
            await self._refreshed.wait()
        return self._revision

    @property
    def listed_tools(self) -> tuple[mcp_types.Tool, ...]:
        """The server's tools as it last listed them (all of them, unfiltered)."""
        return self._listing

    # --- a tool source ---

    @property
    def source_name(self) -> str:
        """``MCP server '{name}'``, for messages."""
        return f"MCP server {self.name!r}"

    def current_tools(self) -> tuple[int, Sequence[Tool]]:
        """Every listed tool as a :class:`~subagent.Tool` (see :meth:`MCPTools.current_tools`)."""
        return self._all.current_tools()

    def select(
        self,
        *,
        allow: Collection[str] | None = None,
        deny: Collection[str] = (),
        where: ToolFilter | None = None,
        prefix: str | None = None,
    ) -> MCPTools:
        """Some of this server's tools, for one agent; the same connection and cache.

        Args:
            allow: Only these tools (by the server's names); a name the server does not
                list is an error when a run starts.
            deny: Not these tools.
            where: Keep a tool only when this returns ``True`` for its description.
            prefix: Offer each tool as ``{prefix}_{name}`` (default: the server's prefix).
        """
        return MCPTools(self, allow=allow, deny=deny, where=where,
                        prefix=self.prefix if prefix is None else prefix)  # fmt: skip

    # --- calls ---

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Call the server's tool ``name``; its result as the text the model reads.

        Raises:
            MCPToolError: The tool reported an error (its text is the message).
            MCPServerError: The server is not connected, went away, or broke the protocol.
        """
        client = self._connected_client()
        span = trace.get_current_span()  # the run's execute_tool span, when traced
        if span.is_recording():
            span.set_attributes(self._attributes)
        try:
            # The SDK's own limit is a backstop; the tool's timeout (the same number) fires
            # first and cancels the request.
            result = await client.call_tool(
                name, dict(arguments), read_timeout_seconds=self.timeout + 1.0
            )
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._lost = self._lost or exc.message or "connection closed"
            if self._lost is not None:  # the HTTP guard marks it before the SDK's error
                raise self._gone() from exc
            raise MCPServerError(f"{self.source_name} refused the call: {exc}") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
            self._lost = self._lost or "connection closed"
            raise self._gone() from exc
        text = result_text(result)
        if result.is_error:
            if span.is_recording():
                span.set_attribute("subagent.mcp.tool_error", True)
            raise MCPToolError(text or "the tool reported an error without text")
        return text

    # --- inside ---

    def _transport(self) -> Any:
        raise NotImplementedError

    def _span_attributes(self, client: Client) -> dict[str, AttributeValue]:
        return {
            "mcp.method.name": "tools/call",
            "mcp.protocol.version": client.protocol_version,
            "subagent.mcp.server": self.name,
        }

    def _connected_client(self) -> Client:
        client = self._client
        if client is None:
            if self._lost is not None:  # closed while a run was using it
                raise MCPServerLostError(
                    f"{self.source_name} is not connected: it was {self._lost}",
                    source=self.source_name,
                )
            raise MCPServerError(
                f"{self.source_name} is not connected (open it with `async with server:`)"
            )
        if self._lost is not None:
            raise self._gone()
        return client

    def _gone(self) -> MCPServerLostError:
        return MCPServerLostError(f"{self.source_name} went away: {self._lost}",
                                  source=self.source_name)  # fmt: skip

    def _mark_lost(self, reason: str) -> None:
        """Record that the connection is gone (the first reason stays)."""
        if self._lost is None:
            self._lost = reason

    async def _on_message(self, message: Any) -> None:
        """Wake the watcher on ``tools/list_changed`` (handshake-era connections)."""
        if isinstance(message, mcp_types.ToolListChangedNotification) and self._changed:
            self._changed.set()
        await anyio.lowlevel.checkpoint()

    async def _watch(
        self, client: Client, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Refetch the tool list when the server says it changed, until disconnected.

        Started once the subscription is acknowledged (or known to be unsupported), so no
        change the server makes after the connection opens is missed.
        """
        started = False
        try:
            with anyio.fail_after(self.connect_timeout):
                listening = client.listen(tools_list_changed=True)
                subscription = await listening.__aenter__()
            try:
                task_status.started()
                started = True
                async for _event in subscription:
                    await self._refresh_quietly()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.connect_timeout):
                    await listening.__aexit__(None, None, None)
        except SubscriptionLost:
            self._mark_lost("the server closed the connection")
            return
        except Exception:  # a handshake-era connection: the notification comes as a message
            pass
        if not started:
            task_status.started()
        while self._lost is None and self._changed is not None:
            await self._changed.wait()
            self._changed = anyio.Event()
            await self._refresh_quietly()

    async def _refresh_quietly(self) -> None:
        # The calls report a dead server; the previous list stays meanwhile.
        with contextlib.suppress(MCPServerError):
            await self.refresh_tools()


class MCPTools:
    """Some tools of one :class:`MCPServer`, as one agent offers them (:meth:`MCPServer.select`).

    A tool source: each run reads the server's cached list when it starts. The tools
    are built once per listing; a listed tool whose name or schema the runtime cannot
    offer (a name outside ``[A-Za-z0-9_-]``, a root schema that is not an object) is a
    :class:`~subagent.ConfigurationError` naming it when a run starts: filter it out.
    """

    def __init__(
        self,
        server: MCPServer,
        *,
        allow: Collection[str] | None = None,
        deny: Collection[str] = (),
        where: ToolFilter | None = None,
        prefix: str | None = None,
    ):
        if isinstance(allow, str) or isinstance(deny, str):
            raise ConfigurationError("allow", "allow and deny take collections of tool names")
        if where is not None and not callable(where):
            raise ConfigurationError("where", f"must be a predicate, got {where!r}")
        _check_prefix(prefix)
        self.server = server
        self.allow = None if allow is None else frozenset(allow)
        self.deny = frozenset(deny)
        self.where = where
        self.prefix = prefix
        self._built: tuple[int, tuple[Tool, ...]] | None = None

    @property
    def source_name(self) -> str:
        """The server's name for messages."""
        return self.server.source_name

    def current_tools(self) -> tuple[int, Sequence[Tool]]:
        """The server's listing revision and the selected tools, built once per listing.

        Raises:
            SourceNotReadyError: The server is not connected.
            ConfigurationError: ``allow`` names a tool the server does not list, or a
                selected tool cannot be offered (the message names it).
        """
        server = self.server
        if server._client is None:
            raise SourceNotReadyError(
                f"{server.source_name} is not connected: open it with `async with server:` "
                f"before running the agent"
            )
        revision = server._revision
        built = self._built
        if built is not None and built[0] == revision:
            return built
        listing = server._listing
        if self.allow is not None:
            missing = sorted(self.allow - {tool.name for tool in listing})
            if missing:
                raise ConfigurationError(
                    "allow", f"{server.source_name} lists no tool named {', '.join(missing)}"
                )
        tools = tuple(
            self._tool(listed)
            for listed in listing
            if (self.allow is None or listed.name in self.allow)
            and listed.name not in self.deny
            and (self.where is None or self.where(listed))
        )
        result = (revision, tools)
        self._built = result
        return result

    def _tool(self, listed: mcp_types.Tool) -> Tool:
        server = self.server
        original = listed.name
        exposed = f"{self.prefix}_{original}" if self.prefix else original

        async def call(**arguments: Any) -> str:
            return await server.call(original, arguments)

        try:
            return Tool.from_schema(
                exposed, listed.description or listed.title or "", listed.input_schema, call,
                timeout=server.timeout,
            )  # fmt: skip
        except ConfigurationError as exc:
            raise ConfigurationError(
                "tools",
                f"{server.source_name} lists a tool the runtime cannot offer: {exc.message} "
                f"(leave it out with select(deny=[{original!r}]))",
            ) from exc


class MCPServerStdio(MCPServer):
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    Args:
        command: The executable (``sys.executable``, ``"npx"``...).
        args: Its arguments.
        env: Extra environment variables, over the SDK's safe default environment.
        cwd: Its working directory.
        name: The server's name (default: the command's file name).
        errlog: Where the server's stderr goes (default: this process's stderr).
        **options: ``prefix``, ``timeout``, ``connect_timeout`` (see :class:`MCPServer`).
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        errlog: TextIO | None = None,
        **options: Any,
    ):
        if not isinstance(command, str) or not command:
            raise ConfigurationError("command", f"must be a non-empty string, got {command!r}")
        if isinstance(args, str):
            raise ConfigurationError("args", f"must be a list of strings, got {args!r}")
        super().__init__(name=name or os.path.basename(command), **options)
        self._parameters = StdioServerParameters(
            command=command, args=list(args), env=None if env is None else dict(env), cwd=cwd
        )
        self._errlog = errlog

    def _transport(self) -> Any:
        return stdio_client(self._parameters, errlog=self._errlog or sys.stderr)

    def _span_attributes(self, client: Client) -> dict[str, AttributeValue]:
        return {**super()._span_attributes(client), "network.transport": "pipe"}


class MCPServerHTTP(MCPServer):
    """An MCP server reached over streamable HTTP.

    Args:
        url: The server's MCP endpoint (``http://127.0.0.1:8000/mcp``).
        headers: Headers sent with every request (authorization...); never recorded.
        name: The server's name (default: the URL's host and port).
        **options: ``prefix``, ``timeout``, ``connect_timeout`` (see :class:`MCPServer`).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        **options: Any,
    ):
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError("url", f"must be an http(s) URL, got {url!r}")
        super().__init__(name=name or parts.netloc.rsplit("@", 1)[-1], **options)
        self.url = url
        self._headers = dict(headers or {})
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._session_id: str | None = None

    def _transport(self) -> Any:
        # The SDK's default client (create_mcp_http_client): the same timeouts, over a
        # transport that keeps a dead server's errors out of the SDK's task group.
        http = httpx2.AsyncClient(
            headers=self._headers or None,
            timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
            transport=_Guarded(httpx2.AsyncHTTPTransport(), self._mark_lost),
            event_hooks={"request": [], "response": [self._note_session]},
        )
        return _OwnedHTTPTransport(self.url, http)

    async def _note_session(self, response: httpx2.Response) -> None:
        session = response.headers.get("mcp-session-id")
        if session:
            self._session_id = session

    def _span_attributes(self, client: Client) -> dict[str, AttributeValue]:
        attributes = {
            **super()._span_attributes(client),
            "network.transport": "tcp",
            "network.protocol.name": "http",
            "server.address": self._host,
            "server.port": self._port,
        }
        if self._session_id:
            attributes["mcp.session.id"] = self._session_id
        return attributes


_LOST_ERRORS = (httpx2.NetworkError, httpx2.RemoteProtocolError, httpx2.ConnectTimeout)
"""The HTTP errors that say the server is gone (refused, reset, closed before answering)."""


class _Guarded(httpx2.AsyncBaseTransport):
    """An HTTP transport whose errors become answers the SDK resolves a request with.

    A transport error (the server gone before it answered) becomes a 503 response whose
    body is a JSON-RPC error (``CONNECTION_CLOSED`` when the server is gone), which the
    SDK hands to the request's caller instead of raising it in its task group. A body cut
    off mid-way ends there (the SDK then reports a broken or unfinished reply). Either
    way the server is marked lost first, so the call reports it gone.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, lost: Callable[[str], None]):
        self._inner = inner
        self._lost = lost

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            gone = isinstance(exc, _LOST_ERRORS)
            reason = _describe(exc)
            if gone:
                self._lost(reason)
            code = mcp_types.CONNECTION_CLOSED if gone else mcp_types.INTERNAL_ERROR
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": reason}}
            return httpx2.Response(503, headers={"content-type": "application/json"},
                                   content=json.dumps(error).encode(), request=request)  # fmt: skip
        response.stream = _GuardedBody(response.stream, self._lost)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _GuardedBody(httpx2.AsyncByteStream):
    """A response body that ends, rather than raises, when the server goes away mid-way."""

    def __init__(self, inner: Any, lost: Callable[[str], None]):
        self._inner = inner
        self._lost = lost

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except _LOST_ERRORS as exc:
            self._lost(_describe(exc))

    async def aclose(self) -> None:
        await self._inner.aclose()


class _OwnedHTTPTransport:
    """The SDK's streamable HTTP transport over an HTTP client it closes when done."""

    def __init__(self, url: str, http: httpx2.AsyncClient):
        self._url = url
        self._http = http
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self._http)
            return await self._stack.enter_async_context(
                streamable_http_client(self._url, http_client=self._http)
            )
        except BaseException:
            await self._stack.aclose()
            raise

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


class _LazyEvent:
    """A stand-in until the first refresh makes a real event (made inside the event loop)."""

    async def wait(self) -> None:
        await anyio.lowlevel.checkpoint()

    def set(self) -> None:
        pass


def _check_prefix(prefix: object) -> None:
    if prefix is not None and (not isinstance(prefix, str) or not prefix.isidentifier()):
        raise ConfigurationError(
            "prefix", f"must be a short identifier such as 'calc', got {prefix!r}"
        )


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text
