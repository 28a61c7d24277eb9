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


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        print(sock.getsockname()[1], flush=True)
        config = uvicorn.Config(server.streamable_http_app(), log_level="critical")
        anyio.run(uvicorn.Server(config).serve, [sock])
