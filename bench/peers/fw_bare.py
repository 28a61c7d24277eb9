"""The floor: a hand-written loop with no framework.

``json`` for tool arguments, pydantic for validation, one feedback message per invalid
reply, the same budgets as the frameworks (work turns, then corrections). No tracing.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError
from scenarios import (
    INSTRUCTIONS,
    PROMPT,
    Answer,
    Outcome,
    RunFn,
    Scenario,
    Script,
    ToolCallSpec,
    Unsupported,
    add,
)

NAME = "bare loop"
DISTRIBUTIONS = ("pydantic",)
NOTES = "json + pydantic + a feedback message; no tracing"


class AddArgs(BaseModel):
    a: int
    b: int


TOOLS = {"add": (add, AddArgs)}


class FakeModel:
    """Replies as an OpenAI-style message dict; arguments as the JSON string of the wire."""

    def __init__(self, script: Script):
        self.script = script

    async def complete(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        reply = self.script.next(len(messages))
        if isinstance(reply, ToolCallSpec):
            call = {"id": reply.call_id, "name": reply.name, "arguments": reply.arguments_json}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": reply}


async def run_loop(model: FakeModel, work_turns: int, corrections: int) -> Answer:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": PROMPT},
    ]
    for _ in range(work_turns + corrections):
        reply = await model.complete(messages)
        messages.append(reply)
        calls = reply.get("tool_calls")
        if calls:
            for call in calls:
                function, schema = TOOLS[call["name"]]
                args = schema.model_validate(json.loads(call["arguments"]))
                result = await function(**args.model_dump())
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": str(result)}
                )
            continue
        try:
            return Answer.model_validate_json(reply["content"])
        except ValidationError as error:
            feedback = f"Invalid answer: {error}. Reply again with JSON only."
            messages.append({"role": "user", "content": feedback})
    raise RuntimeError("budget exhausted")


def build(scenario: Scenario, tracer_provider: object | None) -> RunFn:
    if scenario.traced:
        raise Unsupported("no tracing in a bare loop")
    work_turns = scenario.work_turns

    async def run() -> Outcome:
        script = Script(scenario.script)
        output = await run_loop(FakeModel(script), work_turns, scenario.corrections)
        return Outcome(output, script.sizes)

    return run
