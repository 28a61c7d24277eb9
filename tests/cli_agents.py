"""Agents for the command-line tests (``tests/test_cli.py``), found as ``cli_agents:NAME``."""

from __future__ import annotations

from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent


class Answer(BaseModel):
    value: int


class FortyTwo:
    """A model of the agent's own: always the same valid answer."""

    model_name = "forty-two"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse(text='{"value": 42}')


answer = SubAgent(name="answer", prompt="Answer {{question}}", output=Answer, max_turns=1)
"""No model of its own: the command line gives it one."""

own_model = SubAgent(name="own_model", prompt="Answer {{question}}", output=Answer,
                     llm=FortyTwo())  # fmt: skip

NOT_AN_AGENT = 3


def broken_parser(text: str) -> object:
    """A parser with a bug: the run raises ``ParserContractError`` (exit status 3)."""
    raise RuntimeError("the parser has a bug")


broken = SubAgent(name="broken", prompt="Answer {{question}}", output=broken_parser,
                  max_turns=1)  # fmt: skip


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


with_tool = SubAgent(name="with_tool", prompt="Answer {{question}}", output=Answer, tools=[add],
                     max_turns=1)  # fmt: skip
"""A tool: the request shows the protocol (native tools, or ReAct text)."""
