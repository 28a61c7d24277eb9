"""The ReAct protocol in the loop, and reasoning kept apart (both protocols)."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from subagent import (
    ConfigurationError,
    LLMResponse,
    ReasoningDelta,
    RunEvent,
    ScriptedLLM,
    SubAgent,
    TextDelta,
    ToolPolicy,
    TurnOutcome,
    TurnType,
    tool,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


@tool(run_in_thread=False)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def react(**options: Any) -> SubAgent[Answer]:
    return SubAgent(name="probe", prompt="Return data", output=Answer, tools=[lookup],
                    tool_policy=ToolPolicy(protocol="react"), **options)  # fmt: skip


ACTION = 'Thought: I need the value.\nAction: {"tool": "lookup", "input": {"key": "k"}}'


async def test_the_prompt_describes_the_tools_only_where_they_are_offered() -> None:
    llm = ScriptedLLM([ACTION, "Final Answer: nope", '{"x": 1}'])
    await react().run(llm=llm, max_turns=2, return_retries=1)
    systems = [request.messages[0].content for request in llm.requests]
    assert all(request.tools == [] for request in llm.requests)  # never native schemas
    assert "- lookup: Look a key up." in systems[0] and '"key"' in systems[0]
    assert "Action:" in systems[0]
    assert all("lookup" not in system and "Action:" not in system for system in systems[1:])


async def test_an_action_runs_its_tool_and_the_result_comes_back_as_an_observation() -> None:
    llm = ScriptedLLM([ACTION, 'Thought: done.\nFinal Answer: {"x": 7}'])
    step = await react().run(llm=llm, max_turns=3)
    assert step.ok and step.output == Answer(x=7)
    first = step.turns[0]
    assert first.outcome is TurnOutcome.CONTINUE
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("lookup", {"key": "k"})]
    assert first.tool_results[0].ok and "value of k" in first.tool_results[0].content
    assistant, observation = llm.requests[1].messages[-2:]
    assert (assistant.role, assistant.content) == ("assistant", ACTION)
    assert observation.role == "user" and observation.content.startswith("Observation:")
    assert "value of k" in observation.content


async def test_an_unreadable_action_is_an_error_turn_that_quotes_it() -> None:
    broken = 'Action: {"tool": "lookup", "input": {"key": broken}}'
    llm = ScriptedLLM([broken, ACTION, 'Final Answer: {"x": 1}'])
    step = await react().run(llm=llm, max_turns=3)
    first = step.turns[0]
    assert (first.outcome, first.error_type) == (TurnOutcome.ERROR, "invalid_action")
    assert first.error is not None and "could not be read" in first.error
    assert "broken" in first.error  # quotes what was wrong
    assert step.ok and [t.type for t in step.turns] == [TurnType.NORMAL] * 2 + [
        TurnType.MUST_RETURN
    ]


async def test_a_reply_with_neither_an_action_nor_an_answer_is_fed_back_in_normal() -> None:
    llm = ScriptedLLM(["I think the answer is 3.", 'Final Answer: {"x": 3}'])
    step = await react().run(llm=llm, max_turns=2)
    assert step.turns[0].error_type == "invalid_action"
    assert 'no "Action:"' in (step.turns[0].error or "")
    assert step.ok


async def test_where_no_tool_can_be_called_a_plain_reply_is_the_answer() -> None:
    step = await react().run(llm=ScriptedLLM(['{"x": 5}']), max_turns=1)
    assert step.ok and step.output == Answer(x=5)


async def test_an_action_where_tools_are_not_offered_is_refused_as_with_native_calls() -> None:
    llm = ScriptedLLM([ACTION, 'Final Answer: {"x": 2}'])
    step = await react().run(llm=llm, max_turns=1, return_retries=1)
    first = step.turns[0]
    assert (first.outcome, first.error_type) == (TurnOutcome.ERROR, "tools_unavailable")
    assert first.tool_results[0].ok is False
    assert step.ok


def test_an_unknown_protocol_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"protocol: must be one of \['native', 'react'\]"):
        SubAgent(name="a", prompt="p", tool_policy=ToolPolicy(protocol="xml"))  # type: ignore[arg-type]


# --- reasoning, under both protocols ---


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_think_blocks_are_recorded_never_parsed_never_fed_back(protocol: str) -> None:
    prefix = "" if protocol == "native" else "Final Answer: "
    llm = ScriptedLLM([
        f'<think>the value is 3, written as {{"x": 3}}</think>{prefix}{{"x": "three"}}',
        f'<think>fix the type</think>{prefix}{{"x": 3}}',
    ])  # fmt: skip
    agent = SubAgent(name="r", prompt="p", output=Answer, tool_policy=ToolPolicy(protocol=protocol))  # type: ignore[arg-type]
    step = await agent.run(llm=llm, max_turns=1, return_retries=1)
    assert step.ok and step.output == Answer(x=3)
    first = step.turns[0]
    assert first.reasoning == 'the value is 3, written as {"x": 3}'  # not taken as the answer
    assert "<think>" not in first.reply and first.outcome is TurnOutcome.ERROR
    sent = [m.content for m in llm.requests[1].messages]
    assert not any("the value is 3" in content for content in sent)  # not fed back
    assert step.turns[1].reasoning == "fix the type"


async def test_reasoning_sent_apart_from_the_text_is_recorded() -> None:
    agent = SubAgent(name="r", prompt="p", output=Answer)
    step = await agent.run(llm=ScriptedLLM([LLMResponse(text='{"x": 1}', reasoning="easy")]))
    assert step.turns[0].reasoning == "easy" and step.turns[0].reply == '{"x": 1}'


async def test_a_stream_tells_reasoning_deltas_from_text_deltas() -> None:
    agent = SubAgent(name="r", prompt="p", output=Answer)
    llm = ScriptedLLM(['<think>first think</think>{"x": 4}'])
    events: list[RunEvent] = []
    async with agent.stream(llm=llm) as run:
        events = [event async for event in run]
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert (reasoning, text) == ("first think", '{"x": 4}')
    assert run.step is not None and run.step.ok


def test_the_example_action_is_valid_json_with_the_first_tools_own_arguments() -> None:
    def forecast(city: str, unit: Literal["celsius", "kelvin"], days: int = 1) -> str:
        """The weather."""
        return "sunny"

    llm = ScriptedLLM(["Final Answer: 5"])
    SubAgent(name="w", prompt="Weather?", tools=[forecast],
             tool_policy=ToolPolicy(protocol="react"), max_turns=2).run_sync(llm=llm)  # fmt: skip
    system = llm.requests[0].messages[0].content
    example = next(line for line in system.splitlines()
                   if line.startswith('Action: {"tool": "forecast"'))  # fmt: skip
    action = json.loads(example.removeprefix("Action: "))
    assert action == {"tool": "forecast", "input": {"city": "<city>", "unit": "celsius", "days": 1}}


async def test_a_final_answer_holding_a_fail_object_beside_the_answer_is_corrected() -> None:
    muddled = 'Final Answer: {"x": 1} {"fail": "cannot"}'
    step = await react().run(llm=ScriptedLLM([muddled, 'Final Answer: {"x": 2}']),
                             max_turns=1, return_retries=1)  # fmt: skip
    assert step.ok and step.output == Answer(x=2)
    assert "both answers and gives up" in (step.turns[0].error or "")
