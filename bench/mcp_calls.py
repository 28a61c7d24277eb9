"""MCP benchmark: the per-call overhead of an MCP tool against the same Python tool.

S2 (one tool call, then a valid return, on ScriptedLLM, tracing off) with `add` as an
inline Python tool, then from a real MCP server over stdio and over streamable HTTP on
127.0.0.1 (tests/mcp_server.py, the SDK's own server, its `add` tool alone offered).
Wall-clock, not CPU time: most of an MCP call's cost is in the server's process and the
pipe or socket between. Median
microseconds per run over repeated batches, after a warm-up; the difference to the
Python tool is the overhead of one MCP call.
"""

from __future__ import annotations

import importlib.metadata
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from core import CONTEXT, S2_AGENT, S2_SCRIPT, Answer

from subagent import ScriptedLLM, SubAgent
from subagent.mcp import MCPServer, MCPServerHTTP, MCPServerStdio

# The tests' server (the same socket set-up, one place to keep it right); `add` only.
SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "mcp_server.py")


def s2_with(agent: SubAgent[Answer]) -> Callable[[], object]:
    async def run() -> object:
        step = await agent.run(CONTEXT, llm=ScriptedLLM(S2_SCRIPT), max_turns=2)
        assert step.ok and len(step.turns) == 2, step.failure
        return step

    return run


async def wall(run: Callable[[], object], runs: int = 300, batches: int = 5) -> float:
    """Median wall-clock microseconds per run over ``batches`` batches of ``runs``."""
    for _ in range(50):  # warm-up
        await run()  # type: ignore[misc]
    medians = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(runs):
            await run()  # type: ignore[misc]
        medians.append((time.perf_counter() - start) / runs * 1e6)
    return statistics.median(medians)


async def through(server: MCPServer) -> float:
    agent = SubAgent(name="s2", prompt="Compute {{question}}", output=Answer,
                     tools=[server.select(allow=["add"])])  # fmt: skip
    async with server:
        return await wall(s2_with(agent))


async def main() -> dict[str, float]:
    results = {"python": await wall(s2_with(S2_AGENT))}
    results["mcp stdio"] = await through(MCPServerStdio(sys.executable, [SERVER, "stdio"]))
    # Started before the loop's work and read once: a blocking start is fine in a bench.
    process = subprocess.Popen([sys.executable, SERVER, "http"], stdout=subprocess.PIPE,  # noqa: ASYNC220
                               text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        results["mcp http"] = await through(MCPServerHTTP(f"http://127.0.0.1:{port}/mcp"))
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    version = importlib.metadata.version("mcp")
    print(f"mcp (S2, one `add` call per run, ScriptedLLM, asyncio; wall-clock; SDK {version})")
    base = results["python"]
    for name, micros in results.items():
        extra = "" if name == "python" else f"   +{micros - base:8.1f} us per MCP call"
        print(f"  {name:<10}: {micros:8.1f} us/run{extra}")
    return results


if __name__ == "__main__":
    anyio.run(main)
