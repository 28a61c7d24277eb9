"""OpenAIChat against a real HTTP server on 127.0.0.1 (tests/openai_server.py)."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import socket
import time
import tracemalloc
import zlib
from collections.abc import Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from openai_server import RecordedRequest, Reply, ScriptedServer, completion, sse_chunk
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import set_capture

from subagent import RetryPolicy, ScriptedLLM, SubAgent
from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent.llm import (
    LLMRequest,
    LLMResponse,
    LLMSpec,
    Message,
    OpenAIChat,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    Usage,
)
from subagent.llm._http import parse_retry_after
from subagent.llm._providers import parse_subagent_llm
from subagent.llm._redact import redact_url_credentials
from subagent.llm._retry_policy import DEFAULT_RETRYABLE
from subagent.llm._text_calls import tool_calls_in_text

pytestmark = pytest.mark.anyio

NO_ENV: dict[str, str] = {}


def make_llm(server: ScriptedServer, **kwargs: Any) -> OpenAIChat:
    kwargs.setdefault("model", "requested-model")
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("timeout", 5.0)
    return OpenAIChat(base_url=server.base_url, _environ=NO_ENV, **kwargs)


def ask(text: str = "hi", **kwargs: Any) -> LLMRequest:
    return LLMRequest(messages=(Message(role="user", content=text),), **kwargs)


async def fail(server: ScriptedServer, *replies: Reply, **kwargs: Any) -> LLMError:
    server.script(*replies)
    async with make_llm(server, **kwargs) as llm:
        with pytest.raises(LLMError) as caught:
            await llm.complete(ask())
    return caught.value


# -- the request on the wire ------------------------------------------------------------------

WEATHER = ToolDefinition(
    name="weather",
    description="Current weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


async def test_request_body_carries_messages_tools_and_settings(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("ok")))
    request = LLMRequest(
        messages=(
            Message(role="system", content="be brief"),
            Message(role="user", content="weather in Oslo?"),
            Message(
                role="assistant",
                content="",
                tool_calls=(
                    ToolCall(name="weather", arguments={"city": "Oslo"}, id="call_1"),
                    ToolCall(name="weather", arguments="not json", id="call_2"),
                ),
            ),
            Message(role="tool", content='{"temp": 3}', tool_call_id="call_1", name="weather"),
            Message(role="tool", content="error: bad arguments", tool_call_id="call_2"),
        ),
        tools=[WEATHER],
        tool_choice="auto",
        settings={"temperature": 0.1, "max_tokens": 64},
    )
    async with make_llm(server, default_settings={"temperature": 0.9, "seed": 7}) as llm:
        await llm.complete(request)

    (recorded,) = server.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == "Bearer sk-test"
    assert recorded.headers["content-type"] == "application/json"
    body = recorded.json
    assert body["model"] == "requested-model"
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",  # never null: llama.cpp rejects it
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": "not json"},
                },
            ],
        },
        {"role": "tool", "content": '{"temp": 3}', "tool_call_id": "call_1"},
        {"role": "tool", "content": "error: bad arguments", "tool_call_id": "call_2"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    assert body["temperature"] == 0.1  # the request's settings win over the defaults
    assert body["seed"] == 7
    assert body["max_tokens"] == 64
    assert "stream" not in body


async def test_no_tools_means_no_tools_and_no_tool_choice(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("ok")))
    async with make_llm(server, api_key="") as llm:
        await llm.complete(ask(tool_choice="none"))
    body = server.requests[0].json
    assert "tools" not in body
    assert "tool_choice" not in body  # OpenAI rejects tool_choice without tools
    assert "authorization" not in server.requests[0].headers


async def test_tool_choice_travels_with_tools(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("ok")))
    async with make_llm(server) as llm:
        await llm.complete(ask(tools=[WEATHER], tool_choice="required"))
    assert server.requests[0].json["tool_choice"] == "required"


async def test_settings_may_name_a_tool_but_only_when_tools_are_offered(
    server: ScriptedServer,
) -> None:
    named = {"type": "function", "function": {"name": "weather"}}
    settings = {"tool_choice": named, "parallel_tool_calls": False}
    server.script(Reply.json(completion("ok")), Reply.json(completion("ok")))
    async with make_llm(server) as llm:
        await llm.complete(ask(tools=[WEATHER], tool_choice="auto", settings=settings))
        await llm.complete(ask(tool_choice="none", settings=settings))  # a must_return turn
    with_tools, without_tools = (request.json for request in server.requests)
    assert with_tools["tool_choice"] == named
    assert with_tools["parallel_tool_calls"] is False
    assert "tool_choice" not in without_tools
    assert "parallel_tool_calls" not in without_tools


async def test_model_is_omitted_when_none_is_configured(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("ok", model="the-served-one")))
    async with OpenAIChat(base_url=server.base_url, _environ=NO_ENV) as llm:
        reply = await llm.complete(ask())
    assert "model" not in server.requests[0].json
    assert llm.model_name == "default"
    assert reply.model == "the-served-one"


# -- replies ----------------------------------------------------------------------------------


async def test_reply_text_usage_and_model_from_the_server(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("hello", prompt_tokens=12, completion_tokens=3)))
    async with make_llm(server) as llm:
        reply = await llm.complete(ask())
    assert reply.text == "hello"
    assert reply.stop_reason is StopReason.STOP
    assert reply.raw_stop_reason == "stop"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (12, 3)
    assert reply.model == "served-model"  # the reply's model, not the requested one
    assert reply.tool_calls == []


async def test_model_falls_back_to_the_requested_one(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("x", model=None)))
    async with make_llm(server) as llm:
        reply = await llm.complete(ask())
    assert reply.model == "requested-model"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("stop", StopReason.STOP),
        ("length", StopReason.LENGTH),
        ("tool_calls", StopReason.TOOL_CALLS),
        ("function_call", StopReason.TOOL_CALLS),
        ("content_filter", StopReason.CONTENT_FILTER),
        ("error", StopReason.ERROR),
        ("eaten_by_a_grue", StopReason.UNKNOWN),
        (None, StopReason.UNKNOWN),
    ],
)
async def test_finish_reason_is_normalised_and_kept(
    server: ScriptedServer, raw: str | None, expected: StopReason
) -> None:
    server.script(Reply.json(completion("partial", finish_reason=raw)))
    async with make_llm(server) as llm:
        reply = await llm.complete(ask())
    assert reply.stop_reason is expected
    assert reply.raw_stop_reason == raw
    assert reply.text == "partial"


async def test_tool_calls_are_decoded(server: ScriptedServer) -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
        {"type": "function", "function": {"name": "b", "arguments": "[1, 2]"}},
        {"id": "c3", "type": "function", "function": {"name": "c", "arguments": "{oops"}},
        {"id": "c4", "type": "function", "function": {"name": "d", "arguments": ""}},
        {"id": "c5", "type": "function", "function": {"name": "e", "arguments": {"y": 2}}},
    ]
    server.script(Reply.json(completion(None, tool_calls=calls, finish_reason="tool_calls")))
    async with make_llm(server) as llm:
        reply = await llm.complete(ask(tools=[WEATHER]))
    assert reply.text == ""  # content null
    assert reply.stop_reason is StopReason.TOOL_CALLS
    assert reply.tool_calls == [
        ToolCall(name="a", arguments={"x": 1}, id="c1"),
        ToolCall(name="b", arguments="[1, 2]", id=""),  # not an object: raw; no id: ""
        ToolCall(name="c", arguments="{oops", id="c3"),
        ToolCall(name="d", arguments={}, id="c4"),
        ToolCall(name="e", arguments={"y": 2}, id="c5"),
    ]


async def test_content_parts_are_joined(server: ScriptedServer) -> None:
    body = completion("x")
    body["choices"][0]["message"]["content"] = [
        {"type": "text", "text": "two "},
        {"type": "text", "text": "parts"},
    ]
    server.script(Reply.json(body))
    async with make_llm(server) as llm:
        assert (await llm.complete(ask())).text == "two parts"


async def test_text_tool_calls_are_recognised_when_enabled(server: ScriptedServer) -> None:
    text = '{"name": "weather", "arguments": {"city": "Oslo"}}'
    server.script(*[Reply.json(completion(text))] * 4)
    async with make_llm(server, text_tool_calls=True) as llm:
        with_tools = await llm.complete(ask(tools=[WEATHER]))
        without_tools = await llm.complete(ask())  # a must_return turn: text stays text
    async with make_llm(server, text_tool_calls=False) as llm:
        disabled = await llm.complete(ask(tools=[WEATHER]))
    async with make_llm(server, text_tool_calls=True) as llm:
        streamed = [d async for d in llm.stream(ask(tools=[WEATHER]))][-1].response
    assert with_tools.tool_calls == [ToolCall(name="weather", arguments={"city": "Oslo"})]
    assert with_tools.text == ""
    assert with_tools.stop_reason is StopReason.TOOL_CALLS
    assert with_tools.raw_stop_reason == "stop"
    assert without_tools.tool_calls == [] and without_tools.text == text
    assert disabled.tool_calls == [] and disabled.text == text
    assert streamed is not None and streamed.tool_calls == with_tools.tool_calls


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"name": "a", "arguments": {"x": 1}}', [("a", {"x": 1})]),
        ('{"name": "a", "parameters": {"x": 1}}', [("a", {"x": 1})]),
        ('{"name": "a", "arguments": "{\\"x\\": 2}"}', [("a", {"x": 2})]),
        ('```json\n[{"name": "a", "arguments": {}}, {"name": "b"}]\n```', [("a", {}), ("b", {})]),
        (
            '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>{"name": "b", "arguments": {}}</tool_call>',
            [("a", {"x": 1}), ("b", {})],
        ),
        (
            '{"name": "a", "arguments": {"x": 1}}\n{"name": "b", "arguments": "{\\"y\\": 2}"}',
            [("a", {"x": 1}), ("b", {"y": 2})],
        ),  # several calls, one per line
        ('```json\n{"name": "a"}\n\n{"name": "b"}\n```', [("a", {}), ("b", {})]),
        ('{"name": "a"}\n{"name": "b", "arguments": {"x": ', []),  # the last one cut off
        ('{"name": "a"}\n{"name": "c"}', []),  # one is not an offered tool
        ('{"name": "a"} then {"name": "b"}', []),  # text between them
        ('{"name": "a"}\n[{"name": "b"}]', []),  # not objects only
        ('{"name": "c", "arguments": {}}', []),  # not an offered tool
        ('{"name": "a", "arguments": {}, "extra": 1}', []),  # not the call shape
        ('Calling {"name": "a", "arguments": {}}', []),  # text around it
        ('<tool_call>{"name": "a"}</tool_call> and more', []),
        ("<tool_call>{oops</tool_call>", []),
        ('{"answer": 5}', []),
        ("", []),
    ],
)
def test_tool_calls_in_text(text: str, expected: list[tuple[str, Any]]) -> None:
    calls = tool_calls_in_text(text, {"a", "b"})
    assert [(call.name, call.arguments) for call in calls] == expected
    assert all(call.id == "" for call in calls)


# -- error classification ---------------------------------------------------------------------


async def test_429_is_rate_limit_with_retry_after_seconds(server: ScriptedServer) -> None:
    error = await fail(
        server, Reply.error(429, "slow down", headers={"Retry-After": "2"}), Reply.json({})
    )
    assert error.kind is ErrorKind.RATE_LIMIT
    assert error.status_code == 429
    assert error.retry_after == 2.0
    assert error.message == "slow down"
    assert len(server.requests) == 1  # the adapter never retries by itself
    assert server.remaining == 1


async def test_429_retry_after_as_http_date(server: ScriptedServer) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    error = await fail(
        server,
        Reply.error(429, "later", headers={"Retry-After": format_datetime(when, usegmt=True)}),
    )
    assert error.kind is ErrorKind.RATE_LIMIT
    assert error.retry_after is not None
    assert 25 <= error.retry_after <= 31


async def test_429_retry_after_ms_wins(server: ScriptedServer) -> None:
    error = await fail(
        server, Reply.error(429, "x", headers={"retry-after-ms": "250", "Retry-After": "9"})
    )
    assert error.retry_after == 0.25


async def test_429_insufficient_quota_is_not_a_rate_limit(server: ScriptedServer) -> None:
    body = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    error = await fail(server, Reply.json(body, status=429))
    assert error.kind is ErrorKind.OTHER


async def test_500_with_json_body_gives_the_servers_message(server: ScriptedServer) -> None:
    error = await fail(server, Reply.error(500, "llama_decode returned -3"))
    assert error.kind is ErrorKind.SERVER_ERROR
    assert error.status_code == 500
    assert error.message == "llama_decode returned -3"
    assert error.body is not None and "llama_decode" in error.body
    assert error.retry_after is None


async def test_503_with_text_body_and_retry_after(server: ScriptedServer) -> None:
    error = await fail(
        server,
        Reply(
            status=503,
            body="upstream   overloaded\n",
            content_type="text/plain",
            headers={"Retry-After": "1.5"},
        ),
    )
    assert error.kind is ErrorKind.SERVER_ERROR
    assert error.message == "upstream overloaded"
    assert error.retry_after == 1.5


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, {"error": {"message": "bad key"}}, ErrorKind.AUTHENTICATION),
        (403, {"error": {"message": "not allowed"}}, ErrorKind.PERMISSION),
        (400, {"error": {"message": "context too long"}}, ErrorKind.BAD_REQUEST),
        (404, {"error": {"message": "no such model"}}, ErrorKind.BAD_REQUEST),
        (422, {"detail": [{"loc": ["body", "messages"], "msg": "bad"}]}, ErrorKind.BAD_REQUEST),
        (408, b"", ErrorKind.TIMEOUT),
        (502, b"<html>bad gateway</html>", ErrorKind.SERVER_ERROR),
        (
            400,
            {"error": {"message": "The prompt triggered the content management policy"}},
            ErrorKind.CONTENT_FILTER,
        ),
        (400, {"error": {"message": "no", "code": "content_filter"}}, ErrorKind.CONTENT_FILTER),
        (
            400,
            {"error": {"message": "blocked", "code": "content_policy_violation"}},
            ErrorKind.CONTENT_FILTER,
        ),
        (302, b"", ErrorKind.OTHER),
    ],
)
async def test_status_classification(
    server: ScriptedServer, status: int, body: Any, kind: ErrorKind
) -> None:
    error = await fail(server, Reply.json(body, status=status))
    assert error.kind is kind
    assert error.status_code == status
    assert error.message  # never empty


@pytest.mark.parametrize(
    "body",
    [
        # OpenAI, vLLM and llama-cpp-python (this is the local model server's own reply)
        {"error": {"message": "This model's maximum context length is 4096 tokens. However, "
                              "you requested 40035 tokens (40030 in the messages, 5 in the "
                              "completion).", "type": "invalid_request_error",
                   "param": "messages", "code": "context_length_exceeded"}},
        # llama.cpp's llama-server
        {"error": {"code": 400, "message": "request (4476 tokens) exceeds the available "
                                           "context size (4096 tokens)",
                   "type": "exceed_context_size_error"}},
    ],
    ids=["openai", "llama-server"],
)  # fmt: skip
async def test_a_context_window_overflow_is_its_own_kind_and_never_retried(
    server: ScriptedServer, body: dict[str, Any]
) -> None:
    server.script(Reply.json(body, status=400), Reply.json(body, status=400))
    agent = SubAgent(name="a", prompt="p", retry_policy=RetryPolicy(
        max_attempts=2, initial_delay=0, retry_on=[*DEFAULT_RETRYABLE, ErrorKind.BAD_REQUEST]
    ))  # fmt: skip
    async with make_llm(server) as llm:
        step = await agent.run(llm=llm)
    assert step.failure is not None and step.failure.error_kind is ErrorKind.CONTEXT_LENGTH
    assert len(server.requests) == 1 and not step.retryable


async def test_422_message_keeps_the_validation_detail(server: ScriptedServer) -> None:
    body = {"detail": [{"loc": ["body", "messages"], "msg": "field required"}]}
    error = await fail(server, Reply.json(body, status=422))
    assert "field required" in error.message


async def test_500_validation_error_is_a_bad_request(server: ScriptedServer) -> None:
    # llama-cpp-python answers a request its pydantic model rejects with HTTP 500.
    message = "7 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages')}"
    error = await fail(server, Reply.error(500, message))
    assert error.kind is ErrorKind.BAD_REQUEST
    assert error.status_code == 500


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        ({"choices": []}, "no choices"),
        ({"id": "x"}, "no choices"),
        ({"choices": [{"index": 0}]}, "no message"),
        ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "no function name"),
    ],
)
async def test_malformed_replies_are_invalid_response(
    server: ScriptedServer, body: Any, fragment: str
) -> None:
    error = await fail(server, Reply.json(body))
    assert error.kind is ErrorKind.INVALID_RESPONSE
    assert fragment in error.message
    assert error.status_code == 200


async def test_error_object_in_a_200_reply_is_a_server_error(server: ScriptedServer) -> None:
    error = await fail(server, Reply.json({"error": {"message": "model crashed"}}))
    assert error.kind is ErrorKind.SERVER_ERROR
    assert error.message == "model crashed"


async def test_connection_dropped_before_the_reply(server: ScriptedServer) -> None:
    error = await fail(server, Reply(drop="before"))
    assert error.kind is ErrorKind.CONNECTION
    assert error.status_code is None


async def test_connection_dropped_in_the_middle_of_the_body(server: ScriptedServer) -> None:
    error = await fail(server, Reply.json(completion("a long reply " * 20), drop="mid"))
    assert error.kind is ErrorKind.CONNECTION


async def test_connection_refused_names_the_address_tried_without_its_credentials() -> None:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://user:s3cret-pass@127.0.0.1:{port}/v1"
    async with OpenAIChat(base_url=base_url, _environ=NO_ENV) as llm:
        with pytest.raises(LLMError) as caught:
            await llm.complete(ask())
    assert caught.value.kind is ErrorKind.CONNECTION
    assert f"127.0.0.1:{port}/v1/chat/completions" in caught.value.message
    assert "s3cret-pass" not in str(caught.value)


async def test_slow_reply_is_a_timeout(server: ScriptedServer) -> None:
    started = time.perf_counter()
    error = await fail(server, Reply.json(completion("late"), delay=5.0), timeout=0.2)
    assert error.kind is ErrorKind.TIMEOUT
    assert "ReadTimeout" in error.message
    assert time.perf_counter() - started < 3


async def test_cancellation_is_not_turned_into_an_error(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("late"), delay=5.0))
    async with make_llm(server) as llm:
        with anyio.move_on_after(0.2) as scope:
            await llm.complete(ask())
        assert scope.cancelled_caught  # the cancellation reached the scope, unswallowed


# -- streaming --------------------------------------------------------------------------------


async def collect(llm: OpenAIChat, request: LLMRequest) -> list[StreamDelta]:
    return [delta async for delta in llm.stream(request)]


async def test_stream_yields_text_then_the_whole_reply(server: ScriptedServer) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    server.script(
        Reply.sse(
            [
                sse_chunk(""),
                sse_chunk("Hel"),
                sse_chunk("lo"),
                sse_chunk(None, finish_reason="length"),
                {"id": "x", "model": "served-model", "choices": [], "usage": usage},
                "[DONE]",
            ]
        )
    )
    async with make_llm(server) as llm:
        deltas = await collect(llm, ask(settings={"max_tokens": 3}))
    assert [d.text for d in deltas[:-1]] == ["Hel", "lo"]
    assert all(d.response is None for d in deltas[:-1])
    final = deltas[-1].response
    assert final is not None
    assert final.text == "Hello"
    assert final.stop_reason is StopReason.LENGTH
    assert final.raw_stop_reason == "length"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (5, 3)
    assert final.model == "served-model"
    body = server.requests[0].json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 3
    assert server.requests[0].headers["accept"] == "text/event-stream"


async def test_usage_a_server_does_not_report_is_unreported_not_zero(
    server: ScriptedServer,
) -> None:
    # llama-cpp-python ignores stream_options: its streams carry no usage at all.
    without = [sse_chunk("ok"), sse_chunk(None, finish_reason="stop"), "[DONE]"]
    with_usage = [
        *without[:2],
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 1}},
    ]
    body = completion("ok")
    del body["usage"]
    server.script(Reply.sse(without), Reply.sse(with_usage), Reply.json(body))
    async with make_llm(server) as llm:
        unreported = (await collect(llm, ask()))[-1].response
        reported = (await collect(llm, ask()))[-1].response
        whole = await llm.complete(ask())
    assert unreported is not None and reported is not None
    assert unreported.usage == Usage(unreported=1) and not unreported.usage.known
    assert reported.usage == Usage(input_tokens=4, output_tokens=1) and reported.usage.known
    assert whole.usage.unreported == 1
    assert json.loads(reported.usage.model_dump_json()) == {"input_tokens": 4, "output_tokens": 1}


async def test_a_run_on_a_stream_without_usage_says_its_usage_is_unreported(
    server: ScriptedServer,
) -> None:
    no_usage = Reply.sse([sse_chunk("fine"), sse_chunk(None, finish_reason="stop"), "[DONE]"])
    server.script(no_usage)
    agent = SubAgent(name="usage", prompt="hi", max_turns=1)
    async with make_llm(server) as llm:
        step = await agent.run(llm=llm, on_text=lambda _: None)
    assert step.ok and step.turns[0].usage.unreported == 1
    assert step.usage.total == Usage(unreported=1) and not step.usage.total.known
    assert type(step).model_validate_json(step.model_dump_json()) == step


async def test_a_server_refusing_stream_options_is_asked_again_without_it(
    server: ScriptedServer,
) -> None:
    refusal = Reply.error(400, "Unrecognized request argument supplied: stream_options")
    ok = Reply.sse([sse_chunk("ok"), sse_chunk(None, finish_reason="stop")])
    server.script(refusal, ok, ok)
    async with make_llm(server) as llm:
        first = (await collect(llm, ask()))[-1].response
        second = (await collect(llm, ask()))[-1].response
    assert first is not None and second is not None and first.text == second.text == "ok"
    asked = ["stream_options" in request.json for request in server.requests]
    assert asked == [True, False, False]  # refused once, then never asked again


async def test_a_bad_request_not_about_stream_options_is_not_sent_again(
    server: ScriptedServer,
) -> None:
    server.script(Reply.error(400, "messages: field required"))
    async with make_llm(server) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm, ask())
    assert caught.value.kind is ErrorKind.BAD_REQUEST
    assert len(server.requests) == 1


async def test_stream_assembles_tool_call_deltas(server: ScriptedServer) -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"index": index, **fields}

    server.script(
        Reply.sse(
            [
                sse_chunk(tool_calls=[call(0, id="c0", function={"name": "a", "arguments": ""})]),
                sse_chunk(tool_calls=[call(0, function={"arguments": '{"x"'})]),
                sse_chunk(tool_calls=[call(1, id="c1", function={"name": "b", "arguments": "{"})]),
                sse_chunk(tool_calls=[call(0, function={"arguments": ": 1}"})]),
                sse_chunk(tool_calls=[call(1, function={"arguments": "}"})]),
                sse_chunk(None, finish_reason="tool_calls"),
                "[DONE]",
            ]
        )
    )
    async with make_llm(server) as llm:
        deltas = await collect(llm, ask(tools=[WEATHER]))
    assert len(deltas) == 1
    final = deltas[0].response
    assert final is not None
    assert final.stop_reason is StopReason.TOOL_CALLS
    assert final.tool_calls == [
        ToolCall(name="a", arguments={"x": 1}, id="c0"),
        ToolCall(name="b", arguments={}, id="c1"),
    ]
    assert server.requests[0].json["tools"][0]["function"]["name"] == "weather"


async def test_stream_without_done_is_complete_when_it_has_a_finish_reason(
    server: ScriptedServer,
) -> None:
    server.script(Reply.sse([sse_chunk("ok"), sse_chunk(None, finish_reason="stop")]))
    async with make_llm(server) as llm:
        deltas = await collect(llm, ask())
    final = deltas[-1].response
    assert final is not None
    assert final.text == "ok"
    assert final.stop_reason is StopReason.STOP


async def test_stream_that_just_ends_is_a_connection_error(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk("half a")]))
    async with make_llm(server) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm, ask())
    assert caught.value.kind is ErrorKind.CONNECTION
    assert "without a finish reason" in caught.value.message


async def test_stream_dropped_mid_way(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk("a"), sse_chunk("b"), "[DONE]"], drop_after=1))
    texts: list[str] = []

    async def consume(llm: OpenAIChat) -> None:
        async for delta in llm.stream(ask()):
            texts.append(delta.text)

    async with make_llm(server) as llm:
        with pytest.raises(LLMError) as caught:
            await consume(llm)
    assert caught.value.kind is ErrorKind.CONNECTION
    assert texts == ["a"]


async def test_stream_http_error_is_classified(server: ScriptedServer) -> None:
    server.script(Reply.error(429, "busy", headers={"Retry-After": "3"}))
    async with make_llm(server) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm, ask())
    assert caught.value.kind is ErrorKind.RATE_LIMIT
    assert caught.value.retry_after == 3.0


async def test_stream_malformed_chunk_is_invalid_response(server: ScriptedServer) -> None:
    server.script(Reply.sse(["{nope"]))
    async with make_llm(server) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm, ask())
    assert caught.value.kind is ErrorKind.INVALID_RESPONSE


async def test_stream_error_event_is_classified(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk("a"), {"error": {"message": "kv cache full"}}]))
    async with make_llm(server) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm, ask())
    assert caught.value.kind is ErrorKind.SERVER_ERROR
    assert caught.value.message == "kv cache full"


async def test_stream_falls_back_when_the_server_does_not_stream(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("all at once")))
    async with make_llm(server) as llm:
        deltas = await collect(llm, ask())
    assert [d.text for d in deltas] == ["all at once", ""]
    assert deltas[-1].response is not None
    assert deltas[-1].response.text == "all at once"


async def test_closing_a_stream_early_closes_the_http_response(server: ScriptedServer) -> None:
    # The server sends one chunk, then waits until the client hangs up.
    server.script(Reply.sse([sse_chunk("first"), sse_chunk("never sent")], hold_after=1))
    async with make_llm(server) as llm:
        async with aclosing(llm.stream(ask())) as stream:
            async for delta in stream:
                assert delta.text == "first"
                break
        hung_up = await anyio.to_thread.run_sync(server.client_hung_up.wait, 5.0)
    assert hung_up


async def test_cancelling_a_stream_closes_the_http_response(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk("first"), sse_chunk("never sent")], hold_after=1))
    seen: list[str] = []
    async with make_llm(server) as llm:
        with anyio.move_on_after(0.3) as scope:
            async with aclosing(llm.stream(ask())) as stream:
                async for delta in stream:
                    seen.append(delta.text)
        hung_up = await anyio.to_thread.run_sync(server.client_hung_up.wait, 5.0)
    assert scope.cancelled_caught
    assert seen == ["first"]
    assert hung_up


# -- client ownership -------------------------------------------------------------------------


async def test_owned_client_is_closed_and_a_given_one_is_not(server: ScriptedServer) -> None:
    owned = make_llm(server)
    async with owned:
        pass
    assert owned._client.is_closed

    async with httpx.AsyncClient() as client:
        borrowed = make_llm(server, http_client=client)
        server.script(Reply.json(completion("ok")))
        async with borrowed as llm:
            assert (await llm.complete(ask())).text == "ok"
        assert not client.is_closed


# -- configuration ----------------------------------------------------------------------------


def test_parse_subagent_llm() -> None:
    assert parse_subagent_llm("openai:gpt-4o-mini") == ("openai", "gpt-4o-mini", None)
    assert parse_subagent_llm("openai:local@http://127.0.0.1:8080/v1") == (
        "openai",
        "local",
        "http://127.0.0.1:8080/v1",
    )
    assert parse_subagent_llm("OpenAI:qwen2.5:0.5b@https://h.example/v1") == (
        "openai",
        "qwen2.5:0.5b",
        "https://h.example/v1",
    )
    assert parse_subagent_llm("openai:@http://127.0.0.1:9/v1") == (
        "openai",
        None,
        "http://127.0.0.1:9/v1",
    )
    assert parse_subagent_llm("openai:org/model@x@http://h/v1") == (
        "openai",
        "org/model@x",
        "http://h/v1",
    )


@pytest.mark.parametrize("spec", ["gpt-4o", "gemini:pro", "openai:m@ftp://h", ""])
def test_bad_subagent_llm_names_the_variable(spec: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_subagent_llm(spec)
    assert caught.value.field == "SUBAGENT_LLM"


def test_from_env_reads_subagent_llm_first() -> None:
    env = {
        "SUBAGENT_LLM": "openai:spec-model@http://127.0.0.1:8123/v1",
        "OPENAI_MODEL": "env-model",
        "OPENAI_BASE_URL": "http://10.9.9.9:1/v1",
        "OPENAI_API_KEY": "sk-env",
    }
    llm = OpenAIChat.from_env(env)
    assert llm.model_name == "spec-model"
    assert llm.base_url == "http://127.0.0.1:8123/v1"
    assert (llm.server_address, llm.server_port) == ("127.0.0.1", 8123)
    assert llm.provider_name == "openai"
    assert llm._headers["Authorization"] == "Bearer sk-env"


def test_from_env_with_openai_variables_and_overrides() -> None:
    env = {"OPENAI_BASE_URL": "https://llm.internal/v1/", "OPENAI_MODEL": "m1"}
    llm = OpenAIChat.from_env(env, model="m2", timeout=5)
    assert llm.model_name == "m2"
    assert llm.base_url == "https://llm.internal/v1"
    assert llm.server_port == 443
    assert "Authorization" not in llm._headers
    assert OpenAIChat.env_configured(env)
    assert not OpenAIChat.env_configured({"OPENAI_API_KEY": "sk"})


def test_from_env_without_configuration_fails() -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAIChat.from_env({"OPENAI_API_KEY": "sk"})
    assert caught.value.field == "SUBAGENT_LLM"


@pytest.mark.parametrize(
    ("kwargs", "env", "field"),
    [
        ({"base_url": "ftp://h/v1"}, {}, "base_url"),
        ({"base_url": "not a url"}, {}, "base_url"),
        ({"base_url": "http://h/v1", "timeout": 0}, {}, "timeout"),
        ({"base_url": "http://h/v1", "timeout": True}, {}, "timeout"),
        ({}, {"OPENAI_API_KEY": "sk"}, "model"),  # the default endpoint is OpenAI's
        ({"model": "gpt-4o-mini"}, {}, "api_key"),
        ({}, {"SUBAGENT_LLM": "nonsense"}, "SUBAGENT_LLM"),
    ],
)
def test_bad_configuration_names_the_field(
    kwargs: dict[str, Any], env: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAIChat(_environ=env, **kwargs)
    assert caught.value.field == field


def test_parse_retry_after_forms() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after": " 0.5 "}) == 0.5
    assert parse_retry_after({"Retry-After": "Wed, 01 Jan 2025 12:00:10 GMT"}, now=now) == 10.0
    assert parse_retry_after({"Retry-After": "Wed, 01 Jan 2025 11:00:00 GMT"}, now=now) == 0.0
    assert parse_retry_after({"Retry-After-Ms": "1500"}) == 1.5
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) is None
    assert parse_retry_after({"Retry-After": "nan"}) is None
    assert parse_retry_after({}) is None


def test_llm_response_round_trips_through_json() -> None:
    reply = LLMResponse(text="x", tool_calls=[ToolCall(name="a", arguments={"b": 1}, id="1")])
    assert LLMResponse.model_validate(json.loads(reply.model_dump_json())) == reply


async def test_lone_surrogate_escapes_from_the_server_become_replacement_characters(
    server: ScriptedServer,
) -> None:
    lone = json.loads('"\\ud800"')
    call = {"id": "c1", "type": "function",
            "function": {"name": "weather", "arguments": json.dumps({"city": lone})}}  # fmt: skip
    server.script(
        Reply.json(completion(f"a {lone} b", tool_calls=[call])), Reply.error(400, f"bad {lone}")
    )
    async with make_llm(server) as llm:
        reply = await llm.complete(ask())
        with pytest.raises(LLMError) as caught:
            await llm.complete(ask())
    assert reply.text == "a \ufffd b"
    assert reply.tool_calls[0].arguments == {"city": "\ufffd"}
    assert caught.value.message == "bad \ufffd"
    assert caught.value.body is not None and "\\ud800" in caught.value.body  # still escaped


# -- secrets echoed by the server -------------------------------------------------------------

SECRET = "sk-proj-SECRET0123456789abcdefXYZ"


def echo_error(status: int) -> Callable[[RecordedRequest], Reply]:
    """A reply repeating the Authorization header, as OpenAI's 'Incorrect API key' does."""

    def reply(recorded: RecordedRequest) -> Reply:
        auth = recorded.headers["authorization"]
        body = {"error": {"message": f"Incorrect API key provided: {auth}", "header": auth}}
        return Reply.json(body, status=status)

    return reply


def echo_in_200(recorded: RecordedRequest) -> Reply:
    key = recorded.headers["authorization"].removeprefix("Bearer ")
    return Reply.json({"error": {"message": f"upstream rejected key {key}", "code": 500}})


def echo_in_stream(recorded: RecordedRequest) -> Reply:
    auth = recorded.headers["authorization"]
    return Reply.sse([sse_chunk("partial "), {"error": {"message": f"bad credentials {auth}"}}])


ECHOES = {
    "401": (echo_error(401), ErrorKind.AUTHENTICATION),
    "400": (echo_error(400), ErrorKind.BAD_REQUEST),
    "500": (echo_error(500), ErrorKind.SERVER_ERROR),
    "200 with an error object": (echo_in_200, ErrorKind.SERVER_ERROR),
    "SSE error event": (echo_in_stream, ErrorKind.SERVER_ERROR),
}


@pytest.mark.parametrize("case", list(ECHOES))
async def test_an_echoed_key_never_reaches_the_error(server: ScriptedServer, case: str) -> None:
    reply, kind = ECHOES[case]
    server.script(reply)

    async def call(llm: OpenAIChat) -> None:
        if case != "SSE error event":
            await llm.complete(ask())
            return
        async with aclosing(llm.stream(ask())) as deltas:
            async for _ in deltas:
                pass

    async with make_llm(server, api_key=SECRET) as llm:
        with pytest.raises(LLMError) as caught:
            await call(llm)
    error = caught.value
    assert error.kind is kind
    assert "[REDACTED]" in error.message
    for text in (error.message, error.body or "", str(error), repr(error), *map(str, error.args)):
        assert SECRET not in text


@pytest.mark.parametrize("case", list(ECHOES))
@pytest.mark.parametrize("capture", [False, True])
async def test_an_echoed_key_is_in_no_record_and_no_span(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch, case: str, capture: bool
) -> None:
    set_capture(monkeypatch, capture)
    reply, _ = ECHOES[case]
    server.script(reply, reply)  # a 500 is retried once
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = SubAgent(name="echo", prompt="hi", max_turns=1)
    stream = {"on_text": lambda _: None} if case == "SSE error event" else {}
    async with make_llm(server, api_key=SECRET) as llm:
        step = await agent.run(
            llm=llm, tracer_provider=provider, on_event=lambda _: None,
            retry_policy=RetryPolicy(max_attempts=2, initial_delay=0, jitter=0), **stream,
        )  # fmt: skip

    assert step.failure is not None and "[REDACTED]" in step.failure.message
    if case == "500":
        assert step.turns[0].transport_retries, "the 500 should have been retried"
    retries = [retry.message for turn in step.turns for retry in turn.transport_retries]
    records = [str(step), repr(step), step.summary(), step.model_dump_json(), *retries]
    for text in records:
        assert SECRET not in text
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        assert SECRET not in span.name
        assert SECRET not in (span.status.description or "")
        assert SECRET not in json.dumps(dict(span.attributes or {}), default=str)
        for event in span.events:
            assert SECRET not in event.name
            assert SECRET not in json.dumps(dict(event.attributes or {}), default=str)


async def test_a_key_echoed_in_a_reply_is_redacted(server: ScriptedServer) -> None:
    def echo_reply(recorded: RecordedRequest) -> Reply:
        auth = recorded.headers["authorization"]
        arguments = json.dumps({"city": auth})
        call = {"id": "c1", "type": "function",
                "function": {"name": "weather", "arguments": arguments}}  # fmt: skip
        return Reply.json(completion(f"you sent {auth}", tool_calls=[call], model=auth))

    def echo_stream(recorded: RecordedRequest) -> Reply:
        auth = recorded.headers["authorization"]
        return Reply.sse([sse_chunk(f"you sent {auth}"), sse_chunk(finish_reason="stop"), "[DONE]"])

    server.script(echo_reply, echo_stream)
    async with make_llm(server, api_key=SECRET) as llm:
        reply = await llm.complete(ask())
        async with aclosing(llm.stream(ask())) as deltas:
            streamed = [delta async for delta in deltas]
    assert reply.text == "you sent Bearer [REDACTED]"
    assert reply.tool_calls[0].arguments == {"city": "Bearer [REDACTED]"}
    assert reply.model == "Bearer [REDACTED]"
    assert streamed[0].text == "you sent Bearer [REDACTED]"
    final = streamed[-1].response
    assert final is not None and final.text == "you sent Bearer [REDACTED]"


async def test_secret_headers_are_redacted_and_short_values_are_not(
    server: ScriptedServer,
) -> None:
    def echo_headers(recorded: RecordedRequest) -> Reply:
        sent = f"{recorded.headers['x-api-key']} {recorded.headers['authorization']}"
        return Reply.error(403, sent)

    headers = {"x-api-key": "gateway-token-123456", "Authorization": "Basic dXNlcjpwYXNzd29yZA=="}
    error = await fail(server, echo_headers, headers=headers, api_key=None)
    assert error.message == "[REDACTED] Basic [REDACTED]"
    server.reset()
    server.script(Reply.error(401, "key local is wrong"))
    error = await fail(server, api_key="local")  # too short to redact without damage
    assert error.message == "key local is wrong"


URL_USER, URL_PASSWORD = "gateway-user-1", "s3cret/pass@word"
URL_TOKEN = base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode()


def url_with_credentials(server: ScriptedServer) -> str:
    return server.base_url.replace("//", f"//{URL_USER}:{quote(URL_PASSWORD, safe='')}@", 1)


def echo_credentials(recorded: RecordedRequest) -> str:
    """Everything a careless gateway could echo of Basic auth."""
    auth = recorded.headers["authorization"]
    decoded = base64.b64decode(auth.removeprefix("Basic ")).decode()
    return f"you sent {auth} ({decoded}); password {decoded.partition(':')[2]}"


async def test_url_credentials_are_sent_as_basic_auth_and_never_shown(
    server: ScriptedServer,
) -> None:
    def echo_error(recorded: RecordedRequest) -> Reply:
        return Reply.error(500, echo_credentials(recorded))

    def echo_reply(recorded: RecordedRequest) -> Reply:
        return Reply.json(completion(echo_credentials(recorded)))

    server.script(echo_error, echo_reply)
    llm = OpenAIChat(base_url=url_with_credentials(server), api_key="sk-also-set", _environ={})
    agent = SubAgent(name="echo", prompt="hi", max_turns=1)
    async with llm:
        step = await agent.run(llm=llm, retry_policy=RetryPolicy(initial_delay=0, jitter=0))

    assert [r.headers["authorization"] for r in server.requests] == [f"Basic {URL_TOKEN}"] * 2
    assert step.ok and step.output == (
        "you sent Basic [REDACTED] ([REDACTED]:[REDACTED]); password [REDACTED]"
    )
    assert "password [REDACTED]" in step.turns[0].transport_retries[0].message
    assert llm.base_url == server.base_url
    shown = [repr(llm), str(llm), llm.base_url, str(step), step.summary(), step.model_dump_json()]
    for text in shown:
        for secret in (URL_PASSWORD, quote(URL_PASSWORD, safe=""), URL_TOKEN, URL_USER):
            assert secret not in text


@pytest.mark.parametrize(
    ("base_url", "environ"),
    [
        ("ftp://user:hunter2@gateway/v1", {}),
        (None, {"SUBAGENT_LLM": "openai:m@ftp://user:hunter2@gateway/v1"}),
        (None, {"SUBAGENT_LLM": "other:m@http://user:hunter2@gateway/v1"}),
    ],
)
def test_a_configuration_error_never_quotes_url_credentials(
    base_url: str | None, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAIChat(base_url=base_url, _environ=environ)
    assert "hunter2" not in str(caught.value)
    assert "[REDACTED]@gateway" in str(caught.value)


MALFORMED_REPLIES = {
    "a chunk whose tool_calls is a number": lambda: Reply.sse(
        [{"choices": [{"index": 0, "delta": {"tool_calls": 1}}]}]
    ),
    "a 100,000-deep chunk": lambda: Reply.sse(["[" * 100_000 + "]" * 100_000]),
    "a 100,000-deep body": lambda: Reply.json("[" * 100_000 + "]" * 100_000),
}


@pytest.mark.parametrize("case", list(MALFORMED_REPLIES))
async def test_a_malformed_reply_is_an_invalid_response_and_retried(
    server: ScriptedServer, case: str
) -> None:
    good = Reply.sse([sse_chunk("fine"), sse_chunk(finish_reason="stop"), "[DONE]"])
    server.script(MALFORMED_REPLIES[case](), good)
    agent = SubAgent(name="malformed", prompt="hi", max_turns=1)
    policy = RetryPolicy(initial_delay=0, jitter=0)
    async with make_llm(server) as llm:
        step = await agent.run(llm=llm, retry_policy=policy, on_text=lambda _: None)
    assert step.ok and step.output == "fine"
    (retry,) = step.turns[0].transport_retries
    assert retry.kind is ErrorKind.INVALID_RESPONSE


# -- a model named by a string ----------------------------------------------------------------


def test_a_spec_string_is_accepted_wherever_an_llm_is(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SUBAGENT_LLM names another server: the string given says which model, not the env.
    monkeypatch.setenv("SUBAGENT_LLM", "openai:env-model@http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    server.script(*[Reply.json(completion("four"))] * 3)
    agent = SubAgent(
        name="spec", prompt="2 + 2?", max_turns=1, llm=f"openai:small@{server.base_url}"
    )
    assert isinstance(agent.llm, LLMSpec)
    assert (agent.llm.model_name, agent.llm.server_port) == ("small", server.port)
    # Each run in its own event loop: the spec opens an adapter per call.
    assert agent.run_sync().output == agent.run_sync().output == "four"
    override = f"openai:other@{server.base_url}"
    assert agent.run_sync(llm=override).ok
    assert [r.json["model"] for r in server.requests] == ["small", "small", "other"]
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-the-environment"


async def test_a_spec_string_streams_and_pickles(server: ScriptedServer) -> None:
    server.script(
        Reply.sse([sse_chunk("str"), sse_chunk("eamed"), sse_chunk(finish_reason="stop")])
    )
    spec = pickle.loads(pickle.dumps(LLMSpec(f"openai:m@{server.base_url}", environ=NO_ENV)))
    pieces: list[str] = []
    step = await SubAgent(name="s", prompt="hi", max_turns=1).run(llm=spec, on_text=pieces.append)
    assert step.output == "streamed" and pieces == ["str", "eamed"]
    assert server.requests[0].json["stream"] is True


@pytest.mark.parametrize(
    "spec", ["gpt-4o-mini", "gemini:pro", "openai:m@ftp://user:hunter2@x/v1", ""]
)
def test_a_bad_spec_string_is_a_configuration_error_naming_llm_and_the_value(spec: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="s", prompt="hi", llm=spec)
    assert caught.value.field == "llm"
    assert "hunter2" not in str(caught.value)
    assert redact_url_credentials(repr(spec.strip())) in str(caught.value)
    with pytest.raises(ConfigurationError, match=r"^llm: "):
        SubAgent(name="s", prompt="hi").run_sync(llm=spec)


@pytest.mark.parametrize("key", [None, ""])
def test_a_spec_string_for_openai_without_a_key_is_built_and_fails_at_its_first_call(
    monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    # A module of agents imports without a key, so its tests can run them on test models.
    if key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("SUBAGENT_LLM", raising=False)
    agent = SubAgent(name="s", prompt="hi", max_turns=1, llm="openai:gpt-4o-mini")
    assert isinstance(agent.llm, LLMSpec) and agent.llm.model_name == "gpt-4o-mini"
    assert agent.run_sync(llm=ScriptedLLM(["scripted"])).output == "scripted"
    for run in (agent.run_sync, lambda: agent.run_sync(on_text=lambda _: None)):  # streamed too
        with pytest.raises(ConfigurationError) as caught:
            run()
        assert caught.value.field == "api_key"
        assert "set OPENAI_API_KEY" in caught.value.message


def test_a_spec_string_still_checks_everything_but_the_key_when_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(ConfigurationError, match=r"^model: OpenAI's API needs a model"):
        SubAgent(name="s", prompt="hi", llm="openai:@https://api.openai.com/v1")


# -- sizes and deadlines ----------------------------------------------------------------------


@pytest.mark.parametrize("declare_length", [True, False])
async def test_a_reply_over_max_response_bytes_is_refused(
    server: ScriptedServer, declare_length: bool
) -> None:
    server.script(Reply.huge_completion(5_000, declare_length=declare_length))
    error = await fail(server, max_response_bytes=1_000)
    assert error.kind is ErrorKind.RESPONSE_TOO_LARGE
    assert error.status_code == 200
    assert "max_response_bytes=1,000" in error.message
    assert ("not read" in error.message) is declare_length
    assert RetryPolicy().delay_before_retry(1, error) is None  # not retried by default


async def test_a_reply_at_max_response_bytes_is_read(server: ScriptedServer) -> None:
    body = json.dumps(completion("x" * 500)).encode()
    server.script(Reply.json(body))
    async with make_llm(server, max_response_bytes=len(body)) as llm:
        assert (await llm.complete(ask())).text == "x" * 500


async def test_an_oversized_error_body_keeps_its_classification(server: ScriptedServer) -> None:
    message = "overloaded " + "x" * 200_000
    server.script(Reply.error(503, message))
    error = await fail(server, max_response_bytes=1_000)
    assert error.kind is ErrorKind.SERVER_ERROR
    assert error.body is not None and len(error.body) <= 4_000


@pytest.mark.parametrize("declare_length", [True, False])
async def test_by_default_a_60_mb_reply_is_refused_without_being_held_whole(
    server: ScriptedServer, declare_length: bool
) -> None:
    size = 60_000_000
    server.script(Reply.huge_completion(size, declare_length=declare_length))
    tracemalloc.start()
    try:
        error = await fail(server)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.kind is ErrorKind.RESPONSE_TOO_LARGE
    # Chunked, the first 32 MiB (the default limit) are read and dropped; with a declared
    # length nothing is read. Reading the whole body took 3-4 times its size.
    assert peak < (1_000_000 if declare_length else 40_000_000), f"peak {peak:,} bytes"


def gzip_bomb(size: int, unit: bytes = b"a") -> bytes:
    """``size`` bytes of ``unit`` repeated, gzip-compressed (about 1,000:1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = unit * ((1 << 20) // len(unit))
    parts = [compressor.compress(block[: size - start]) for start in range(0, size, len(block))]
    return b"".join([*parts, compressor.flush()])


BOMB = gzip_bomb(300_000_000)  # 300 MB decoded from about 290 KB


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_gzip_bomb_is_refused_having_held_little_more_than_the_limit(
    server: ScriptedServer, streamed: bool
) -> None:
    content_type = "text/event-stream" if streamed else "application/json"
    reply = Reply(body=BOMB, headers={"Content-Encoding": "gzip"}, content_type=content_type)
    server.script(reply)
    tracemalloc.start()
    try:
        async with make_llm(server, max_response_bytes=1_000_000) as llm:
            call = drain(llm) if streamed else llm.complete(ask())
            with pytest.raises(LLMError) as caught:
                await call
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.kind is ErrorKind.RESPONSE_TOO_LARGE
    # Decoded in 64 KiB pieces, counted as they come: about the 1 MB limit is ever held.
    # httpx inflates each network read whole (a 64 KiB read is 64 MiB here).
    assert peak < 6_000_000, f"peak {peak:,} bytes"


async def test_the_adapter_asks_only_for_encodings_it_decodes_in_pieces(
    server: ScriptedServer,
) -> None:
    server.script(Reply.json(completion("ok")), Reply.sse([sse_chunk("ok", finish_reason="stop")]))
    async with make_llm(server) as llm:
        await llm.complete(ask())
        await drain(llm)
    assert [r.headers["accept-encoding"] for r in server.requests] == ["gzip, deflate"] * 2


async def test_a_gzipped_reply_and_stream_are_read(server: ScriptedServer) -> None:
    body = json.dumps(completion("squeezed")).encode()
    events = (
        b"".join(
            b"data: " + json.dumps(sse_chunk(piece)).encode() + b"\n\n" for piece in ("a", "b")
        )
        + b"data: "
        + json.dumps(sse_chunk(None, finish_reason="stop")).encode()
        + b"\n\n"
    )
    gzipped = {"Content-Encoding": "gzip"}
    server.script(
        Reply(body=gzip.compress(body), headers=gzipped),
        Reply(body=gzip.compress(events), headers=gzipped, content_type="text/event-stream"),
    )
    async with make_llm(server) as llm:
        assert (await llm.complete(ask())).text == "squeezed"
        assert [delta.text for delta in await drain(llm)][:2] == ["a", "b"]


async def test_a_corrupt_gzip_body_is_an_invalid_response(server: ScriptedServer) -> None:
    corrupt = gzip.compress(json.dumps(completion("x")).encode())[:20] + b"\xff" * 40
    error = await fail(server, Reply(body=corrupt, headers={"Content-Encoding": "gzip"}))
    assert error.kind is ErrorKind.INVALID_RESPONSE


async def test_a_gzipped_flood_of_keep_alives_ends_at_the_total_timeout(
    server: ScriptedServer,
) -> None:
    # 50 MB of ":\n" in 50 KB: read a line at a time with a copy of the rest per line, this
    # held the event loop for minutes, past any deadline (1.5 MB took 20 s).
    flood = gzip_bomb(50_000_000, b":\n")
    headers = {"Content-Encoding": "gzip"}
    server.script(Reply(body=flood, headers=headers, content_type="text/event-stream"))
    async with make_llm(server, total_timeout=0.3) as llm:
        with pytest.raises(LLMError) as caught:
            await drain(llm)
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert "total_timeout=0.3" in caught.value.message


async def test_an_endless_stream_ends_at_max_stream_bytes(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk("a")], forever=True))
    async with make_llm(server, max_stream_bytes=50_000) as llm:
        with pytest.raises(LLMError) as caught:
            await drain(llm)
    assert caught.value.kind is ErrorKind.RESPONSE_TOO_LARGE
    assert "max_stream_bytes=50,000" in caught.value.message


async def test_an_endless_stream_ends_at_the_total_timeout(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk(None)], forever=True, delay_between=0.01))
    started = time.monotonic()
    async with make_llm(server, total_timeout=0.5) as llm:
        with pytest.raises(LLMError) as caught:
            await drain(llm)
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert "total_timeout=0.5 s" in caught.value.message
    assert time.monotonic() - started < 5  # the per-read timeout never fired: data kept coming


async def test_a_slow_reply_ends_at_the_total_timeout(server: ScriptedServer) -> None:
    server.script(Reply.json(completion("late"), delay=2))
    started = time.monotonic()
    error = await fail(server, total_timeout=0.3)
    assert error.kind is ErrorKind.TIMEOUT and "total_timeout=0.3 s" in error.message
    assert time.monotonic() - started < 1.5


async def test_a_streamed_reply_longer_than_max_response_bytes_is_refused(
    server: ScriptedServer,
) -> None:
    server.script(Reply.sse([sse_chunk("x" * 400)] * 5 + [sse_chunk(finish_reason="stop")]))
    async with make_llm(server, max_response_bytes=1_000) as llm:
        with pytest.raises(LLMError) as caught:
            await drain(llm)
    assert caught.value.kind is ErrorKind.RESPONSE_TOO_LARGE
    assert "streamed reply is longer" in caught.value.message


async def test_one_streamed_event_larger_than_max_response_bytes_is_refused(
    server: ScriptedServer,
) -> None:
    server.script(Reply.sse(["x" * 5_000]))  # one line that never ends within the limit
    async with make_llm(server, max_response_bytes=1_000) as llm:
        with pytest.raises(LLMError) as caught:
            await drain(llm)
    assert caught.value.kind is ErrorKind.RESPONSE_TOO_LARGE
    assert "streamed event" in caught.value.message


async def test_a_too_large_reply_ends_the_run_without_retries(server: ScriptedServer) -> None:
    server.script(Reply.huge_completion(5_000, declare_length=False))
    agent = SubAgent(name="big", prompt="hi", max_turns=2)
    async with make_llm(server, max_response_bytes=1_000) as llm:
        step = await agent.run(llm=llm)
    assert step.failure is not None
    assert step.failure.error_kind is ErrorKind.RESPONSE_TOO_LARGE
    assert len(server.requests) == 1


def test_size_and_deadline_defaults() -> None:
    llm = OpenAIChat(base_url="http://127.0.0.1:1/v1", _environ=NO_ENV)
    assert llm.total_timeout == 600.0
    assert llm.max_response_bytes == 32 * 1024 * 1024
    assert llm.max_stream_bytes == 256 * 1024 * 1024


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_response_bytes", 0), ("max_response_bytes", True), ("max_response_bytes", 1.5),
     ("max_stream_bytes", -1), ("total_timeout", 0), ("total_timeout", float("nan"))],
)  # fmt: skip
def test_bad_size_or_deadline_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field}: "):
        OpenAIChat(base_url="http://127.0.0.1:1/v1", _environ=NO_ENV, **{field: value})


async def drain(llm: OpenAIChat) -> list[StreamDelta]:
    async with aclosing(llm.stream(ask())) as deltas:
        return [delta async for delta in deltas]


async def test_reasoning_content_is_read_apart_from_the_text(server: ScriptedServer) -> None:
    body = completion('{"x": 1}')
    body["choices"][0]["message"]["reasoning_content"] = "one is the answer"
    server.script(Reply.json(body))
    async with make_llm(server) as llm:
        reply = await llm.complete(ask())
    assert (reply.text, reply.reasoning) == ('{"x": 1}', "one is the answer")


async def test_streamed_reasoning_content_arrives_as_reasoning_deltas(
    server: ScriptedServer,
) -> None:
    chunks = [sse_chunk(reasoning="think "), sse_chunk(reasoning="hard"), sse_chunk("done"),
              sse_chunk(None, finish_reason="stop"), "[DONE]"]  # fmt: skip
    server.script(Reply.sse(chunks))
    async with make_llm(server) as llm:
        items = await collect(llm, ask())
    assert [(d.reasoning, d.text) for d in items[:-1]] == [("think ", ""), ("hard", ""),
                                                           ("", "done")]  # fmt: skip
    final = items[-1].response
    assert final is not None and (final.reasoning, final.text) == ("think hard", "done")
