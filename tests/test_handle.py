"""Watching and stopping a run: agent.stream() and agent.start()."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from openai_server import Reply, ScriptedServer, sse_chunk
from pydantic import BaseModel
from support import Traced

from subagent import (
    AgentRun,
    CallRetried,
    ConfigurationError,
    FailReason,
    LLMRequest,
    LLMResponse,
    OpenAIChat,
    ReasoningDelta,
    RetryPolicy,
    RunEnded,
    RunEvent,
    RunStarted,
    ScriptedLLM,
    ScriptExhaustedError,
    StreamDelta,
    SubAgent,
    TextDelta,
    ToolCall,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnOutcome,
    TurnStarted,
    tool,
)
from subagent.observe._stream import EventQueue

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


AGENT = SubAgent(name="calc", prompt="p", output=Answer)


@tool(run_in_thread=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def hanging(entered: anyio.Event) -> Any:
    """A scripted reply that never comes (until the run is stopped)."""

    async def reply(request: LLMRequest) -> str:
        entered.set()
        await anyio.sleep_forever()
        return "never"

    return reply


# --- stream ---


async def test_a_stream_delivers_every_event_in_order() -> None:
    llm = ScriptedLLM([
        LLMResponse(text='{"x": "three"}', reasoning="count the apples"),
        '{"x": 3}',
    ])  # fmt: skip
    events: list[RunEvent] = []
    async with AGENT.stream(llm=llm, max_turns=1, return_retries=1) as run:
        async for event in run:
            events.append(event)
    kinds = [type(event).__name__ for event in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunEnded"
    assert kinds.count("TurnStarted") == kinds.count("TurnEnded") == 2
    first_turn = events[1 : kinds.index("TurnEnded") + 1]
    assert isinstance(first_turn[0], TurnStarted) and first_turn[0].index == 1
    reasoning = "".join(e.text for e in first_turn if isinstance(e, ReasoningDelta))
    text = "".join(e.text for e in first_turn if isinstance(e, TextDelta))
    assert (reasoning, text) == ("count the apples", '{"x": "three"}')
    assert len([e for e in first_turn if isinstance(e, TextDelta)]) == 2  # word by word
    ended = events[-1]
    assert isinstance(ended, RunEnded) and ended.step.ok
    assert run.step is ended.step and ended.step.output == Answer(x=3)


async def test_a_stream_reports_tool_calls_and_results() -> None:
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add], max_turns=2)
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
        '{"x": 3}',
    ])  # fmt: skip
    async with agent.stream(llm=llm) as run:
        events = [event async for event in run]
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    ended = [e for e in events if isinstance(e, ToolCallEnded)]
    assert [(e.index, e.call.name) for e in started] == [(1, "add")]
    assert [(e.index, e.result.ok) for e in ended] == [(1, True)]
    turn_end = next(e for e in events if isinstance(e, TurnEnded))
    assert events.index(ended[0]) < events.index(turn_end)


class StillStreaming:
    """A model that streams its first word, then keeps the stream open."""

    model_name = "slow"

    def __init__(self) -> None:
        self.closed = False

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise AssertionError("the run streams: complete() is not used")

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        try:
            yield StreamDelta(text="one ")
            await anyio.sleep_forever()
            yield StreamDelta(response=LLMResponse(text="never"))
        finally:
            self.closed = True


async def test_leaving_a_stream_early_stops_the_run_cleanly(traced: Traced) -> None:
    llm = StillStreaming()
    async with AGENT.stream(llm=llm, max_turns=3, tracer_provider=traced.provider) as run:
        async for event in run:
            if isinstance(event, TextDelta):
                break  # closed after the first delta, while the model still streams
    step = run.step
    assert step is not None and step.failure is not None
    assert step.failure.reason is FailReason.CANCELLED
    assert [t.error_type for t in step.turns] == ["cancelled"]
    assert llm.closed  # the model's stream was closed too
    assert traced.open_spans.open == {}
    run_span = traced.one("invoke_agent calc")
    assert dict(run_span.attributes or {})["subagent.failure.reason"] == "cancelled"


async def test_a_slow_consumer_gets_merged_deltas_and_a_bounded_queue() -> None:
    words = " ".join(["w"] * 2000)
    llm = ScriptedLLM([words])
    agent = SubAgent(name="talk", prompt="p")
    most = 0
    text = []
    async with agent.stream(llm=llm) as run:
        queue = run._queue
        assert queue is not None
        async for event in run:
            most = max(most, len(queue))
            if isinstance(event, TextDelta):
                text.append(event.text)
            await anyio.lowlevel.checkpoint()
    assert run.step is not None and run.step.ok
    assert "".join(text) == words  # merged, never lost
    assert most <= 256 + 4  # DELTA_ROOM, plus events about the run and its turn


async def test_an_event_queue_merges_deltas_past_its_room_never_across_other_events() -> None:
    queue = EventQueue(room=2)
    queue.put(RunStarted("a", 1, 0, "normal"))
    queue.put_delta(TextDelta("a", 1, "x"))
    queue.put_delta(TextDelta("a", 1, "y"))  # full: merged into the waiting "x"
    queue.put_delta(ReasoningDelta("a", 1, "r"))  # another kind: its own event
    queue.put_delta(TextDelta("a", 1, "z"))  # merged past the reasoning, into "xy"
    queue.put_delta(ReasoningDelta("a", 1, "s"))
    queue.put_delta(TextDelta("a", 2, "next turn"))  # another turn: its own event
    assert len(queue) == 4
    queue.close()
    events = []
    while (event := await queue.get()) is not None:
        events.append(event)
    assert events == [
        RunStarted("a", 1, 0, "normal"),
        TextDelta("a", 1, "xyz"),
        ReasoningDelta("a", 1, "rs"),
        TextDelta("a", 2, "next turn"),
    ]


async def test_an_event_queue_never_makes_a_delta_wait() -> None:
    queue = EventQueue(room=1)
    for piece in "abc":
        assert queue.put_delta(TextDelta("a", 1, piece)) is None  # type: ignore[func-returns-value]
    assert await queue.get() == TextDelta("a", 1, "abc")


async def test_result_returns_a_long_streamed_reply_without_reading_the_events() -> None:
    words = " ".join(["word"] * 3000)  # many more pieces than the queue's room
    agent = SubAgent(name="talk", prompt="p")
    async with agent.stream(llm=ScriptedLLM([words, words])) as run:
        with anyio.fail_after(10):  # it used to hang here forever
            step = await run.result()
        assert step.ok and step.output == words
        events = [event async for event in run]  # still all there, afterwards
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == words
    assert isinstance(events[-1], RunEnded)


async def test_result_after_breaking_out_of_the_events_returns_the_finished_run() -> None:
    words = " ".join(["word"] * 3000)
    agent = SubAgent(name="talk", prompt="p")
    async with agent.stream(llm=ScriptedLLM([words])) as run:
        async for event in run:
            if isinstance(event, TextDelta):
                break  # the loop is left; the run goes on (Python tells no iterator)
        with anyio.fail_after(10):  # it used to hang here forever
            step = await run.result()
    assert step.ok and step.output == words


async def test_breaking_out_then_stop_ends_a_long_streamed_run_cancelled() -> None:
    agent = SubAgent(name="talk", prompt="p", output=Answer)
    entered = anyio.Event()
    words = " ".join(["word"] * 3000)
    llm = ScriptedLLM([words, hanging(entered)])
    async with agent.stream(llm=llm, max_turns=1, return_retries=1) as run:
        async for event in run:
            if isinstance(event, TextDelta):
                break
        await entered.wait()  # the first, long reply was read past the queue's room
        run.stop()
        step = await run.result()
    assert step.failure is not None and step.failure.reason is FailReason.CANCELLED
    assert [t.error_type for t in step.turns] == ["invalid_output", "cancelled"]


def streamed_words(count: int, **kwargs: Any) -> Reply:
    """An SSE reply sending ``count`` words at once, one chunk each."""
    chunks = [sse_chunk(f"w{n} ") for n in range(count)]
    return Reply.sse([*chunks, sse_chunk(None, finish_reason="stop"), "[DONE]"], **kwargs)


async def test_a_consumer_that_reads_nothing_until_the_end_never_times_the_model_out(
    server: ScriptedServer,
) -> None:
    server.script(streamed_words(1500))
    agent = SubAgent(name="talk", prompt="p")
    llm = OpenAIChat(model="m", base_url=server.base_url, _environ={})
    async with llm, agent.stream(llm=llm, timeout=3) as run:
        step = await run.result()  # the slowest consumer: nothing read until the end
        events = [event async for event in run]
    assert step.ok, step.failure  # was failed(timeout), the reply requested three times
    assert len(server.requests) == 1
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    words = "".join(f"w{n} " for n in range(1500))
    assert text == words and step.output == words.strip()


async def test_a_retried_call_is_announced_before_its_reply_streams_again(
    server: ScriptedServer,
) -> None:
    server.script(streamed_words(50, drop_after=20), streamed_words(50))
    agent = SubAgent(name="talk", prompt="p")
    policy = RetryPolicy(initial_delay=0, jitter=0)
    llm = OpenAIChat(model="m", base_url=server.base_url, _environ={})
    async with llm, agent.stream(llm=llm, retry_policy=policy) as run:
        events = [event async for event in run]
    assert len(server.requests) == 2
    retried = [i for i, event in enumerate(events) if isinstance(event, CallRetried)]
    assert len(retried) == 1
    announced = events[retried[0]]
    assert isinstance(announced, CallRetried) and announced.index == 1
    assert announced.retry.attempt == 1
    before = "".join(e.text for e in events[: retried[0]] if isinstance(e, TextDelta))
    after = "".join(e.text for e in events[retried[0] :] if isinstance(e, TextDelta))
    assert before and "".join(f"w{n} " for n in range(50)).startswith(before)
    assert after == "".join(f"w{n} " for n in range(50))  # the reply, once, after the event


# --- stream_output ---


class Report(BaseModel):
    title: str
    body: str = ""
    pages: int = 0


REPORTER = SubAgent(name="reporter", prompt="p", output=Report)
BODY = "the numbers are in and they look better than last quarter " * 4


async def test_stream_output_yields_the_output_as_it_forms_then_the_final_one() -> None:
    reply = f'{{"title": "Q3", "body": "{BODY}", "pages": 12}}'
    async with REPORTER.stream(llm=ScriptedLLM([reply])) as run:
        partials = [partial async for partial in run.stream_output()]
    *forming, final = partials
    assert len(forming) >= 3 and not any(p.final for p in forming)
    assert all(BODY.startswith(p.output.body) for p in forming)  # the body as far as it came
    assert [len(p.output.body) for p in forming] == sorted(len(p.output.body) for p in forming)
    assert final.final and final.index == 1 and final.agent == "reporter"
    assert run.step is not None and final.output is run.step.output
    assert final.output == Report(title="Q3", body=BODY, pages=12)


async def test_stream_output_starts_over_with_the_correction_turn() -> None:
    invalid = f'{{"title": "Draft", "body": "{BODY}", "pages": "many"}}'
    valid = f'{{"title": "Fixed", "body": "{BODY}", "pages": 3}}'
    llm = ScriptedLLM([invalid, valid])
    async with REPORTER.stream(llm=llm, max_turns=1, return_retries=1) as run:
        partials = [partial async for partial in run.stream_output()]
    first = [p.output.title for p in partials if p.index == 1]
    second = [p.output.title for p in partials if p.index == 2]
    assert first and set(first) == {"Draft"}  # shown while it formed, though found invalid
    assert second and set(second) == {"Fixed"}
    assert [p.index for p in partials] == sorted(p.index for p in partials)
    assert partials[-1].final and partials[-1].index == 2


async def test_stream_output_with_events_puts_each_partial_after_its_delta() -> None:
    reply = f'{{"title": "Q3", "body": "{BODY}"}}'
    async with REPORTER.stream(llm=ScriptedLLM([reply])) as run:
        items = [item async for item in run.stream_output(events=True)]
    kinds = [type(item).__name__ for item in items]
    assert kinds[0] == "RunStarted" and kinds[-2:] == ["PartialOutput", "RunEnded"]
    partial_at = [i for i, kind in enumerate(kinds) if kind == "PartialOutput"]
    assert len(partial_at) >= 2
    for at in partial_at[:-1]:
        assert isinstance(items[at - 1], TextDelta)  # the piece that completed it
    text = "".join(item.text for item in items if isinstance(item, TextDelta))
    assert text == reply  # every event is still there


async def test_stream_output_of_a_run_that_does_not_end_done_has_no_final_output() -> None:
    invalid = f'{{"title": "Draft", "body": "{BODY}", "pages": "many"}}'
    async with REPORTER.stream(llm=ScriptedLLM([invalid]), max_turns=1) as run:
        partials = [partial async for partial in run.stream_output()]
        step = await run.result()
    assert partials and not any(p.final for p in partials)
    assert step.failure is not None and step.failure.reason is FailReason.BUDGET_EXHAUSTED


async def test_stream_output_read_late_gets_the_merged_text_and_the_final_output() -> None:
    body = "word " * 3000  # many more pieces than the queue's room
    reply = f'{{"title": "Long", "body": "{body}"}}'
    async with REPORTER.stream(llm=ScriptedLLM([reply])) as run:
        step = await run.result()  # nothing read until the run is over
        partials = [partial async for partial in run.stream_output()]
    assert partials[-1].final and partials[-1].output is step.output
    assert all(body.startswith(p.output.body) for p in partials)


async def test_stream_output_raises_what_ended_the_run_abnormally() -> None:
    async def consume() -> None:
        async with REPORTER.stream(llm=ScriptedLLM([])) as run:
            async for _ in run.stream_output():
                pass

    with pytest.raises(ScriptExhaustedError):
        await consume()


async def test_stream_output_needs_a_typed_output_a_stream_and_the_block() -> None:
    text_agent = SubAgent(name="talk", prompt="p")
    async with text_agent.stream(llm=ScriptedLLM(["hello"])) as run:
        with pytest.raises(TypeError, match="TextDelta"):
            run.stream_output()
    async with REPORTER.start(llm=ScriptedLLM(['{"title": "t"}'])) as started:
        with pytest.raises(TypeError, match=r"use agent.stream\(\)"):
            started.stream_output()
    with pytest.raises(RuntimeError, match="async with"):
        REPORTER.stream(llm=ScriptedLLM([])).stream_output()


# --- start / stop ---


async def test_stop_during_an_llm_call_ends_the_run_cancelled_with_its_turns() -> None:
    entered = anyio.Event()
    llm = ScriptedLLM(['{"x": "bad"}', hanging(entered)])
    async with AGENT.start(llm=llm, max_turns=1, return_retries=2) as run:
        await entered.wait()
        run.stop()
        step = await run.result()
    assert step.failure is not None and step.failure.reason is FailReason.CANCELLED
    assert step.failure.message == "the run was stopped before it finished"
    assert [t.outcome for t in step.turns] == [TurnOutcome.ERROR, TurnOutcome.FAIL]
    assert step.turns[1].error_type == "cancelled" and step.turns[1].phase_after == "failed"


async def test_stop_during_a_tool_call_abandons_a_blocked_sync_tool() -> None:
    entered, release = threading.Event(), threading.Event()

    @tool
    def blocking() -> str:
        entered.set()
        release.wait(30)
        return "late"

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[blocking], max_turns=2)
    llm = ScriptedLLM([LLMResponse(tool_calls=[ToolCall(name="blocking")]), '{"x": 1}'])
    try:
        with anyio.fail_after(10):
            async with agent.start(llm=llm) as run:
                await anyio.to_thread.run_sync(entered.wait)
                run.stop()
    finally:
        release.set()
    step = run.step
    assert step is not None and step.failure is not None
    assert step.failure.reason is FailReason.CANCELLED
    (result,) = step.turns[0].tool_results
    assert (result.name, result.completed) == ("blocking", False)


async def test_execute_runs_in_the_calling_task_and_a_stop_keeps_its_turns() -> None:
    entered = anyio.Event()
    run = AGENT.start(llm=ScriptedLLM(['{"x": "bad"}', hanging(entered)]), max_turns=1,
                      return_retries=2)  # fmt: skip
    steps: list[Any] = []

    async def execute() -> None:
        steps.append(await run.execute())

    async with anyio.create_task_group() as group:
        group.start_soon(execute)
        await entered.wait()
        run.stop()  # from another task
    (step,) = steps
    assert step.failure is not None and step.failure.reason is FailReason.CANCELLED
    assert [t.error_type for t in step.turns] == ["invalid_output", "cancelled"]
    assert run.done and run.step is step and await run.result() is step


async def test_execute_returns_the_step_and_raises_as_run_does() -> None:
    assert (await AGENT.start(llm=ScriptedLLM(['{"x": 4}'])).execute()).output == Answer(x=4)
    with pytest.raises(ScriptExhaustedError):
        await AGENT.start(llm=ScriptedLLM([])).execute()


async def test_execute_runs_once_and_never_a_stream() -> None:
    run = AGENT.start(llm=ScriptedLLM(['{"x": 1}', '{"x": 1}']))
    await run.execute()
    with pytest.raises(RuntimeError, match="only once"):
        await run.execute()
    with pytest.raises(RuntimeError, match="only once"):
        async with run:
            pass
    with pytest.raises(TypeError, match="block"):
        await AGENT.stream(llm=ScriptedLLM([])).execute()


async def test_leaving_the_block_stops_a_run_that_has_not_finished() -> None:
    entered = anyio.Event()
    async with AGENT.start(llm=ScriptedLLM([hanging(entered)])) as run:
        await entered.wait()
    assert run.done and run.step is not None
    assert run.step.failure is not None and run.step.failure.reason is FailReason.CANCELLED


async def test_a_finished_run_is_not_changed_by_stop() -> None:
    async with AGENT.start(llm=ScriptedLLM(['{"x": 2}'])) as run:
        step = await run.result()
        run.stop()
    assert step.ok and run.step is step


async def test_an_enclosing_cancel_scope_still_propagates() -> None:
    entered = anyio.Event()
    handle: AgentRun[Any] | None = None
    with anyio.CancelScope() as scope:
        async with AGENT.start(llm=ScriptedLLM([hanging(entered)])) as handle:
            await entered.wait()
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert handle is not None and handle.step is None  # cancelled, not stopped


async def test_an_abnormal_end_is_raised_by_result_and_by_the_block() -> None:
    with pytest.raises(ScriptExhaustedError) as caught:
        async with AGENT.start(llm=ScriptedLLM([])) as run:
            await run.result()
    assert [turn.error_type for turn in caught.value.turns] == ["ScriptExhaustedError"]
    with pytest.raises(ScriptExhaustedError):
        async with AGENT.start(llm=ScriptedLLM([])):
            pass


async def test_an_abnormal_end_is_raised_at_the_end_of_the_stream() -> None:
    seen: list[type[Any]] = []

    async def consume() -> None:
        async with AGENT.stream(llm=ScriptedLLM([])) as run:
            async for event in run:
                seen.append(type(event))

    with pytest.raises(ScriptExhaustedError):
        await consume()
    assert seen[:2] == [RunStarted, TurnStarted]


def test_options_are_checked_when_the_run_is_made() -> None:
    with pytest.raises(ConfigurationError, match="max_turns"):
        AGENT.start(llm=ScriptedLLM([]), max_turns=0)


async def test_the_handle_is_used_as_a_context_manager() -> None:
    run = AGENT.stream(llm=ScriptedLLM([]))
    with pytest.raises(RuntimeError, match=r"async with agent\.stream"):
        run.__aiter__()
    started = AGENT.start(llm=ScriptedLLM(['{"x": 1}']))
    async with started:
        with pytest.raises(TypeError, match=r"use agent.stream\(\)"):
            started.__aiter__()
        await started.result()
    with pytest.raises(RuntimeError, match="only once"):
        async with started:
            pass


async def test_an_error_in_the_block_stops_the_run_and_propagates_as_it_is() -> None:
    entered = anyio.Event()
    handle = AGENT.start(llm=ScriptedLLM([hanging(entered)]))

    async def use() -> None:
        async with handle:
            await entered.wait()
            raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await use()
    assert handle.step is not None and handle.step.failure is not None
    assert handle.step.failure.reason is FailReason.CANCELLED
