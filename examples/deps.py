"""Deps: tools, validators and instructions that see the run through a typed RunContext.

Run it with `python examples/deps.py`. A support agent looks customers up in a database it
gets per run (``deps=``), never through a global or a closure. The tool and the validator
take ``ctx: RunContext[Shop]`` as their first parameter: the model never sees it in the
tool's schema, and the database reaches no record, span or JSON. The model is scripted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel

from subagent import (
    LLMResponse,
    RunContext,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    Validation,
    tool,
)


@dataclass
class Shop:
    """What one run needs: a database handle and who is asking (per run, not global)."""

    orders: dict[str, str]
    caller: str
    api_key: str = field(default="sk-never-logged", repr=False)


class Reply(BaseModel):
    order_id: str
    status: str


@tool(run_in_thread=False)
def order_status(ctx: RunContext[Shop], order_id: str) -> str:
    """The status of an order.

    Args:
        order_id: The order's id, such as A-1.
    """
    print(f"  tool sees: caller={ctx.deps.caller} turn={ctx.turn} phase={ctx.phase}")
    return ctx.deps.orders.get(order_id, "unknown order")


def matches_the_database(ctx: RunContext[Shop], reply: Reply) -> Validation:
    """The status the model reports must be the one on file."""
    on_file = ctx.deps.orders.get(reply.order_id)
    if reply.status == on_file:
        return Validation.ok()
    return Validation.fail(f"the status of {reply.order_id} is {on_file!r}, not {reply.status!r}")


def instructions(ctx: RunContext[Shop], values: Mapping[str, Any]) -> str:
    return f"You are answering {ctx.deps.caller}."


agent = SubAgent(
    name="support",
    prompt="Where is order {{order_id}}?",
    output=Reply,
    deps_type=Shop,  # SubAgent[Reply, Shop]: mypy checks run(deps=...)
    tools=[order_status],
    validators=[matches_the_database],
    instructions=instructions,
    max_turns=3,
    return_retries=1,
)


async def main() -> Step[Reply]:
    shop = Shop(orders={"A-1": "shipped"}, caller="ada@example.com")
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="order_status", arguments={"order_id": "A-1"})]),
        '{"order_id": "A-1", "status": "delivered"}',  # wrong: the validator says so
        '{"order_id": "A-1", "status": "shipped"}',
    ])  # fmt: skip
    step = await agent.run({"order_id": "A-1"}, llm=llm, deps=shop)
    schema = llm.requests[0].tools[0].parameters
    print(f"the model sees the parameters: {sorted(schema['properties'])}")
    print(f"system prompt ends: {llm.requests[0].messages[0].content.splitlines()[-1]}")
    print(f"feedback: {step.turns[1].error}")
    print(step.summary())
    print(f"output: {step.output!r}")
    assert step.ok and "sk-never-logged" not in step.model_dump_json()
    return step


if __name__ == "__main__":
    anyio.run(main)
