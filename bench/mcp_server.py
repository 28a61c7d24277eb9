"""The MCP server of bench/mcp.py: `add`, over stdio (`stdio`) or streamable HTTP (`http`,
on 127.0.0.1 at an ephemeral port printed as the first line)."""

from __future__ import annotations

import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench", log_level="ERROR")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


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
