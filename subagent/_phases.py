"""The phase machine: DESIGN.md's state table as data, kept by one ``transitions`` Machine.

The machine only keeps books: it moves a run's :class:`Budget` between phases and spends
work or correction turns. All awaiting happens in the turn loop. One machine is built at
import and shared by every run (building a ``Machine`` per run would cost more than the
rest of a turn); each run's :class:`Budget` is a model passed to the trigger.

A transition depends only on (phase, trigger, work left, retries left, abort reason): the
guards and effects below are pure functions of those, and must stay so. :func:`advance`
therefore fires the machine once per distinct situation, on a scratch budget, and replays
the machine's result afterwards: the same books at about a twentieth of the cost of a live
trigger (which is ~20 us, more than the rest of a turn's bookkeeping together).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from transitions import EventData, Machine

from subagent._records import FailReason

__all__ = ["ACTIVE_PHASES", "TABLE", "Budget", "Phase", "Row", "advance", "fire", "mermaid_chart"]


class Phase(StrEnum):
    """Where a run is."""

    NORMAL = "normal"
    MUST_RETURN = "must_return"
    RETRY = "retry"
    DONE = "done"
    FAILED = "failed"


ACTIVE_PHASES = (Phase.NORMAL, Phase.MUST_RETURN, Phase.RETRY)
_PHASE_OF = {phase.value: phase for phase in Phase}


@dataclass(slots=True)
class Budget:
    """The books of one run: its phase and what is left of each budget.

    Attributes:
        state: The current phase's value (the attribute ``transitions`` drives).
        work_remaining: Work turns left, the current one included.
        retries_remaining: Correction turns left.
        retry_total: The correction budget the run started with.
        failure_reason: Set when the run enters ``failed``.
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
        """Whether another turn will be taken."""
        return self.state not in (Phase.DONE, Phase.FAILED)

    @property
    def retry_attempt(self) -> int:
        """The 1-based number of the current correction turn (meaningful in ``retry``)."""
        return self.retry_total - self.retries_remaining + 1


# --- guards and effects (transitions calls them with an EventData: send_event=True) ---


def _books(event: EventData) -> Budget:
    return cast(Budget, event.model)


def _last_work_turn_next(event: EventData) -> bool:
    return bool(_books(event).work_remaining - 1 == 1)


def _has_retries(event: EventData) -> bool:
    return bool(_books(event).retries_remaining > 0)


def _more_than_one_retry(event: EventData) -> bool:
    return bool(_books(event).retries_remaining > 1)


def _spend_work(event: EventData) -> None:
    _books(event).work_remaining -= 1


def _spend_retry(event: EventData) -> None:
    _books(event).retries_remaining -= 1


def _exhausted(event: EventData) -> None:
    _books(event).failure_reason = FailReason.BUDGET_EXHAUSTED


def _explicit_fail(event: EventData) -> None:
    _books(event).failure_reason = FailReason.EXPLICIT_FAIL


def _aborted(event: EventData) -> None:
    _books(event).failure_reason = FailReason(event.kwargs["reason"])


@dataclass(frozen=True, slots=True)
class Row:
    """One transition of the table.

    Attributes:
        trigger: ``returned`` (a valid return), ``gave_up`` (an explicit fail), ``missed``
            (an error, an invalid return, or a turn that did not return), ``aborted``.
        source: The phase the run is in.
        dest: The phase it moves to.
        guard: Taken only when this holds (rows are tried in order).
        effects: Book-keeping done on the way.
        label: How the chart names the edge.
    """

    trigger: str
    source: Phase
    dest: Phase
    guard: Any = None
    effects: tuple[Any, ...] = ()
    label: str = ""


def _rows() -> tuple[Row, ...]:
    rows: list[Row] = []
    for phase in ACTIVE_PHASES:
        rows.append(Row("returned", phase, Phase.DONE, label="valid return"))
        rows.append(
            Row("gave_up", phase, Phase.FAILED, effects=(_explicit_fail,), label="explicit fail")
        )
    rows += [
        Row("missed", Phase.NORMAL, Phase.MUST_RETURN, _last_work_turn_next, (_spend_work,),
            "miss [work-1 == 1] / work -= 1"),
        Row("missed", Phase.NORMAL, Phase.NORMAL, None, (_spend_work,),
            "miss [work-1 > 1] / work -= 1"),
        Row("missed", Phase.MUST_RETURN, Phase.RETRY, _has_retries, (_spend_work,),
            "miss [retries > 0] / work -= 1"),
        Row("missed", Phase.MUST_RETURN, Phase.FAILED, None, (_spend_work, _exhausted),
            "miss [retries == 0] / budget_exhausted"),
        Row("missed", Phase.RETRY, Phase.RETRY, _more_than_one_retry, (_spend_retry,),
            "miss [retries-1 > 0] / retries -= 1"),
        Row("missed", Phase.RETRY, Phase.FAILED, None, (_spend_retry, _exhausted),
            "miss [retries-1 == 0] / budget_exhausted"),
    ]  # fmt: skip
    for phase in ACTIVE_PHASES:
        rows.append(
            Row("aborted", phase, Phase.FAILED, effects=(_aborted,), label="llm_error / timeout")
        )
    return tuple(rows)


TABLE: tuple[Row, ...] = _rows()


def _machine() -> Machine:
    transitions = []
    for row in TABLE:
        spec: dict[str, Any] = {
            "trigger": row.trigger,
            "source": row.source.value,
            "dest": row.dest.value,
            "before": list(row.effects),
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
_EVENTS = {name: _MACHINE.events[name] for name in ("returned", "gave_up", "missed", "aborted")}


_Situation = tuple[str, str, int, int, Any]
_Result = tuple[str, int, int, FailReason | None]
_MEMO: dict[_Situation, _Result] = {}
_MEMO_LIMIT = 4096


def fire(budget: Budget, trigger: str, **kwargs: Any) -> Phase:
    """Fire ``trigger`` on the machine with ``budget`` as its model (no memo).

    Raises:
        transitions.MachineError: ``trigger`` is not valid in the budget's phase.
    """
    _EVENTS[trigger].trigger(budget, **kwargs)
    return budget.phase


def advance(budget: Budget, trigger: str, **kwargs: Any) -> Phase:
    """Move ``budget`` as the machine does for ``trigger``; return the phase it lands in.

    Raises:
        transitions.MachineError: ``trigger`` is not valid in the budget's phase.
    """
    situation = (budget.state, trigger, budget.work_remaining, budget.retries_remaining,
                 kwargs.get("reason"))  # fmt: skip
    result = _MEMO.get(situation)
    if result is None:
        scratch = Budget(budget.state, budget.work_remaining, budget.retries_remaining,
                         budget.retry_total)  # fmt: skip
        fire(scratch, trigger, **kwargs)
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
    """The state chart of :data:`TABLE` as a mermaid ``stateDiagram-v2``."""
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
    lines += ["    done --> [*]", "    failed --> [*]"]
    return "\n".join(lines) + "\n"
