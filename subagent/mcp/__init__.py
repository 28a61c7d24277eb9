"""MCP servers as tool sources, on the official ``mcp`` SDK (the optional ``mcp`` extra).

``pip install "subagent-runtime[mcp]"``, then::

    from subagent.mcp import MCPServerStdio

    server = MCPServerStdio(sys.executable, ["calc_server.py"], name="calc")
    agent = SubAgent(name="calc", prompt="...", tools=[add, server])
    async with server:
        step = await agent.run(...)

The server's lifetime is yours (``async with server:``); its tools are listed once per
connection and cached, refreshed when the server says they changed or when
:meth:`MCPServer.refresh_tools` is awaited. :meth:`MCPServer.select` filters them for one
agent (allow / deny lists, a predicate) and may prefix their names. Their calls obey the
rules of any tool: schemas sent as given and checked, arguments validated with feedback,
a per-call timeout, result caps, offered only in ``normal`` turns. A server that goes
away mid-run fails the call (:class:`MCPServerLostError`, a tool error) and ends the run
``failed(tool_server_lost)``. See ``docs/mcp.md``.

What lives here: ``_server`` (the servers, the filtered views, the calls, the listing's
bounds), ``_stdio`` (the stdio transport: the process, its lines read within a bound, its
stderr), ``_http`` (the streamable HTTP client: a dead server and an oversized reply made
JSON-RPC errors), ``_results`` (a ``tools/call`` result as the text the model reads).
What it may import: the tools room and the base modules, and the ``mcp`` SDK; nothing in
the library imports this room, so ``import subagent`` never needs the SDK.
"""

try:
    import mcp as _sdk  # noqa: F401 - only to say what is missing
except ImportError as _missing:  # pragma: no cover - the extra is installed in tests
    raise ImportError(
        'subagent.mcp needs the MCP SDK: pip install "subagent-runtime[mcp]"'
    ) from _missing

from subagent.mcp._server import (
    MCPServer,
    MCPServerError,
    MCPServerHTTP,
    MCPServerLostError,
    MCPServerStdio,
    MCPToolError,
    MCPTools,
)

__all__ = [
    "MCPServer",
    "MCPServerError",
    "MCPServerHTTP",
    "MCPServerLostError",
    "MCPServerStdio",
    "MCPToolError",
    "MCPTools",
]
