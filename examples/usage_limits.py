"""Usage limits as a budget: a run, a nested agent and a batch that may spend only so much.

Run it with `python examples/usage_limits.py`. Three scripted scenes:

1. A run whose replies would take it past ``max_total_tokens``: it ends
   ``failed(usage_limit)``, every turn kept, and is not ``retryable``.
2. A researcher agent calling a searcher agent as a tool: the searcher's tokens count
   against the researcher's limit as they are spent, so the nested run stops first.
3. A batch with one budget for all its runs (``run_many(batch_limits=...)``): once it is
   spent, the inputs not started get a ``failed(usage_limit)`` Step each; none is lost.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from subagent import (
    LLMResponse,
    Price,
    ScriptedLLM,
    SubAgent,
    ToolCall,
    Usage,
    UsageLimits,
    run_many,
    tool,
)


class Answer(BaseModel):
    value: int


@tool(run_in_thread=False)
def search(query: str) -> str:
    """Search the notes."""
    return f"notes about {query}"


def spent(text: str = "", calls: list[ToolCall] | None = None) -> LLMResponse:
    """A scripted reply that used 400 input and 100 output tokens."""
    usage = Usage(input_tokens=400, output_tokens=100)
    return LLMResponse(text=text, tool_calls=calls or [], usage=usage)


def searching(query: str) -> LLMResponse:
    return spent(calls=[ToolCall(name="search", arguments={"query": query})])


agent = SubAgent(name="calc", prompt="Answer {{question}}", output=Answer, tools=[search],
                 max_turns=5)  # fmt: skip


async def one_run() -> None:
    llm = ScriptedLLM([searching("a"), searching("b"), searching("c"), spent('{"value": 1}')])
    limits = UsageLimits(max_total_tokens=1200, max_cost=0.01, prices=Price(2.5, 10.0))
    step = await agent.run({"question": "q"}, llm=llm, usage_limits=limits)
    assert step.failure is not None
    print(f"1. {step.summary()}")
    print(
        f"   retryable: {step.retryable}; tokens kept on the turns: {step.usage.total.total_tokens}"
    )


async def nested() -> None:
    searcher = SubAgent(name="searcher", prompt="Find {{topic}}", tools=[search], max_turns=4)
    researcher = SubAgent(name="researcher", prompt="Study {{topic}}", output=Answer,
                          tools=[searcher.as_tool()], max_turns=3)  # fmt: skip
    llm = ScriptedLLM([
        spent(calls=[ToolCall(name="searcher", arguments={"topic": "budgets"})]),
        searching("budgets"), searching("limits"), searching("costs"),  # the searcher
        spent('{"value": 2}'),
    ])  # fmt: skip
    step = await researcher.run({"topic": "budgets"}, llm=llm,
                                usage_limits=UsageLimits(max_total_tokens=1500))  # fmt: skip
    child = step.turns[0].tool_results[0].step
    assert child is not None and child.failure is not None and step.failure is not None
    print(f"2. searcher: {child.failure.reason.value}: {child.failure.message}")
    print(f"   researcher: {step.failure.reason.value}: {step.failure.message}")


async def batch() -> None:
    llm = ScriptedLLM([spent('{"value": 3}')] * 6)
    steps = await run_many(agent, [{"question": n} for n in range(6)], llm=llm, concurrency=2,
                           batch_limits=UsageLimits(max_total_tokens=2000))  # fmt: skip
    outcomes = [step.failure.reason.value if step.failure else "done" for step in steps]
    print(f"3. {len(steps)} inputs, {len(steps)} Steps: {outcomes}")


async def main() -> None:
    await one_run()
    await nested()
    await batch()


if __name__ == "__main__":
    anyio.run(main)
