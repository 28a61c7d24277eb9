"""How a durable run waits for approval: a DBOS event says what waits, a message decides.

A durable run that pauses for approval (:attr:`Step.paused`) does not end: its workflow
publishes the waiting calls as the DBOS event :data:`PENDING_EVENT` and waits, in its body,
for a DBOS message on :data:`APPROVAL_TOPIC`. DBOS waits on a notification, not a thread,
and the wait is durable: a process killed while it waits resumes the wait on restart, and a
message sent meanwhile (from any process, by ``DBOS.send`` or ``DBOSClient.send``) is there.

The event's value is JSON: ``{"pause": n, "waiting": [<ToolCall>, ...]}`` (``n`` counts the
run's pauses; ``waiting`` is empty once the run went on). The message is JSON too:
``{"<call id>": <Decision>, ...}``, one decision per waiting call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from subagent._errors import ConfigurationError
from subagent._records import Step
from subagent._state import Decision
from subagent.llm import ToolCall

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "decisions_message",
    "pending_value",
    "read_decisions",
    "read_pending",
]

APPROVAL_TOPIC = "subagent.approval"
"""The DBOS message topic a durable run receives its decisions on."""

PENDING_EVENT = "subagent.pending"
"""The DBOS event a durable run publishes its waiting calls as."""

_CALLS = TypeAdapter(list[ToolCall])
_DECISIONS = TypeAdapter(dict[str, Decision])


def pending_value(step: Step[Any] | None, pause: int) -> str:
    """The event's value: the calls ``step`` waits on (none when ``step`` is ``None``)."""
    waiting = step.pending.waiting if step is not None and step.pending is not None else []
    calls = json.loads(_CALLS.dump_json(waiting))
    return json.dumps({"pause": pause, "waiting": calls})


def read_pending(value: object) -> list[ToolCall]:
    """The waiting calls in an event's value (``[]`` when it is unset)."""
    if value is None:
        return []
    if not isinstance(value, str):
        raise ConfigurationError("pending", f"not a durable run's pending event: {value!r}")
    return _CALLS.validate_python(json.loads(value)["waiting"])


def decisions_message(waiting: list[ToolCall], decisions: Mapping[str, Decision | bool]) -> str:
    """The message deciding each of ``waiting``, checked before it is sent.

    Raises:
        ConfigurationError: Nothing waits, a waiting call has no decision, or a decision
            names no waiting call (the message names the ids).
    """
    if not waiting:
        raise ConfigurationError("decisions", "the run is not waiting for approval")
    if not isinstance(decisions, Mapping):
        raise ConfigurationError("decisions", f"must be a mapping of call ids, got {decisions!r}")
    ids = {call.id for call in waiting}
    unknown = sorted(set(decisions) - ids)
    missing = sorted(ids - set(decisions))
    if unknown or missing:
        raise ConfigurationError(
            "decisions",
            f"the waiting calls are {sorted(ids)}; unknown: {unknown}, missing: {missing}",
        )
    decided: dict[str, Decision] = {}
    for call_id, decision in decisions.items():
        if isinstance(decision, bool):
            decision = Decision.approve() if decision else Decision.deny()
        if not isinstance(decision, Decision):
            raise ConfigurationError(
                "decisions", f"{call_id!r}: must be a Decision or a bool, got {decision!r}"
            )
        decided[call_id] = decision
    return _DECISIONS.dump_json(decided).decode()


def read_decisions(message: object) -> dict[str, Decision]:
    """The decisions in a message (raises pydantic's error on anything else)."""
    if isinstance(message, bytes | str):
        return _DECISIONS.validate_json(message)
    return _DECISIONS.validate_python(message)
