"""A real MCP server for the tests, written with the SDK's own server side (MCPServer).

``python tests/mcp_server.py stdio`` serves over stdin/stdout; ``python tests/mcp_server.py
http`` serves streamable HTTP on 127.0.0.1 at an ephemeral port, printed as the first line
of its stdout. Its tools exercise what the client must handle: plain results, errors (the
SDK's ToolError and a plain exception), slowness, a crash of the whole process, a call held
until the test kills the process, images, trace context, concurrency and a tool list that
changes.
"""

from __future__ import annotations

import base64
import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ImageContent, TextContent

server = MCPServer("calc", log_level="CRITICAL")
_arrived = 0
_together: anyio.Event | None = None


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then say done."""
    await anyio.sleep(seconds)
    return "done"


@server.tool()
def crash() -> str:
    """End the server's process at once (a server that dies mid-call)."""
    os._exit(3)


@server.tool()
async def hold(port: int) -> str:
    """Tell 127.0.0.1:``port`` this process's id, then wait to be killed (a server killed
    mid-call, the test knowing when the call has arrived)."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    async with stream:
        await stream.send(f"{os.getpid()}\n".encode())
        await anyio.sleep_forever()
    return "never"


@server.tool()
def refuse(reason: str) -> CallToolResult:
    """Report an error as MCP tools do (isError)."""
    return CallToolResult(content=[TextContent(type="text", text=f"refused: {reason}")],
                          is_error=True)  # fmt: skip


@server.tool()
def explain(reason: str) -> str:
    """Fail with a ToolError: its text reaches the client."""
    raise ToolError(f"cannot: {reason}")


@server.tool()
def stumble(reason: str) -> str:
    """Fail with a plain exception: the SDK shows the client only that the tool failed."""
    raise ValueError(f"cannot: {reason}")


@server.tool()
def picture() -> CallToolResult:
    """Return an image and a caption."""
    data = base64.b64encode(b"\x89PNG" + bytes(96)).decode()
    caption = TextContent(type="text", text="a small picture")
    return CallToolResult(content=[caption, ImageContent(type="image", data=data,
                                                         mime_type="image/png")])  # fmt: skip


@server.tool()
def traceparent(ctx: Context) -> str:
    """The W3C traceparent this request carried in its _meta (empty without)."""
    meta = ctx.request_context.meta or {}
    value = meta.get("traceparent") if isinstance(meta, dict) else getattr(meta, "traceparent", "")
    return str(value or "")


@server.tool()
async def gather(count: int) -> str:
    """Wait until ``count`` calls are in flight together (10 s at most)."""
    global _arrived, _together
    if _together is None:
        _together = anyio.Event()
    _arrived += 1
    if _arrived >= count:
        _together.set()
    with anyio.move_on_after(10):
        await _together.wait()
    return "together" if _together.is_set() else "alone"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``extra`` and tell the client its list changed."""
    if server._tool_manager.get_tool("extra") is None:
        server.add_tool(lambda: "extra!", name="extra", description="A tool added later.")
    await ctx.notify_tools_changed()
    return "grown"


def listening_socket() -> socket.socket:
    """A listening TCP socket on an ephemeral port of 127.0.0.1, its replies sent at once.

    Made with ``IPPROTO_TCP`` and ``TCP_NODELAY``: asyncio sets ``TCP_NODELAY`` on an
    accepted connection only when the listening socket's ``proto`` is ``IPPROTO_TCP``, and
    ``socket.socket()`` gives 0. Without it uvicorn's two writes per response (headers,
    then body) meet Nagle's algorithm and the client's delayed ACK: about 40 ms per MCP
    call on loopback (docs/performance.md).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited on Linux
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        sock = listening_socket()
        print(sock.getsockname()[1], flush=True)
        config = uvicorn.Config(server.streamable_http_app(), log_level="critical")
        anyio.run(uvicorn.Server(config).serve, [sock])
