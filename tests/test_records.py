"""Step and Turn records: JSON round trip, failure reasons, summaries."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from subagent import (
    FailReason,
    LLMResponse,
    RunFailedError,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    TurnType,
)


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def a_run() -> Step[Answer]:
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add])
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
        '{"value": "three"}',
        '{"value": 3}',
    ])  # fmt: skip
    return agent.run_sync(llm=llm, max_turns=2, return_retries=1)


def test_step_round_trips_through_json_typed() -> None:
    step = a_run()
    restored = Step[Answer].model_validate_json(step.model_dump_json())
    assert restored == step
    assert isinstance(restored.output, Answer)
    assert restored.turns[0].tool_calls[0].arguments == {"a": 1, "b": 2}
    assert restored.usage.by_type.keys() == {TurnType.NORMAL, TurnType.MUST_RETURN, TurnType.RETRY}


def test_json_carries_ok_and_the_failure_reason_as_strings() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    step = agent.run_sync(llm=ScriptedLLM(['{"fail": "no data"}']))
    data = step.model_dump(mode="json")
    assert data["ok"] is False
    assert data["failure"] == {"reason": "explicit_fail", "message": "no data", "error_kind": None}
    assert Step[Answer].model_validate(data).failure == step.failure


def test_fail_reason_compares_equal_to_its_string() -> None:
    assert FailReason.BUDGET_EXHAUSTED == "budget_exhausted"
    assert {reason.value for reason in FailReason} == {
        "budget_exhausted", "explicit_fail", "llm_error", "timeout", "cancelled"
    }  # fmt: skip


def test_raise_for_failure_returns_a_successful_step() -> None:
    step = a_run()
    assert step.raise_for_failure() is step


def test_raise_for_failure_raises_with_the_step() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    step = agent.run_sync(llm=ScriptedLLM(["nope"]), max_turns=1)
    with pytest.raises(RunFailedError, match=r"run failed \(budget_exhausted\)") as caught:
        step.raise_for_failure()
    assert caught.value.step is step and caught.value.reason is FailReason.BUDGET_EXHAUSTED


def test_summary_names_outcome_and_turn_types() -> None:
    assert a_run().summary() == "done in 3 turns (normal, must_return, retry)"


def test_summary_says_turn_for_a_single_turn() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    step = agent.run_sync(llm=ScriptedLLM(['{"value": 1}']), max_turns=1)
    assert step.summary() == "done in 1 turn (must_return)"
