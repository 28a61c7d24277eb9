"""Approval of a tool source's tools: judged exactly like plain tools, wherever they run.

A run's tools are resolved once (its plain tools and every source's current tools); the
approval rule, resume's check of decisions and ``as_tool``'s refusal read that one set.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from support import ListedSource

from subagent import (
    ConfigurationError,
    Decision,
    LLMResponse,
    ScriptedLLM,
    SubAgent,
    Tool,
    ToolCall,
    ToolPolicy,
    TurnOutcome,
)
from subagent.tools import mapped_source

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


class Deployments:
    """A deploy tool whose calls this test counts."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def tool(self, *, requires_approval: bool = False) -> Tool:
        def deploy(env: str) -> str:
            """Deploy to an environment."""
            self.made.append(env)
            return f"deployed to {env}"

        return Tool(deploy, requires_approval=requires_approval, run_in_thread=False)


def deploy_then_answer() -> ScriptedLLM:
    return ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="deploy", arguments={"env": "prod"})]),
        '{"x": 1}',
    ])  # fmt: skip


def agent(*tools: Any, **fields: Any) -> SubAgent[Answer]:
    return SubAgent(name="ops", prompt="Ship it", output=Answer, tools=list(tools),
                    max_turns=3, **fields)  # fmt: skip


async def test_an_approval_policy_judges_a_source_tool_before_it_runs() -> None:
    deployments = Deployments()
    asked: list[tuple[str, dict[str, Any]]] = []

    def policy(name: str, arguments: dict[str, Any]) -> bool:
        asked.append((name, dict(arguments)))
        return True

    ops = agent(ListedSource(deployments.tool()), tool_policy=ToolPolicy(approval=policy))
    step = await ops.run(llm=deploy_then_answer())
    assert step.paused and deployments.made == []
    assert asked == [("deploy", {"env": "prod"})]
    assert [call.name for call in step.pending.calls] == ["deploy"]


async def test_a_source_tool_marked_requires_approval_pauses_the_run() -> None:
    deployments = Deployments()
    step = await agent(ListedSource(deployments.tool(requires_approval=True))).run(
        llm=deploy_then_answer()
    )
    assert step.paused and deployments.made == []


async def test_a_mapped_source_keeps_its_tools_approval() -> None:
    deployments = Deployments()
    wrapped = mapped_source(ListedSource(deployments.tool(requires_approval=True)), lambda t: t)
    step = await agent(wrapped).run(llm=deploy_then_answer())
    assert step.paused and deployments.made == []


async def test_a_paused_source_call_runs_once_approved_and_never_when_denied() -> None:
    deployments = Deployments()
    ops = agent(ListedSource(deployments.tool(requires_approval=True)))
    paused = await ops.run(llm=deploy_then_answer())
    denied = await ops.resume(paused.state, {"c1": Decision.deny("not today")},
                              llm=ScriptedLLM(['{"x": 0}']))  # fmt: skip
    assert deployments.made == [] and denied.output == Answer(x=0)
    approved = await ops.resume(paused.state, {"c1": True}, llm=ScriptedLLM(['{"x": 1}']))
    assert deployments.made == ["prod"] and approved.output == Answer(x=1)


async def test_resuming_a_paused_source_call_without_its_decision_is_refused() -> None:
    deployments = Deployments()
    ops = agent(ListedSource(deployments.tool(requires_approval=True)))
    paused = await ops.run(llm=deploy_then_answer())
    with pytest.raises(ConfigurationError, match="c1"):
        await ops.resume(paused.state, {}, llm=ScriptedLLM(['{"x": 1}']))
    assert deployments.made == []


async def test_a_source_tool_that_needs_no_approval_runs_without_a_pause() -> None:
    deployments = Deployments()
    step = await agent(ListedSource(deployments.tool())).run(llm=deploy_then_answer())
    assert step.output == Answer(x=1) and deployments.made == ["prod"]
    assert step.turns[0].outcome is TurnOutcome.CONTINUE


def test_as_tool_refuses_a_child_whose_listed_source_tools_need_approval() -> None:
    child = agent(ListedSource(Deployments().tool(requires_approval=True)))
    with pytest.raises(ConfigurationError, match="requires_approval") as raised:
        child.as_tool()
    assert raised.value.field == "approval"


async def test_a_child_whose_source_later_lists_a_tool_needing_approval_is_not_run() -> None:
    deployments = Deployments()
    source = ListedSource(deployments.tool())
    child = agent(source)
    parent = SubAgent(name="lead", prompt="Delegate", output=Answer, max_turns=2,
                      tools=[child.as_tool(name="ops")])  # fmt: skip
    source.lists(deployments.tool(requires_approval=True))
    step = await parent.run(llm=ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="p1", name="ops", arguments={})]),
        '{"x": 2}',
    ]))  # fmt: skip
    assert deployments.made == []
    result = step.turns[0].tool_results[0]
    assert not result.ok and "asks for approval of tool calls" in result.content
    assert step.output == Answer(x=2)
