"""Agents for the command-line tests (``tests/test_cli.py``), found as ``cli_agents:NAME``."""

from __future__ import annotations

from pydantic import BaseModel

from subagent import InputGuardrail, LLMRequest, LLMResponse, Message, SubAgent, Tool, ToolCall


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


def no_homework(messages: list[Message]) -> str | None:
    """Refuses a task about homework."""
    return "no homework here" if "homework" in messages[-1].content else None


guarded = SubAgent(name="guarded", prompt="Answer {{question}}", output=Answer, max_turns=1,
                   hooks=[InputGuardrail(no_homework)])  # fmt: skip
"""An input guardrail: a question about homework fails ``input_refused`` (exit status 1)."""

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


class AsksToDeploy:
    """A model of the agent's own that asks to deploy: the run pauses for approval."""

    model_name = "deployer"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        call = ToolCall(id="d1", name="deploy", arguments={"env": "prod"})
        return LLMResponse(tool_calls=[call])


DEPLOYED: list[str] = []
"""The environments deployed to in this process, in order."""


def deploy(env: str) -> str:
    """Deploy to an environment."""
    DEPLOYED.append(env)
    return f"deployed to {env}"


needs_approval = SubAgent(name="needs_approval", prompt="Deploy {{question}}", max_turns=3,
                          tools=[Tool(deploy, requires_approval=True)],
                          llm=AsksToDeploy())  # fmt: skip
"""Pauses on its first turn: exit status 4."""


class DeploysThenReports:
    """A model of the agent's own that asks to deploy twice, then reports what came back.

    Stateless (it reads the conversation), so a run it paused resumes in another process.
    """

    model_name = "deploy-and-report"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        results: list[str] = []
        for message in reversed(request.messages):
            if message.role != "tool":
                break
            results.insert(0, message.content)
        if results:
            return LLMResponse(text="report: " + " | ".join(results))
        return LLMResponse(tool_calls=[
            ToolCall(id="d1", name="deploy", arguments={"env": "prod"}),
            ToolCall(id="d2", name="deploy", arguments={"env": "eu-west"}),
        ])  # fmt: skip


approval_flow = SubAgent(name="approval_flow", prompt="Deploy {{question}}", max_turns=3,
                         tools=[Tool(deploy, requires_approval=True, run_in_thread=False)],
                         llm=DeploysThenReports())  # fmt: skip
"""Pauses on its first turn with two calls (d1, d2); resumed, it reports their results."""

approval_broken = SubAgent(name="approval_broken", prompt="Deploy {{question}}", max_turns=3,
                           output=broken_parser,
                           tools=[Tool(deploy, requires_approval=True, run_in_thread=False)],
                           llm=DeploysThenReports())  # fmt: skip
"""Pauses like ``approval_flow``; resumed, its parser raises (exit status 3)."""
