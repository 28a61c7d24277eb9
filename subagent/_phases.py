"""The phase machine: the state table as data, kept by one ``transitions`` Machine.

This module is the table's one home (``docs/state-chart.md`` draws it, and
``docs/architecture.md`` shows where it sits in a turn). Each row says, for a phase and a
:class:`Trigger` (what a turn came to), where the run goes, what it spends, and, for rows
into ``failed``, the :class:`~subagent.FailReason`: the table is the one place that decides
why a run failed.

The machine only keeps books: it moves a run's :class:`Budget` between phases and spends
work or correction turns. All awaiting happens in the turn loop. One machine is built at
import and shared by every run (building a ``Machine`` per run would cost more than the
rest of a turn); each run's :class:`Budget` is a model passed to the trigger.

A transition depends only on (phase, trigger, work left, retries left): the guards and
effects below are pure functions of those, and must stay so. :func:`advance` therefore
fires the machine once per distinct situation, on a scratch budget, and replays the
machine's result afterwards: the same books at about a twentieth of the cost of a live
trigger (which is ~20 us, more than the rest of a turn's bookkeeping together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from transitions import EventData, Machine

from subagent.records import FailReason

__all__ = [
    "ACTIVE_PHASES",
    "TABLE",
    "Budget",
    "Phase",
    "Row",
    "Trigger",
    "advance",
    "fire",
    "mermaid_chart",
]


class Phase(StrEnum):
    """Where a run is."""

    NORMAL = "normal"
    MUST_RETURN = "must_return"
    RETRY = "retry"
    DONE = "done"
    FAILED = "failed"
    PAUSED = "paused"


class Trigger(StrEnum):
    """What a turn came to, as the machine sees it: exactly one per turn.

    ``RETURNED``: a valid return. ``GAVE_UP``: the model's explicit fail. ``USED_TOOLS``: a
    tool turn in ``normal`` (the calls ran; their errors, if any, are fed back). ``MISSED``:
    an error, an invalid return, a cut-off reply or a refused tool call. ``LLM_FAILED``: a
    call that failed for good (non-retryable, or its retries spent). ``TIMED_OUT``: a call
    that kept timing out, or the mission timeout. ``STOPPED``: the run was stopped from
    outside. ``NEEDS_APPROVAL``: a reply in ``normal`` called a tool that needs approval;
    the run pauses before running any call, spending nothing. ``RESUMED``: the decisions
    came; the paused turn goes on in ``normal`` (its tool calls run, then it spends its
    work turn as any tool turn does). ``LIMIT_REACHED``: a usage limit (tokens, tool calls,
    cost) was reached before a call, or crossed by a reply or by the tool calls it asked for.
    ``SERVER_LOST``: a tool turn in ``normal`` found a tool's source gone (an MCP server
    whose process died); the calls' results are kept, and the run ends. ``INPUT_REFUSED``:
    a hook's ``before_run`` (an input guardrail) refused the task before the first model
    call; no turn was taken, and none is spent.
    """

    RETURNED = "returned"
    GAVE_UP = "gave_up"
    USED_TOOLS = "used_tools"
    MISSED = "missed"
    LLM_FAILED = "llm_failed"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"
    NEEDS_APPROVAL = "needs_approval"
    RESUMED = "resumed"
    LIMIT_REACHED = "limit_reached"
    SERVER_LOST = "server_lost"
    INPUT_REFUSED = "input_refused"


ACTIVE_PHASES = (Phase.NORMAL, Phase.MUST_RETURN, Phase.RETRY)
# The phases a run's call returns in: done and failed end the run; paused ends this part of
# it (resume() goes on from there).
_ENDS_A_RUN = frozenset({Phase.DONE.value, Phase.FAILED.value, Phase.PAUSED.value})
_PHASE_OF = {phase.value: phase for phase in Phase}


@dataclass(slots=True)
class Budget:
    """The books of one run: its phase and what is left of each budget.

    Attributes:
        state: The current phase's value (the attribute ``transitions`` drives).
        work_remaining: Work turns left: between turns, the next one included; after the
            turn that ended the run, what that turn left (every turn spends one turn of its
            phase's budget, the last one too).
        retries_remaining: Correction turns left, counted the same way.
        retry_total: The correction budget the run started with.
        failure_reason: Why the run failed, set by the row that moved it to ``failed``.
    """

    state: str
    work_remaining: int
    retries_remaining: int
    retry_total: int
    failure_reason: FailReason | None = None

    @classmethod
    def start(cls, max_turns: int, return_retries: int) -> Budget:
        """The initial books: ``normal`` if there is more than one work turn."""
        phase = Phase.NORMAL if max_turns > 1 else Phase.MUST_RETURN
        return cls(phase.value, max_turns, return_retries, return_retries)

    @property
    def phase(self) -> Phase:
        """The current phase."""
        return _PHASE_OF[self.state]

    @property
    def active(self) -> bool:
        """Whether another turn will be taken (not in ``done``, ``failed`` or ``paused``)."""
        return self.state not in _ENDS_A_RUN

    def left_after_turn(self) -> tuple[int, int]:
        """(work, retries) left once the current turn is spent, whatever it came to.

        What a turn cut short (cancelled, a mission timeout) reports as left: the turn was
        taken, so it counts, exactly as the table's rows count a turn that ended the run.
        """
        if self.state == Phase.RETRY:
            return self.work_remaining, self.retries_remaining - 1
        return self.work_remaining - 1, self.retries_remaining

    @property
    def last_work_turn_next(self) -> bool:
        """Whether the next turn, if this one does not end the run, is ``must_return``.

        In ``normal``, this turn is then the last one that offers tools.
        """
        return self.work_remaining - 1 == 1

    @property
    def retry_attempt(self) -> int:
        """The 1-based number of the current correction turn (meaningful in ``retry``)."""
        return self.retry_total - self.retries_remaining + 1


# --- guards and effects (transitions calls them with an EventData: send_event=True) ---


def _books(event: EventData) -> Budget:
    return cast(Budget, event.model)


def _last_work_turn_next(event: EventData) -> bool:
    return _books(event).last_work_turn_next


def _has_retries(event: EventData) -> bool:
    return bool(_books(event).retries_remaining > 0)


def _more_than_one_retry(event: EventData) -> bool:
    return bool(_books(event).retries_remaining > 1)


def _spend_work(event: EventData) -> None:
    _books(event).work_remaining -= 1


def _spend_retry(event: EventData) -> None:
    _books(event).retries_remaining -= 1


@dataclass(frozen=True, slots=True)
class Row:
    """One transition of the table.

    Attributes:
        trigger: What the turn came to.
        source: The phase the run is in.
        dest: The phase it moves to.
        guard: Taken only when this holds (rows are tried in order).
        effects: Book-keeping done on the way.
        reason: Why the run failed, for rows into ``failed``.
        label: How the chart names the edge.
    """

    trigger: Trigger
    source: Phase
    dest: Phase
    guard: Callable[[EventData], bool] | None = None
    effects: tuple[Callable[[EventData], None], ...] = ()
    reason: FailReason | None = None
    label: str = ""


_KEEP_WORKING = "tool turn or miss [work-1 > 1] / work -= 1"
_LAST_WORK_TURN = "tool turn or miss [work-1 == 1] / work -= 1"
_ABORTED = "llm_error / timeout / cancelled"


def _spends(phase: Phase) -> tuple[Callable[[EventData], None], ...]:
    """What a turn in ``phase`` spends: a correction turn in ``retry``, else a work turn."""
    return (_spend_retry,) if phase is Phase.RETRY else (_spend_work,)


def _rows() -> tuple[Row, ...]:
    # Every turn spends one turn of its phase's budget, the one that ends the run too: the
    # budgets left on a Turn (and its span, its event, the console line) are what the run
    # had not used. Spending on rows into done / failed changes no decision (the run ends).
    rows: list[Row] = []
    for phase in ACTIVE_PHASES:
        rows.append(Row(Trigger.RETURNED, phase, Phase.DONE, None, _spends(phase),
                        label="valid return"))  # fmt: skip
        rows.append(Row(Trigger.GAVE_UP, phase, Phase.FAILED, None, _spends(phase),
                        FailReason.EXPLICIT_FAIL, "explicit fail"))  # fmt: skip
    # A tool turn can only happen in normal (tools are not offered elsewhere, and a call
    # there is refused: a miss); in normal it spends a work turn exactly as a miss does.
    for trigger in (Trigger.USED_TOOLS, Trigger.MISSED):
        rows += [
            Row(trigger, Phase.NORMAL, Phase.MUST_RETURN, _last_work_turn_next, (_spend_work,),
                label=_LAST_WORK_TURN),
            Row(trigger, Phase.NORMAL, Phase.NORMAL, None, (_spend_work,), label=_KEEP_WORKING),
        ]  # fmt: skip
    rows += [
        Row(Trigger.MISSED, Phase.MUST_RETURN, Phase.RETRY, _has_retries, (_spend_work,),
            label="miss [retries > 0] / work -= 1"),
        Row(Trigger.MISSED, Phase.MUST_RETURN, Phase.FAILED, None, (_spend_work,),
            FailReason.BUDGET_EXHAUSTED, "miss [retries == 0] / budget_exhausted"),
        Row(Trigger.MISSED, Phase.RETRY, Phase.RETRY, _more_than_one_retry, (_spend_retry,),
            label="miss [retries-1 > 0] / retries -= 1"),
        Row(Trigger.MISSED, Phase.RETRY, Phase.FAILED, None, (_spend_retry,),
            FailReason.BUDGET_EXHAUSTED, "miss [retries-1 == 0] / budget_exhausted"),
    ]  # fmt: skip
    # Approval: tools are offered in normal only, so only a normal turn can pause. The
    # pause spends nothing; the resumed turn is then a tool turn of normal like any other.
    rows += [
        Row(Trigger.NEEDS_APPROVAL, Phase.NORMAL, Phase.PAUSED,
            label="calls a tool needing approval / spends nothing"),
        Row(Trigger.RESUMED, Phase.PAUSED, Phase.NORMAL,
            label="resume(state, decisions) / spends nothing"),
    ]  # fmt: skip
    for trigger, reason in (
        (Trigger.LLM_FAILED, FailReason.LLM_ERROR),
        (Trigger.TIMED_OUT, FailReason.TIMEOUT),
        (Trigger.STOPPED, FailReason.CANCELLED),
    ):
        for phase in ACTIVE_PHASES:
            rows.append(Row(trigger, phase, Phase.FAILED, None, _spends(phase), reason,
                            _ABORTED))  # fmt: skip
    rows += _limit_rows()
    rows += _lost_rows()
    rows += _refused_rows()
    return tuple(rows)


def _limit_rows() -> list[Row]:
    """A usage limit reached ends the run from any active phase, like an abort."""
    return [
        Row(Trigger.LIMIT_REACHED, phase, Phase.FAILED, None, _spends(phase),
            FailReason.USAGE_LIMIT, "usage limit reached / usage_limit")
        for phase in ACTIVE_PHASES
    ]  # fmt: skip


def _lost_rows() -> list[Row]:
    """A tool source gone mid-run ends it; only ``normal`` runs tools, so only from there."""
    return [
        Row(Trigger.SERVER_LOST, Phase.NORMAL, Phase.FAILED, None, (_spend_work,),
            FailReason.TOOL_SERVER_LOST, "tool server lost / tool_server_lost"),
    ]  # fmt: skip


def _refused_rows() -> list[Row]:
    """A task refused before the first call ends the run from the phase it starts in.

    No turn was taken, so none is spent.
    """
    return [
        Row(Trigger.INPUT_REFUSED, phase, Phase.FAILED, None, (), FailReason.INPUT_REFUSED,
            "task refused / input_refused")
        for phase in (Phase.NORMAL, Phase.MUST_RETURN)
    ]  # fmt: skip


TABLE: tuple[Row, ...] = _rows()


def _failing_with(reason: FailReason) -> Callable[[EventData], None]:
    def fail(event: EventData) -> None:
        _books(event).failure_reason = reason

    fail.__name__ = f"fail_{reason.value}"
    return fail


def _machine() -> Machine:
    transitions = []
    for row in TABLE:
        effects: list[Callable[[EventData], None]] = list(row.effects)
        if row.reason is not None:
            effects.append(_failing_with(row.reason))
        spec: dict[str, Any] = {
            "trigger": row.trigger.value,
            "source": row.source.value,
            "dest": row.dest.value,
            "before": effects,
        }
        if row.guard is not None:
            spec["conditions"] = row.guard
        transitions.append(spec)
    return Machine(
        model=None,
        states=[phase.value for phase in Phase],
        transitions=transitions,
        initial=None,
        auto_transitions=False,
        send_event=True,
        model_attribute="state",
    )


_MACHINE = _machine()
_EVENTS = {trigger: _MACHINE.events[trigger.value] for trigger in Trigger}


_Situation = tuple[str, Trigger, int, int]
_Result = tuple[str, int, int, FailReason | None]
_MEMO: dict[_Situation, _Result] = {}
_MEMO_LIMIT = 4096


def fire(budget: Budget, trigger: Trigger) -> Phase:
    """Fire ``trigger`` on the machine with ``budget`` as its model (no memo).

    Raises:
        transitions.MachineError: ``trigger`` is not valid in the budget's phase.
    """
    _EVENTS[trigger].trigger(budget)
    return budget.phase


def advance(budget: Budget, trigger: Trigger) -> Phase:
    """Move ``budget`` as the machine does for ``trigger``; return the phase it lands in.

    Raises:
        transitions.MachineError: ``trigger`` is not valid in the budget's phase.
    """
    situation = (budget.state, trigger, budget.work_remaining, budget.retries_remaining)
    result = _MEMO.get(situation)
    if result is None:
        scratch = Budget(budget.state, budget.work_remaining, budget.retries_remaining,
                         budget.retry_total)  # fmt: skip
        fire(scratch, trigger)
        result = (scratch.state, scratch.work_remaining, scratch.retries_remaining,
                  scratch.failure_reason)  # fmt: skip
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        _MEMO[situation] = result
    budget.state, budget.work_remaining, budget.retries_remaining, reason = result
    if reason is not None:
        budget.failure_reason = reason
    return _PHASE_OF[budget.state]


def mermaid_chart() -> str:
    """The state chart of :data:`TABLE` as a mermaid ``stateDiagram-v2``.

    Rows that draw the same edge (the same phases and label) are drawn once.
    """
    lines = [
        "stateDiagram-v2",
        "    [*] --> normal: max_turns > 1",
        "    [*] --> must_return: max_turns == 1",
    ]
    seen: set[tuple[str, str, str]] = set()
    for row in TABLE:
        key = (row.source.value, row.dest.value, row.label)
        if key not in seen:
            seen.add(key)
            lines.append(f"    {row.source.value} --> {row.dest.value}: {row.label}")
    lines += [
        "    done --> [*]",
        "    failed --> [*]",
        "    paused --> [*]: the run returns, paused",
    ]
    return "\n".join(lines) + "\n"
