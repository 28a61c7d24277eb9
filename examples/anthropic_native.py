"""An agent on Anthropic's Messages API, natively: a tool call, then a typed answer.

Run it with ``ANTHROPIC_API_KEY`` set: ``python examples/anthropic_native.py``; or against
another server speaking the Messages API (a gateway, the tests' scripted one):
``python examples/anthropic_native.py http://127.0.0.1:PORT``. Each turn shows its stop
reason (the run's and Anthropic's own) and its tokens, the prompt cache's reads and
writes among the input ones (``prompt_cache=True`` marks the system prompt, the tools and
the conversation as cache breakpoints).
"""

from __future__ import annotations

import sys

import anyio
from pydantic import BaseModel

from subagent import AnthropicChat, SubAgent


class Forecast(BaseModel):
    city: str
    high_c: int


def weather(city: str) -> dict[str, int]:
    """Tomorrow's high in a city, in °C (a stand-in for a weather service)."""
    return {"high_c": 14 if city == "Oslo" else 20}


agent = SubAgent(
    name="forecast",
    prompt="What is tomorrow's high in {{city}}? Look it up.",
    output=Forecast,
    tools=[weather],
    max_turns=3,
)


async def main(base_url: str | None) -> None:
    async with AnthropicChat("claude-sonnet-4-5", base_url=base_url, prompt_cache=True) as llm:
        step = await agent.run({"city": "Oslo"}, llm=llm)
    print(f"output: {step.output!r}")
    for turn in step.turns:
        stop = turn.stop_reason.value if turn.stop_reason else "-"
        used = turn.usage
        print(f"turn {turn.index} {turn.type.value}: {stop} ({turn.raw_stop_reason}); "
              f"{used.input_tokens} in ({used.cache_read_tokens} from the cache, "
              f"{used.cache_write_tokens} written to it), {used.output_tokens} out")  # fmt: skip
    print(step.summary())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)
