"""Tools from an MCP server beside a Python tool: `python examples/mcp_tools.py`.

The MCP server (examples/mcp_calc_server.py) runs as a subprocess over stdio; the agent
offers its `multiply` tool (filtered with `select`) next to the Python function `add`. The
model here is scripted so the example runs anywhere; set `llm=` to a real one
("openai:MODEL@http://127.0.0.1:8080/v1") to let a model choose the calls. Needs the `mcp`
extra: pip install "subagent-runtime[mcp]".
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from subagent import LLMResponse, ScriptedLLM, SubAgent, ToolCall
from subagent.mcp import MCPServerStdio

SERVER = Path(__file__).with_name("mcp_calc_server.py")


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


async def main() -> None:
    calc = MCPServerStdio(sys.executable, [str(SERVER)], name="calc")
    agent = SubAgent(
        name="arithmetic",
        prompt="Compute (2 + 3) * 4.",
        tools=[add, calc.select(allow=["multiply"])],
        max_turns=4,
    )
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})]),
        LLMResponse(tool_calls=[ToolCall(name="multiply", arguments={"a": 5, "b": 4})]),
        "20",
    ])  # fmt: skip
    async with calc:  # the connection lives as long as this block
        step = await agent.run(llm=llm)
    print("offered:", ", ".join(tool.name for tool in llm.requests[0].tools))
    for turn in step.turns:
        for result in turn.tool_results:
            print(f"{result.name}: {result.content.splitlines()[2]}")
    print(step.summary(), "->", step.output)


if __name__ == "__main__":
    anyio.run(main)
