"""Streaming: watch each reply arrive, correction included.

Run it with `python examples/streaming.py`. `run(on_text=...)` receives the text of every
reply as the model streams it (here a scripted model, word by word); the turn then goes on
with the complete reply as usual, so the invalid first answer is still fed back and
corrected. `on_event` marks where each turn starts.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from subagent import RunEvent, ScriptedLLM, Step, SubAgent, TurnStarted


class Forecast(BaseModel):
    city: str
    high_c: int


agent = SubAgent(name="forecast", prompt="Tomorrow's high in {{city}}?", output=Forecast)


async def main() -> Step[Forecast]:
    llm = ScriptedLLM([
        'Probably warm: {"city": "Lisbon", "high_c": "twenty-four"}',  # invalid: fed back
        '{"city": "Lisbon", "high_c": 24}',
    ])  # fmt: skip

    def show(piece: str) -> None:
        print(piece, end="", flush=True)

    def turn_header(event: RunEvent) -> None:
        if isinstance(event, TurnStarted):
            print(f"\n[turn {event.index} {event.type.value}] ", end="")

    step = await agent.run({"city": "Lisbon"}, llm=llm, max_turns=1, return_retries=1,
                           on_text=show, on_event=turn_header)  # fmt: skip
    print()
    print(step.summary())
    print(f"output: {step.output!r}")
    return step


if __name__ == "__main__":
    anyio.run(main)
