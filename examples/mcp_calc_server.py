"""A tiny MCP server for examples/mcp_tools.py, written with the SDK's own server side.

`python examples/mcp_calc_server.py` serves over stdin/stdout (the client starts it).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("calc", log_level="ERROR")


@server.tool()
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


if __name__ == "__main__":
    server.run("stdio")
