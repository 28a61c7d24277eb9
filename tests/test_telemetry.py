"""Spans and events of a run (subagent.observe._otel), checked with an in-memory exporter."""

from __future__ import annotations

import gc
import json
import logging
import weakref
from contextlib import aclosing
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from support import (
    CALC,
    Answer,
    Logged,
    Traced,
    attrs,
    parent_id,
    set_capture,
    set_semconv,
    span_id,
)

from subagent import (
    ConfigurationError,
    ErrorKind,
    FailReason,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    ReplyPolicy,
    RetryPolicy,
    RunEnded,
    RunEvent,
    RunStarted,
    ScriptedLLM,
    Step,
    SubAgent,
    ToolCall,
    ToolCallEnded,
    ToolCallStarted,
    Turn,
    TurnEnded,
    TurnOutcome,
    TurnStarted,
    TurnType,
    Usage,
)
from subagent.observe import observer_for_run
from subagent.observe._observer import NO_OBSERVER, TurnStart
from subagent.observe._otel import (
    CONTENT_LIMIT,
    ERROR_TEXT_LIMIT,
    _tracer_for,
    span_observer,
)
from subagent.observe._semconv import DETAILS_EVENT

pytestmark = pytest.mark.anyio

DETACH_ERROR = "Failed to detach context"


def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b


def usage(i: int, o: int) -> Usage:
    return Usage(input_tokens=i, output_tokens=o)


# --- the span tree of a run ---


async def test_run_that_recovers_through_a_retry_has_an_unset_run_status_and_a_red_turn(
    traced: Traced,
) -> None:
    llm = ScriptedLLM(
        [
            LLMResponse(text='{"value": "three"}', usage=usage(10, 3), model="scripted-1"),
            LLMResponse(text='{"value": 3}', usage=usage(12, 4), model="scripted-1"),
        ]
    )
    step = await CALC.run(
        {"question": "1+2"},
        llm=llm,
        max_turns=1,
        return_retries=1,
        tracer_provider=traced.provider,
    )
    assert step.ok

    expected = ["invoke_agent calc", "agent_turn must_return", "agent_turn retry"]
    assert sorted(traced.names()) == sorted([*expected, "chat scripted", "chat scripted"])
    run = traced.one("invoke_agent calc")
    failed = traced.one("agent_turn must_return")
    retry = traced.one("agent_turn retry")
    chats = traced.named("chat scripted")

    # one trace; turns under the run, each chat under its own turn
    assert run.parent is None
    assert {span.context.trace_id for span in traced.spans if span.context} == {
        run.context.trace_id if run.context else 0
    }
    assert parent_id(failed) == parent_id(retry) == span_id(run)
    assert sorted(parent_id(chat) for chat in chats) == sorted([span_id(failed), span_id(retry)])
    assert run.kind is failed.kind is retry.kind is SpanKind.INTERNAL
    assert all(chat.kind is SpanKind.CLIENT for chat in chats)

    assert run.status.status_code is StatusCode.UNSET
    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "calc",
        "gen_ai.provider.name": "scripted",
        "subagent.max_turns": 1,
        "subagent.return_retries": 1,
        "subagent.outcome": "done",
        "subagent.turns": 2,
        "gen_ai.usage.input_tokens": 22,
        "gen_ai.usage.output_tokens": 7,
    }

    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description is not None
    # Without content capture, the error is summarised: field and error type, no reply text.
    assert failed.status.description == "invalid_output: value: int_parsing"
    failed_attrs = attrs(failed)
    assert failed_attrs.pop("subagent.turn.error") == "invalid_output: value: int_parsing"
    assert failed_attrs == {
        "subagent.turn.index": 1,
        "subagent.turn.type": "must_return",
        "subagent.turn.outcome": "error",
        "subagent.phase.before": "must_return",
        "subagent.phase.after": "retry",
        "subagent.budget.work_remaining": 0,
        "subagent.budget.retries_remaining": 1,
        "subagent.turn.tools_offered": 0,
        "subagent.context.messages": 2,
        "subagent.context.collapsed": 0,
        "gen_ai.response.finish_reasons": ("stop",),
        "error.type": "invalid_output",
        # the typed output's default: the final turn and its correction under its schema
        "subagent.turn.corrected": True,
        "subagent.turn.output_mode": "json_schema",
    }

    assert retry.status.status_code is StatusCode.UNSET
    assert attrs(retry) == {
        "subagent.turn.index": 2,
        "subagent.turn.type": "retry",
        "subagent.turn.outcome": "success",
        "subagent.phase.before": "retry",
        "subagent.phase.after": "done",
        "subagent.budget.work_remaining": 0,
        "subagent.budget.retries_remaining": 0,  # the retry turn spent the one correction
        "subagent.turn.tools_offered": 0,
        "subagent.retry.attempt": 1,
        "subagent.retry.total": 1,
        "subagent.context.messages": 4,
        "subagent.context.collapsed": 0,
        "gen_ai.response.finish_reasons": ("stop",),
        "subagent.turn.corrected": True,
        "subagent.turn.output_mode": "json_schema",
    }

    first_chat = next(chat for chat in chats if parent_id(chat) == span_id(failed))
    assert first_chat.status.status_code is StatusCode.UNSET
    assert attrs(first_chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": "scripted-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
        "subagent.request.output_mode": "json_schema",
    }


async def test_tool_turn_records_an_execute_tool_span_under_its_turn(traced: Traced) -> None:
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]),
            '{"value": 3}',
        ]
    )
    step = await CALC.run(
        {"question": "1+2"}, llm=llm, max_turns=2, tracer_provider=traced.provider
    )
    assert step.ok
    turn = traced.one("agent_turn normal")
    tool = traced.one("execute_tool add")
    assert parent_id(tool) == span_id(turn)
    assert tool.kind is SpanKind.INTERNAL
    assert tool.status.status_code is StatusCode.UNSET
    assert attrs(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_1_1",
        "gen_ai.tool.type": "function",
    }
    assert attrs(turn)["subagent.turn.tools_offered"] == 1
    assert attrs(turn)["subagent.turn.outcome"] == "continue"
    assert attrs(turn)["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert turn.status.status_code is StatusCode.UNSET


async def test_failed_tool_call_sets_error_status_and_error_type(traced: Traced) -> None:
    agent = SubAgent(name="calc", prompt="Compute", output=Answer, tools=[divide])
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="divide", arguments={"a": 1, "b": 0}, id="c-7")]),
            '{"value": 0}',
        ]
    )
    step = await agent.run(llm=llm, max_turns=2, tracer_provider=traced.provider)
    assert step.ok
    tool = traced.one("execute_tool divide")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description is not None
    assert "ZeroDivisionError" in tool.status.description
    assert attrs(tool)["error.type"] == "ZeroDivisionError"
    assert attrs(tool)["gen_ai.tool.call.id"] == "c-7"
    turn = traced.one("agent_turn normal")
    assert turn.status.status_code is StatusCode.ERROR
    assert attrs(turn)["error.type"] == "tool_error"
    assert attrs(turn)["subagent.turn.outcome"] == "error"


async def test_usage_a_server_did_not_report_is_absent_from_the_chat_span_not_zero(
    traced: Traced,
) -> None:
    reply = LLMResponse(text='{"value": 3}', usage=Usage(unreported=1))
    step = await CALC.run({"question": "1+2"}, llm=ScriptedLLM([reply]),
                          tracer_provider=traced.provider)  # fmt: skip
    assert step.ok
    chat = attrs(traced.one("chat scripted"))
    assert "gen_ai.usage.input_tokens" not in chat
    assert chat["subagent.usage.unreported_calls"] == 1
    assert attrs(traced.one("invoke_agent calc"))["subagent.usage.unreported_calls"] == 1


async def test_prompt_cache_tokens_are_on_the_chat_span_and_summed_on_the_run_span(
    traced: Traced,
) -> None:
    cached = Usage(input_tokens=1200, output_tokens=5, cache_read_tokens=1000,
                   cache_write_tokens=150)  # fmt: skip
    add = ToolCall(name="add", arguments={"a": 1, "b": 2})
    plain = Usage(input_tokens=40, output_tokens=5)
    replies = [LLMResponse(tool_calls=[add], usage=cached),
               LLMResponse(text='{"value": 3}', usage=plain)]  # fmt: skip
    step = await CALC.run({"question": "1+2"}, llm=ScriptedLLM(replies), max_turns=2,
                          tracer_provider=traced.provider)  # fmt: skip
    assert step.ok
    first, second = sorted(traced.named("chat scripted"), key=lambda span: span.start_time or 0)
    assert attrs(first)["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert attrs(first)["gen_ai.usage.cache_creation.input_tokens"] == 150
    assert not any(key.startswith("gen_ai.usage.cache") for key in attrs(second))
    run = attrs(traced.one("invoke_agent calc"))
    assert run["gen_ai.usage.input_tokens"] == 1240
    assert run["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert run["gen_ai.usage.cache_creation.input_tokens"] == 150


async def test_run_that_exhausts_its_budget_is_an_error_with_the_failure_reason(
    traced: Traced,
) -> None:
    llm = ScriptedLLM(['{"value": "three"}'])
    step = await CALC.run(
        {"question": "1+2"}, llm=llm, max_turns=1, tracer_provider=traced.provider
    )
    assert not step.ok
    run = traced.one("invoke_agent calc")
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description is not None
    assert run.status.description.startswith("no valid answer within max_turns=1")
    assert attrs(run)["subagent.outcome"] == "failed"
    assert attrs(run)["subagent.failure.reason"] == "budget_exhausted"
    assert attrs(run)["error.type"] == "budget_exhausted"
    turn = traced.one("agent_turn must_return")
    assert attrs(turn)["subagent.phase.after"] == "failed"
    assert turn.status.status_code is StatusCode.ERROR


async def test_llm_error_fails_the_chat_turn_and_run_with_its_kind(traced: Traced) -> None:
    llm = ScriptedLLM([LLMError(ErrorKind.AUTHENTICATION, "bad key", status_code=401)])
    step = await CALC.run({"question": "1+2"}, llm=llm, tracer_provider=traced.provider)
    assert step.failure is not None and step.failure.reason is FailReason.LLM_ERROR
    chat = traced.one("chat scripted")
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)["error.type"] == "authentication"
    assert "gen_ai.response.finish_reasons" not in attrs(chat)
    turn = traced.one("agent_turn normal")
    assert turn.status.status_code is StatusCode.ERROR
    assert attrs(turn)["subagent.turn.outcome"] == "fail"
    assert attrs(turn)["error.type"] == "authentication"
    run = traced.one("invoke_agent calc")
    assert attrs(run)["subagent.failure.reason"] == "llm_error"
    assert run.status.status_code is StatusCode.ERROR


async def test_transport_retries_are_events_on_the_chat_span(traced: Traced) -> None:
    llm = ScriptedLLM(
        [LLMError(ErrorKind.RATE_LIMIT, "slow down", status_code=429), '{"value": 3}']
    )
    policy = RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)
    step = await CALC.run(
        {"question": "1+2"}, llm=llm, retry_policy=policy, tracer_provider=traced.provider
    )
    assert step.ok
    chat = traced.one("chat scripted")
    assert chat.status.status_code is StatusCode.UNSET
    assert [event.name for event in chat.events] == ["transport_retry"]
    event = chat.events[0]
    assert dict(event.attributes or {}) == {
        "error.type": "rate_limit",
        "subagent.retry.attempt": 1,
        "subagent.retry.delay_s": 0.0,
    }  # the server's message only with content capture


async def test_span_names_stay_low_cardinality_across_inputs(traced: Traced) -> None:
    for question in ("1+2", "2+2", "a long question " * 20):
        llm = ScriptedLLM(['{"value": 1}'])
        await CALC.run({"question": question}, llm=llm, tracer_provider=traced.provider)
    assert set(traced.names()) == {"invoke_agent calc", "agent_turn normal", "chat scripted"}


# --- message content ---


def _content_attributes(traced: Traced) -> set[str]:
    keys = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    return {key for span in traced.spans for key in attrs(span) if key in keys}


async def test_message_content_is_not_recorded_by_default(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, False)
    llm = ScriptedLLM(
        [LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2})]), '{"value": 3}']
    )
    await CALC.run({"question": "secret"}, llm=llm, max_turns=2, tracer_provider=traced.provider)
    assert _content_attributes(traced) == set()
    assert not any(
        "secret" in str(value) for span in traced.spans for value in attrs(span).values()
    )


async def test_message_content_is_semconv_json_when_opted_in(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, True)
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="t1")]),
            '{"value": 3}',
        ]
    )
    await CALC.run({"question": "1+2"}, llm=llm, max_turns=2, tracer_provider=traced.provider)
    assert _content_attributes(traced) == {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    first, second = sorted(traced.named("chat scripted"), key=lambda s: s.start_time or 0)
    sent = json.loads(attrs(first)["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["parts"] == [{"type": "text", "content": "Compute 1+2"}]
    replied = json.loads(attrs(first)["gen_ai.output.messages"])
    assert replied == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "t1", "name": "add", "arguments": {"a": 1, "b": 2}}
            ],
            "finish_reason": "tool_calls",
        }
    ]
    resent = json.loads(attrs(second)["gen_ai.input.messages"])
    assert [m["role"] for m in resent][-3:] == ["assistant", "tool", "user"]
    tool_part = resent[-2]["parts"][0]
    assert tool_part["type"] == "tool_call_response" and tool_part["id"] == "t1"
    assert "3" in tool_part["response"]
    tool = traced.one("execute_tool add")
    assert json.loads(attrs(tool)["gen_ai.tool.call.arguments"]) == {"a": 1, "b": 2}
    assert "3" in attrs(tool)["gen_ai.tool.call.result"]


MARK = "zebra"
"""A word that only the model, the caller and a tool write: never the runtime."""


def lookup(key: str) -> int:
    """Look a key up."""
    raise LookupError(f"no entry for {key}")  # the exception's text quotes the model


LEAKY = SubAgent(
    name="leaky",
    prompt="Answer {{question}}",
    output=Answer,
    tools=[lookup],
    reply_policy=ReplyPolicy(allow_fail=True),
)


async def _run_leaky_runs(traced: Traced) -> list[Step[Any]]:
    """Runs that put the model's text into every place a span could pick it up."""
    retry = RetryPolicy(max_attempts=2, initial_delay=0, jitter=0)
    calls = [
        ToolCall(name="lookup", arguments={"key": f"{MARK}-1", f"{MARK}_extra": 1}),
        ToolCall(name=f"{MARK}_tool", arguments={"x": 1}),
    ]
    scripts: list[list[Any]] = [
        [
            LLMError(ErrorKind.SERVER_ERROR, f"overloaded by {MARK}", status_code=500),
            LLMResponse(tool_calls=calls),
            LLMResponse(text="three", reasoning=f"the {MARK} says three"),
            f'{{"value": "still {MARK}"}}',
        ],
        [f'{{"fail": "the {MARK} is missing"}}'],
        [LLMError(ErrorKind.BAD_REQUEST, f"no such {MARK}", status_code=400)],
    ]
    options: dict[str, Any] = {"max_turns": 2, "return_retries": 1, "retry_policy": retry,
                               "tracer_provider": traced.provider}  # fmt: skip
    question = {"question": f"where is the {MARK}?"}
    return [await LEAKY.run(question, llm=ScriptedLLM(script), **options) for script in scripts]


def _places_of(word: str, traced: Traced) -> set[str]:
    """Where a word appears in the finished spans: names, attributes, statuses, events."""
    places: set[str] = set()
    for span in traced.spans:
        if word in span.name:
            places.add("span name")
        for key, value in attrs(span).items():
            if word in str(value):
                places.add(key)
        if word in (span.status.description or ""):
            places.add(f"status of {span.name.split()[0]}")
        for event in span.events:
            for key, value in (event.attributes or {}).items():
                if word in str(value):
                    places.add(f"{event.name} {key}")
    return places


async def test_without_capture_no_span_holds_text_of_the_model_a_tool_or_the_caller(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, False)
    budget, fail, error = await _run_leaky_runs(traced)
    # The runs did what they were scripted to do, and their records keep every word...
    assert budget.failure is not None and budget.failure.reason is FailReason.BUDGET_EXHAUSTED
    assert fail.failure is not None and fail.failure.reason is FailReason.EXPLICIT_FAIL
    assert error.failure is not None and error.failure.reason is FailReason.LLM_ERROR
    assert MARK in budget.failure.message and MARK in fail.failure.message
    # ...while the spans keep the runtime's own words only.
    assert _places_of(MARK, traced) == set()
    runs = {span.status.description for span in traced.spans if span.name == "invoke_agent leaky"}
    assert runs == {
        "explicit_fail",
        "llm_error: bad_request",
        "no valid answer within max_turns=2 and return_retries=1;"
        " last error: invalid_output: value: int_parsing",
    }
    assert len(traced.named("execute_tool unknown_tool")) == 1
    tool = attrs(traced.one("execute_tool lookup"))
    assert tool["subagent.tool.pruned_count"] == 1
    assert traced.one("execute_tool lookup").status.description == "LookupError"


async def test_with_capture_the_spans_hold_the_text_wherever_it_explains_a_failure(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, True)
    await _run_leaky_runs(traced)
    assert _places_of(MARK, traced) == {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.name",  # the unknown tool's; its span name stays low-cardinality
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "subagent.tool.pruned_arguments",
        "subagent.turn.error",
        "status of invoke_agent",
        "status of agent_turn",
        "status of chat",
        "status of execute_tool",
        "transport_retry exception.message",
    }
    assert len(traced.named("execute_tool unknown_tool")) == 1


async def test_reasoning_sent_apart_is_a_reasoning_part_of_the_captured_reply(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, True)
    llm = ScriptedLLM([LLMResponse(text='{"value": 3}', reasoning="1+2 is 3")])
    await CALC.run({"question": "1+2"}, llm=llm, tracer_provider=traced.provider)
    (reply,) = json.loads(attrs(traced.one("chat scripted"))["gen_ai.output.messages"])
    assert reply["parts"] == [
        {"type": "reasoning", "content": "1+2 is 3"},
        {"type": "text", "content": '{"value": 3}'},
    ]


async def test_captured_content_is_size_capped_and_stays_valid_json(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, True)
    llm = ScriptedLLM(["x" * 50_000, "y" * 50_000, '{"value": 1}'])
    await CALC.run(
        {"question": "q " * 30_000},
        llm=llm,
        max_turns=1,
        return_retries=2,
        tracer_provider=traced.provider,
    )
    for chat in traced.named("chat scripted"):
        for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
            value = attrs(chat)[key]
            assert len(value) <= CONTENT_LIMIT
            assert isinstance(json.loads(value), list)


# --- cancellation and timeouts ---


def _hanging_reply(started: anyio.Event) -> Any:
    never = anyio.Event()

    async def reply(request: LLMRequest) -> str:
        started.set()
        await never.wait()
        raise AssertionError("the event never fires")

    return reply


async def test_cancelled_run_ends_every_span_as_cancelled_without_detach_errors(
    traced: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="opentelemetry.context")
    started = anyio.Event()
    llm = ScriptedLLM([_hanging_reply(started)])
    scope = anyio.CancelScope()

    async def run_agent() -> None:
        with scope:
            await CALC.run({"question": "1+2"}, llm=llm, tracer_provider=traced.provider)

    async with anyio.create_task_group() as group:
        group.start_soon(run_agent)
        await started.wait()
        scope.cancel()

    assert scope.cancelled_caught
    assert traced.open_spans.started == 3
    assert traced.open_spans.open == {}
    assert sorted(traced.names()) == ["agent_turn normal", "chat scripted", "invoke_agent calc"]
    for span in traced.spans:
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert attrs(span)["error.type"] == "cancelled", span.name
    run = traced.one("invoke_agent calc")
    assert attrs(run)["subagent.outcome"] == "failed"
    assert attrs(run)["subagent.failure.reason"] == "cancelled"
    turn = traced.one("agent_turn normal")
    # The turn cut short counts: 4 of the 5 work turns are left after it, as on its record.
    assert attrs(turn)["subagent.budget.work_remaining"] == 4
    assert DETACH_ERROR not in caplog.text
    assert [r for r in caplog.records if r.name == "opentelemetry.context"] == []


async def test_mission_timeout_ends_every_span_and_marks_the_run_timed_out(
    traced: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="opentelemetry.context")
    started = anyio.Event()
    llm = ScriptedLLM([_hanging_reply(started)])
    step = await CALC.run(
        {"question": "1+2"}, llm=llm, mission_timeout=0.05, tracer_provider=traced.provider
    )
    assert started.is_set()
    assert step.failure is not None and step.failure.reason is FailReason.TIMEOUT
    assert traced.open_spans.open == {}
    run = traced.one("invoke_agent calc")
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["subagent.failure.reason"] == "timeout"
    assert attrs(run)["error.type"] == "timeout"
    assert attrs(run)["subagent.turns"] == 1
    for name in ("agent_turn normal", "chat scripted"):
        span = traced.one(name)
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)["error.type"] == "cancelled"
        assert parent_id(span) is not None
    assert DETACH_ERROR not in caplog.text


async def test_cancelled_tool_call_ends_its_span(traced: Traced) -> None:
    started = anyio.Event()
    never = anyio.Event()

    async def slow(x: int) -> int:
        """Never returns."""
        started.set()
        await never.wait()
        return x

    agent = SubAgent(name="calc", prompt="Compute", output=Answer, tools=[slow])
    llm = ScriptedLLM([LLMResponse(tool_calls=[ToolCall(name="slow", arguments={"x": 1})])])
    scope = anyio.CancelScope()

    async def run_agent() -> None:
        with scope:
            await agent.run(llm=llm, tracer_provider=traced.provider)

    async with anyio.create_task_group() as group:
        group.start_soon(run_agent)
        await started.wait()
        scope.cancel()
    tool = traced.one("execute_tool slow")
    assert tool.status.status_code is StatusCode.ERROR
    assert attrs(tool)["error.type"] == "cancelled"
    assert traced.open_spans.open == {}


async def test_stream_closed_early_inside_an_active_span_logs_no_detach_error(
    traced: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    """The pattern a streaming turn uses: a chat span current while a stream is read."""
    caplog.set_level(logging.DEBUG, logger="opentelemetry.context")
    llm = ScriptedLLM(["one two three four", "five six seven"])
    observer = span_observer("calc", traced.provider, llm)
    assert observer is not None
    request = LLMRequest(messages=(Message(role="user", content="hi"),))

    with observer.chat(request) as chat:
        span = trace.get_current_span()
        async with aclosing(llm.stream(request)) as stream:
            async for delta in stream:
                assert delta.text == "one "
                assert trace.get_current_span() is span
                break  # closed after the first delta
        chat.replied(LLMResponse(text="one "))
    assert trace.get_current_span() is trace.INVALID_SPAN

    started = anyio.Event()
    with anyio.CancelScope() as scope, observer.chat(request):
        async with aclosing(llm.stream(request)) as stream:
            async for _ in stream:
                started.set()
                scope.cancel()
                await anyio.lowlevel.checkpoint()
    assert started.is_set() and scope.cancelled_caught
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert traced.open_spans.open == {}
    cancelled = [s for s in traced.spans if attrs(s).get("error.type") == "cancelled"]
    assert len(cancelled) == 1
    assert DETACH_ERROR not in caplog.text


# --- nesting ---


async def test_nested_agent_runs_as_a_child_of_the_calling_tool_span(traced: Traced) -> None:
    inner = SubAgent(
        name="adder",
        prompt="Add {{a}} and {{b}}",
        output=Answer,
        llm=ScriptedLLM(['{"value": 3}']),
    )
    outer = SubAgent(name="boss", prompt="Solve", output=Answer, tools=[inner.as_tool()])
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="adder", arguments={"a": "1", "b": "2"})]),
            '{"value": 3}',
        ]
    )
    step = await outer.run(llm=llm, max_turns=2, tracer_provider=traced.provider)
    assert step.ok
    outer_run = traced.one("invoke_agent boss")
    tool = traced.one("execute_tool adder")
    inner_run = traced.one("invoke_agent adder")
    assert parent_id(inner_run) == span_id(tool)
    assert inner_run.context is not None and outer_run.context is not None
    assert inner_run.context.trace_id == outer_run.context.trace_id
    # the outer run: normal (the tool call) then must_return; the inner: one normal turn
    outer_turns = [s for s in traced.spans if parent_id(s) == span_id(outer_run)]
    inner_turns = [s for s in traced.spans if parent_id(s) == span_id(inner_run)]
    assert sorted(s.name for s in outer_turns) == ["agent_turn must_return", "agent_turn normal"]
    assert [s.name for s in inner_turns] == ["agent_turn normal"]
    outer_tool_turn = next(s for s in outer_turns if s.name == "agent_turn normal")
    assert parent_id(tool) == span_id(outer_tool_turn)


# --- providers ---


async def test_without_provider_or_handler_a_run_has_no_telemetry() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert observer_for_run("calc", ScriptedLLM(), None, None, None) is NO_OBSERVER
    step = await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']))
    assert step.ok
    # the library never installs a global provider
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


async def test_global_provider_is_used_when_the_run_gets_none(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What trace.set_tracer_provider() records, undone after the test (it can be set once).
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", traced.provider)
    await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']))
    assert "invoke_agent calc" in traced.names()


def test_tracer_is_cached_per_provider_without_keeping_it_alive() -> None:
    provider = TracerProvider(shutdown_on_exit=False)  # atexit would keep it alive
    tracer = _tracer_for(provider)
    assert tracer is not None and _tracer_for(provider) is tracer
    assert _tracer_for(TracerProvider(shutdown_on_exit=False)) is not tracer
    gone = weakref.ref(provider)
    del provider, tracer
    gc.collect()
    assert gone() is None


def test_turn_error_text_is_truncated(traced: Traced, monkeypatch: pytest.MonkeyPatch) -> None:
    set_capture(monkeypatch, True)
    observer = span_observer("calc", traced.provider, ScriptedLLM())
    assert observer is not None
    with observer.turn(TurnStart(1, TurnType.NORMAL, 2, 0, None, None, 0, 2, 0)) as turn:
        turn.ended(
            Turn(
                index=1,
                type=TurnType.NORMAL,
                outcome=TurnOutcome.ERROR,
                phase_after="normal",
                work_remaining=1,
                retries_remaining=0,
                error="e" * 10_000,
                error_type="invalid_output",
            )
        )
    span = traced.one("agent_turn normal")
    assert len(attrs(span)["subagent.turn.error"]) == ERROR_TEXT_LIMIT
    assert span.status.description is not None
    assert len(span.status.description) == ERROR_TEXT_LIMIT
    assert attrs(span)["error.type"] == "invalid_output"


# --- on_event ---


async def test_on_event_delivers_typed_events_with_the_span_fields() -> None:
    events: list[RunEvent] = []
    llm = ScriptedLLM(['{"value": "three"}', '{"value": 3}'])
    step = await CALC.run(
        {"question": "1+2"}, llm=llm, max_turns=1, return_retries=2, on_event=events.append
    )
    assert step.ok
    assert [type(event) for event in events] == [
        RunStarted,
        TurnStarted,
        TurnEnded,
        TurnStarted,
        TurnEnded,
        RunEnded,
    ]
    run_started, first, first_end, second, second_end, run_ended = events
    assert run_started == RunStarted(
        agent="calc", max_turns=1, return_retries=2, phase="must_return"
    )
    assert first == TurnStarted(
        agent="calc",
        index=1,
        type=TurnType.MUST_RETURN,
        phase="must_return",
        work_remaining=1,
        retries_remaining=2,
        tools_offered=0,
        messages=2,
        collapsed=0,
    )
    assert isinstance(first_end, TurnEnded)
    assert first_end.outcome is TurnOutcome.ERROR
    assert (first_end.index, first_end.type, first_end.phase_after) == (
        1,
        TurnType.MUST_RETURN,
        "retry",
    )
    assert first_end.turn is step.turns[0]
    assert (first_end.work_remaining, first_end.retries_remaining) == (0, 2)
    assert first_end.error is not None and "three" in first_end.error
    assert first_end.stop_reason == "stop"
    assert first_end.duration_s >= 0
    assert isinstance(second, TurnStarted)
    assert (second.index, second.type, second.attempt, second.total) == (
        2,
        TurnType.RETRY,
        1,
        2,
    )
    assert isinstance(second_end, TurnEnded)
    assert second_end.outcome is TurnOutcome.SUCCESS and second_end.error is None
    assert second_end.phase_after == "done"
    # What is left after the successful correction: one of the two corrections.
    assert (second_end.work_remaining, second_end.retries_remaining) == (0, 1)
    assert isinstance(run_ended, RunEnded)
    assert run_ended.agent == "calc" and run_ended.step is step
    assert run_ended.failure_reason is None


async def test_on_event_reports_the_failure_reason_of_a_failed_run() -> None:
    events: list[RunEvent] = []
    await CALC.run(
        {"question": "1+2"}, llm=ScriptedLLM(["no json here"]), max_turns=1, on_event=events.append
    )
    run_ended = events[-1]
    assert isinstance(run_ended, RunEnded)
    assert run_ended.failure_reason is FailReason.BUDGET_EXHAUSTED


async def test_on_event_and_spans_work_together(traced: Traced) -> None:
    events: list[RunEvent] = []
    await CALC.run(
        {"question": "1+2"},
        llm=ScriptedLLM(['{"value": 3}']),
        tracer_provider=traced.provider,
        on_event=events.append,
    )
    assert len(events) == 4
    assert sorted(traced.names()) == ["agent_turn normal", "chat scripted", "invoke_agent calc"]


# --- the rule for user callbacks: their own exception, raised as it is, turns kept ---


class CallbackBug(Exception):
    pass


def raising_on(kind: type[Any], seen: int = 1) -> Any:
    """An on_event handler raising CallbackBug at the ``seen``-th event of ``kind``."""
    count = 0

    def handler(event: RunEvent) -> None:
        nonlocal count
        if isinstance(event, kind):
            count += 1
            if count == seen:
                raise CallbackBug(f"bug at {type(event).__name__}")

    return handler


def two_calls() -> LLMResponse:
    calls = [ToolCall(id=f"c{i}", name="add", arguments={"a": i, "b": 1}) for i in (1, 2)]
    return LLMResponse(text="", tool_calls=calls)


async def test_a_raising_on_text_is_raised_as_it_is_not_blamed_on_the_model() -> None:
    def on_text(piece: str) -> None:
        raise CallbackBug("on_text broke")

    llm = ScriptedLLM(["tool time", '{"value": 3}'])
    with pytest.raises(CallbackBug) as raised:
        await CALC.run({"question": "1+2"}, llm=llm, max_turns=1, return_retries=1,
                       on_text=on_text)  # fmt: skip
    assert len(llm.requests) == 1  # never retried as a model failure
    assert raised.value.turns == ()  # type: ignore[attr-defined]
    assert any("on_text" in note for note in raised.value.__notes__)


async def test_a_raising_on_text_keeps_the_turns_made_before_it() -> None:
    def on_text(piece: str) -> None:
        if "3" in piece:
            raise CallbackBug("the second reply")

    llm = ScriptedLLM(['{"value": "x"}', '{"value": 3}'])
    with pytest.raises(CallbackBug) as raised:
        await CALC.run({"question": "1+2"}, llm=llm, max_turns=2, on_text=on_text)
    turns = raised.value.turns  # type: ignore[attr-defined]
    assert [turn.error_type for turn in turns] == ["invalid_output"]


async def test_a_raising_on_event_is_raised_with_the_turns_made_so_far() -> None:
    llm = ScriptedLLM(['{"value": "three"}', '{"value": 3}'])
    with pytest.raises(CallbackBug) as raised:
        await CALC.run({"question": "1+2"}, llm=llm, max_turns=1, return_retries=1,
                       on_event=raising_on(TurnStarted, seen=2))  # fmt: skip
    turns = raised.value.turns  # type: ignore[attr-defined]
    assert [turn.error_type for turn in turns] == ["invalid_output"]
    assert any("on_event" in note for note in raised.value.__notes__)


async def test_a_raising_on_event_at_the_end_keeps_every_turn() -> None:
    with pytest.raises(CallbackBug) as raised:
        await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']),
                       on_event=raising_on(RunEnded))  # fmt: skip
    assert [turn.outcome for turn in raised.value.turns] == [TurnOutcome.SUCCESS]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", [ToolCallStarted, ToolCallEnded])
async def test_a_raising_on_event_during_parallel_tool_calls_is_not_an_exception_group(
    kind: type[Any],
) -> None:
    llm = ScriptedLLM([two_calls(), '{"value": 3}'])
    with pytest.raises(CallbackBug) as raised:
        await CALC.run({"question": "1+2"}, llm=llm, on_event=raising_on(kind))
    assert not isinstance(raised.value, BaseExceptionGroup)
    assert raised.value.turns == ()  # type: ignore[attr-defined]


async def test_an_async_on_event_is_refused_when_the_run_is_made() -> None:
    async def on_event(event: RunEvent) -> None:
        return None

    class Handler:
        async def __call__(self, event: RunEvent) -> None:
            return None

    for handler in (on_event, Handler()):
        with pytest.raises(ConfigurationError) as raised:
            await CALC.run({"question": "1+2"}, llm=ScriptedLLM([]), on_event=handler)
        assert raised.value.field == "on_event" and "async" in str(raised.value)
    with pytest.raises(ConfigurationError) as refused:
        CALC.start({"question": "1+2"}, llm=ScriptedLLM([]), on_text=on_event)  # type: ignore[arg-type]
    assert refused.value.field == "on_text"


async def test_an_on_event_returning_a_coroutine_is_refused_at_its_first_event() -> None:
    async def later(event: RunEvent) -> None:
        return None

    llm = ScriptedLLM(['{"value": 3}'])
    with pytest.raises(ConfigurationError) as raised:
        await CALC.run({"question": "1+2"}, llm=llm, on_event=lambda event: later(event))  # type: ignore[func-returns-value]
    assert raised.value.field == "on_event" and "never be awaited" in str(raised.value)
    assert llm.requests == []  # refused at RunStarted, before any call


async def test_a_raising_on_event_in_a_streamed_run_is_raised_by_result() -> None:
    async with CALC.stream({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']),
                           on_event=raising_on(TurnEnded)) as run:  # fmt: skip
        with pytest.raises(CallbackBug) as raised:
            await run.result()
    assert len(raised.value.turns) == 1  # type: ignore[attr-defined]


# --- the latest conventions and the details event ---

LATEST = "gen_ai_latest_experimental"


async def test_the_latest_conventions_rename_cache_writes_and_keep_the_run_span_lean(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_semconv(monkeypatch, LATEST)
    cached = Usage(input_tokens=1200, output_tokens=5, cache_read_tokens=1000,
                   cache_write_tokens=150)  # fmt: skip
    step = await CALC.run({"question": "1+2"}, llm=ScriptedLLM([LLMResponse(
        text='{"value": 3}', usage=cached)]), max_turns=3, return_retries=1,
        tracer_provider=traced.provider)  # fmt: skip
    assert step.ok
    chat = attrs(traced.one("chat scripted"))
    assert chat["gen_ai.usage.cache_write.input_tokens"] == 150
    assert chat["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert "gen_ai.usage.cache_creation.input_tokens" not in chat
    assert chat["gen_ai.provider.name"] == "scripted"  # on the inference span, as before
    run = attrs(traced.one("invoke_agent calc"))
    # Removed from the internal invoke_agent span: provider (#289) and cache sums (#469).
    assert run == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "calc",
        "subagent.max_turns": 3,
        "subagent.return_retries": 1,
        "subagent.outcome": "done",
        "subagent.turns": 1,
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 5,
    }


async def test_captured_replies_carry_no_finish_reason_under_the_latest_conventions(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_semconv(monkeypatch, LATEST)
    set_capture(monkeypatch, True)
    await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']),
                   tracer_provider=traced.provider)  # fmt: skip
    chat = attrs(traced.one("chat scripted"))
    assert json.loads(chat["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": '{"value": 3}'}]}
    ]  # deprecated (#363): gen_ai.response.finish_reasons says it
    assert chat["gen_ai.response.finish_reasons"] == ("stop",)


@pytest.mark.parametrize("capture", [False, "NO_CONTENT", True, "SPAN_ONLY"])
async def test_no_details_event_unless_capture_goes_to_events(
    traced: Traced, logged: Logged, monkeypatch: pytest.MonkeyPatch, capture: bool | str
) -> None:
    set_capture(monkeypatch, capture)
    await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']),
                   tracer_provider=traced.provider)  # fmt: skip
    assert logged.exporter.get_finished_logs() == ()


@pytest.mark.parametrize("opt_in", [None, LATEST])
async def test_event_only_capture_puts_the_messages_on_the_details_event_not_on_spans(
    traced: Traced, logged: Logged, monkeypatch: pytest.MonkeyPatch, opt_in: str | None
) -> None:
    set_semconv(monkeypatch, opt_in)
    set_capture(monkeypatch, "EVENT_ONLY")
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="t1")],
                        usage=usage(20, 4), model="scripted-1"),
            '{"value": 3}',
        ]
    )  # fmt: skip
    await CALC.run({"question": "secret 1+2"}, llm=llm, max_turns=2,
                   tracer_provider=traced.provider)  # fmt: skip
    assert _content_attributes(traced) == set()
    assert not any("secret" in str(v) for span in traced.spans for v in attrs(span).values())

    first, second = logged.events(DETAILS_EVENT)
    chats = sorted(traced.named("chat scripted"), key=lambda span: span.start_time or 0)
    for record, chat in zip((first, second), chats, strict=True):  # each in its chat span
        assert chat.context is not None
        assert record.log_record.span_id == chat.context.span_id
        assert record.log_record.trace_id == chat.context.trace_id
    details = dict(first.log_record.attributes or {})
    assert details["gen_ai.operation.name"] == "chat"
    assert details["gen_ai.provider.name"] == "scripted"
    assert details["gen_ai.request.model"] == "scripted"
    assert details["gen_ai.response.model"] == "scripted-1"
    assert tuple(details["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert (details["gen_ai.usage.input_tokens"], details["gen_ai.usage.output_tokens"]) == (20, 4)
    # Structured, not JSON strings: events must carry the messages in structured form.
    sent = details["gen_ai.input.messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert list(sent[1]["parts"]) == [{"type": "text", "content": "Compute secret 1+2"}]
    reply = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "t1", "name": "add", "arguments": {"a": 1, "b": 2}}],
    }
    if opt_in is None:  # the previous conventions keep the per-message finish reason
        reply["finish_reason"] = "tool_calls"
    assert _plain(details["gen_ai.output.messages"]) == [reply]
    resent = dict(second.log_record.attributes or {})["gen_ai.input.messages"]
    assert [m["role"] for m in resent][-3:] == ["assistant", "tool", "user"]
    assert resent[-2]["parts"][0]["type"] == "tool_call_response"


async def test_span_and_event_capture_records_the_messages_in_both_places(
    traced: Traced, logged: Logged, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_semconv(monkeypatch, LATEST)
    set_capture(monkeypatch, "span_and_event")
    await CALC.run({"question": "1+2"}, llm=ScriptedLLM(['{"value": 3}']),
                   tracer_provider=traced.provider)  # fmt: skip
    chat = attrs(traced.one("chat scripted"))
    (event,) = logged.events(DETAILS_EVENT)
    details = dict(event.log_record.attributes or {})
    assert json.loads(chat["gen_ai.input.messages"]) == _plain(details["gen_ai.input.messages"])
    assert json.loads(chat["gen_ai.output.messages"]) == _plain(details["gen_ai.output.messages"])


async def test_a_failed_call_has_a_details_event_with_its_error_and_no_output(
    traced: Traced, logged: Logged, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, "EVENT_ONLY")
    llm = ScriptedLLM([LLMError(ErrorKind.BAD_REQUEST, "no", status_code=400)])
    step = await CALC.run({"question": "1+2"}, llm=llm, tracer_provider=traced.provider)
    assert not step.ok
    (event,) = logged.events(DETAILS_EVENT)
    details = dict(event.log_record.attributes or {})
    assert details["error.type"] == "bad_request"
    assert "gen_ai.output.messages" not in details
    assert [m["role"] for m in details["gen_ai.input.messages"]] == ["system", "user"]


async def test_event_capture_without_a_logger_provider_costs_no_event(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_capture(monkeypatch, "EVENT_ONLY")
    observer = span_observer("calc", traced.provider, ScriptedLLM())
    assert observer is not None and observer._logger is None


def _plain(value: Any) -> Any:
    """A structured attribute value as plain lists and dicts (the SDK keeps tuples)."""
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value
