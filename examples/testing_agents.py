"""Testing code that runs its own agents: TestLLM, FunctionLLM, agent.override, no real calls.

The "application" below builds its agent with a real model (a spec string: importing it
needs no key) and runs it itself. The "tests" after it run the application's code as it is,
without a server or a key: ``agent.override(llm=...)`` hands the agent a test model for the
length of a ``with`` block, and ``block_model_requests()`` makes sure nothing reaches a real
model by mistake. Run it with ``python examples/testing_agents.py``.
"""

from __future__ import annotations

import json

import anyio
from pydantic import BaseModel, Field

from subagent import (
    FunctionLLM,
    LLMRequest,
    LLMResponse,
    ModelRequestsBlockedError,
    SubAgent,
    TestLLM,
    ToolCall,
    testing,
)

# --- the application ---------------------------------------------------------------------


class Trip(BaseModel):
    city: str
    days: int = Field(ge=1, le=14)
    budget_eur: float = Field(gt=0)


def flight_price(city: str) -> float:
    """The cheapest return flight to a city, in euros."""
    return {"Lisbon": 120.0, "Oslo": 310.0}.get(city, 250.0)


planner = SubAgent(
    name="planner",
    prompt="Plan {{days}} days in {{city}}, with a budget in euros.",
    output=Trip,
    tools=[flight_price],
    llm="openai:gpt-4o-mini",
)


async def plan(city: str, days: int) -> Trip:
    """The application's code: it runs its own agent, on its own model."""
    step = await planner.run({"city": city, "days": days})
    return step.output_or_raise()


# --- the tests -----------------------------------------------------------------------------


async def with_test_llm() -> None:
    # TestLLM calls each tool once with arguments its schema accepts, then answers with
    # an output the agent's schema accepts: enough to test the wiring.
    test_llm = TestLLM()
    with planner.override(llm=test_llm):
        trip = await plan("Lisbon", 3)
    print(f"TestLLM:     {trip!r}")
    print(f"             {len(test_llm.requests)} calls; tools offered on the first: "
          f"{[tool.name for tool in test_llm.requests[0].tools]}")  # fmt: skip


def travel_agent(request: LLMRequest) -> LLMResponse | str:
    """A FunctionLLM's function: the reply, decided from the request."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:  # first call: ask for the price of the city named in the task
        city = request.messages[-1].content.split(" in ")[1].split(",")[0]
        return LLMResponse(tool_calls=[ToolCall(name="flight_price", arguments={"city": city})])
    price = float(results[0].split("\n")[2])  # the tool's result, in the runtime's frame
    return json.dumps({"city": "Lisbon", "days": 3, "budget_eur": price + 3 * 90})


async def with_function_llm() -> None:
    with planner.override(llm=FunctionLLM(travel_agent)):
        trip = await plan("Lisbon", 3)
    print(f"FunctionLLM: {trip!r}")


async def nothing_reaches_a_real_model() -> None:
    testing.block_model_requests()  # once, at the top of conftest.py
    try:
        await plan("Lisbon", 3)  # no override: the agent's own model
    except ModelRequestsBlockedError as error:
        print(f"blocked:     {str(error).split(',')[0]}")
    finally:
        testing.block_model_requests(False)


async def main() -> None:
    await with_test_llm()
    await with_function_llm()
    await nothing_reaches_a_real_model()


if __name__ == "__main__":
    anyio.run(main)
