"""Streaming a typed output: show a plan while the model writes it, correction included.

Run it with `python examples/streaming_output.py`. `run.stream_output(events=True)` yields
the run's events and, each time the reply's JSON so far validates to something new, a
`PartialOutput`: the whole plan as far as it came, an instance of `Plan`. The first reply
ends with a step that has no duration, so it is found invalid and corrected; the
correction turn starts over with its own index, and the run's validated output comes last
(`final=True`). A UI redraws its view from each partial output; here each redraw is a line.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel, Field

from subagent import PartialOutput, ScriptedLLM, Step, SubAgent, TurnStarted


class Task(BaseModel):
    name: str
    days: int = Field(ge=1)


class Plan(BaseModel):
    goal: str
    tasks: list[Task] = []


agent = SubAgent(name="planner", prompt="Plan: {{goal}}", output=Plan)

FIRST = (
    '{"goal": "ship the billing page", "tasks": [{"name": "draft the page layout", "days": 2}, '
    '{"name": "wire up the payment provider", "days": 3}, {"name": "review", "days": 0}]}'
)
SECOND = (
    '{"goal": "ship the billing page", "tasks": [{"name": "draft the page layout", "days": 2}, '
    '{"name": "wire up the payment provider", "days": 3}, '
    '{"name": "review with the finance team", "days": 1}]}'
)


def redraw(partial: PartialOutput[Plan]) -> str:
    plan = partial.output
    tasks = ", ".join(f"{task.name} ({task.days}d)" for task in plan.tasks)
    mark = "final" if partial.final else "so far"
    return f"  {mark}: {plan.goal!r} [{tasks}]"


async def main() -> Step[Plan]:
    llm = ScriptedLLM([FIRST, SECOND])
    goal = {"goal": "ship the billing page"}
    async with agent.stream(goal, llm=llm, max_turns=1, return_retries=1) as run:
        async for item in run.stream_output(events=True):
            if isinstance(item, TurnStarted):
                print(f"turn {item.index} ({item.type.value})")
            elif isinstance(item, PartialOutput):
                print(redraw(item))
        step = await run.result()
    print(step.summary())
    return step


if __name__ == "__main__":
    anyio.run(main)
