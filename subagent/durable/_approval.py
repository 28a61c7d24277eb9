"""How a durable run waits for approval: a DBOS event says what waits, a message decides.

A durable run that pauses for approval (:attr:`Step.paused`) does not end: its workflow
publishes the pause as the DBOS event :data:`PENDING_EVENT` and waits, in its body, for a
DBOS message on :data:`APPROVAL_TOPIC`. DBOS waits on a notification, not a thread, and the
wait is durable: a process killed while it waits resumes the wait on restart, and a message
sent meanwhile (from any process, by ``DBOS.send`` or ``DBOSClient.send``) is there.

A decision is bound to the pause it answers. The event's value is a
:class:`PendingApproval` as JSON: the run's pause number, the waiting calls and their
digest (``waiting`` is empty once the pause is decided). The message is JSON too
(:func:`decisions_message`): ``{"pause": n, "digest": "...", "decisions": {"<call id>":
<Decision>, ...}}``. The run takes the first message that answers the pause it is in, its
calls exactly as they wait (:func:`read_decisions`); it refuses any other (a message for an
earlier pause, a second decision, one that does not parse), logs why, and keeps waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from subagent._errors import ConfigurationError
from subagent.llm import ToolCall
from subagent.records import Decision, call_digest, digest

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "AlreadyDecidedError",
    "DecisionRefused",
    "PendingApproval",
    "decisions_message",
    "log_refused",
    "read_decisions",
    "read_pending",
]

APPROVAL_TOPIC = "subagent.approval"
"""The DBOS message topic a durable run receives its decisions on."""

PENDING_EVENT = "subagent.pending"
"""The DBOS event a durable run publishes its pause as (a :class:`PendingApproval`)."""

MAX_LOGGED_CHARS = 200
"""How much of a refused message's reason a log line quotes (never the message itself)."""

logger = logging.getLogger("subagent.durable")


class PendingApproval(BaseModel):
    """A pause of a durable run: the calls waiting for decisions, and which pause it is.

    :meth:`DurableAgent.pending` returns it; :meth:`DurableAgent.decide` takes it back with
    the decisions, which are then bound to this pause: they cannot answer a later one, even
    one that waits on the same calls. Its JSON is the value of :data:`PENDING_EVENT`, for a
    process that reads it with a plain ``DBOSClient`` (``PendingApproval.model_validate_json``).

    Attributes:
        workflow_id: The run's workflow id.
        pause: Which pause of the run this is (1 for its first; a run may pause again).
        waiting: The calls that need a decision, in the reply's order (empty once decided).
        digest: The digest of the waiting calls (each call's name, id and arguments): a
            decision message carries it.
    """

    model_config = ConfigDict(frozen=True)

    workflow_id: str
    pause: int = Field(ge=1)
    waiting: list[ToolCall]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def digest(self) -> str:
        """The digest of the waiting calls: their names, ids and arguments, in order."""
        return digest([call_digest(call) for call in self.waiting])

    def decided(self) -> PendingApproval:
        """The same pause once decided: nothing waits any more."""
        return self.model_copy(update={"waiting": []})


PendingApproval.__module__ = "subagent.durable"


class AlreadyDecidedError(ConfigurationError):
    """The pause the decisions answer was decided already.

    By another :meth:`DurableAgent.decide` (of this process or another), or the run went on
    past it (decided by a message sent another way). The decisions were not sent. Read the
    run's pause again (:meth:`DurableAgent.pending`) to decide what waits now.

    Attributes:
        workflow_id: The run's workflow id.
        pause: The pause the decisions were meant for.
    """

    def __init__(self, workflow_id: str, pause: int, detail: str):
        super().__init__(
            "decisions", f"pause {pause} of the run {workflow_id!r} is already decided ({detail})"
        )
        self.workflow_id = workflow_id
        self.pause = pause


AlreadyDecidedError.__module__ = "subagent.durable"


class DecisionRefused(ValueError):
    """A message that does not answer the pause a run waits on (the reason says why)."""


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    pause: int
    digest: str
    decisions: dict[str, Decision]


def read_pending(value: object) -> PendingApproval | None:
    """The pause in an event's value (``None``: the run never paused, or it was decided).

    Raises:
        ConfigurationError: The value is not a durable run's pending event.
    """
    if value is None:
        return None
    try:
        pending = PendingApproval.model_validate_json(value)  # type: ignore[arg-type]
    except (ValidationError, TypeError) as exc:
        raise ConfigurationError(
            "pending", f"not a durable run's pending event: {type(value).__name__}"
        ) from exc
    return pending if pending.waiting else None


def decisions_message(pending: PendingApproval, decisions: Mapping[str, Decision | bool]) -> str:
    """The message deciding each call of ``pending``, checked before it is sent.

    Raises:
        ConfigurationError: Nothing waits, a waiting call has no decision, or a decision
            names no waiting call (the message names the ids).
    """
    if not isinstance(pending, PendingApproval):
        raise ConfigurationError(
            "pending", f"must be a PendingApproval (from pending()), got {pending!r}"
        )
    if not pending.waiting:
        raise ConfigurationError("decisions", "the run is not waiting for approval")
    if not isinstance(decisions, Mapping):
        raise ConfigurationError("decisions", f"must be a mapping of call ids, got {decisions!r}")
    ids = {call.id for call in pending.waiting}
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
    message = _Message(pause=pending.pause, digest=pending.digest, decisions=decided)
    return message.model_dump_json()


def read_decisions(message: object, pending: PendingApproval) -> dict[str, Decision]:
    """The decisions in ``message``, when it answers ``pending`` exactly.

    Raises:
        DecisionRefused: The message does not parse, or answers another pause, or other
            calls, or not each waiting call once (the reason says which; it quotes no
            value of the message).
    """
    try:
        if isinstance(message, str | bytes):
            parsed = _Message.model_validate_json(message, strict=False)
        else:
            parsed = _Message.model_validate(message)
    except ValidationError as exc:
        raise DecisionRefused(f"it does not parse: {_where(exc)}") from None
    if parsed.pause != pending.pause:
        raise DecisionRefused(
            f"it answers pause {parsed.pause}; the run waits on pause {pending.pause}"
        )
    if parsed.digest != pending.digest:
        raise DecisionRefused(
            f"it was made for other calls (digest {parsed.digest[:16]!r}; the waiting "
            f"calls' is {pending.digest!r})"
        )
    ids = {call.id for call in pending.waiting}
    if set(parsed.decisions) != ids:
        raise DecisionRefused(
            f"it decides {len(parsed.decisions)} call(s), not each of {sorted(ids)}"
        )
    return parsed.decisions


def log_refused(pending: PendingApproval, reason: DecisionRefused) -> None:
    """Say, once per refused message, why the run ignored it and goes on waiting."""
    logger.warning(
        "durable run %r, pause %d: ignored a decision message (%s); still waiting for decisions",
        pending.workflow_id,
        pending.pause,
        str(reason)[:MAX_LOGGED_CHARS],
    )


def _where(exc: ValidationError) -> str:
    """Where a message fails to parse, without its values (decisions may hold secrets)."""
    parts = [
        f"{'.'.join(str(part) for part in error['loc']) or 'message'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)[:3]
    ]
    return "; ".join(parts)
