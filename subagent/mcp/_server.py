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

A server is not trusted: every message it sends is read within ``max_message_bytes``
(``_stdio``, ``_http``), its listing within :data:`MCP_TOOL_LIMIT` tools,
:data:`MCP_LISTING_BYTES` and :data:`MCP_SCHEMA_PROPERTIES` per tool (the schemas checked in
a worker thread, once per schema), its descriptions reach the model labelled as its own and
cut to :data:`MCP_DESCRIPTION_LIMIT`, and nothing it sends runs a backtracking match on the
event loop (see :func:`_skip_output_check`).

The connection lives in a task of its own (:meth:`MCPServer._connection`): the SDK's task
groups are entered there, so an exception of the ``async with server:`` block leaves it as
itself (not wrapped in the SDK's exception groups), the handshake is bounded as a whole by
``connect_timeout``, and a transport that fails never cancels the block's code.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.to_thread
import httpx2
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from subagent._checks import check_seconds
from subagent._errors import ConfigurationError, SubAgentError
from subagent._text import shorten
from subagent.mcp._http import describe, http_transport
from subagent.mcp._results import result_text
from subagent.mcp._stdio import TOO_LARGE, StderrTail, stdio_transport
from subagent.tools import SourceNotReadyError, Tool, ToolSourceLostError

__all__ = [
    "MCP_DESCRIPTION_LIMIT",
    "MCP_LISTING_BYTES",
    "MCP_MESSAGE_LIMIT",
    "MCP_PAGE_LIMIT",
    "MCP_SCHEMA_PROPERTIES",
    "MCP_TOOL_LIMIT",
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

MCP_TOOL_LIMIT = 1000
"""Tools one listing may hold; past it the listing fails (``MCPServerError``)."""

MCP_LISTING_BYTES = 512 * 1024
"""Bytes one listing may take: each ``tools/list`` reply, and its tools' JSON together.

Parsing a listing holds the event loop (about 70 ms per MiB): within this bound it stays
under 50 ms. A listing past it fails (``MCPServerError``)."""

MCP_SCHEMA_PROPERTIES = 1000
"""Properties one tool's input schema may declare (nested ones counted); a tool past it
cannot be offered (a ``ConfigurationError`` naming it when a run starts)."""

MCP_MESSAGE_LIMIT = 1024 * 1024
"""The default ``max_message_bytes``: the largest message read from a server."""

MCP_DESCRIPTION_LIMIT = 1024
"""Characters of a server's tool description the model is shown (the rest is cut)."""

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
        connect_timeout: Seconds the whole connection may take (spawning or reaching the
            server, the handshake, the first tool listing), and each later listing.
        max_message_bytes: The largest message read from the server (a stdio line, an
            HTTP body or server-sent event). A reply past it is not read: its call fails
            with a tool error the model reads.
    """

    def __init__(
        self,
        *,
        name: str,
        prefix: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 30.0,
        max_message_bytes: int = MCP_MESSAGE_LIMIT,
    ):
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("name", f"must be a non-empty string, got {name!r}")
        _check_prefix(prefix)
        for field, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if value is None:
                raise ConfigurationError(field, "must be a number of seconds (waits are bounded)")
            check_seconds(field, value)
        if (
            isinstance(max_message_bytes, bool)
            or not isinstance(max_message_bytes, int)
            or max_message_bytes < 1024
        ):
            raise ConfigurationError(
                "max_message_bytes", f"must be a number of bytes >= 1024, got {max_message_bytes!r}"
            )
        self.name = name
        self.prefix = prefix
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.max_message_bytes = max_message_bytes
        self._client: Client | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._closing: anyio.Event | None = None
        self._stage = ""
        self._failure: BaseException | None = None
        self._listing: tuple[mcp_types.Tool, ...] = ()
        self._revision = 0
        self._lost: str | None = None
        self._changed: anyio.Event | None = None
        self._refreshed: anyio.Event | _LazyEvent = _LazyEvent()
        self._attributes: dict[str, AttributeValue] = {}
        self._views: weakref.WeakSet[MCPTools] = weakref.WeakSet()
        self._all = MCPTools(self, prefix=prefix)

    # --- the connection, the user's to open and close ---

    async def __aenter__(self) -> MCPServer:
        """Connect, negotiate, fetch the tool list, and watch it for changes.

        The whole of it is bounded by ``connect_timeout``.

        Raises:
            RuntimeError: The server is connected already.
            MCPServerError: The server could not be reached, broke the protocol, or did
                not answer in ``connect_timeout`` seconds (the message says what it was
                waiting for).
        """
        if self._group is not None:
            raise RuntimeError(f"{self.source_name} is connected already")
        self._lost = None
        self._failure = None
        self._changed = anyio.Event()
        self._closing = anyio.Event()
        ready, settled = anyio.Event(), anyio.Event()
        group = anyio.create_task_group()
        await group.__aenter__()
        try:
            group.start_soon(self._connection, ready, settled)
            with anyio.move_on_after(self.connect_timeout):
                await settled.wait()
        except BaseException:
            await self._abandon(group)
            raise
        if not ready.is_set():
            failure = self._failure
            await self._abandon(group)
            if isinstance(failure, MCPServerError):  # a listing past the bounds, say
                raise MCPServerError(str(failure)) from failure
            if failure is not None:
                raise MCPServerError(
                    f"{self.source_name} could not be connected: {describe(failure)}"
                ) from failure
            raise MCPServerError(
                f"{self.source_name} did not connect within connect_timeout "
                f"({self.connect_timeout:g} s): it was waiting for {self._stage}"
            )
        self._group = group
        return self

    async def _abandon(self, group: anyio.abc.TaskGroup) -> None:
        """Stop a connection that did not open (its task group, entered in this task)."""
        assert self._closing is not None
        self._closing.set()
        group.cancel_scope.cancel()
        await group.__aexit__(None, None, None)
        self._client = None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the connection (stopping a stdio server's process).

        An exception of the block leaves it as itself: the connection's own tasks never
        see it.
        """
        group, self._group = self._group, None
        self._client = None
        self._lost = "closed"
        if group is not None:
            if self._closing is not None:
                self._closing.set()
            # The SDK bounds the closing (a stdio server is killed after about 4 s).
            await group.__aexit__(None, None, None)

    async def _connection(self, ready: anyio.Event, settled: anyio.Event) -> None:
        """The connection's task: it opens the SDK's client, serves, and closes it.

        Nothing escapes it: a failure before ``ready`` is reported by ``__aenter__`` (woken
        by ``settled``), one after it marks the server lost (every call then fails at once).
        """
        try:
            self._stage = "the handshake (server/discover, then initialize)"
            client = Client(
                self._transport(),
                read_timeout_seconds=self.connect_timeout,
                message_handler=self._on_message,
                # Listings are fetched afresh (cache_mode="refresh") and kept here; the
                # SDK's response cache would only copy each one on the event loop.
                cache=None,
            )
            async with client:
                _skip_output_check(client.session)
                self._client = client
                self._attributes = self._span_attributes(client)
                self._stage = "its tool list (tools/list)"
                await self.refresh_tools()
                self._stage = "the subscription to changes of its tool list"
                async with anyio.create_task_group() as watchers:
                    await watchers.start(self._watch, client)
                    ready.set()
                    settled.set()
                    assert self._closing is not None
                    await self._closing.wait()
                    watchers.cancel_scope.cancel()
        except Exception as exc:
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]  # the SDK's task groups wrap what they let through
            if not ready.is_set():
                self._failure = exc
            self._mark_lost(describe(exc))
        finally:
            self._client = None
            settled.set()

    @property
    def connected(self) -> bool:
        """Whether the server is connected and has not gone away."""
        return self._client is not None and self._lost is None

    async def refresh_tools(self) -> None:
        """Fetch the tool list again; runs that start afterwards see the new list.

        The listing is bounded (:data:`MCP_TOOL_LIMIT` tools, :data:`MCP_LISTING_BYTES`),
        and its schemas are checked in a worker thread, once per schema, so a large
        listing never holds the event loop.

        Raises:
            MCPServerError: The server is not connected, did not answer, or sent a
                listing past the bounds.
        """
        client = self._connected_client()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(MCP_PAGE_LIMIT):
                with anyio.fail_after(self.connect_timeout):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                _check_tool_count(self.source_name, len(tools))
                cursor = page.next_cursor
                if cursor is None:
                    break
        except MCPServerError:
            raise
        except Exception as exc:
            raise MCPServerError(
                f"{self.source_name} did not list its tools: {describe(exc)}"
            ) from exc
        listing = tuple(tools)
        views = list(self._views)
        built = await anyio.to_thread.run_sync(_prepare, self.source_name, listing, views)
        revision = next(_REVISIONS)
        for view, tools_or_error in zip(views, built, strict=True):
            view._built = (revision, tools_or_error)
        self._listing = listing
        self._revision = revision
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
            if exc.code == TOO_LARGE:
                raise MCPServerError(f"{self.source_name}: {exc.message}") from exc
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
        self._built: tuple[int, tuple[Tool, ...] | ConfigurationError] | None = None
        server._views.add(self)  # built with each listing, off the event loop

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
        if built is None or built[0] != revision:  # a view made after the listing came
            built = (revision, _build(self, server._listing))
            self._built = built
        tools = built[1]
        if isinstance(tools, ConfigurationError):
            raise ConfigurationError(tools.field, tools.message)
        return revision, tools

    def _tools(self, listing: Sequence[mcp_types.Tool]) -> tuple[Tool, ...]:
        """This view's tools of ``listing``.

        Raises:
            ConfigurationError: ``allow`` names a tool the listing lacks, or a selected
                tool cannot be offered.
        """
        server = self.server
        if self.allow is not None:
            missing = sorted(self.allow - {tool.name for tool in listing})
            if missing:
                raise ConfigurationError(
                    "allow", f"{server.source_name} lists no tool named {', '.join(missing)}"
                )
        return tuple(
            self._tool(listed)
            for listed in listing
            if (self.allow is None or listed.name in self.allow)
            and listed.name not in self.deny
            and (self.where is None or self.where(listed))
        )

    def _tool(self, listed: mcp_types.Tool) -> Tool:
        server = self.server
        original = listed.name
        exposed = f"{self.prefix}_{original}" if self.prefix else original

        async def call(**arguments: Any) -> str:
            return await server.call(original, arguments)

        try:
            _check_properties(original, listed.input_schema)
            description = _labelled(server.name, listed.description or listed.title or "")
            return Tool.from_schema(exposed, description, listed.input_schema, call,
                                    timeout=server.timeout)  # fmt: skip
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
        errlog: Where the server's stderr goes (a file; ``sys.stderr`` to see it live).
            By default it is kept to itself: its last 64 KiB are in :attr:`stderr_tail`.
        **options: ``prefix``, ``timeout``, ``connect_timeout``, ``max_message_bytes``
            (see :class:`MCPServer`).
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
        self._stderr = StderrTail()

    @property
    def stderr_tail(self) -> str:
        """The last 64 KiB the server wrote on its stderr (empty with an ``errlog``)."""
        return self._stderr.text()

    def _transport(self) -> Any:
        return stdio_transport(self._parameters, limit=self.max_message_bytes,
                               listing_limit=min(MCP_LISTING_BYTES, self.max_message_bytes),
                               errlog=self._errlog, stderr=self._stderr,
                               lost=self._mark_lost)  # fmt: skip

    def _span_attributes(self, client: Client) -> dict[str, AttributeValue]:
        return {**super()._span_attributes(client), "network.transport": "pipe"}


class MCPServerHTTP(MCPServer):
    """An MCP server reached over streamable HTTP.

    Args:
        url: The server's MCP endpoint (``http://127.0.0.1:8000/mcp``).
        headers: Headers sent with every request (authorization...); never recorded.
        name: The server's name (default: the URL's host and port).
        **options: ``prefix``, ``timeout``, ``connect_timeout``, ``max_message_bytes``
            (see :class:`MCPServer`).
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
        return http_transport(self.url, self._headers, limit=self.max_message_bytes,
                              listing_limit=min(MCP_LISTING_BYTES, self.max_message_bytes),
                              lost=self._mark_lost, on_response=self._note_session)  # fmt: skip

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


def _skip_output_check(session: ClientSession) -> None:
    """Turn off the SDK's check of ``structuredContent`` against a tool's ``outputSchema``.

    The SDK (2.3.0, ``ClientSession.validate_tool_result``) checks every result against the
    output schema the server listed, with ``jsonschema`` on the event loop: a server's
    ``"pattern": "^(a+)+$"`` and 26 characters of its own result held the loop 3.2 s past
    every timeout, doubling with each character (and the check may list the tools again,
    unbounded). The runtime reads the content blocks itself and shows structured content
    only as JSON text, so the check buys nothing here; it is skipped on this session.
    ``tests/test_mcp_bounds.py`` notices if an upgrade renames the method.
    """

    async def unchecked(name: str, result: mcp_types.CallToolResult) -> None:
        return None

    session.validate_tool_result = unchecked  # type: ignore[method-assign]


def _prepare(
    source: str, listing: Sequence[mcp_types.Tool], views: Sequence[MCPTools]
) -> list[tuple[Tool, ...] | ConfigurationError]:
    """In a worker thread: check the listing's size, then build each view's tools.

    Raises:
        MCPServerError: The listing is past :data:`MCP_LISTING_BYTES`.
    """
    size = sum(
        len(tool.name) + len(tool.description or "") + len(json.dumps(tool.input_schema))
        for tool in listing
    )
    if size > MCP_LISTING_BYTES:
        raise MCPServerError(
            f"{source} lists tools of {size} bytes of JSON, more than MCP_LISTING_BYTES "
            f"({MCP_LISTING_BYTES})"
        )
    return [_build(view, listing) for view in views]


def _check_tool_count(source: str, count: int) -> None:
    if count > MCP_TOOL_LIMIT:
        raise MCPServerError(f"{source} lists more than MCP_TOOL_LIMIT ({MCP_TOOL_LIMIT}) tools")


def _check_properties(name: str, schema: Any) -> None:
    properties = _count_properties(schema)
    if properties > MCP_SCHEMA_PROPERTIES:
        raise ConfigurationError(
            "tools",
            f"the schema of {name!r} declares {properties} properties, more than "
            f"MCP_SCHEMA_PROPERTIES ({MCP_SCHEMA_PROPERTIES})",
        )


def _build(
    view: MCPTools, listing: Sequence[mcp_types.Tool]
) -> tuple[Tool, ...] | ConfigurationError:
    try:
        return view._tools(listing)
    except ConfigurationError as exc:
        return exc


def _count_properties(schema: Any) -> int:
    """The properties a schema declares, nested ones included."""
    count = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                count += len(properties)
            stack.extend(value for value in node.values() if isinstance(value, dict | list))
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, dict | list))
    return count


def _labelled(server: str, description: str) -> str:
    """A server's tool description as the model is shown it: quoted, labelled, bounded.

    The server wrote it, not the user: it reaches the system prompt (ReAct) or the tool list
    (native) marked as the server's words, on one line (quoted as JSON, so it cannot open a
    new section of the prompt), and cut to :data:`MCP_DESCRIPTION_LIMIT` characters.
    """
    quoted = json.dumps(shorten(description, MCP_DESCRIPTION_LIMIT), ensure_ascii=False)
    return f"(MCP server {server!r} describes this tool:) {quoted}"


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
