"""Agents as tools of agents: typed input, the child's Step and usage, the depth guard."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from subagent import (
    ConfigurationError,
    ErrorKind,
    FailReason,
    LLMError,
    LLMResponse,
    RetryPolicy,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    TurnType,
    Usage,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


class Pair(BaseModel):
    a: int
    b: int = Field(default=0, description="the second term")


def reply(text: str, tokens: int) -> LLMResponse:
    return LLMResponse(text=text, usage=Usage(input_tokens=tokens, output_tokens=1))


def call(name: str, tokens: int = 0, **arguments: Any) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)],
                       usage=Usage(input_tokens=tokens, output_tokens=1))  # fmt: skip


async def test_the_childs_step_is_kept_and_its_tokens_count_as_nested() -> None:
    child = SubAgent(name="adder", prompt="Add {{a}} and {{b}}", output=Answer,
                     llm=ScriptedLLM([reply('{"x": "no"}', 7), reply('{"x": 3}', 8)]),
                     max_turns=1, return_retries=1)  # fmt: skip
    parent = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[child.as_tool()],
                      max_turns=2, return_retries=1)  # fmt: skip
    llm = ScriptedLLM([call("adder", 100, a="1", b="2"), reply('{"x": "?"}', 200),
                       reply('{"x": 3}', 300)])  # fmt: skip
    step = await parent.run(llm=llm)
    assert step.ok
    kept = step.turns[0].tool_results[0].step
    assert kept is not None and kept.agent == "adder" and kept.output == Answer(x=3)
    assert [t.type for t in kept.turns] == [TurnType.MUST_RETURN, TurnType.RETRY]
    usage = step.usage
    assert usage.work == Usage(input_tokens=300, output_tokens=2)  # normal + must_return
    assert usage.correction == Usage(input_tokens=300, output_tokens=1)  # the retry turn
    assert usage.nested == Usage(input_tokens=15, output_tokens=2)  # the child's total
    assert usage.own == Usage(input_tokens=600, output_tokens=3)
    assert usage.total == Usage(input_tokens=615, output_tokens=5)
    stored = step.model_dump_json()  # the child's Step (its output a dict once loaded) too
    assert Step[Answer].model_validate_json(stored).model_dump_json() == stored


async def test_a_failed_child_is_a_tool_error_with_its_step_kept() -> None:
    child = SubAgent(name="adder", prompt="Add {{a}}", output=Answer,
                     llm=ScriptedLLM([reply("no json", 5)]), max_turns=1)  # fmt: skip
    parent = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[child.as_tool()],
                      max_turns=2)  # fmt: skip
    llm = ScriptedLLM([call("adder", a="1"), '{"x": 0}'])
    step = await parent.run(llm=llm)
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.error_type) == (False, "agent_failed")
    assert "agent 'adder' failed (budget_exhausted)" in result.content
    assert result.step is not None and result.step.failure is not None
    assert result.step.failure.reason is FailReason.BUDGET_EXHAUSTED
    assert step.usage.nested == Usage(input_tokens=5, output_tokens=1)
    tool_message = llm.requests[1].messages[-2]
    assert "agent 'adder' failed" in tool_message.content


async def test_a_child_that_raises_keeps_its_turns_and_tokens_in_the_parents_usage() -> None:
    # The child's second call finds its script empty: the run raises after one turn.
    child = SubAgent(name="adder", prompt="Add {{a}}", output=Answer,
                     llm=ScriptedLLM([reply("no json", 5)]), max_turns=2)  # fmt: skip
    parent = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[child.as_tool()],
                      max_turns=2)  # fmt: skip
    step = await parent.run(llm=ScriptedLLM([call("adder", a="1"), '{"x": 0}']))
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.error_type) == (False, "agent_failed")
    assert "agent 'adder' raised ScriptExhaustedError" in result.content
    assert result.step is not None and result.step.failure is not None
    assert result.step.failure.reason is FailReason.ERROR
    assert [t.error_type for t in result.step.turns] == ["invalid_output", "ScriptExhaustedError"]
    assert step.usage.nested == Usage(input_tokens=5, output_tokens=1)  # was lost


def chain(depth: int, max_depth: int) -> SubAgent[Any]:
    """agent0 -> agent1 -> ... -> agent{depth}, each calling the next as a tool."""
    agent: SubAgent[Any] = SubAgent(name=f"agent{depth}", prompt="go", llm=ScriptedLLM(["leaf"]))
    for level in reversed(range(depth)):
        script: list[Any] = [call(f"agent{level + 1}"), "done"]
        tools = [agent.as_tool(max_depth=max_depth)]
        agent = SubAgent(name=f"agent{level}", prompt="go", tools=tools, llm=ScriptedLLM(script),
                         max_turns=2)  # fmt: skip
    return agent


async def test_agents_nest_as_deep_as_max_depth_allows() -> None:
    step = await chain(3, max_depth=3).run()
    assert step.ok
    level1 = step.turns[0].tool_results[0].step
    assert level1 is not None
    level2 = level1.turns[0].tool_results[0].step
    assert level2 is not None
    level3 = level2.turns[0].tool_results[0].step
    assert level3 is not None and level3.output == "leaf"


async def test_a_call_past_max_depth_is_refused_with_a_tool_error() -> None:
    step = await chain(3, max_depth=2).run()
    assert step.ok  # every level answers "done"
    level2 = step.turns[0].tool_results[0].step
    assert level2 is not None
    level2_step = level2.turns[0].tool_results[0].step
    assert level2_step is not None
    refused = level2_step.turns[0].tool_results[0]
    assert (refused.ok, refused.step) == (False, None)
    assert "would be nested 3 deep, past max_depth=2" in refused.content


async def test_a_pydantic_input_types_the_tools_parameters() -> None:
    seen: list[str] = []

    def record(request: Any) -> str:
        seen.append(request.messages[1].content.split("\n\n")[0])
        return '{"x": 5}'

    child = SubAgent(name="adder", prompt="Add {{a}} and {{b}}", output=Answer,
                     llm=ScriptedLLM([record]), max_turns=1)  # fmt: skip
    tool = child.as_tool(parameters=Pair)
    schema = tool.definition.parameters
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["properties"]["b"]["description"] == "the second term"
    assert schema["required"] == ["a"]
    parent = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[tool], max_turns=2)
    step = await parent.run(llm=ScriptedLLM([call("adder", a="2"), '{"x": 5}']))
    assert step.ok and seen == ["Add 2 and 0"]


async def test_declared_variable_types_are_validated() -> None:
    child = SubAgent(name="adder", prompt="Add {{a}}", output=Answer,
                     llm=ScriptedLLM(['{"x": 1}']), max_turns=1)  # fmt: skip
    parent = SubAgent(name="boss", prompt="Solve", output=Answer, max_turns=2,
                      tools=[child.as_tool(parameters={"a": int})])  # fmt: skip
    step = await parent.run(llm=ScriptedLLM([call("adder", a="two"), '{"x": 1}']))
    result = step.turns[0].tool_results[0]
    assert result.error_type == "invalid_arguments" and "- a: " in result.content


def test_parameters_must_cover_the_prompts_variables() -> None:
    child = SubAgent(name="adder", prompt="Add {{a}} and {{c}}", output=Answer)
    with pytest.raises(ConfigurationError, match=r"parameters: leaves out \['c'\]"):
        child.as_tool(parameters=Pair)
    with pytest.raises(ConfigurationError, match="max_depth"):
        child.as_tool(max_depth=0)


async def test_transport_retries_are_counted_with_the_tokens_servers_report() -> None:
    busy = LLMError(ErrorKind.SERVER_ERROR, "busy", status_code=503, usage=(4, 0))
    agent = SubAgent(name="a", prompt="p", output=Answer, max_turns=1,
                     retry_policy=RetryPolicy(max_attempts=3, initial_delay=0))  # fmt: skip
    llm = ScriptedLLM([busy, LLMError(ErrorKind.CONNECTION, "reset"), reply('{"x": 1}', 9)])
    step = await agent.run(llm=llm)
    assert step.ok
    assert step.usage.transport_retries == 2
    assert step.usage.transport_retry_usage == Usage(input_tokens=4, output_tokens=0)
    assert step.usage.total == Usage(input_tokens=9, output_tokens=1)
