"""The local model calls a tool of a real MCP server (stdio, the SDK's own server side)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import local_llm
import pytest

from subagent import OpenAIChat, SubAgent
from subagent.mcp import MCPServerStdio

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SERVER = str(Path(__file__).resolve().parents[1] / "mcp_server.py")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # both backends are covered by tests/test_mcp.py


@pytest.fixture(scope="module")
def qwen() -> Iterator[local_llm.LocalServer]:
    with local_llm.running("qwen") as server:
        yield server


async def test_the_local_model_adds_with_an_mcp_tool(qwen: local_llm.LocalServer) -> None:
    model = OpenAIChat(model="local", base_url=qwen.base_url, timeout=120, _environ={})
    calc = MCPServerStdio(sys.executable, [SERVER, "stdio"], name="calc")
    agent = SubAgent(
        name="adder",
        prompt="What is 1234 + 4321? Use the add tool, then answer with the number only.",
        tools=[calc.select(allow=["add"])],
        max_turns=4,
        return_retries=1,
    )
    async with calc:
        step = await agent.run(llm=model)
    calls = [call.name for turn in step.turns for call in turn.tool_calls]
    assert "add" in calls, step.turns
    results = [result for turn in step.turns for result in turn.tool_results if result.ok]
    assert any("5555" in result.content for result in results)
    assert step.ok and "5555" in str(step.output)
