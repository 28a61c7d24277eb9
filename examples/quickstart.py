"""Quickstart: a calculator agent that uses a tool, slips once, and corrects itself.

Run it with `python examples/quickstart.py` (or `make demo`). The model here is scripted, so
the run is the same every time: a tool call in a normal turn, an invalid answer in the
must-return turn, and a correction in the retry turn.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from subagent import LLMResponse, ScriptedLLM, Step, SubAgent, ToolCall, TurnType


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, tools=[add])


def print_turns(step: Step[Answer]) -> None:
    print(f"{'turn':>4}  {'type':<11} {'outcome':<8} error")
    for turn in step.turns:
        error = (turn.error or "").splitlines()[-1] if turn.error else ""
        print(f"{turn.index:>4}  {turn.type.value:<11} {turn.outcome.value:<8} {error[:70]}")
    print(step.summary())


async def main() -> Step[Answer]:
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
        '{"value": "three"}',  # invalid: fed back, corrected
        '{"value": 3}',
    ])  # fmt: skip
    step = await agent.run({"question": "1+2"}, llm=llm, max_turns=2, return_retries=1)
    assert step.ok and step.output == Answer(value=3)
    assert [t.type for t in step.turns] == [TurnType.NORMAL, TurnType.MUST_RETURN, TurnType.RETRY]
    assert llm.requests[1].tools == [] and llm.requests[2].tools == []  # stripped
    print_turns(step)
    print(f"output: {step.output!r}")
    return step


if __name__ == "__main__":
    anyio.run(main)
