"""The ledger's MCP server for the durable crash tests (tests/test_durable_crash.py).

``python durable_mcp_server.py LEDGER`` serves over stdio, written with the SDK's own server
side. Its tool ``record(item)`` is the ledger agent's ``record`` (tests/durable_child.py):
it appends the item to the file LEDGER (the side effect) and answers ``recorded <item>``.
Every call that reaches it is first appended to ``LEDGER.calls``, so a test counts the
server's calls, those cut off included.

Environment (the child forwards it):

- ``DURABLE_MCP_TOOLS``: the tools it lists, comma-separated, among ``record`` and
  ``extra`` (default ``record``): a server that changed between a crash and the restart.
- ``DURABLE_MCP_HOLD``: ``<item>:<port>``: the call recording ``item`` tells
  127.0.0.1:``port`` this process's id, then waits to be killed, before its side effect.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

LEDGER = Path(sys.argv[1])
CALLS = LEDGER.with_name(LEDGER.name + ".calls")
HELD, _, PORT = os.environ.get("DURABLE_MCP_HOLD", "").partition(":")

server = MCPServer("ledger", log_level="CRITICAL")


def _append(path: Path, item: str) -> None:
    with path.open("a", encoding="utf-8") as lines:
        lines.write(f"{item}\n")


async def record(item: str) -> str:
    """Record one item in the ledger."""
    _append(CALLS, item)
    if item == HELD:
        stream = await anyio.connect_tcp("127.0.0.1", int(PORT))
        async with stream:
            await stream.send(f"{os.getpid()}\n".encode())
            await anyio.sleep_forever()  # the test kills this process here
    _append(LEDGER, item)
    return f"recorded {item}"


def extra() -> str:
    """A tool the server lists only after an upgrade."""
    return "extra"


if __name__ == "__main__":
    for name in os.environ.get("DURABLE_MCP_TOOLS", "record").split(","):
        server.add_tool({"record": record, "extra": extra}[name], name=name)
    server.run("stdio")
