"""Nested agents: one agent as a tool of another, with the turn events of both.

Run it with `python examples/nested_agents.py`. `inner.as_tool()` turns an agent into a
tool whose parameters are its prompt's variables; the inner run uses the outer run's model
(it has none of its own) and its validated output becomes the tool's result. `on_event`
receives the typed events of the outer run; when tracing is on, the inner run's spans sit
under the outer run's `execute_tool capitals` span (see docs/tracing.md).
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from subagent import (
    LLMResponse,
    RunEvent,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    TurnEnded,
    TurnStarted,
)


class Capital(BaseModel):
    country: str
    capital: str


class Trip(BaseModel):
    destination: str
    reason: str


capitals = SubAgent(
    name="capitals",
    prompt="What is the capital of {{country}}?",
    output=Capital,
    description="Find the capital city of a country.",
)
planner = SubAgent(
    name="planner",
    prompt="Plan a city trip to {{country}}.",
    output=Trip,
    tools=[capitals.as_tool()],
)


def log(event: RunEvent) -> None:
    if isinstance(event, TurnStarted):
        print(f"{event.agent}: turn {event.index} {event.type.value} "
              f"({event.tools_offered} tools offered)")  # fmt: skip
    elif isinstance(event, TurnEnded):
        print(f"{event.agent}: turn {event.index} -> {event.outcome.value}")


async def main() -> Step[Trip]:
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="capitals", arguments={"country": "Portugal"})]),
        '{"country": "Portugal", "capital": "Lisbon"}',  # the inner agent's answer
        '{"destination": "Lisbon", "reason": "the capital, by the sea"}',
    ])  # fmt: skip
    step = await planner.run({"country": "Portugal"}, llm=llm, max_turns=2, on_event=log)
    print(step.summary())
    print(f"tool result seen by the planner: {step.turns[0].tool_results[0].content!r}")
    print(f"output: {step.output!r}")
    return step


if __name__ == "__main__":
    anyio.run(main)
