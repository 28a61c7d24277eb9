"""Batches: run_many, stream_many and summarize."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from openai_server import Reply, ScriptedServer, completion
from pydantic import BaseModel

from subagent import (
    ConfigurationError,
    ErrorKind,
    FailReason,
    LLMError,
    LLMRequest,
    LLMResponse,
    OpenAIChat,
    RetryPolicy,
    ScriptedLLM,
    StopReason,
    SubAgent,
    Usage,
    run_many,
    stream_many,
    summarize,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


AGENT = SubAgent(name="double", prompt="Double {{n}}", output=Answer, max_turns=1)


class Doubler:
    """A model that doubles the number in the task, counting calls in flight."""

    model_name = "doubler"

    def __init__(self, gate: anyio.Event | None = None) -> None:
        self.in_flight = 0
        self.most = 0
        self.gate = gate

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await anyio.lowlevel.checkpoint()  # let the other runs start
            if self.gate is not None:
                await self.gate.wait()
            n = int(request.messages[1].content.splitlines()[0].split()[-1])
            return LLMResponse(text=json.dumps({"x": 2 * n}))
        finally:
            self.in_flight -= 1


async def test_run_many_returns_steps_in_input_order_within_its_concurrency() -> None:
    llm = Doubler()
    steps = await run_many(AGENT, [{"n": n} for n in range(20)], concurrency=4, llm=llm)
    assert [step.output for step in steps] == [Answer(x=2 * n) for n in range(20)]
    assert 1 < llm.most <= 4


async def test_one_failing_run_never_stops_the_others() -> None:
    contexts: list[dict[str, Any]] = [{"n": 1}, {"wrong": 2}, {"n": 3}]  # the second lacks n
    steps = await run_many(AGENT, contexts, llm=Doubler())
    assert [step.ok for step in steps] == [True, False, True]
    failure = steps[1].failure
    assert failure is not None and failure.reason is FailReason.ERROR
    assert "MissingVariableError" in failure.message and "'n'" in failure.message
    assert steps[1].retryable is False


async def test_retryable_failures_are_rerun_when_asked() -> None:
    busy = LLMError(ErrorKind.SERVER_ERROR, "busy", status_code=503)
    options: dict[str, Any] = {"retry_policy": RetryPolicy.none()}
    once = await run_many(AGENT, [{"n": 1}], llm=ScriptedLLM([busy, '{"x": 2}']), **options)
    assert once[0].retryable  # not rerun by default
    again = await run_many(AGENT, [{"n": 1}], llm=ScriptedLLM([busy, '{"x": 2}']),
                           rerun_retryable=2, rerun_delay=0, **options)  # fmt: skip
    assert again[0].ok and again[0].output == Answer(x=2)


async def test_stream_many_yields_outcomes_as_they_complete() -> None:
    gate = anyio.Event()
    slow = SubAgent(name="slow", prompt="Double {{n}}", output=Answer, max_turns=1,
                    llm=Doubler(gate))  # fmt: skip
    fast = SubAgent(name="fast", prompt="Double {{n}}", output=Answer, max_turns=1)
    seen: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(slow.run, {"n": 0})  # holds the gate's model busy

        async with stream_many(fast, [{"n": n} for n in range(3)], llm=Doubler()) as batch:
            async for item in batch:
                seen.append(item.index)
                assert item.step.output == Answer(x=2 * item.index) and item.attempts == 1
        gate.set()
    assert sorted(seen) == [0, 1, 2]


async def test_inputs_are_read_lazily_and_leaving_early_cancels_the_rest() -> None:
    taken: list[int] = []

    def contexts() -> Iterator[dict[str, int]]:
        for n in range(1000):
            taken.append(n)
            yield {"n": n}

    gate = anyio.Event()  # never set: every run waits
    with anyio.fail_after(10):
        async with stream_many(AGENT, contexts(), concurrency=3, llm=Doubler(gate)):
            await anyio.wait_all_tasks_blocked()
    assert len(taken) == 3  # one input per worker, no more


class ConsumerBug(Exception):
    pass


async def consume_raising(block: Any, *, before_reading: bool = False) -> None:
    """Enter ``block`` (a batch or a stream) and raise ConsumerBug in it."""
    async with block as events:
        if before_reading:
            await anyio.wait_all_tasks_blocked()  # the runs are under way
            raise ConsumerBug("mine")
        async for _ in events:
            raise ConsumerBug("mine")


async def test_the_consumers_own_exception_leaves_a_batch_unwrapped() -> None:
    gate = anyio.Event()  # never set: the runs are still going when the block raises
    waiting = stream_many(AGENT, [{"n": n} for n in range(5)], concurrency=2, llm=Doubler(gate))
    with pytest.raises(ConsumerBug) as raised:
        await consume_raising(waiting, before_reading=True)
    assert not isinstance(raised.value, BaseExceptionGroup)
    reading = stream_many(AGENT, [{"n": n} for n in range(5)], llm=Doubler())
    with pytest.raises(ConsumerBug):  # the same while reading finished results
        await consume_raising(reading)


async def test_a_batch_and_a_stream_pass_the_consumers_exception_on_alike() -> None:
    raised: list[type[BaseException]] = []
    for block in (stream_many(AGENT, [{"n": 1}], llm=Doubler()),
                  AGENT.stream({"n": 1}, llm=Doubler())):  # fmt: skip
        try:
            await consume_raising(block)
        except BaseException as exc:  # which exception comes out is the point
            raised.append(type(exc))
    assert raised == [ConsumerBug, ConsumerBug]


async def test_run_many_reads_its_inputs_lazily_and_keeps_their_order() -> None:
    taken: list[int] = []

    def contexts() -> Iterator[dict[str, int]]:
        for n in range(50):
            taken.append(n)
            yield {"n": n}

    gate = anyio.Event()
    steps: list[Any] = []

    async def run() -> None:
        steps.extend(await run_many(AGENT, contexts(), concurrency=3, llm=Doubler(gate)))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await anyio.wait_all_tasks_blocked()
        assert len(taken) == 3  # one input per worker, not all 50 up front
        gate.set()
    assert [step.output for step in steps] == [Answer(x=2 * n) for n in range(50)]


async def test_options_are_checked_before_any_run() -> None:
    with pytest.raises(ConfigurationError, match="max_turns"):
        await run_many(AGENT, [{"n": 1}], llm=Doubler(), max_turns=0)
    with pytest.raises(ConfigurationError, match="concurrency"):
        await run_many(AGENT, [{"n": 1}], llm=Doubler(), concurrency=0)
    with pytest.raises(ConfigurationError, match="contexts"):
        await run_many(AGENT, {"n": 1}, llm=Doubler())  # type: ignore[arg-type]


async def test_a_progress_bar_is_shown_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    await run_many(AGENT, [{"n": n} for n in range(5)], llm=Doubler(), progress=True)
    err = capsys.readouterr().err
    assert "double" in err and "5/5" in err and "done=5" in err
    await run_many(AGENT, [{"n": n} for n in range(5)], llm=Doubler())  # not a terminal
    assert capsys.readouterr().err == ""


async def test_one_adapter_serves_a_whole_batch(server: ScriptedServer) -> None:
    server.script(*[Reply.json(completion('{"x": 1}')) for _ in range(40)])
    async with OpenAIChat(model="m", base_url=server.base_url, _environ={}) as llm:
        steps = await run_many(AGENT, [{"n": n} for n in range(40)], concurrency=8, llm=llm)
    assert all(step.ok for step in steps) and len(server.requests) == 40


# --- deadlines ---


def virtual_time() -> pytest.MarkDecorator:
    """Run the test on trio with a mock clock that jumps ahead whenever every task waits.

    A deadline is then reached at once and exactly, whatever the machine's load.
    """
    from trio.testing import MockClock

    clock = MockClock(autojump_threshold=0)
    return pytest.mark.parametrize("anyio_backend", [("trio", {"clock": clock})], ids=["trio"])


class FirstTwoAnswer:
    """Doubles the number of inputs 0 and 1; the others never answer."""

    model_name = "first-two"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        n = int(request.messages[1].content.splitlines()[0].split()[-1])
        if n >= 2:
            await anyio.sleep_forever()
        return LLMResponse(text=json.dumps({"x": 2 * n}))


@virtual_time()
async def test_an_enclosing_deadline_cancels_run_many_which_returns_nothing() -> None:
    returned: list[Any] = []
    with anyio.move_on_after(60) as scope:
        returned.append(await run_many(AGENT, [{"n": n} for n in range(6)], concurrency=2,
                                       llm=FirstTwoAnswer()))  # fmt: skip
    assert scope.cancelled_caught and returned == []  # the two finished runs are lost too


@virtual_time()
async def test_a_batch_timeout_stops_the_runs_under_way_and_keeps_every_step() -> None:
    steps = await run_many(AGENT, [{"n": n} for n in range(6)], concurrency=2,
                           llm=FirstTwoAnswer(), batch_timeout=60)  # fmt: skip
    assert [step.output for step in steps[:2]] == [Answer(x=0), Answer(x=2)]
    for step in steps[2:]:
        assert step.failure is not None and step.failure.reason is FailReason.CANCELLED
    # The runs under way were stopped: their cut turn is kept, as a stopped run keeps it.
    assert [len(step.turns) for step in steps[2:]] == [1, 1, 0, 0]
    assert [step.turns[0].error_type for step in steps[2:4]] == ["cancelled", "cancelled"]
    assert steps[2].failure.message == "the run was stopped before it finished"  # type: ignore[union-attr]
    assert steps[4].failure.message == (  # type: ignore[union-attr]
        "the batch did not finish within batch_timeout=60 s; the run was not started"
    )


@virtual_time()
async def test_stream_many_past_its_batch_timeout_yields_every_input() -> None:
    seen: dict[int, Any] = {}
    async with stream_many(AGENT, [{"n": n} for n in range(5)], concurrency=2,
                           llm=FirstTwoAnswer(), batch_timeout=5) as batch:  # fmt: skip
        async for item in batch:
            seen[item.index] = item.step.failure.reason if item.step.failure else "done"
    assert seen == {0: "done", 1: "done", 2: FailReason.CANCELLED, 3: FailReason.CANCELLED,
                    4: FailReason.CANCELLED}  # fmt: skip


@virtual_time()
async def test_a_retryable_failure_is_not_rerun_past_the_batch_timeout() -> None:
    busy = LLMError(ErrorKind.SERVER_ERROR, "busy", status_code=503)
    started = anyio.current_time()
    batch = stream_many(AGENT, [{"n": 1}], llm=ScriptedLLM([busy, '{"x": 2}']),
                        retry_policy=RetryPolicy.none(), rerun_retryable=3, rerun_delay=100,
                        batch_timeout=10)  # fmt: skip
    async with batch:
        (item,) = [item async for item in batch]
    assert item.attempts == 1 and item.step.retryable  # its first Step stands
    assert anyio.current_time() - started == pytest.approx(10)  # the wait ended at the deadline


@virtual_time()
async def test_a_batch_done_before_its_timeout_does_not_wait_for_it() -> None:
    started = anyio.current_time()
    steps = await run_many(AGENT, [{"n": n} for n in range(4)], llm=Doubler(), batch_timeout=3600)
    assert all(step.ok for step in steps)
    assert anyio.current_time() - started < 1  # the deadline's timer was let go


async def test_a_batch_timeout_must_be_positive_seconds() -> None:
    with pytest.raises(ConfigurationError, match="batch_timeout"):
        await run_many(AGENT, [{"n": 1}], llm=Doubler(), batch_timeout=0)


# --- summarize ---


def test_summarize_counts_outcomes_reasons_turns_and_tokens() -> None:
    steps = [
        AGENT.run_sync({"n": 1}, llm=ScriptedLLM(['{"x": 2}'])),
        AGENT.run_sync({"n": 1}, llm=ScriptedLLM(["nope", '{"x": 2}']), return_retries=1),
        AGENT.run_sync({"n": 1}, llm=ScriptedLLM([LLMResponse(text="cut",
                                                             stop_reason=StopReason.LENGTH)])),
        AGENT.run_sync({"n": 1}, llm=ScriptedLLM([LLMError(ErrorKind.CONNECTION, "down")]),
                       retry_policy=RetryPolicy.none()),
    ]  # fmt: skip
    summary = summarize(steps)
    assert (summary.runs, summary.done, summary.failed, summary.retryable) == (4, 2, 2, 1)
    assert summary.failure_reasons == {"budget_exhausted": 1, "llm_error": 1}
    assert summary.error_kinds == {"connection": 1}
    assert summary.stop_reasons == {"stop": 3, "length": 1}
    assert summary.turns == 5 and summary.turns_by_type == {"must_return": 4, "retry": 1}
    assert summary.calls_per_success == 2.5
    assert summary.success_rate == 0.5
    assert any("1 replies hit max_tokens" in hint for hint in summary.hints)
    table = str(summary)
    assert "\ndone                2 (50.0%)\n" in table
    assert "\n    connection      1\n" in table
    assert BatchSummaryRoundTrip.check(summary)


def test_summarize_prints_error_kinds_under_llm_error_whatever_the_order() -> None:
    down = LLMError(ErrorKind.CONNECTION, "down")
    slow = LLMError(ErrorKind.TIMEOUT, "slow")
    none = RetryPolicy.none()
    steps = [
        AGENT.run_sync({"n": 1}, llm=ScriptedLLM([down]), retry_policy=none),
        *[AGENT.run_sync({"n": 1}, llm=ScriptedLLM(["nope"])) for _ in range(2)],
        AGENT.run_sync({"n": 1}, llm=ScriptedLLM([slow]), retry_policy=none),
    ]
    summary = summarize(steps)
    assert summary.failure_reasons == {"budget_exhausted": 2, "llm_error": 1, "timeout": 1}
    assert summary.error_kinds == {"connection": 1}  # the llm_error runs' kinds only
    lines = str(summary).splitlines()
    assert lines[3:7] == [
        "  budget_exhausted  2",
        "  llm_error         1",
        "    connection      1",
        "  timeout           1",
    ]


class BatchSummaryRoundTrip:
    @staticmethod
    def check(summary: Any) -> bool:
        return bool(type(summary).model_validate_json(summary.model_dump_json()) == summary)


def test_tokens_a_server_did_not_report_are_a_lower_bound_in_the_summary() -> None:
    reported = LLMResponse(text='{"value": 2}', usage=Usage(input_tokens=10, output_tokens=5))
    unreported = LLMResponse(text='{"value": 2}', usage=Usage(unreported=1))
    steps = [AGENT.run_sync({"n": 1}, llm=ScriptedLLM([reply]))
             for reply in (reported, unreported)]  # fmt: skip
    summary = summarize(steps)
    assert summary.tokens_total.unreported == 1
    assert "tokens total        at least 15 (in 10, out 5); 1 call did not report usage" in (
        str(summary).splitlines()
    )


def test_summarize_of_nothing_is_empty() -> None:
    summary = summarize([])
    assert (summary.runs, summary.calls_per_success, summary.success_rate) == (0, None, 0.0)


def test_summarize_of_runs_with_several_budgets_recommends_the_cheapest_near_the_best() -> None:
    def runs(retries: int) -> list[Any]:
        replies = [["nope", '{"x": 2}'] if n % 2 else ['{"x": 2}'] for n in range(40)]
        return [AGENT.run_sync({"n": 1}, llm=ScriptedLLM(script), return_retries=retries)
                for script in replies]  # fmt: skip

    steps = [*runs(0), *runs(1), *runs(2)]
    summary = summarize(steps)
    assert [(b.return_retries, b.runs, b.done, b.calls_per_run) for b in summary.budgets] == [
        (0, 40, 20, 1.0),
        (1, 40, 40, 1.5),
        (2, 40, 40, 1.5),
    ]
    assert summary.recommendation is not None
    assert summary.recommendation.startswith("return_retries=1: 100% [91-100], 1.5 calls/run; ")
    assert "return_retries=0 saves 0.5 calls but loses 50 points (p=" in summary.recommendation
    table = str(summary)
    assert "\nby budget:\n  max_turns=1, return_retries=0: 20/40 done (50% [35-65]), " in table
    assert f"recommended: {summary.recommendation}" in table
    one_budget = summarize(runs(1))
    assert (one_budget.budgets, one_budget.recommendation) == ([], None)
