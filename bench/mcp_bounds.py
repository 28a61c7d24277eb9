"""MCP servers as untrusted: how long a hostile server holds the event loop, and what it costs.

Each scenario runs against tests/mcp_hostile_server.py (raw JSON-RPC over stdio) while a
ticker task sleeps 5 ms at a time: the longest gap between its ticks is the longest the
event loop was held. Also printed: the scenario's wall time, its outcome, and the growth of
peak RSS. Run one scenario per process (peak RSS is per process), with the library first on
the path; pointing PYTHONPATH at an older checkout gives the "before" numbers:

    PYTHONPATH=. python bench/mcp_bounds.py shaped          # outputSchema "^(a+)+$", 26 a's
    PYTHONPATH=. python bench/mcp_bounds.py pattern         # Tool.from_schema, 27 a's
    PYTHONPATH=. python bench/mcp_bounds.py tools 1000      # connect, then a run, N tools
    PYTHONPATH=. python bench/mcp_bounds.py properties 900  # one tool of N properties
    PYTHONPATH=. python bench/mcp_bounds.py flood 300000    # a result of N text blocks
    PYTHONPATH=. python bench/mcp_bounds.py badbytes        # a byte that is not UTF-8
    PYTHONPATH=. python bench/mcp_bounds.py silent          # a server that never answers

With ``--freeze`` the objects alive before the scenario are moved out of the garbage
collector's sight first (``gc.freeze()``): a full collection walks every object of the
process, and one that the scenario's allocations set off is counted in its stall
otherwise (about 40-90 ms in this process, whatever the scenario).
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from subagent import LLMResponse, ScriptedLLM, SubAgent, Tool, ToolCall
from subagent.mcp import MCPServerStdio

HOSTILE = str(Path(__file__).resolve().parents[1] / "tests" / "mcp_hostile_server.py")


def call(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)])


def server(*options: str, **settings: Any) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [HOSTILE, "stdio", *options], name="hostile",
                          errlog=open(os.devnull, "w"), **settings)  # fmt: skip


async def one_call(name: str, options: tuple[str, ...] = (), **arguments: Any) -> str:
    async with server(*options, timeout=1) as hostile:
        agent = SubAgent(name="x", prompt="Go", tools=[hostile], max_turns=3)
        step = await agent.run(llm=ScriptedLLM([call(name, **arguments), "done"]),
                               mission_timeout=1)  # fmt: skip
    if step.failure is not None:
        return f"run failed: {step.failure.reason.value}"
    result = step.turns[0].tool_results[0]
    return f"call {'ok' if result.ok else result.error_type}: {result.content[:90]!r}"


async def scenario(name: str, size: int) -> str:
    if name == "shaped":
        return await one_call("shaped")
    if name == "pattern":
        schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
        try:
            built = Tool.from_schema("t", "d", schema, lambda s: s)
            built.validate_arguments({"s": "a" * 27 + "!"})
        except Exception as exc:
            return f"{type(exc).__name__}"
        return "accepted"
    if name in ("tools", "properties"):
        option = "--tools" if name == "tools" else "--properties"
        try:
            async with server(option, str(size)) as hostile:
                agent = SubAgent(name="x", prompt="Go", tools=[hostile], max_turns=2)
                llm = ScriptedLLM(["done"])
                await agent.run(llm=llm)
                return f"run offered {len(llm.requests[0].tools)} tools"
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc)[:120]}"
    if name == "flood":
        return await one_call("flood", count=size)
    if name == "badbytes":
        return await one_call("badbytes")
    if name == "silent":
        try:
            async with server("--silent", connect_timeout=1):
                return "connected"
        except BaseException as exc:
            return f"{type(exc).__name__}: {str(exc)[:120]}"
    raise SystemExit(__doc__)


async def main(name: str, size: int) -> None:
    longest = 0.0
    done = False

    async def tick() -> None:
        nonlocal longest
        while not done:
            before = time.perf_counter()
            await anyio.sleep(0.005)
            longest = max(longest, time.perf_counter() - before - 0.005)

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        await anyio.sleep(0.01)  # the ticker is waiting before the scenario starts
        start = time.perf_counter()
        outcome = await scenario(name, size)
        wall = time.perf_counter() - start
        done = True
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    print(f"{name} {size or ''}: {outcome}")
    held = longest * 1000
    print(f"  wall {wall:.2f} s, loop held at most {held:.0f} ms, peak RSS +{grown:.0f} MiB")


if __name__ == "__main__":
    words = [word for word in sys.argv[1:] if word != "--freeze"]
    if "--freeze" in sys.argv:
        gc.freeze()
    anyio.run(main, words[0], int(words[1]) if len(words) > 1 else 0)
