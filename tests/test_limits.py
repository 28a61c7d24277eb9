"""Usage limits as a budget: checked before each call, after each reply, before tool calls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    Correction,
    ErrorKind,
    FailReason,
    FallbackLLM,
    LLMError,
    LLMResponse,
    Price,
    RetryPolicy,
    ScriptedLLM,
    SubAgent,
    ToolCall,
    ToolPolicy,
    TurnOutcome,
    Usage,
    UsageLimits,
    run_many,
    tool,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


@tool(run_in_thread=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def used(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens)


def reply(text: str, input_tokens: int = 10, output_tokens: int = 5) -> LLMResponse:
    return LLMResponse(text=text, usage=used(input_tokens, output_tokens))


def add_call(input_tokens: int = 10, output_tokens: int = 5, count: int = 1) -> LLMResponse:
    calls = [ToolCall(name="add", arguments={"a": 1, "b": n}) for n in range(count)]
    return LLMResponse(tool_calls=calls, usage=used(input_tokens, output_tokens))


def react_add(input_tokens: int = 10, output_tokens: int = 5) -> LLMResponse:
    action = json.dumps({"tool": "add", "input": {"a": 1, "b": 2}})
    usage = used(input_tokens, output_tokens)
    return LLMResponse(text=f"Thought: add.\nAction: {action}", usage=usage)


AGENT = SubAgent(name="calc", prompt="p", output=Answer, tools=[add], max_turns=4)


# --- configuration ---


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_input_tokens": 0}, "max_input_tokens"),
        ({"max_total_tokens": 1.5}, "max_total_tokens"),
        ({"max_tool_calls": -1}, "max_tool_calls"),
        ({"max_cost": 1.0}, "prices"),
        ({"max_cost": 0.0, "prices": Price(1, 1)}, "max_cost"),
        ({"max_cost": 1.0, "prices": {"m": 3}}, "prices"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        UsageLimits(**options)


async def test_usage_limits_that_are_no_usage_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="usage_limits"):
        await AGENT.run(llm=ScriptedLLM([]), usage_limits={"max_total_tokens": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="usage_limits"):
        SubAgent(name="a", prompt="p", usage_limits=3)  # type: ignore[arg-type]


async def test_a_cost_limit_without_a_price_for_the_model_is_refused_before_any_call() -> None:
    limits = UsageLimits(max_cost=1.0, prices={"gpt-4o": Price(2.5, 10)})
    llm = ScriptedLLM([], model_name="scripted")
    with pytest.raises(ConfigurationError, match="no price for model 'scripted'"):
        await AGENT.run(llm=llm, usage_limits=limits)
    assert llm.requests == []


# --- a run's own limits ---


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        (UsageLimits(max_input_tokens=15), "max_input_tokens=15"),
        (UsageLimits(max_output_tokens=8), "max_output_tokens=8"),
        (UsageLimits(max_total_tokens=25), "max_total_tokens=25"),
        (UsageLimits(max_cost=0.0002, prices=Price(10, 10)), "max_cost=0.0002"),
    ],
)
async def test_a_reply_crossing_a_limit_ends_the_run_keeping_its_turns(
    limits: UsageLimits, named: str
) -> None:
    # Each reply spends 10 input and 5 output tokens (0.00015 at 10 per million each).
    llm = ScriptedLLM([add_call(), add_call(), reply('{"x": 3}')])
    step = await AGENT.run(llm=llm, usage_limits=limits)
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert named in step.failure.message and "of agent 'calc'" in step.failure.message
    assert not step.retryable
    last = step.turns[-1]
    assert len(step.turns) == 2 and last.outcome is TurnOutcome.FAIL
    assert last.error_type == "usage_limit" and last.phase_after == "failed"
    # The crossing reply is kept, not acted on: its tool call never ran.
    assert [c.name for c in last.tool_calls] == ["add"] and last.tool_results == []
    assert step.usage.total == used(20, 10)


async def test_a_run_within_its_limits_is_not_touched() -> None:
    llm = ScriptedLLM([add_call(), reply('{"x": 3}')])
    step = await AGENT.run(llm=llm, usage_limits=UsageLimits(max_total_tokens=30,
                                                             max_tool_calls=1))  # fmt: skip
    assert step.ok and step.output == Answer(x=3)


async def test_a_limit_reached_exactly_stops_the_run_before_its_next_call() -> None:
    llm = ScriptedLLM([add_call(), reply('{"x": 3}')])
    step = await AGENT.run(llm=llm, usage_limits=UsageLimits(max_total_tokens=15))
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert "before the call" in step.failure.message and "15 spent" in step.failure.message
    assert len(llm.requests) == 1  # the second call was never sent
    assert len(step.turns) == 1 and step.turns[0].tool_results[0].ok


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_tool_calls_past_the_limit_do_not_run(protocol: str) -> None:
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add], max_turns=4,
                     tool_policy=ToolPolicy(protocol=protocol))  # type: ignore[arg-type]  # fmt: skip
    first = react_add() if protocol == "react" else add_call()
    llm = ScriptedLLM([first, first, reply('{"x": 3}')])
    step = await agent.run(llm=llm, usage_limits=UsageLimits(max_tool_calls=1))
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert "max_tool_calls=1" in step.failure.message
    assert step.turns[0].tool_results[0].ok
    assert step.turns[1].tool_results == [] and step.turns[1].error_type == "usage_limit"


async def test_a_reply_asking_for_more_calls_than_are_left_runs_none() -> None:
    ran: list[int] = []

    @tool(run_in_thread=False)
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(b)
        return a + b

    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add], max_turns=3)
    llm = ScriptedLLM([add_call(count=3)])
    step = await agent.run(llm=llm, usage_limits=UsageLimits(max_tool_calls=2))
    assert step.failure is not None and "3 more asked for" in step.failure.message
    assert ran == []


async def test_the_agent_default_limits_apply_and_a_run_may_replace_them() -> None:
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add], max_turns=4,
                     usage_limits=UsageLimits(max_total_tokens=10))  # fmt: skip
    step = await agent.run(llm=ScriptedLLM([add_call()]))
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    step = await agent.run(llm=ScriptedLLM([add_call(), reply('{"x": 3}')]),
                           usage_limits=UsageLimits(max_total_tokens=100))  # fmt: skip
    assert step.ok


async def test_a_limit_in_a_correction_turn_ends_the_run_from_retry() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, max_turns=1, return_retries=3)
    llm = ScriptedLLM([reply("no"), reply("still no"), reply('{"x": 1}')])
    step = await agent.run(llm=llm, usage_limits=UsageLimits(max_output_tokens=9))
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert [t.type.value for t in step.turns] == ["must_return", "retry"]


async def test_the_run_span_names_the_usage_limit_without_content(traced: Traced) -> None:
    llm = ScriptedLLM([add_call(), add_call()])
    await AGENT.run(llm=llm, usage_limits=UsageLimits(max_total_tokens=20),
                    tracer_provider=traced.provider)  # fmt: skip
    span = attrs(traced.one("invoke_agent calc"))
    assert "usage_limit" in json.dumps(span)


# --- each reply at the price of the model that produced it ---

PRICES = {"cheap": Price(1, 1), "dear": Price(1000, 1000)}  # per million tokens
ONE_TURN = SubAgent(name="a", prompt="p", output=Answer, max_turns=1)


def costly(text: str, *, model: str | None = None) -> LLMResponse:
    """1,000 input and 1,000 output tokens: 0.002 at the cheap price, 2.0 at the dear one."""
    return LLMResponse(text=text, usage=used(1000, 1000), model=model)


def down() -> LLMError:
    return LLMError(ErrorKind.RATE_LIMIT, "slow down", status_code=429)


async def test_a_fallback_models_reply_is_charged_its_own_price_and_crosses_max_cost() -> None:
    fallback = FallbackLLM([ScriptedLLM([down()], model_name="cheap"),
                            ScriptedLLM([costly('{"x": 3}')], model_name="dear")])  # fmt: skip
    step = await ONE_TURN.run(llm=fallback, retry_policy=RetryPolicy.none(),
                              usage_limits=UsageLimits(max_cost=0.5, prices=PRICES))  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    # At the first model's price it would have cost 0.002 and passed.
    assert "max_cost=0.5 of agent 'a': 2 spent" in step.failure.message
    assert step.turns[0].model == "dear"


async def test_a_correction_models_reply_is_charged_its_own_price() -> None:
    cheap = ScriptedLLM([costly("three")], model_name="cheap")
    dear = ScriptedLLM([costly('{"x": 3}')], model_name="dear")
    step = await ONE_TURN.run(llm=cheap, return_retries=1, correction=Correction(llm=dear),
                              usage_limits=UsageLimits(max_cost=0.5, prices=PRICES))  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert "max_cost=0.5 of agent 'a': 2.002 spent" in step.failure.message


@pytest.mark.parametrize("where", ["fallback", "nested fallback", "correction"])
async def test_a_model_the_prices_leave_out_is_refused_before_any_call(where: str) -> None:
    cheap = ScriptedLLM([], model_name="cheap")
    unpriced = ScriptedLLM([], model_name="unpriced")
    options: dict[str, Any] = {
        "fallback": {"llm": FallbackLLM([cheap, unpriced])},
        "nested fallback": {"llm": FallbackLLM([cheap, FallbackLLM([cheap, unpriced])])},
        "correction": {"llm": cheap, "correction": Correction(llm=unpriced)},
    }[where]
    limits = UsageLimits(max_cost=1.0, prices=PRICES)
    with pytest.raises(ConfigurationError, match="no price for model 'unpriced'") as caught:
        await ONE_TURN.run(usage_limits=limits, **options)
    assert caught.value.field == "prices"
    assert cheap.requests == unpriced.requests == []


async def test_one_price_prices_every_model_and_no_cost_limit_needs_none() -> None:
    def fallback() -> FallbackLLM:
        return FallbackLLM([ScriptedLLM([down()], model_name="cheap"),
                            ScriptedLLM([costly('{"x": 3}')], model_name="unpriced")])  # fmt: skip

    for limits in (UsageLimits(max_cost=0.5, prices=Price(1, 1)),
                   UsageLimits(max_total_tokens=5000, prices=PRICES)):  # fmt: skip
        step = await ONE_TURN.run(llm=fallback(), retry_policy=RetryPolicy.none(),
                                  usage_limits=limits)  # fmt: skip
        assert step.ok, step.failure


@pytest.mark.parametrize("fallback", [False, True])
async def test_a_dated_server_name_does_not_change_the_price(fallback: bool) -> None:
    # The server answers for gpt-4o with a dated name the price table does not hold.
    answer = costly('{"x": 3}', model="gpt-4o-2024-08-06")
    dated = ScriptedLLM([answer], model_name="gpt-4o")
    llm = (
        FallbackLLM([ScriptedLLM([down()], model_name="gpt-4o-mini"), dated]) if fallback else dated
    )
    prices = {"gpt-4o-mini": Price(0.15, 0.6), "gpt-4o": Price(2.5, 10)}
    step = await ONE_TURN.run(llm=llm, retry_policy=RetryPolicy.none(),
                              usage_limits=UsageLimits(max_cost=0.01, prices=prices))  # fmt: skip
    assert step.failure is not None and "0.0125 spent" in step.failure.message  # gpt-4o's price
    assert step.usage.by_model == {"gpt-4o": used(1000, 1000)}


async def test_a_reply_naming_a_model_no_price_covers_ends_the_run() -> None:
    # An adapter of the user's names a model the run could not know of before it started.
    named = LLMResponse(text='{"x": 3}', usage=used(10, 5), model_name="mystery")
    step = await ONE_TURN.run(llm=ScriptedLLM([named], model_name="cheap"),
                              usage_limits=UsageLimits(max_cost=1.0, prices=PRICES))  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert "cannot be counted" in step.failure.message
    assert "no price for model 'mystery'" in step.failure.message


# --- nested agents ---


async def test_a_nested_agent_spends_from_the_calling_run_budget() -> None:
    inner = SubAgent(name="inner", prompt="add {{a}}", tools=[add], max_turns=3)
    outer = SubAgent(name="outer", prompt="p", output=Answer, tools=[inner.as_tool()],
                     max_turns=3)  # fmt: skip
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="inner", arguments={"a": "1"})],
                    usage=used(10, 5)),  # outer: 15
        add_call(),  # inner: 30 in all
        add_call(),  # inner: 45 > 40: the inner run ends
        reply('{"x": 1}'),  # never sent: the outer run's budget is spent
    ])  # fmt: skip
    step = await outer.run(llm=llm, usage_limits=UsageLimits(max_total_tokens=40))
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    nested = step.turns[0].tool_results[0]
    assert nested.step is not None and nested.step.failure is not None
    assert nested.step.failure.reason is FailReason.USAGE_LIMIT
    assert "of agent 'outer'" in nested.step.failure.message
    assert "before the call" in step.failure.message
    assert len(llm.requests) == 3
    assert step.usage.total == used(30, 15)


async def test_nested_tool_calls_count_against_the_caller() -> None:
    inner = SubAgent(name="inner", prompt="add {{a}}", tools=[add], max_turns=3)
    outer = SubAgent(name="outer", prompt="p", tools=[inner.as_tool()], max_turns=3)
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="inner", arguments={"a": "1"})]),
        add_call(), "3",  # the inner agent: one call of add, then its answer
        LLMResponse(tool_calls=[ToolCall(name="inner", arguments={"a": "2"})]),
    ])  # fmt: skip
    step = await outer.run(llm=llm, usage_limits=UsageLimits(max_tool_calls=2))
    assert step.failure is not None and "max_tool_calls=2 of agent 'outer'" in (
        step.failure.message
    )
    assert len(step.turns) == 2


# --- batches ---


async def test_a_batch_limit_ends_the_runs_not_started_with_usage_limit() -> None:
    agent = SubAgent(name="a", prompt="task {{n}}", output=Answer)
    llm = ScriptedLLM([reply('{"x": 1}', 10, 5)] * 5)
    steps = await run_many(agent, [{"n": n} for n in range(5)], llm=llm, concurrency=1,
                           batch_limits=UsageLimits(max_total_tokens=30))  # fmt: skip
    assert len(steps) == 5
    assert [s.ok for s in steps] == [True, True, False, False, False]
    for failed in steps[2:]:
        assert failed.failure is not None and failed.failure.reason is FailReason.USAGE_LIMIT
        assert failed.turns == [] and "of the batch" in failed.failure.message
    assert len(llm.requests) == 2


async def test_a_batch_limit_crossed_stops_the_runs_under_way() -> None:
    agent = SubAgent(name="a", prompt="task {{n}}", output=Answer, tools=[add], max_turns=3)
    llm = ScriptedLLM([add_call(10, 5), add_call(10, 5), reply('{"x": 1}')] * 2)
    steps = await run_many(agent, [{"n": 0}, {"n": 1}], llm=llm, concurrency=2,
                           batch_limits=UsageLimits(max_total_tokens=40))  # fmt: skip
    assert len(steps) == 2
    assert all(s.failure is not None for s in steps)
    assert all(s.failure.reason is FailReason.USAGE_LIMIT for s in steps if s.failure)
    assert sum(len(s.turns) for s in steps) == 3  # the third reply crossed 40


async def test_batch_limits_that_are_no_usage_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="batch_limits"):
        await run_many(AGENT, [{}], llm=ScriptedLLM([]), batch_limits=5)  # type: ignore[arg-type]
