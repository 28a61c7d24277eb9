"""AnthropicChat against a scripted Messages API on 127.0.0.1 (tests/anthropic_server.py).

The server checks each request as the documented API does (the key, the version, roles
that alternate, every ``tool_use`` answered first thing in the next message...), so a
request the adapter got wrong fails here as it would against Anthropic.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest
from anthropic_server import (
    API_KEY,
    AnthropicServer,
    Reply,
    events_of,
    message,
    running_anthropic,
    text,
    thinking,
    tool_use,
)
from pydantic import BaseModel
from support import CALC, Answer, Traced, attrs

from subagent import (
    AnthropicChat,
    ConfigurationError,
    Correction,
    ErrorKind,
    FailReason,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    OutputRequest,
    RetryPolicy,
    StopReason,
    StreamDelta,
    SubAgent,
    ToolCall,
    ToolDefinition,
    UnsupportedOutputError,
    Usage,
)
from subagent.llm import LLMSpec, open_llm
from subagent.llm._retry_policy import DEFAULT_RETRYABLE

pytestmark = pytest.mark.anyio

MODEL = "claude-test-1"
WEATHER = ToolDefinition(
    name="weather",
    description="Current weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(scope="module")
def shared_api() -> Iterator[AnthropicServer]:
    with running_anthropic() as running:
        yield running


@pytest.fixture
def api(shared_api: AnthropicServer) -> Iterator[AnthropicServer]:
    """The module's Messages API, with an empty script and no recorded requests."""
    shared_api.reset()
    yield shared_api
    assert not shared_api.refused, f"the API refused a request: {shared_api.refused[0].body}"
    shared_api.reset()


def make_llm(api: AnthropicServer, **kwargs: Any) -> AnthropicChat:
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("timeout", 5.0)
    return AnthropicChat(MODEL, base_url=api.base_url, _environ={}, **kwargs)


def ask(content: str = "hi", **kwargs: Any) -> LLMRequest:
    return LLMRequest(messages=(Message(role="user", content=content),), **kwargs)


async def answer(api: AnthropicServer, *replies: Reply, **kwargs: Any) -> LLMResponse:
    api.script(*replies)
    async with make_llm(api, **kwargs) as llm:
        return await llm.complete(ask())


async def fail(api: AnthropicServer, *replies: Reply) -> LLMError:
    api.script(*replies)
    async with make_llm(api) as llm:
        with pytest.raises(LLMError) as caught:
            await llm.complete(ask())
    return caught.value


async def streamed(llm: AnthropicChat, request: LLMRequest) -> list[StreamDelta]:
    async with aclosing(llm.stream(request)) as deltas:
        return [delta async for delta in deltas]


# -- the request on the wire ----------------------------------------------------------------------


async def test_a_request_carries_key_version_system_blocks_tools_and_a_default_max_tokens(
    api: AnthropicServer,
) -> None:
    api.script(Reply.json(message(text("ok"))))
    request = LLMRequest(
        messages=(
            Message(role="system", content="Be brief."),
            Message(role="user", content="Weather in Oslo and Bergen?"),
            Message(role="assistant", content="Looking.", tool_calls=(
                ToolCall(name="weather", arguments={"city": "Oslo"}, id="toolu_1"),
                ToolCall(name="weather", arguments="not json", id="toolu_2"),
            )),
            Message(role="tool", content='{"temp": 3}', tool_call_id="toolu_1", name="weather"),
            Message(role="tool", content="error: bad arguments", tool_call_id="toolu_2"),
            Message(role="user", content="Now answer."),
        ),
        tools=[WEATHER],
        tool_choice="auto",
        settings={"temperature": 0.1},
    )  # fmt: skip
    async with make_llm(api, default_settings={"temperature": 0.9, "top_k": 5}) as llm:
        await llm.complete(request)

    (sent,) = api.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == API_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    assert sent.json == {
        "model": MODEL,
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather in Oslo and Bergen?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                # arguments the model wrote badly go back as an object: the API takes no other
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}},
            ]},
            # both results in one user message, first, then the text that followed them
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp": 3}'},
                {"type": "tool_result", "tool_use_id": "toolu_2",
                 "content": "error: bad arguments"},
                {"type": "text", "text": "Now answer."},
            ]},
        ],
        "tools": [{"name": "weather", "description": "Current weather of a city.",
                   "input_schema": WEATHER.parameters}],
        "tool_choice": {"type": "auto"},
        "temperature": 0.1,
        "top_k": 5,
    }  # fmt: skip


async def test_an_empty_reply_is_left_out_and_the_user_messages_around_it_are_one(
    api: AnthropicServer,
) -> None:
    api.script(Reply.json(message(text("ok"))))
    request = LLMRequest(messages=(
        Message(role="system", content="One."),
        Message(role="user", content="Answer in JSON."),
        Message(role="assistant", content=""),
        Message(role="system", content="Two."),
        Message(role="user", content="Your reply was empty."),
    ))  # fmt: skip
    async with make_llm(api) as llm:
        await llm.complete(request)
    body = api.requests[0].json
    assert body["system"] == "One.\n\nTwo."
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Answer in JSON."},
        {"type": "text", "text": "Your reply was empty."},
    ]}]  # fmt: skip


async def test_a_tool_result_is_first_in_its_message_even_after_a_note_of_the_user(
    api: AnthropicServer,
) -> None:
    api.script(Reply.json(message(text("ok"))))
    call = ToolCall(name="weather", arguments={"city": "Oslo"}, id="toolu_n")
    request = LLMRequest(messages=(
        Message(role="user", content="Weather?"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="user", content="(the user is waiting)"),
        Message(role="tool", content="3", tool_call_id="toolu_n"),
    ))  # fmt: skip
    async with make_llm(api) as llm:
        await llm.complete(request)
    assert api.requests[0].json["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_n", "content": "3"},
        {"type": "text", "text": "(the user is waiting)"},
    ]}  # fmt: skip


@pytest.mark.parametrize(
    ("choice", "sent"),
    [("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"}),
     (None, None)],
)  # fmt: skip
async def test_tool_choice_is_the_apis_and_travels_only_with_tools(
    api: AnthropicServer, choice: Any, sent: Any
) -> None:
    api.script(Reply.json(message(text("ok"))), Reply.json(message(text("ok"))))
    settings = {"max_tokens": 64, "tool_choice": {"type": "any"}} if choice is None else {}
    async with make_llm(api) as llm:
        await llm.complete(ask(tools=[WEATHER], tool_choice=choice))
        await llm.complete(ask(tool_choice=choice, settings=settings))  # no tools offered
    with_tools, without = (request.json for request in api.requests)
    assert with_tools.get("tool_choice") == sent
    assert "tools" not in without and "tool_choice" not in without
    assert without["max_tokens"] == (64 if choice is None else 4096)  # the settings' wins


async def test_server_tools_in_the_settings_join_the_tools_offered_and_are_marked_cached(
    api: AnthropicServer,
) -> None:
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    settings = {"tools": [search]}
    api.script(Reply.json(message(text("ok"))))
    async with make_llm(api, prompt_cache=True) as llm:
        await llm.complete(ask(tools=[WEATHER], settings=settings))
    sent = api.requests[0].json["tools"]
    assert [tool["name"] for tool in sent] == ["weather", "web_search"]
    assert sent[-1] == {**search, "cache_control": {"type": "ephemeral"}}
    assert settings == {"tools": [search]} and "cache_control" not in search  # not changed


# -- the reply ----------------------------------------------------------------------------------


async def test_a_reply_gives_its_text_model_stop_reason_and_usage_with_the_cache(
    api: AnthropicServer,
) -> None:
    body = message(text("It is "), text("3 °C."), input_tokens=20, output_tokens=9,
                   cache_read=1000, cache_write=50)  # fmt: skip
    reply = await answer(api, Reply.json(body))
    assert reply.text == "It is 3 °C."
    assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.STOP, "end_turn")
    assert reply.model == "claude-served-1"
    # every prompt token is an input token; the cache's reads and writes are among them
    assert reply.usage == Usage(input_tokens=1070, output_tokens=9, cache_read_tokens=1000,
                                cache_write_tokens=50)  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [("end_turn", StopReason.STOP), ("stop_sequence", StopReason.STOP),
     ("max_tokens", StopReason.LENGTH), ("model_context_window_exceeded", StopReason.LENGTH),
     ("tool_use", StopReason.TOOL_CALLS), ("refusal", StopReason.CONTENT_FILTER),
     ("something_new", StopReason.UNKNOWN)],
)  # fmt: skip
async def test_stop_reasons_are_normalised_and_kept(
    api: AnthropicServer, raw: str, normalised: StopReason
) -> None:
    reply = await answer(api, Reply.json(message(text("x"), stop_reason=raw)))
    assert (reply.stop_reason, reply.raw_stop_reason) == (normalised, raw)


async def test_parallel_tool_calls_come_back_in_order_with_their_ids(api: AnthropicServer) -> None:
    body = message(
        text("Checking both."),
        tool_use("weather", {"city": "Oslo"}, "toolu_a"),
        tool_use("weather", {"city": "Bergen"}, "toolu_b"),
        stop_reason="tool_use",
    )
    reply = await answer(api, Reply.json(body))
    assert reply.text == "Checking both."
    assert reply.stop_reason is StopReason.TOOL_CALLS
    assert reply.tool_calls == [ToolCall(name="weather", arguments={"city": "Oslo"}, id="toolu_a"),
                                ToolCall(name="weather", arguments={"city": "Bergen"},
                                         id="toolu_b")]  # fmt: skip


async def test_thinking_is_the_reasoning_and_goes_back_only_where_the_api_requires_it(
    api: AnthropicServer,
) -> None:
    call = tool_use("weather", {"city": "Oslo"}, "toolu_think")
    signed = thinking("Oslo first, then answer.", signature="sig-kept")
    api.script(Reply.json(message(signed, call, stop_reason="tool_use")),
               Reply.json(message(text("3 °C"))), Reply.json(message(text("3 °C"))))  # fmt: skip
    thinks = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    async with make_llm(api) as llm:
        reply = await llm.complete(ask("Weather?", settings=thinks))
        assert (reply.reasoning, reply.text) == ("Oslo first, then answer.", "")
        conversation = (Message(role="user", content="Weather?"),
                        Message(role="assistant", tool_calls=tuple(reply.tool_calls)),
                        Message(role="tool", content="3", tool_call_id="toolu_think"))  # fmt: skip
        await llm.complete(LLMRequest(messages=conversation, settings=thinks))
        await llm.complete(LLMRequest(messages=conversation))  # thinking off: not sent
    with_thinking, without = (
        request.json["messages"][1]["content"] for request in api.requests[1:]
    )
    assert with_thinking == [signed, call]
    assert without == [call]


async def test_a_paused_turn_is_continued_with_its_content_and_the_parts_are_one_reply(
    api: AnthropicServer,
) -> None:
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
              "input": {"query": "oslo weather"}}  # fmt: skip
    paused = message(text("Searching."), search, stop_reason="pause_turn", input_tokens=10,
                     output_tokens=5)  # fmt: skip
    done = message(text(" Found: 3 °C."), input_tokens=30, output_tokens=4)
    reply = await answer(api, Reply.json(paused), Reply.json(done))
    assert reply.text == "Searching. Found: 3 °C."
    assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.STOP, "end_turn")
    assert reply.usage == Usage(input_tokens=40, output_tokens=9)
    first, second = (request.json["messages"] for request in api.requests)
    assert second == [*first, {"role": "assistant", "content": [text("Searching."), search]}]


async def test_a_turn_still_paused_after_three_continuations_is_returned_as_it_stands(
    api: AnthropicServer,
) -> None:
    paused = Reply.json(message(text("."), stop_reason="pause_turn"))
    reply = await answer(api, paused, paused, paused, paused, Reply.json(message(text("never"))))
    assert len(api.requests) == 4 and api.remaining == 1
    assert (reply.text, reply.stop_reason, reply.raw_stop_reason) == (
        "....",
        StopReason.UNKNOWN,
        "pause_turn",
    )


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "retry_after"),
    [
        (Reply.error(400, "invalid_request_error", "messages: Field required"),
         ErrorKind.BAD_REQUEST, None),
        (Reply.error(401, "authentication_error", "invalid x-api-key"),
         ErrorKind.AUTHENTICATION, None),
        (Reply.error(403, "permission_error", "Your API key does not have permission"),
         ErrorKind.PERMISSION, None),
        (Reply.error(404, "not_found_error", "model: claude-nope"), ErrorKind.BAD_REQUEST, None),
        (Reply.error(413, "request_too_large", "Request exceeds the maximum allowed size"),
         ErrorKind.BAD_REQUEST, None),
        (Reply.error(429, "rate_limit_error", "Number of request tokens has exceeded your "
                     "per-minute rate limit", headers={"retry-after": "7"}),
         ErrorKind.RATE_LIMIT, 7.0),
        (Reply.error(500, "api_error", "Internal server error"), ErrorKind.SERVER_ERROR, None),
        (Reply.error(529, "overloaded_error", "Overloaded", headers={"retry-after": "2"}),
         ErrorKind.SERVER_ERROR, 2.0),
        (Reply.error(400, "invalid_request_error",
                     "prompt is too long: 208310 tokens > 200000 maximum"),
         ErrorKind.CONTEXT_LENGTH, None),
    ],
    ids=["400", "401", "403", "404", "413", "429", "500", "529", "prompt-too-long"],
)  # fmt: skip
async def test_errors_keep_the_apis_message_and_are_classified_for_retries(
    api: AnthropicServer, reply: Reply, kind: ErrorKind, retry_after: float | None
) -> None:
    error = await fail(api, reply)
    assert (error.kind, error.status_code, error.retry_after) == (kind, reply.status, retry_after)
    assert error.message == reply.body["error"]["message"]
    retried = kind in DEFAULT_RETRYABLE
    assert retried == (reply.status in (429, 500, 529))


async def test_an_overloaded_api_is_retried_inside_the_turn_after_its_retry_after(
    api: AnthropicServer,
) -> None:
    api.script(Reply.error(529, "overloaded_error", "Overloaded", headers={"retry-after": "0"}),
               Reply.json(message(text('{"value": 3}'))))  # fmt: skip
    async with make_llm(api) as llm:
        step = await CALC.run({"question": "1+2"}, llm=llm, max_turns=1,
                              retry_policy=RetryPolicy(max_attempts=2, max_delay=1))  # fmt: skip
    assert step.ok and step.output == Answer(value=3)
    (retry,) = step.turns[0].transport_retries
    assert (retry.kind, retry.message, retry.delay_s) == (ErrorKind.SERVER_ERROR, "Overloaded", 0)
    assert len(api.requests) == 2 and len(step.turns) == 1


@pytest.mark.parametrize("drop", ["before", "mid"])
async def test_a_connection_dropped_is_a_connection_error(api: AnthropicServer, drop: str) -> None:
    error = await fail(api, Reply(body=message(text("x" * 2000)), drop=drop))
    assert error.kind is ErrorKind.CONNECTION
    assert f"{api.base_url}/v1/messages" in error.message


async def test_an_error_object_with_status_200_is_classified_by_its_type(
    api: AnthropicServer,
) -> None:
    overloaded = await fail(api, Reply.error(200, "overloaded_error", "Overloaded"))
    assert (overloaded.kind, overloaded.message) == (ErrorKind.SERVER_ERROR, "Overloaded")
    refused = await fail(api, Reply.error(200, "invalid_request_error", "bad"))
    assert refused.kind is ErrorKind.BAD_REQUEST


@pytest.mark.parametrize(
    "body", ["not json", [1, 2], {"type": "message", "content": "text"},
             {"type": "message", "content": [{"type": "tool_use", "input": {}}],
              "stop_reason": "tool_use"}],
    ids=["not-json", "a-list", "content-not-blocks", "tool-use-without-name"],
)  # fmt: skip
async def test_a_malformed_reply_is_an_invalid_response(api: AnthropicServer, body: Any) -> None:
    error = await fail(api, Reply.json(body))
    assert error.kind is ErrorKind.INVALID_RESPONSE


SECRET = "sk-ant-api03-EchoedBackByTheServer"


async def test_an_echoed_key_reaches_no_error_record_or_span(
    api: AnthropicServer, traced: Traced
) -> None:
    api.key = SECRET
    try:
        echo = Reply.error(401, "authentication_error", f"invalid x-api-key: {SECRET}")
        api.script(echo)
        async with make_llm(api, api_key=SECRET) as llm:
            step = await CALC.run({"question": "1+2"}, llm=llm, max_turns=1,
                                  tracer_provider=traced.provider)  # fmt: skip
    finally:
        api.key = API_KEY
    assert step.failure is not None and step.failure.error_kind is ErrorKind.AUTHENTICATION
    assert "invalid x-api-key: [REDACTED]" in step.failure.message
    assert SECRET not in step.model_dump_json() + str(step) + step.summary()
    for span in traced.spans:
        assert SECRET not in json.dumps(attrs(span), default=str)
        assert SECRET not in (span.status.description or "")


# -- streaming ------------------------------------------------------------------------------------


async def test_a_stream_yields_text_and_thinking_then_the_whole_reply(api: AnthropicServer) -> None:
    body = message(
        thinking("Weather, then answer."),
        text("Checking Oslo."),
        tool_use("weather", {"city": "Oslo", "units": "metric"}, "toolu_s"),
        stop_reason="tool_use",
        input_tokens=12,
        output_tokens=30,
        cache_read=900,
    )
    events = events_of(body)
    assert {"type": "ping"} in events and any(
        e.get("delta", {}).get("type") == "input_json_delta" for e in events
    )
    api.script(Reply.sse(events))
    async with make_llm(api) as llm:
        deltas = await streamed(llm, ask(tools=[WEATHER]))
    assert api.requests[0].json["stream"] is True
    assert api.requests[0].headers["accept"] == "text/event-stream"
    pieces = [(delta.reasoning, delta.text) for delta in deltas[:-1]]
    assert "".join(reasoning for reasoning, _ in pieces) == "Weather, then answer."
    assert "".join(piece for _, piece in pieces) == "Checking Oslo."
    assert len(pieces) > 2  # in pieces, as they came
    final = deltas[-1].response
    assert final is not None
    assert final.tool_calls == [
        ToolCall(name="weather", id="toolu_s", arguments={"city": "Oslo", "units": "metric"})
    ]
    assert (final.text, final.reasoning) == ("Checking Oslo.", "Weather, then answer.")
    assert final.stop_reason is StopReason.TOOL_CALLS
    assert final.usage == Usage(input_tokens=912, output_tokens=30, cache_read_tokens=900)


async def test_a_stream_cut_in_the_middle_of_an_event_is_a_connection_error_and_retried(
    api: AnthropicServer,
) -> None:
    body = message(text('{"value": 3}'))
    api.script(Reply.stream_of(body, cut_after=4))
    seen: list[str] = []
    async with make_llm(api) as llm:
        with pytest.raises(LLMError) as caught:
            await streamed(llm, ask())
        assert caught.value.kind is ErrorKind.CONNECTION
        api.script(Reply.stream_of(body, cut_after=4), Reply.stream_of(body))
        step = await CALC.run(
            {"question": "1+2"},
            llm=llm,
            max_turns=1,
            on_text=seen.append,
            retry_policy=RetryPolicy(max_attempts=2, initial_delay=0),
        )
    assert step.ok and step.output == Answer(value=3)
    assert [retry.kind for retry in step.turns[0].transport_retries] == [ErrorKind.CONNECTION]
    assert "".join(seen).endswith('{"value": 3}')  # the second attempt streamed whole


async def test_a_stream_that_ends_without_message_stop_is_a_connection_error(
    api: AnthropicServer,
) -> None:
    events = events_of(message(text("half")))
    api.script(Reply.sse(events[:-2]))
    async with make_llm(api) as llm:
        with pytest.raises(LLMError) as caught:
            await streamed(llm, ask())
    assert caught.value.kind is ErrorKind.CONNECTION
    assert "without message_stop" in caught.value.message


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("overloaded_error", ErrorKind.SERVER_ERROR), ("rate_limit_error", ErrorKind.RATE_LIMIT),
     ("invalid_request_error", ErrorKind.BAD_REQUEST)],
)  # fmt: skip
async def test_an_error_event_is_classified_by_its_type(
    api: AnthropicServer, kind: str, expected: ErrorKind
) -> None:
    events = events_of(message(text("partial")))[:3]
    events.append({"type": "error", "error": {"type": kind, "message": "stopped"}})
    api.script(Reply.sse(events))
    async with make_llm(api) as llm:
        with pytest.raises(LLMError) as caught:
            await streamed(llm, ask())
    assert (caught.value.kind, caught.value.message) == (expected, "stopped")


async def test_a_malformed_event_is_an_invalid_response(api: AnthropicServer) -> None:
    api.script(Reply.sse([*events_of(message(text("x")))[:2], "{not json"]))
    async with make_llm(api) as llm:
        with pytest.raises(LLMError) as caught:
            await streamed(llm, ask())
    assert caught.value.kind is ErrorKind.INVALID_RESPONSE


async def test_a_stream_that_stalls_ends_at_the_total_timeout(api: AnthropicServer) -> None:
    api.script(Reply.stream_of(message(text("never finished")), hold_after=3))
    async with make_llm(api, total_timeout=0.3) as llm:
        with pytest.raises(LLMError) as caught:
            await streamed(llm, ask())
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert caught.value.message == "no complete reply within total_timeout=0.3 s"


async def test_closing_a_stream_early_closes_the_http_response(api: AnthropicServer) -> None:
    api.script(Reply.stream_of(message(text("a long answer, word by word")), hold_after=5))
    async with make_llm(api) as llm, aclosing(llm.stream(ask())) as deltas:
        async for delta in deltas:
            if delta.text:
                break
    assert api.client_hung_up.wait(5)


# -- whole runs -----------------------------------------------------------------------------------


async def test_an_agent_named_by_a_model_string_calls_a_tool_and_answers_its_typed_output(
    api: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer,
                     tools=CALC.tools, llm=f"anthropic:{MODEL}@{api.base_url}")  # fmt: skip
    assert isinstance(agent.llm, LLMSpec) and agent.llm.provider_name == "anthropic"
    api.script(
        Reply.json(message(text("Adding."), tool_use("add", {"a": 1, "b": 2}, "toolu_add"),
                           stop_reason="tool_use", cache_write=300)),
        Reply.json(message(text('{"value": 3}'), cache_read=300)),
    )  # fmt: skip
    step = await agent.run({"question": "1+2"}, max_turns=3)

    assert step.ok and step.output == Answer(value=3)
    assert [turn.stop_reason for turn in step.turns] == [StopReason.TOOL_CALLS, StopReason.STOP]
    result = step.turns[0].tool_results[0].content
    assert result.endswith("```\n3\n```")  # the runtime's framing of the tool's 3
    second = api.requests[1].json
    assert second["system"].startswith("You are calc, a sub-agent")
    assert second["messages"] == [
        {"role": "user", "content": "Compute 1+2"},
        {"role": "assistant", "content": [text("Adding."), tool_use("add", {"a": 1, "b": 2},
                                                                     "toolu_add")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_add",
                                      "content": result}]},
    ]  # fmt: skip
    assert step.usage.total.cache_read_tokens == 300
    assert step.usage.total.cache_write_tokens == 300


async def test_a_correction_turn_is_served_through_the_forced_answer_tool(
    api: AnthropicServer,
) -> None:
    agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, max_turns=1,
                     return_retries=1, correction=Correction(output="tool"))  # fmt: skip
    api.script(
        Reply.json(message(text("It is three."))),
        Reply.json(message(tool_use("final_answer", {"value": 3}, "toolu_f"),
                           stop_reason="tool_use")),
    )  # fmt: skip
    async with make_llm(api) as llm:
        step = await agent.run({"question": "1+2"}, llm=llm)

    assert step.ok and step.output == Answer(value=3)
    assert [turn.type.value for turn in step.turns] == ["must_return", "retry"]
    first, correction = (request.json for request in api.requests)
    assert "tools" not in first and "tool_choice" not in first
    (forced,) = correction["tools"]
    assert forced["name"] == "final_answer"
    assert forced["input_schema"]["properties"] == {"value": {"title": "Value", "type": "integer"}}
    assert correction["tool_choice"] == {"type": "tool", "name": "final_answer"}
    assert step.turns[1].output_mode == "tool" and step.turns[1].reply == '{"value": 3}'


async def test_a_typed_agents_default_asks_its_final_turn_through_the_forced_tool(
    api: AnthropicServer,
) -> None:
    # The default correction asks for structured output on the final turn; the Messages
    # API's form of it is the forced tool.
    api.script(Reply.json(message(tool_use("final_answer", {"value": 3}, "toolu_f"),
                                  stop_reason="tool_use")))  # fmt: skip
    async with make_llm(api) as llm:
        step = await CALC.run({"question": "1+2"}, llm=llm, max_turns=1)
    assert step.ok and step.output == Answer(value=3)
    assert api.requests[0].json["tool_choice"] == {"type": "tool", "name": "final_answer"}


async def test_a_reply_cut_at_max_tokens_is_a_truncated_turn_not_a_retried_call(
    api: AnthropicServer,
) -> None:
    agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, max_turns=1,
                     return_retries=1, correction=Correction(output="text"))  # fmt: skip
    api.script(Reply.json(message(text('{"val'), stop_reason="max_tokens")),
               Reply.json(message(text('{"value": 3}'))))  # fmt: skip
    async with make_llm(api) as llm:
        step = await agent.run({"question": "1+2"}, llm=llm)
    assert step.ok and len(api.requests) == 2
    cut = step.turns[0]
    assert (cut.error_type, cut.stop_reason, cut.raw_stop_reason) == (
        "truncated",
        StopReason.LENGTH,
        "max_tokens",
    )
    assert not cut.transport_retries


async def test_a_cut_forced_answer_stays_a_cut_reply(api: AnthropicServer) -> None:
    cut = {"type": "tool_use", "id": "toolu_cut", "name": "final_answer", "input": {}}
    events = [event for event in events_of(message(cut, stop_reason="max_tokens"))
              if event["type"] != "content_block_delta"]  # fmt: skip
    start = next(i for i, e in enumerate(events) if e["type"] == "content_block_start")
    events.insert(
        start + 1,
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"value": '},
        },
    )
    api.script(Reply.sse(events))
    output = OutputRequest(mode="tool", json_schema=Answer.model_json_schema())
    async with make_llm(api) as llm:
        deltas = await streamed(llm, ask(output=output))
    final = deltas[-1].response
    assert final is not None and final.tool_calls == []
    assert (final.text, final.stop_reason) == ('{"value": ', StopReason.LENGTH)


async def test_a_refusal_ends_the_run_as_a_content_filter(api: AnthropicServer) -> None:
    api.script(Reply.json(message(text("I can't help with that."), stop_reason="refusal")))
    async with make_llm(api) as llm:
        step = await CALC.run({"question": "1+2"}, llm=llm, max_turns=2)
    assert step.failure is not None
    assert (step.failure.reason, step.failure.error_kind) == (
        FailReason.LLM_ERROR,
        ErrorKind.CONTENT_FILTER,
    )
    assert step.turns[0].raw_stop_reason == "refusal" and len(api.requests) == 1


async def test_a_non_object_answer_is_wrapped_in_the_forced_tool_and_unwrapped(
    api: AnthropicServer,
) -> None:
    api.script(Reply.json(message(tool_use("final_answer", {"answer": [1, 2, 3]}, "toolu_l"),
                                  stop_reason="tool_use")))  # fmt: skip
    schema = {"type": "array", "items": {"$ref": "#/$defs/N"}, "$defs": {"N": {"type": "integer"}}}
    output = OutputRequest(mode="json_schema", json_schema=schema)
    async with make_llm(api) as llm:
        reply = await llm.complete(ask(output=output))
    assert (reply.text, reply.tool_calls, reply.stop_reason) == ("[1, 2, 3]", [], StopReason.STOP)
    (forced,) = api.requests[0].json["tools"]
    inner = {"type": "array", "items": {"$ref": "#/$defs/N"}}
    assert forced["input_schema"] == {
        "type": "object", "properties": {"answer": inner}, "required": ["answer"],
        "$defs": {"N": {"type": "integer"}},
    }  # fmt: skip


async def test_a_forced_tool_is_refused_while_thinking_unless_the_request_falls_back_to_text(
    api: AnthropicServer,
) -> None:
    api.script(Reply.json(message(text('{"value": 3}'))))
    thinks = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    schema = Answer.model_json_schema()
    async with make_llm(api, default_settings=thinks) as llm:
        with pytest.raises(UnsupportedOutputError, match="forces no tool while extended thinking"):
            await llm.complete(ask(output=OutputRequest(mode="tool", json_schema=schema)))
        assert not api.requests  # refused before anything was sent
        fallback = OutputRequest(mode="json_schema", json_schema=schema, fallback="text")
        reply = await llm.complete(ask(output=fallback))
    assert reply.text == '{"value": 3}'
    assert "tools" not in api.requests[0].json


async def test_prompt_cache_marks_the_system_prompt_the_tools_and_the_last_block(
    api: AnthropicServer,
) -> None:
    api.script(Reply.json(message(text("ok"))))
    request = LLMRequest(
        messages=(
            Message(role="system", content="Long instructions."),
            Message(role="user", content="Go."),
        ),
        tools=[WEATHER],
    )
    async with make_llm(api, prompt_cache=True) as llm:
        await llm.complete(request)
    body = api.requests[0].json
    cached = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Long instructions.",
                               "cache_control": cached}]  # fmt: skip
    assert body["tools"][-1]["cache_control"] == cached
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Go.", "cache_control": cached}]}]  # fmt: skip


# -- configuration --------------------------------------------------------------------------------


def test_a_model_string_without_a_key_is_built_and_fails_at_its_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    agent = SubAgent(name="a", prompt="hi", llm="anthropic:claude-sonnet-4-5")
    assert isinstance(agent.llm, LLMSpec)
    assert (agent.llm.model_name, agent.llm.server_address) == ("claude-sonnet-4-5",
                                                                "api.anthropic.com")  # fmt: skip
    assert pickle.loads(pickle.dumps(agent.llm)).spec == "anthropic:claude-sonnet-4-5"
    with pytest.raises(ConfigurationError) as caught:
        agent.run_sync()
    assert caught.value.field == "api_key" and "ANTHROPIC_API_KEY" in caught.value.message
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        open_llm("anthropic:claude-sonnet-4-5")  # opened once: the key checked now


def test_configuration_errors_name_the_field() -> None:
    with pytest.raises(ConfigurationError, match=r"^llm: anthropic needs a model"):
        SubAgent(name="a", prompt="hi", llm="anthropic:@http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match=r"^model: "):
        AnthropicChat(_environ={})
    with pytest.raises(ConfigurationError, match=r"^base_url: ") as bad:
        AnthropicChat(MODEL, base_url="ftp://user:hunter2@host", _environ={})
    assert "hunter2" not in str(bad.value)
    for field, value in [("max_tokens", 0), ("total_timeout", -1), ("prompt_cache", "yes")]:
        with pytest.raises(ConfigurationError, match=f"^{field}: "):
            AnthropicChat(MODEL, _environ={}, **{field: value})


def test_the_base_url_is_the_sdks_and_credentials_in_it_are_never_shown() -> None:
    env = {"ANTHROPIC_BASE_URL": "https://gateway.example/anthropic/"}
    llm = AnthropicChat(MODEL, _environ=env)
    assert llm._endpoint == "https://gateway.example/anthropic/v1/messages"
    assert AnthropicChat(MODEL, base_url="http://h/v1", _environ={})._endpoint == (
        "http://h/v1/messages"
    )
    secret = AnthropicChat(MODEL, base_url="https://me:hunter2-long@gw.example", _environ={})
    assert "hunter2" not in repr(secret) + secret.base_url
    assert secret._headers["Authorization"].startswith("Basic ")


async def test_a_model_string_with_a_url_calls_that_server_with_the_environments_key(
    api: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    api.script(Reply.json(message(text("hello"))), Reply.stream_of(message(text("hello"))))
    spec = LLMSpec(f"anthropic:{MODEL}@{api.base_url}")
    assert (await spec.complete(ask())).text == "hello"
    async with aclosing(spec.stream(ask())) as deltas:
        final = [delta async for delta in deltas][-1].response
    assert final is not None and final.text == "hello"
    assert [request.headers["x-api-key"] for request in api.requests] == [API_KEY, API_KEY]


class Cities(BaseModel):
    cities: list[str]


async def test_a_streamed_run_hands_on_text_the_text_and_keeps_thinking_as_reasoning(
    api: AnthropicServer,
) -> None:
    body = message(thinking("List them."), text('{"cities": ["Oslo", "Bergen"]}'))
    api.script(Reply.stream_of(body))
    agent = SubAgent(name="cities", prompt="Name two cities", output=Cities, max_turns=2)
    seen: list[str] = []
    async with make_llm(api) as llm:
        step = await agent.run(llm=llm, on_text=seen.append)
    assert step.ok and step.output == Cities(cities=["Oslo", "Bergen"])
    assert len(seen) > 1 and "".join(seen) == '{"cities": ["Oslo", "Bergen"]}'
    assert step.turns[0].reasoning == "List them."
