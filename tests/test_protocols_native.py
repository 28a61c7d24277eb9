"""The native protocol's reading of a tool call written as text (subagent.protocols._native).

A reply whose whole text is a call of an offered tool, which neither the server nor the
adapter turned into a call, is no answer: the model is told it was not run, and a run that
ends on it says so in its failure.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from subagent import LLMResponse, ScriptedLLM, SubAgent, ToolCall
from subagent._templates import default_templates
from subagent.protocols._native import NATIVE, call_written_as_text

TEMPLATES = default_templates()
OFFERED = {"get_temperature": None, "get_wind": None}  # the loop passes the toolbox's mapping


class Weather(BaseModel):
    city: str
    temperature_c: float


def get_temperature(city: str) -> float:
    """The temperature in a city, in °C."""
    return 3.0


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_temperature", "arguments": {"city": "Paris"}}',
        '```json\n{"name": "get_temperature", "parameters": {"city": "Paris"}}\n```',
        '<tool_call>\n{"name": "get_temperature", "arguments": {"city": "Paris"}}\n</tool_call>',
        'functions.get_temperature:\n{"city": "Paris"}',
    ],
)
def test_a_call_of_an_offered_tool_written_as_text_is_named(text: str) -> None:
    problem = call_written_as_text(text, OFFERED, TEMPLATES)
    assert problem == (
        "Your reply is a call of get_temperature written as text, so it was not run: a call "
        "written in the reply's text is not read as a tool call here. Call the tool through "
        "tool calling, or reply with your final answer."
    )
    assert NATIVE.read(LLMResponse(text=text), OFFERED, TEMPLATES).problem == problem


def test_several_calls_name_each_tool_once() -> None:
    text = (
        '{"name": "get_temperature", "arguments": {"city": "Paris"}}\n'
        '{"name": "get_wind", "arguments": {"city": "Paris"}}\n'
        '{"name": "get_temperature", "arguments": {"city": "Oslo"}}'
    )
    problem = call_written_as_text(text, OFFERED, TEMPLATES)
    assert problem is not None and "a call of get_temperature, get_wind written" in problem


def test_when_tools_are_not_offered_the_text_says_to_answer() -> None:
    text = '{"name": "get_temperature", "arguments": {"city": "Paris"}}'
    problem = call_written_as_text(text, OFFERED, TEMPLATES, offered=False)
    assert problem is not None
    assert problem.endswith("No tool can be called now: reply with your final answer.")


@pytest.mark.parametrize(
    "text",
    [
        '{"city": "Paris", "temperature_c": 3}',  # an answer
        '{"name": "get_pressure", "arguments": {"city": "Paris"}}',  # no such tool
        '{"name": "get_temperature", "arguments": {"city": "Paris"}, "note": 1}',  # more keys
        'I will call {"name": "get_temperature", "arguments": {}}',  # prose around it
        "",
    ],
)
def test_anything_else_stays_an_answer(text: str) -> None:
    assert call_written_as_text(text, OFFERED, TEMPLATES) is None
    assert NATIVE.read(LLMResponse(text=text), OFFERED, TEMPLATES).answer == text


def test_without_offered_tools_nothing_is_a_call() -> None:
    text = '{"name": "get_temperature", "arguments": {"city": "Paris"}}'
    assert call_written_as_text(text, (), TEMPLATES) is None
    assert NATIVE.read(LLMResponse(text=text), frozenset(), TEMPLATES).answer == text


def test_native_calls_are_read_as_calls() -> None:
    calls = [ToolCall(name="get_temperature", arguments={"city": "Paris"})]
    assert list(NATIVE.read(LLMResponse(tool_calls=calls), OFFERED, TEMPLATES).calls) == calls


def test_a_run_that_writes_its_call_as_text_is_told_so() -> None:
    call = '{"name": "get_temperature", "arguments": {"city": "Paris"}}'
    agent = SubAgent(name="weather", prompt="The temperature in {{city}}?", output=Weather,
                     tools=[get_temperature])  # fmt: skip
    llm = ScriptedLLM([call, call, call])
    step = agent.run_sync({"city": "Paris"}, llm=llm, max_turns=3)
    assert not step.ok
    first = step.turns[0]
    assert first.error_type == "invalid_action" and first.tool_calls == []
    assert "a call of get_temperature written as text" in (first.error or "")
    # the model read it as feedback on its next turn
    assert "a call of get_temperature written as text" in llm.requests[1].messages[-1].content
    ok = agent.run_sync({"city": "Paris"},
                        llm=ScriptedLLM([call, '{"city": "Paris", "temperature_c": 3}']),
                        max_turns=2)  # fmt: skip
    assert ok.ok and ok.output == Weather(city="Paris", temperature_c=3)
