"""FallbackLLM: when the preferred model's service fails for good, the next model answers.

The preferred model here is a real OpenAI-compatible adapter pointed at a port where no
server listens (a provider that is down: every call is a ``connection`` error); the backup
is a scripted model. The turn retries the first model as the run's RetryPolicy says, then
moves on; the record of the turn keeps every failed attempt and which model it was.
Run it with ``python examples/fallback.py``.
"""

from __future__ import annotations

import socket

import anyio
from pydantic import BaseModel

from subagent import FallbackLLM, OpenAIChat, RetryPolicy, ScriptedLLM, SubAgent


class Answer(BaseModel):
    value: int


agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, max_turns=1)


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def main() -> None:
    down = f"http://127.0.0.1:{closed_port()}/v1"
    async with OpenAIChat("big-model", base_url=down, api_key="sk-unused") as preferred:
        backup = ScriptedLLM(['{"value": 3}'], model_name="small-model")
        llm = FallbackLLM([preferred, backup])
        retries = RetryPolicy(max_attempts=2, initial_delay=0.05)  # the first model's, too
        step = await agent.run({"question": "1+2"}, llm=llm, retry_policy=retries)
    print(f"output: {step.output!r}")
    for retry in step.turns[0].transport_retries:
        moved = f" -> {retry.fallback_to}" if retry.fallback_to else ""
        print(f"  {retry.model} attempt {retry.attempt}: {retry.kind.value}{moved}")


if __name__ == "__main__":
    anyio.run(main)
