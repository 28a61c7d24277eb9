"""The core's transport retries end to end: SubAgent -> OpenAIChat -> a real HTTP server.

The server (tests/openai_server.py) plays a script of failures and replies; the tests assert
what the run recorded (turns, transport retries, failure) and what went over the wire: a
retried call sends the very same request, so no retry leaks into the prompt.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_server import Reply, ScriptedServer, completion
from pydantic import BaseModel

from subagent import (
    ErrorKind,
    FailReason,
    OpenAIChat,
    RetryPolicy,
    ScriptedLLM,
    StopReason,
    SubAgent,
    TurnOutcome,
    TurnType,
)

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=3, initial_delay=0.01, multiplier=1.0, max_delay=0.05, jitter=0)


class Answer(BaseModel):
    answer: int


AGENT = SubAgent(name="adder", prompt="What is {{a}} + {{b}}? Reply as JSON.", output=Answer)
GOOD = completion('{"answer": 5}', prompt_tokens=20, completion_tokens=6)


def lookup(city: str) -> str:
    """Look up the temperature of a city."""
    return f"{city}: 3 C"


TOOL_AGENT = SubAgent(name="weather", prompt="How cold is {{city}}?", output=Answer, tools=[lookup])


async def run(server: ScriptedServer, agent: SubAgent[Any] = AGENT, **options: Any) -> Any:
    options.setdefault("max_turns", 1)
    options.setdefault("return_retries", 1)
    options.setdefault("retry_policy", FAST)
    options.setdefault("timeout", 5)
    options.setdefault("mission_timeout", 20)
    context = options.pop("context", {"a": 2, "b": 3})
    llm = OpenAIChat(model="m", base_url=server.base_url, api_key="k", _environ={})
    async with llm:
        return await agent.run(context, llm=llm, **options)


def bodies(server: ScriptedServer) -> list[dict[str, Any]]:
    return [request.json for request in server.requests]


async def test_rate_limit_is_retried_in_the_same_turn(server: ScriptedServer) -> None:
    server.script(Reply.error(429, "slow down", headers={"Retry-After": "0"}), Reply.json(GOOD))
    step = await run(server)

    assert step.ok, step.summary()
    assert step.output == Answer(answer=5)
    (turn,) = step.turns
    assert turn.type is TurnType.MUST_RETURN
    assert turn.outcome is TurnOutcome.SUCCESS
    assert [(r.attempt, r.kind, r.delay_s) for r in turn.transport_retries] == [
        (1, ErrorKind.RATE_LIMIT, 0.0)  # the server's Retry-After, not the policy's backoff
    ]
    assert "slow down" in turn.transport_retries[0].message
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (20, 6)
    first, second = bodies(server)
    assert first == second  # the retry sent the same request: nothing leaked into the prompt


async def test_server_error_then_dropped_connection_then_success(server: ScriptedServer) -> None:
    server.script(
        Reply.error(500, "llama_decode failed"),
        Reply(drop="before"),
        Reply.json(GOOD),
    )
    step = await run(server)

    assert step.ok, step.summary()
    (turn,) = step.turns
    assert [r.kind for r in turn.transport_retries] == [
        ErrorKind.SERVER_ERROR,
        ErrorKind.CONNECTION,
    ]
    assert [r.attempt for r in turn.transport_retries] == [1, 2]
    assert all(r.delay_s == 0.01 for r in turn.transport_retries)
    assert turn.transport_retries[0].message == "llama_decode failed"
    sent = bodies(server)
    assert len(sent) == 3
    assert sent[0] == sent[1] == sent[2]


async def test_retries_are_bounded_by_the_policy(server: ScriptedServer) -> None:
    server.script(*[Reply.error(503, "overloaded")] * 3, Reply.json(GOOD))
    step = await run(server)

    assert not step.ok
    assert step.failure.reason is FailReason.LLM_ERROR
    assert step.failure.error_kind is ErrorKind.SERVER_ERROR
    (turn,) = step.turns  # the failed call spent no correction turn: the run ended
    assert turn.outcome is TurnOutcome.FAIL
    assert len(turn.transport_retries) == 2
    assert len(server.requests) == 3  # max_attempts
    assert server.remaining == 1


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply.error(401, "invalid api key"), ErrorKind.AUTHENTICATION),
        (Reply.error(400, "context length exceeded"), ErrorKind.BAD_REQUEST),
        (Reply.error(400, "blocked by the content filter"), ErrorKind.CONTENT_FILTER),
    ],
)
async def test_non_retryable_errors_end_the_run_at_once(
    server: ScriptedServer, reply: Reply, kind: ErrorKind
) -> None:
    server.script(reply, Reply.json(GOOD))
    step = await run(server)

    assert step.failure.reason is FailReason.LLM_ERROR
    assert step.failure.error_kind is kind
    (turn,) = step.turns
    assert turn.transport_retries == []
    assert turn.error_type == kind.value
    assert len(server.requests) == 1


async def test_a_slow_call_times_out_and_is_retried(server: ScriptedServer) -> None:
    server.script(Reply.json(GOOD, delay=5.0), Reply.json(GOOD))
    step = await run(server, timeout=0.3)

    assert step.ok, step.summary()
    (turn,) = step.turns
    assert [r.kind for r in turn.transport_retries] == [ErrorKind.TIMEOUT]
    assert len(server.requests) == 2


async def test_calls_that_keep_timing_out_fail_the_run_as_timeout(server: ScriptedServer) -> None:
    server.script(*[Reply.json(GOOD, delay=5.0)] * 2)
    policy = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)
    step = await run(server, timeout=0.2, retry_policy=policy)

    assert step.failure.reason is FailReason.TIMEOUT
    assert step.failure.error_kind is ErrorKind.TIMEOUT
    assert len(step.turns) == 1
    assert len(server.requests) == 2


async def test_an_adapter_raising_timeout_error_without_a_call_timeout_fails_as_timeout() -> None:
    # A custom adapter bounding its own call (asyncio.wait_for) raises the built-in
    # TimeoutError; with no per-call timeout the message used to format None (TypeError).
    llm = ScriptedLLM([TimeoutError("gateway wait"), TimeoutError()])
    policy = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)
    step = await AGENT.run({"a": 2, "b": 3}, llm=llm, retry_policy=policy, max_turns=1)

    assert step.failure.reason is FailReason.TIMEOUT
    assert step.failure.error_kind is ErrorKind.TIMEOUT
    assert step.failure.message.endswith("the model call raised TimeoutError")
    (retry,) = step.turns[0].transport_retries
    assert retry.message == "the model call raised TimeoutError: gateway wait"


async def test_an_adapter_timeout_error_is_retried_like_any_timeout() -> None:
    llm = ScriptedLLM([TimeoutError(), '{"answer": 5}'])
    step = await AGENT.run({"a": 2, "b": 3}, llm=llm, retry_policy=FAST, timeout=30)

    assert step.ok, step.summary()
    assert [r.kind for r in step.turns[0].transport_retries] == [ErrorKind.TIMEOUT]


async def test_mission_timeout_ends_a_run_stuck_in_retries(server: ScriptedServer) -> None:
    server.script(*[Reply.error(503, "down", headers={"Retry-After": "0.1"})] * 50)
    policy = RetryPolicy(max_attempts=50, max_delay=1.0)
    step = await run(server, retry_policy=policy, mission_timeout=0.5)

    assert step.failure.reason is FailReason.TIMEOUT
    assert 2 <= len(server.requests) < 50


async def test_a_cut_off_return_is_an_error_turn_then_corrected(server: ScriptedServer) -> None:
    server.script(
        Reply.json(completion('{"answ', finish_reason="length")),
        Reply.json(GOOD),
    )
    step = await run(server, settings={"max_tokens": 5})

    assert step.ok, step.summary()
    first, second = step.turns
    assert (first.type, first.outcome) == (TurnType.MUST_RETURN, TurnOutcome.ERROR)
    assert first.stop_reason is StopReason.LENGTH
    assert first.raw_stop_reason == "length"
    assert first.error is not None and "cut off" in first.error
    assert first.transport_retries == []  # a length stop is never retried blindly
    assert (second.type, second.outcome) == (TurnType.RETRY, TurnOutcome.SUCCESS)
    assert step.stop_reasons == {"length": 1, "stop": 1}
    sent = bodies(server)
    assert all(body["max_tokens"] == 5 for body in sent)
    assert "cut off" in sent[1]["messages"][-1]["content"]


async def test_content_filter_finish_reason_fails_the_run(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("", finish_reason="content_filter")), Reply.json(GOOD))
    step = await run(server)

    assert step.failure.reason is FailReason.LLM_ERROR
    assert step.failure.error_kind is ErrorKind.CONTENT_FILTER
    assert len(server.requests) == 1


async def test_native_tool_call_round_trip(server: ScriptedServer) -> None:
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"city": "Oslo"})},
    }
    server.script(
        Reply.json(completion(None, tool_calls=[call], finish_reason="tool_calls")),
        Reply.error(502, "bad gateway"),  # a transport retry inside the second turn
        Reply.json(completion('{"answer": 3}')),
    )
    step = await run(server, TOOL_AGENT, context={"city": "Oslo"}, max_turns=3)

    assert step.ok, step.summary()
    assert step.output == Answer(answer=3)
    first, second = step.turns
    assert (first.type, first.outcome) == (TurnType.NORMAL, TurnOutcome.CONTINUE)
    assert first.stop_reason is StopReason.TOOL_CALLS
    assert ["Oslo: 3 C" in result.content for result in first.tool_results] == [True]
    assert [r.kind for r in second.transport_retries] == [ErrorKind.SERVER_ERROR]

    sent = bodies(server)
    assert [tool["function"]["name"] for tool in sent[0]["tools"]] == ["lookup"]
    assert "tool_choice" not in sent[0]
    assert sent[1] == sent[2]  # the retried request is the same request
    assistant, tool = sent[1]["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["id"] == "call_abc"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert tool == {"role": "tool", "content": tool["content"], "tool_call_id": "call_abc"}
    assert "Oslo: 3 C" in tool["content"]
