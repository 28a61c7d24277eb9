"""The phase machine: the state table, fired trigger by trigger."""

from __future__ import annotations

import pytest

from subagent._phases import ACTIVE_PHASES, TABLE, Budget, Phase, Trigger, advance, mermaid_chart
from subagent.records import FailReason


@pytest.mark.parametrize(("max_turns", "phase"), [(1, Phase.MUST_RETURN), (2, Phase.NORMAL)])
def test_initial_phase_depends_on_the_work_budget(max_turns: int, phase: Phase) -> None:
    assert Budget.start(max_turns, 0).phase is phase


# What a turn that ends the run leaves: it spends one turn of its phase's budget like any
# other (a work turn in normal and must_return, a correction turn in retry).
_LEFT_AFTER_THE_LAST_TURN = {Phase.NORMAL: (1, 3), Phase.MUST_RETURN: (1, 3), Phase.RETRY: (2, 2)}


@pytest.mark.parametrize("phase", [Phase.NORMAL, Phase.MUST_RETURN, Phase.RETRY])
def test_valid_return_is_done_from_every_active_phase_and_spends_the_turn(phase: Phase) -> None:
    budget = Budget(phase.value, 2, 3, 3)
    assert advance(budget, Trigger.RETURNED) is Phase.DONE
    assert (budget.work_remaining, budget.retries_remaining) == _LEFT_AFTER_THE_LAST_TURN[phase]


@pytest.mark.parametrize("phase", [Phase.NORMAL, Phase.MUST_RETURN, Phase.RETRY])
def test_explicit_fail_fails_from_every_active_phase_and_spends_the_turn(phase: Phase) -> None:
    budget = Budget(phase.value, 2, 3, 3)
    assert advance(budget, Trigger.GAVE_UP) is Phase.FAILED
    assert budget.failure_reason is FailReason.EXPLICIT_FAIL
    assert (budget.work_remaining, budget.retries_remaining) == _LEFT_AFTER_THE_LAST_TURN[phase]


@pytest.mark.parametrize("phase", ACTIVE_PHASES)
def test_left_after_turn_is_what_the_table_leaves_after_a_turn_that_ends_the_run(
    phase: Phase,
) -> None:
    budget = Budget(phase.value, 2, 3, 3)
    assert budget.left_after_turn() == _LEFT_AFTER_THE_LAST_TURN[phase]


@pytest.mark.parametrize(
    ("trigger", "reason"),
    [
        (Trigger.LLM_FAILED, FailReason.LLM_ERROR),
        (Trigger.TIMED_OUT, FailReason.TIMEOUT),
        (Trigger.STOPPED, FailReason.CANCELLED),
        (Trigger.LIMIT_REACHED, FailReason.USAGE_LIMIT),
    ],
)
@pytest.mark.parametrize("phase", ACTIVE_PHASES)
def test_abort_fails_from_every_active_phase_with_its_reason(
    phase: Phase, trigger: Trigger, reason: FailReason
) -> None:
    budget = Budget(phase.value, 2, 3, 3)
    assert advance(budget, trigger) is Phase.FAILED
    assert budget.failure_reason is reason
    assert (budget.work_remaining, budget.retries_remaining) == _LEFT_AFTER_THE_LAST_TURN[phase]


def test_every_row_into_failed_says_why_and_no_other_row_does() -> None:
    for row in TABLE:
        assert (row.reason is not None) == (row.dest is Phase.FAILED), row


def test_a_tool_turn_spends_a_work_turn_like_a_miss() -> None:
    for work in (2, 3, 4):
        used, missed = Budget.start(work, 1), Budget.start(work, 1)
        assert advance(used, Trigger.USED_TOOLS) is advance(missed, Trigger.MISSED)
        assert used == missed


@pytest.mark.parametrize("phase", [Phase.MUST_RETURN, Phase.RETRY])
def test_a_tool_turn_is_impossible_where_tools_are_not_offered(phase: Phase) -> None:
    from transitions import MachineError

    with pytest.raises(MachineError):
        advance(Budget(phase.value, 1, 1, 1), Trigger.USED_TOOLS)


def test_normal_miss_spends_work_and_stays_while_more_than_one_is_left() -> None:
    budget = Budget.start(4, 0)
    assert advance(budget, Trigger.MISSED) is Phase.NORMAL
    assert budget.work_remaining == 3


def test_normal_miss_moves_to_must_return_when_one_work_turn_is_left() -> None:
    budget = Budget.start(2, 0)
    assert advance(budget, Trigger.MISSED) is Phase.MUST_RETURN
    assert budget.work_remaining == 1


def test_must_return_miss_moves_to_retry_when_retries_are_left() -> None:
    budget = Budget.start(1, 2)
    assert advance(budget, Trigger.MISSED) is Phase.RETRY
    assert (budget.work_remaining, budget.retries_remaining) == (0, 2)
    assert budget.retry_attempt == 1


def test_must_return_miss_fails_without_retries() -> None:
    budget = Budget.start(1, 0)
    assert advance(budget, Trigger.MISSED) is Phase.FAILED
    assert budget.failure_reason is FailReason.BUDGET_EXHAUSTED
    assert budget.work_remaining == 0


def test_retry_miss_spends_a_retry_and_stays_while_more_than_one_is_left() -> None:
    budget = Budget(Phase.RETRY.value, 0, 2, 2)
    assert advance(budget, Trigger.MISSED) is Phase.RETRY
    assert budget.retries_remaining == 1
    assert budget.retry_attempt == 2


def test_retry_miss_on_the_last_retry_fails() -> None:
    budget = Budget(Phase.RETRY.value, 0, 1, 1)
    assert advance(budget, Trigger.MISSED) is Phase.FAILED
    assert budget.failure_reason is FailReason.BUDGET_EXHAUSTED
    assert budget.retries_remaining == 0


@pytest.mark.parametrize(("max_turns", "retries"), [(1, 0), (1, 4), (3, 0), (5, 2)])
def test_missing_every_turn_takes_exactly_max_turns_plus_retries_turns(
    max_turns: int, retries: int
) -> None:
    budget = Budget.start(max_turns, retries)
    turns = 0
    while budget.active:
        advance(budget, Trigger.MISSED)
        turns += 1
    assert turns == max_turns + retries


@pytest.mark.parametrize("phase", [Phase.DONE, Phase.FAILED])
def test_final_phases_accept_no_trigger(phase: Phase) -> None:
    from transitions import MachineError

    for trigger in Trigger:
        with pytest.raises(MachineError):
            advance(Budget(phase.value, 1, 1, 1), trigger)


def test_table_covers_every_trigger_from_every_active_phase() -> None:
    active = set(ACTIVE_PHASES)
    only_from = {
        Trigger.USED_TOOLS: {Phase.NORMAL},
        Trigger.NEEDS_APPROVAL: {Phase.NORMAL},
        Trigger.RESUMED: {Phase.PAUSED},
        Trigger.SERVER_LOST: {Phase.NORMAL},
        Trigger.INPUT_REFUSED: {Phase.NORMAL, Phase.MUST_RETURN},  # where a run starts
    }
    for trigger in Trigger:
        sources = {row.source for row in TABLE if row.trigger is trigger}
        assert sources == only_from.get(trigger, active), trigger


@pytest.mark.parametrize("work", [2, 3, 5])
def test_a_pause_for_approval_spends_nothing_and_resuming_returns_to_normal(work: int) -> None:
    budget = Budget(Phase.NORMAL.value, work, 2, 2)
    assert advance(budget, Trigger.NEEDS_APPROVAL) is Phase.PAUSED
    assert (budget.work_remaining, budget.retries_remaining) == (work, 2)
    assert not budget.active
    assert advance(budget, Trigger.RESUMED) is Phase.NORMAL
    assert (budget.work_remaining, budget.retries_remaining) == (work, 2)
    assert budget.active


@pytest.mark.parametrize("phase", [Phase.MUST_RETURN, Phase.RETRY])
def test_no_pause_is_possible_where_tools_are_not_offered(phase: Phase) -> None:
    from transitions import MachineError

    with pytest.raises(MachineError):
        advance(Budget(phase.value, 1, 1, 1), Trigger.NEEDS_APPROVAL)


def test_mermaid_chart_draws_every_row_of_the_table() -> None:
    chart = mermaid_chart()
    assert chart.startswith("stateDiagram-v2")
    for row in TABLE:
        assert f"{row.source.value} --> {row.dest.value}: {row.label}" in chart


def test_memoised_advance_matches_live_firing_everywhere() -> None:
    from itertools import product

    from transitions import MachineError

    from subagent._phases import fire

    for phase, trigger, work, retries in product(
        [p.value for p in Phase], list(Trigger), range(5), range(5)
    ):
        live, replayed = Budget(phase, work, retries, 4), Budget(phase, work, retries, 4)
        try:
            fire(live, trigger)
        except MachineError:
            with pytest.raises(MachineError):
                advance(replayed, trigger)
            continue
        advance(Budget(phase, work, retries, 4), trigger)  # first time: fills the memo
        advance(replayed, trigger)  # second time: replays it
        assert replayed == live, (phase, trigger, work, retries)


def test_the_chart_shows_the_usage_limit_row_from_every_active_phase() -> None:
    chart = mermaid_chart()
    for phase in ACTIVE_PHASES:
        assert f"{phase.value} --> failed: usage limit reached / usage_limit" in chart


def test_a_lost_tool_server_fails_a_normal_turn_spending_its_work_turn() -> None:
    budget = Budget(Phase.NORMAL.value, 3, 2, 2)
    assert advance(budget, Trigger.SERVER_LOST) is Phase.FAILED
    assert budget.failure_reason is FailReason.TOOL_SERVER_LOST
    assert (budget.work_remaining, budget.retries_remaining) == (2, 2)


@pytest.mark.parametrize("phase", [Phase.MUST_RETURN, Phase.RETRY])
def test_no_tool_server_is_lost_where_tools_never_run(phase: Phase) -> None:
    from transitions import MachineError

    with pytest.raises(MachineError):
        advance(Budget(phase.value, 2, 2, 2), Trigger.SERVER_LOST)


def test_the_chart_shows_the_lost_server_row_from_normal_only() -> None:
    lost = [line for line in mermaid_chart().splitlines() if "tool_server_lost" in line]
    assert lost == ["    normal --> failed: tool server lost / tool_server_lost"]


@pytest.mark.parametrize("phase", [Phase.NORMAL, Phase.MUST_RETURN])
def test_a_refused_task_fails_from_the_phase_a_run_starts_in_spending_nothing(
    phase: Phase,
) -> None:
    budget = Budget(phase.value, 2, 3, 3)
    assert advance(budget, Trigger.INPUT_REFUSED) is Phase.FAILED
    assert budget.failure_reason is FailReason.INPUT_REFUSED
    assert (budget.work_remaining, budget.retries_remaining) == (2, 3)  # no turn was taken


def test_no_task_is_refused_once_corrections_began() -> None:
    from transitions import MachineError

    with pytest.raises(MachineError):
        advance(Budget(Phase.RETRY.value, 2, 2, 2), Trigger.INPUT_REFUSED)


def test_the_chart_shows_the_refused_task_row_from_the_starting_phases() -> None:
    refused = [line for line in mermaid_chart().splitlines() if "input_refused" in line]
    assert refused == ["    normal --> failed: task refused / input_refused",
                       "    must_return --> failed: task refused / input_refused"]  # fmt: skip
