"""A Step as data, without the fields a resumed run measures anew."""

from __future__ import annotations

from typing import Any

from subagent.records import Step

__all__ = ["MEASURED_FIELDS", "comparable"]

MEASURED_FIELDS: frozenset[str] = frozenset({"duration_s", "delay_s"})
"""The fields that differ between a resumed run and the run that never stopped.

``duration_s`` (of the Step, each Turn and each ToolResult) is wall-clock time measured in
the workflow's body, which a resumed process replays at the speed of reading checkpoints;
``delay_s`` (of a transport retry) is the retry policy's jittered delay, drawn again on
replay. Everything else (turns, replies, tool calls and results, ids, budgets, usage,
the output or failure) comes from checkpointed steps or from the deterministic loop.
"""


def comparable(step: Step[Any]) -> dict[str, Any]:
    """``step`` as JSON data with :data:`MEASURED_FIELDS` left out, at every depth.

    Two runs of one durable workflow, one crashed and resumed, one never stopped, give
    equal ``comparable`` values (nested agents' Steps on tool results included).
    """
    data: dict[str, Any] = _without(step.model_dump(mode="json"))
    return data


def _without(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without(v) for k, v in value.items() if k not in MEASURED_FIELDS}
    if isinstance(value, list):
        return [_without(item) for item in value]
    return value
