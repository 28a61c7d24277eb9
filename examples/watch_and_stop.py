"""Watch a run's events as they happen, then stop a run that takes too long.

Run it with `python examples/watch_and_stop.py`. The first run is streamed with
`agent.stream(...)`: each event is printed as it arrives (a tool call, the reply's text word
by word, the turn's end). The second run's model never answers its second call: the run is
stopped with `run.stop()` and still returns its Step, `failed(cancelled)`, with the first
turn kept.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from subagent import (
    LLMRequest,
    LLMResponse,
    RunEnded,
    ScriptedLLM,
    Step,
    SubAgent,
    TextDelta,
    ToolCall,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
    tool,
)


class Answer(BaseModel):
    value: int


@tool(run_in_thread=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, tools=[add])


async def watch() -> Step[Answer]:
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 17, "b": 25})]),
        'The sum is {"value": 42}',
    ])  # fmt: skip
    async with agent.stream({"question": "17+25"}, llm=llm, max_turns=2) as run:
        async for event in run:
            if isinstance(event, TurnStarted):
                print(f"[turn {event.index} {event.type.value}]")
            elif isinstance(event, ToolCallStarted):
                print(f"  calls {event.call.name}({event.call.arguments})")
            elif isinstance(event, ToolCallEnded):
                print(f"  {event.result.name} returned ok={event.result.ok}")
            elif isinstance(event, TextDelta):
                print(f"  text: {event.text!r}")
            elif isinstance(event, TurnEnded):
                print(f"  -> {event.outcome.value}")
            elif isinstance(event, RunEnded):
                print(f"run: {event.step.summary()}, output {event.step.output!r}")
        return await run.result()


async def never_answers(request: LLMRequest) -> str:
    await anyio.sleep_forever()
    return "never"


async def stop_a_slow_run() -> Step[Answer]:
    llm = ScriptedLLM(['{"value": "forty-two"}', never_answers])
    async with agent.start({"question": "17+25"}, llm=llm, max_turns=2, return_retries=2) as run:
        with anyio.move_on_after(0.2):  # the user's patience
            await run.result()
        print("stopping the run")
        run.stop()
        step = await run.result()
    print(f"stopped: {step.summary()}")
    return step


async def main() -> None:
    await watch()
    await stop_a_slow_run()


if __name__ == "__main__":
    anyio.run(main)
