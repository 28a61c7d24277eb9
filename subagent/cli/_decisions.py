"""Decisions about the calls a paused run waits on, from flags or a file, checked.

``--approve ID``, ``--deny ID[=REASON]``, ``--edit ID=JSON`` and ``--decisions FILE``
(``subagent resume``: ``{"ID": decision}``; ``subagent batch``: ``{"LINE": {"ID":
decision}}``), where a decision is a :class:`~subagent.Decision` as JSON
(``{"action": "deny", "reason": "..."}``) or ``true`` / ``false``. Every waiting call gets
exactly one; :func:`decisions_for` checks them against the state's waiting calls, naming the
calls and how to decide each.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from subagent.cli._reading import json_object, read_limited
from subagent.cli._show import call_line
from subagent.cli._status import UsageError
from subagent.records import Decision, PendingCalls, RunState

__all__ = [
    "HOW_TO_DECIDE",
    "Given",
    "add_decision_flags",
    "decision_from_json",
    "decisions_for",
    "flag_decisions",
    "read_decisions",
]

HOW_TO_DECIDE = "--approve ID, --deny ID=REASON or --edit ID=JSON"


@dataclass(frozen=True, slots=True)
class Given:
    """A decision as the user gave it, before it is checked against the waiting calls.

    Attributes:
        decision: The decision.
        source: Where it was given (``--approve d1``, ``--decisions FILE``), for messages.
    """

    decision: Decision
    source: str


def add_decision_flags(parser: argparse.ArgumentParser) -> None:
    """``--approve``, ``--deny``, ``--edit`` and ``--decisions``, for ``subagent resume``."""
    parser.add_argument("--approve", action="append", default=[], metavar="ID",
                        help="run the waiting call ID as the model asked (repeat it)")  # fmt: skip
    parser.add_argument("--deny", action="append", default=[], metavar="ID[=REASON]",
                        help="do not run call ID; the model is told REASON")  # fmt: skip
    parser.add_argument("--edit", action="append", default=[], metavar="ID=JSON",
                        help="run call ID with these arguments (a JSON object)")  # fmt: skip
    parser.add_argument("--decisions", default=None, metavar="FILE|-",
                        help='JSON: {"ID": {"action": "approve"|"deny"|"edit", ...} or '
                        "true/false}")  # fmt: skip


def flag_decisions(args: argparse.Namespace) -> dict[str, Given]:
    """The decisions the flags give, by call id.

    Raises:
        UsageError: A flag's value is malformed, or a call is decided twice.
    """
    given: dict[str, Given] = {}

    def add(call_id: str, decision: Decision, source: str) -> None:
        if not call_id:
            raise UsageError(f"{source}: names no call (expected ID, as the pause line shows)")
        if call_id in given:
            raise UsageError(
                f"{source}: call {call_id!r} is already decided ({given[call_id].source})"
            )
        given[call_id] = Given(decision, source)

    for call_id in args.approve:
        add(call_id, Decision.approve(), f"--approve {call_id}")
    for value in args.deny:
        call_id, _, reason = value.partition("=")
        add(call_id, Decision.deny(reason), f"--deny {call_id}")
    for value in args.edit:
        call_id, equals, text = value.partition("=")
        source = f"--edit {call_id}"
        if not equals:
            raise UsageError(f"{source}: expected ID=JSON, the call's new arguments")
        add(call_id, Decision.edit(json_object(text, source)), source)
    if args.decisions is not None:
        source = f"--decisions {args.decisions}"
        for call_id, value in read_decisions(args.decisions).items():
            add(call_id, decision_from_json(value, f"{source}: call {call_id!r}"), source)
    return given


def read_decisions(name: str) -> dict[str, Any]:
    """A decisions file (``-``: standard input): a strict JSON object, bounded in size."""
    source = f"--decisions {name}"
    return json_object(read_limited(name, source), source)


def decision_from_json(value: Any, source: str) -> Decision:
    """A decision as a file holds it: ``Decision``'s JSON, or ``true`` / ``false``.

    Raises:
        UsageError: It is neither, naming ``source`` and what is wrong.
    """
    if value is True:
        return Decision.approve()
    if value is False:
        return Decision.deny()
    if not isinstance(value, dict):
        raise UsageError(
            f'{source}: expected a decision ({{"action": "approve"|"deny"|"edit", '
            f"...}}) or true/false, got {type(value).__name__}"
        )
    try:
        return Decision.model_validate(value)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"{source}: {where + ': ' if where else ''}{first['msg']}") from None


def decisions_for(state: RunState, given: Mapping[str, Given], where: str) -> dict[str, Decision]:
    """The decisions for ``state``'s waiting calls, checked: one for each, and no other.

    Args:
        state: The state to resume.
        given: The decisions given, by call id.
        where: What the state is, for messages (``STATE``, ``line 3 of in.jsonl``).

    Raises:
        UsageError: The state is not paused but decisions were given, a decision names no
            waiting call, or a waiting call has none (every such call is listed, with its
            arguments and how to decide it).
    """
    pending = state.pending
    if pending is None:
        if given:
            first = next(iter(given.values()))
            raise UsageError(
                f"{first.source}: {where} is not paused (phase {state.phase!r}): it takes no "
                "decisions"
            )
        return {}
    waiting = {call.id: call for call in pending.waiting}
    for call_id, decided in given.items():
        if call_id not in waiting:
            raise UsageError(
                f"{decided.source}: no call of {where} waits for approval with the id "
                f"{call_id!r}; {_waiting(pending)}"
            )
    undecided = [call for call_id, call in waiting.items() if call_id not in given]
    if undecided:
        calls = "; ".join(call_line(call) for call in undecided)
        raise UsageError(
            f"{where}: {len(undecided)} waiting call(s) need a decision ({HOW_TO_DECIDE}): {calls}"
        )
    # Each decision bound to the call the user decided about, as the state shows it: a state
    # changed before the resume is then refused, naming the call.
    return {call_id: _bound(given[call_id].decision, pending, call_id) for call_id in waiting}


def _bound(decision: Decision, pending: PendingCalls, call_id: str) -> Decision:
    if decision.call_digest is not None:
        return decision
    if decision.action == "edit":
        return pending.edit(call_id, dict(decision.arguments or {}))
    if decision.action == "deny":
        return pending.deny(call_id, decision.reason)
    return pending.approve(call_id)


def _waiting(pending: PendingCalls) -> str:
    return "waiting: " + "; ".join(call_line(call) for call in pending.waiting)
