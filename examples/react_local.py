"""The ReAct protocol on a small local model: tools described in the prompt, read from text.

Run it with `python examples/react_local.py` (or `python -m subagent.local_model run --
python examples/react_local.py`). It uses the model the environment names
(`SUBAGENT_LLM`, `OPENAI_BASE_URL`...), else starts the local Qwen2.5-Coder 0.5B as
`make demo` does. The agent looks a city's weather up with a tool and answers with a typed
record. With `protocol="react"`, the tool is described in the system prompt, the model
writes `Action: {...}`, and the result comes back as an `Observation:`; the budgets, the
correction turns, the stripping of tools and the traces are the same as with native calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio
from pydantic import BaseModel

from subagent import OpenAIChat, RetryPolicy, Step, SubAgent, ToolPolicy, local_model, tool

TEMPERATURES = {"Lisbon": 24, "Lisboa": 24, "Oslo": 7, "Cairo": 31, "Lima": 19}


class Weather(BaseModel):
    city: str
    celsius: int


@tool(run_in_thread=False)
def current_temperature(city: str) -> str:
    """Look up the current temperature of a city, in degrees Celsius.

    Args:
        city: The city's name, e.g. Lisbon.
    """
    degrees = TEMPERATURES.get(city.strip().title())
    return f"{degrees} C" if degrees is not None else f"no data for {city!r}"


agent = SubAgent(
    name="weather",
    prompt=(
        "What is the current temperature in {{city}}? Look it up with the "
        "current_temperature tool, then answer."
    ),
    output=Weather,
    tools=[current_temperature],
    tool_policy=ToolPolicy(protocol="react"),
)


@contextlib.contextmanager
def model() -> Iterator[OpenAIChat]:
    if OpenAIChat.env_configured():
        llm = OpenAIChat.from_env(timeout=120)
        print(f"using {llm.model_name} at {llm.base_url} (from the environment)")
        yield llm
        return
    print("no SUBAGENT_LLM/OPENAI_BASE_URL set: starting the local model 'qwen'")
    with local_model.running("qwen") as server:
        yield OpenAIChat(model=local_model.MODEL_ALIAS, base_url=server.base_url, timeout=120)


def show(step: Step[Any]) -> None:
    for turn in step.turns:
        if turn.tool_calls:
            what = ", ".join(f"{call.name}({call.arguments})" for call in turn.tool_calls)
        else:
            what = (
                (turn.error or turn.reply).strip().splitlines()[0][:70]
                if turn.error or turn.reply
                else ""
            )
        print(f"  turn {turn.index} {turn.type.value:<11} {turn.outcome.value:<8} {what}")
    print(f"  {step.summary()}")
    print(f"  output: {step.output!r}")


async def main() -> list[Step[Weather]]:
    steps: list[Step[Weather]] = []
    with model() as llm:
        async with llm:
            for city in ("Lisbon", "Oslo"):
                print(f"\n== {city}")
                step = await agent.run(
                    {"city": city}, llm=llm, max_turns=3, return_retries=1, timeout=120,
                    retry_policy=RetryPolicy(max_attempts=3, initial_delay=0.5),
                    settings={"temperature": 0, "max_tokens": 200},
                )  # fmt: skip
                show(step)
                steps.append(step)
    return steps


if __name__ == "__main__":
    anyio.run(main)
