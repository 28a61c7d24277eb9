"""A saved state is untrusted input: everything ``resume`` checks before it runs anything.

A :class:`~subagent.RunState` is plain JSON that applications keep in files, queues and
browsers. Before a resume runs a single call, the state is read (its signature checked
when the application signs its states), matched with the agent that resumes it, checked
for fields that fit together (its phase, budgets, turns and pending calls), claimed for a
single use when the application asks, and the decisions are checked against the calls the
agent's own rule says need one (:mod:`subagent._approval`). Any refusal is an
:class:`~subagent.InvalidStateError` (or a ``ConfigurationError`` for the caller's own
arguments) naming the field and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from subagent._approval import ApprovalRule, checked_decisions
from subagent._build import check_state
from subagent._claims import StateClaims
from subagent._definition import AgentDefinition
from subagent._errors import ConfigurationError, InvalidStateError
from subagent._parts import AgentParts
from subagent.records import Decision, RunState, TurnOutcome, TurnType

__all__ = ["check_consistency", "checked_resume", "read_state"]


def read_state(state: RunState | str | bytes, key: bytes | None) -> RunState:
    """The state to resume: as given, or read from JSON (signed JSON when ``key`` is given).

    Raises:
        InvalidStateError: The JSON is not a RunState, or not signed with ``key``; or a
            key was given with a state object (its signature cannot be checked).
    """
    if isinstance(state, RunState):
        if key is not None:  # read from untrusted text already, its signature unchecked
            raise InvalidStateError(
                "signature", "a key was given with a RunState object, whose signature "
                "cannot be checked: pass the signed text (state.signed(key)) itself"
            )  # fmt: skip
        return state  # an object never left the process
    try:
        if key is not None:
            return RunState.from_signed(state, key)
        return RunState.model_validate_json(state)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "(state)"
        raise InvalidStateError(field, error["msg"]) from None


def checked_resume(
    agent: AgentDefinition[Any, Any],
    parts: AgentParts,
    state: RunState | str | bytes,
    decisions: Mapping[str, Decision | bool] | None,
    key: bytes | None,
    claims: StateClaims | None,
) -> tuple[RunState, dict[str, Decision]]:
    """The state and the decisions ``resume`` may go on with, every check passed.

    ``parts``: the resumed run's parts, whose approval rule (its every tool, a source's
    included) says which calls need a decision.

    Raises:
        InvalidStateError: The state is not one to resume (the message names the field).
        StateMismatchError: It was saved by another agent, or another definition.
        ConfigurationError: The decisions do not answer the calls that need them.
    """
    saved = read_state(state, key)
    check_state(agent, saved)
    check_consistency(saved)
    rule = parts.approval
    given = checked_decisions(saved.pending, rule if isinstance(rule, ApprovalRule) else None,
                              decisions)  # fmt: skip
    if claims is not None:
        if not isinstance(claims, StateClaims):
            raise ConfigurationError(
                "claims", f"must have a claim(state_id) method, got {claims!r}"
            )
        if not claims.claim(saved.id):
            raise InvalidStateError("id", f"state {saved.id!r} was resumed already (single use)")
    return saved, given


def check_consistency(state: RunState) -> None:
    """Refuse a state whose fields do not fit together.

    Raises:
        InvalidStateError: Naming the first field that does not fit, and why.
    """
    _check_budgets(state)
    work = sum(
        turn.type is not TurnType.RETRY and turn.outcome is not TurnOutcome.PAUSED
        for turn in state.turns
    )
    retries = sum(turn.type is TurnType.RETRY for turn in state.turns)
    if state.work_remaining != state.max_turns - work:
        _refuse("work_remaining", f"is {state.work_remaining}, but {work} of max_turns="
                f"{state.max_turns} work turns were taken")  # fmt: skip
    if state.retries_remaining != state.return_retries - retries:
        _refuse("retries_remaining", f"is {state.retries_remaining}, but {retries} of "
                f"return_retries={state.return_retries} correction turns were taken")  # fmt: skip
    if [turn.index for turn in state.turns] != list(range(1, len(state.turns) + 1)):
        _refuse("turns", "their indexes are not 1, 2, 3... in order")
    _check_phase(state)
    if not state.history:
        _refuse("history", "is empty: a run always has its task")


def _check_budgets(state: RunState) -> None:
    if state.max_turns < 1:
        _refuse("max_turns", f"must be at least 1, got {state.max_turns}")
    if state.return_retries < 0:
        _refuse("return_retries", f"must be at least 0, got {state.return_retries}")
    if state.retry_total != state.return_retries:
        _refuse("retry_total", f"is {state.retry_total}, not return_retries={state.return_retries}")
    if not 0 <= state.work_remaining <= state.max_turns:
        _refuse("work_remaining", f"must be within 0 and max_turns={state.max_turns}, got "
                f"{state.work_remaining}")  # fmt: skip
    if not 0 <= state.retries_remaining <= state.return_retries:
        _refuse("retries_remaining", f"must be within 0 and return_retries="
                f"{state.return_retries}, got {state.retries_remaining}")  # fmt: skip
    if not (math.isfinite(state.elapsed_s) and state.elapsed_s >= 0):
        _refuse("elapsed_s", f"must be a number of seconds >= 0, got {state.elapsed_s}")
    if state.collapsed < 0:
        _refuse("collapsed", f"must be at least 0, got {state.collapsed}")


def _check_phase(state: RunState) -> None:
    """The phase fits the budgets, and a paused state has its pending calls and turn."""
    phase, work, retries = state.phase, state.work_remaining, state.retries_remaining
    fits = {
        "normal": work >= 2 and retries == state.return_retries,
        "paused": work >= 2 and retries == state.return_retries,
        "must_return": work == 1 and retries == state.return_retries,
        "retry": work == 0 and retries >= 1,
    }[phase]
    if not fits:
        _refuse("phase", f"{phase!r} does not fit work_remaining={work} and "
                f"retries_remaining={retries}")  # fmt: skip
    pending = state.pending
    if (phase == "paused") != (pending is not None):
        _refuse("pending", "a paused state has its pending calls, and only a paused one")
    if pending is None:
        return
    ids = [call.id for call in pending.calls]
    if not ids or not all(ids) or len(set(ids)) != len(ids):
        _refuse("pending.calls", "must be one or more calls, each with its own id")
    last = state.turns[-1] if state.turns else None
    if last is None or last.outcome is not TurnOutcome.PAUSED:
        _refuse("turns", "a paused state's last turn is the paused one")


def _refuse(field: str, reason: str) -> None:
    raise InvalidStateError(field, reason)
