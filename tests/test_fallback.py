"""FallbackLLM (subagent/llm/_fallback.py): the next model when a call fails for good."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from openai_server import Reply, ScriptedServer, completion, running_server, sse_chunk
from support import CALC, Answer, Traced

from subagent import (
    ConfigurationError,
    ErrorKind,
    FailReason,
    FallbackLLM,
    FunctionLLM,
    LLMError,
    LLMRequest,
    LLMResponse,
    OpenAIChat,
    RetryPolicy,
    ScriptedLLM,
    Step,
    StreamDelta,
    SubAgent,
    TransportRetry,
    Usage,
)
from subagent.llm import LLMSpec
from subagent.llm._fallback import DEFAULT_FALLBACK_ON, answering_names

pytestmark = pytest.mark.anyio

NO_WAIT = RetryPolicy(max_attempts=2, initial_delay=0, jitter=0)
ANSWER = '{"value": 3}'


def rate_limited(message: str = "slow down") -> LLMError:
    return LLMError(ErrorKind.RATE_LIMIT, message, status_code=429, usage=(5, 0))


async def test_the_next_model_answers_when_retries_did_not_cure_the_first() -> None:
    primary = ScriptedLLM([rate_limited(), rate_limited("still")], model_name="primary")
    secondary = ScriptedLLM([LLMResponse(text=ANSWER, usage=Usage(input_tokens=9,
                                                                  output_tokens=2))],
                            model_name="secondary")  # fmt: skip
    step = await CALC.run({"question": "1+2"}, llm=FallbackLLM([primary, secondary]),
                          retry_policy=NO_WAIT)  # fmt: skip
    assert step.output == Answer(value=3) and len(step.turns) == 1
    assert len(primary.requests) == 2 and len(secondary.requests) == 1  # retried, then moved on
    assert secondary.requests[0] == primary.requests[0]  # the same request
    first, second = step.turns[0].transport_retries
    assert (first.model, first.attempt, first.fallback_to, first.delay_s) == (
        "primary", 1, None, 0.0
    )  # fmt: skip
    assert (second.model, second.attempt, second.fallback_to) == ("primary", 2, "secondary")
    assert (second.kind, second.message, second.usage.input_tokens) == (
        ErrorKind.RATE_LIMIT, "still", 5
    )  # fmt: skip
    # Usage: the answer's own, with the model that answered; the failed calls' apart.
    assert step.turns[0].usage == Usage(input_tokens=9, output_tokens=2)
    assert step.usage.transport_retry_usage.input_tokens == 10


async def test_each_turn_and_by_model_name_the_model_that_answered_it() -> None:
    def spent(text: str, tokens: int) -> LLMResponse:
        return LLMResponse(text=text, usage=Usage(input_tokens=tokens, output_tokens=1))

    primary = ScriptedLLM([spent('{"value": "three"}', 10), rate_limited()], model_name="primary")
    secondary = ScriptedLLM([spent(ANSWER, 20)], model_name="secondary")
    step = await CALC.run({"question": "?"}, llm=FallbackLLM([primary, secondary]), max_turns=1,
                          return_retries=1, retry_policy=RetryPolicy.none())  # fmt: skip
    assert step.ok and [turn.model for turn in step.turns] == ["primary", "secondary"]
    assert step.usage.by_model == {
        "primary": Usage(input_tokens=10, output_tokens=1),
        "secondary": Usage(input_tokens=20, output_tokens=1),
    }


async def test_the_reply_names_the_configured_model_beside_the_servers_name_for_it() -> None:
    request = LLMRequest(messages=({"role": "user", "content": "hi"},))  # type: ignore[arg-type]
    dated = LLMResponse(text="hi", model="gpt-4o-2024-08-06")
    inner = FallbackLLM([ScriptedLLM([rate_limited()], model_name="b"),
                         ScriptedLLM([dated], model_name="gpt-4o")])  # fmt: skip
    outer = FallbackLLM([ScriptedLLM([rate_limited()], model_name="a"), inner])
    reply = await outer.complete(request)
    # A nested fallback's member names itself; the server's own name is kept as it came.
    assert (reply.model_name, reply.model) == ("gpt-4o", "gpt-4o-2024-08-06")
    assert answering_names(outer) == ("a", "b", "gpt-4o")
    assert answering_names(ScriptedLLM(model_name="x")) == ("x",)

    class Wrapping:  # a model that calls another (as DurableLLM does) is looked through
        model_name = "a"

        def __init__(self, wrapped: FallbackLLM) -> None:
            self.wrapped = wrapped

        async def complete(self, request: LLMRequest) -> LLMResponse:
            return await self.wrapped.complete(request)

    assert answering_names(FallbackLLM([Wrapping(outer), ScriptedLLM(model_name="z")])) == (
        "a", "b", "gpt-4o", "z"
    )  # fmt: skip
    assert "model_name" not in LLMResponse(text="hi").model_dump(mode="json")


async def test_each_attempt_is_an_event_of_the_chat_span_and_the_answering_model_its_response(
    traced: Traced,
) -> None:
    primary = ScriptedLLM([rate_limited(), rate_limited()], model_name="primary")
    fallback = FallbackLLM([primary, ScriptedLLM([ANSWER], model_name="secondary")])
    await CALC.run({"question": "1+2"}, llm=fallback, retry_policy=NO_WAIT,
                   tracer_provider=traced.provider)  # fmt: skip
    chat = traced.one("chat primary")  # the model requested: the first
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.request.model"] == "primary"
    assert chat.attributes["gen_ai.response.model"] == "secondary"  # the one that answered
    events = [dict(event.attributes or {}) for event in chat.events]
    assert [event["subagent.retry.model"] for event in events] == ["primary", "primary"]
    assert [event.get("subagent.retry.fallback_to") for event in events] == [None, "secondary"]
    assert {event["error.type"] for event in events} == {"rate_limit"}


async def test_a_step_with_fallback_attempts_round_trips_through_json() -> None:
    fallback = FallbackLLM([ScriptedLLM([rate_limited()], model_name="a"),
                            ScriptedLLM([ANSWER], model_name="b")])  # fmt: skip
    step = await CALC.run({"question": "?"}, llm=fallback, retry_policy=RetryPolicy.none())
    loaded = Step[Answer].model_validate_json(step.model_dump_json())
    assert loaded == step
    assert loaded.turns[0].transport_retries == [
        TransportRetry(attempt=1, kind=ErrorKind.RATE_LIMIT, message="slow down", delay_s=0.0,
                       usage=Usage(input_tokens=5), model="a", fallback_to="b")
    ]  # fmt: skip


async def test_a_plain_retry_record_keeps_its_json_form() -> None:
    llm = ScriptedLLM([rate_limited(), ANSWER])
    step = await CALC.run({"question": "?"}, llm=llm, retry_policy=NO_WAIT)
    (retry,) = step.turns[0].transport_retries
    assert retry.model is None and retry.fallback_to is None
    assert set(retry.model_dump(mode="json")) == {"attempt", "kind", "message", "delay_s", "usage"}


@pytest.mark.parametrize("kind", sorted(DEFAULT_FALLBACK_ON))
async def test_every_default_kind_moves_the_call_on(kind: ErrorKind) -> None:
    fallback = FallbackLLM([ScriptedLLM([LLMError(kind, "down")]), ScriptedLLM([ANSWER])])
    step = await CALC.run({"question": "?"}, llm=fallback, retry_policy=RetryPolicy.none())
    assert step.ok


async def test_an_error_another_model_would_not_cure_is_raised_at_once() -> None:
    secondary = ScriptedLLM([ANSWER])
    fallback = FallbackLLM([ScriptedLLM([LLMError(ErrorKind.AUTHENTICATION, "bad key")]),
                            secondary])  # fmt: skip
    step = await CALC.run({"question": "?"}, llm=fallback, max_turns=1, return_retries=0)
    assert step.failure is not None and step.failure.reason is FailReason.LLM_ERROR
    assert "bad key" in step.failure.message and secondary.requests == []


async def test_an_invalid_answer_is_corrected_by_the_same_model_not_the_next() -> None:
    primary = ScriptedLLM(['{"value": "three"}', ANSWER], model_name="primary")
    secondary = ScriptedLLM([], model_name="secondary")
    step = await CALC.run({"question": "?"}, llm=FallbackLLM([primary, secondary]),
                          max_turns=1, return_retries=1)  # fmt: skip
    assert step.ok and [t.type.value for t in step.turns] == ["must_return", "retry"]
    assert secondary.requests == [] and step.turns[0].transport_retries == []


async def test_when_every_model_fails_the_last_error_ends_the_turn() -> None:
    fallback = FallbackLLM([ScriptedLLM([rate_limited("a")], model_name="a"),
                            ScriptedLLM([rate_limited("b")], model_name="b")])  # fmt: skip
    step = await CALC.run({"question": "?"}, llm=fallback, retry_policy=RetryPolicy.none(),
                          max_turns=1)  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.LLM_ERROR
    assert step.failure.message.endswith("b")  # the last model's error
    (moved,) = step.turns[0].transport_retries  # the last failure is the turn's error
    assert (moved.model, moved.fallback_to) == ("a", "b")


async def test_its_own_retry_policy_replaces_the_runs_for_its_models() -> None:
    primary = ScriptedLLM([rate_limited()], model_name="a")
    fallback = FallbackLLM([primary, ScriptedLLM([ANSWER])], retry_policy=RetryPolicy.none())
    step = await CALC.run({"question": "?"}, llm=fallback)  # the run's policy would wait 0.5 s
    assert step.ok and len(primary.requests) == 1


async def test_fallback_between_two_real_servers(server: ScriptedServer) -> None:
    server.script(*[Reply.error(503, "overloaded")] * 2)
    with running_server() as second:
        second.script(Reply.json(completion(ANSWER, model="second-model")))
        async with (
            OpenAIChat("first-model", base_url=server.base_url, _environ={}) as first_llm,
            OpenAIChat("second-model", base_url=second.base_url, _environ={}) as second_llm,
        ):
            step = await CALC.run({"question": "?"}, llm=FallbackLLM([first_llm, second_llm]),
                                  retry_policy=NO_WAIT)  # fmt: skip
    assert step.output == Answer(value=3)
    assert [r.json["model"] for r in server.requests] == ["first-model", "first-model"]
    assert [r.json["model"] for r in second.requests] == ["second-model"]
    assert [(r.model, r.kind) for r in step.turns[0].transport_retries] == [
        ("first-model", ErrorKind.SERVER_ERROR), ("first-model", ErrorKind.SERVER_ERROR)
    ]  # fmt: skip


# --- streaming ---


async def test_a_run_streams_the_answering_models_reply(server: ScriptedServer) -> None:
    server.script(Reply.sse([sse_chunk('{"value": '), sse_chunk("3}"),
                             sse_chunk(finish_reason="stop"), "[DONE]"]))  # fmt: skip
    pieces: list[str] = []
    async with OpenAIChat("m", base_url=server.base_url, _environ={}) as streaming:
        fallback = FallbackLLM([ScriptedLLM([rate_limited()]), streaming])
        step = await CALC.run({"question": "?"}, llm=fallback, on_text=pieces.append,
                              retry_policy=RetryPolicy.none())  # fmt: skip
    assert step.output == Answer(value=3) and pieces == ['{"value": ', "3}"]
    assert server.requests[0].json["stream"] is True


async def test_a_model_failing_mid_stream_is_followed_by_the_next_from_the_start() -> None:
    async def breaks(request: LLMRequest) -> AsyncIterator[str | StreamDelta]:
        yield '{"val'
        raise LLMError(ErrorKind.CONNECTION, "connection reset")

    fallback = FallbackLLM([FunctionLLM(str, stream_function=breaks, model_name="flaky"),
                            ScriptedLLM([ANSWER], model_name="steady")])  # fmt: skip
    pieces: list[str] = []
    step = await CALC.run({"question": "?"}, llm=fallback, on_text=pieces.append,
                          retry_policy=RetryPolicy.none())  # fmt: skip
    assert step.output == Answer(value=3)
    assert pieces == ['{"val', '{"value": ', "3}"]  # the second reply streams from its start
    (moved,) = step.turns[0].transport_retries
    assert (moved.model, moved.kind, moved.fallback_to) == ("flaky", ErrorKind.CONNECTION,
                                                            "steady")  # fmt: skip


# --- called directly ---


async def test_called_directly_each_model_is_tried_once_in_order() -> None:
    request = LLMRequest(messages=({"role": "user", "content": "hi"},))  # type: ignore[arg-type]
    fallback = FallbackLLM([ScriptedLLM([rate_limited()], model_name="a"),
                            ScriptedLLM(["hello"], model_name="b")])  # fmt: skip
    reply = await fallback.complete(request)
    assert (reply.text, reply.model) == ("hello", "b")


async def test_its_stream_falls_back_and_streams_a_model_that_cannot() -> None:
    class Plain:
        model_name = "plain"

        async def complete(self, request: LLMRequest) -> LLMResponse:
            return LLMResponse(text="whole reply")

    request = LLMRequest(messages=({"role": "user", "content": "hi"},))  # type: ignore[arg-type]
    fallback = FallbackLLM([ScriptedLLM([rate_limited()]), Plain()])
    deltas = [delta async for delta in fallback.stream(request)]
    assert [delta.text for delta in deltas[:-1]] == ["whole reply"]
    final = deltas[-1].response
    assert final is not None and (final.text, final.model) == ("whole reply", "plain")
    with pytest.raises(LLMError, match="bad request"):
        await FallbackLLM([ScriptedLLM([LLMError(ErrorKind.BAD_REQUEST, "bad request")]),
                           Plain()]).complete(request)  # fmt: skip


# --- construction ---


def test_spec_strings_become_models_and_the_first_names_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fallback = FallbackLLM(["openai:gpt-4o-mini", "openai:local@http://127.0.0.1:8080/v1"])
    assert all(isinstance(model, LLMSpec) for model in fallback.models)
    assert (fallback.model_name, fallback.provider_name) == ("gpt-4o-mini", "openai")
    assert fallback.server_address == "api.openai.com"
    agent = SubAgent(name="a", prompt="hi", llm=fallback)
    assert agent.llm is fallback


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({"models": []}, "models", "must be a non-empty list of models"),
        ({"models": "openai:gpt-4o"}, "models", "must be a non-empty list of models"),
        ({"models": [ScriptedLLM(), 3]}, "models[1]", "3 is not an LLM"),
        ({"models": [ScriptedLLM(), "gpt-4o"]}, "models[1]", "expected 'openai:MODEL'"),
        ({"models": [ScriptedLLM()], "fallback_on": ["rate_limit", "meteor"]}, "fallback_on",
         "'meteor' is not an error kind"),
        ({"models": [ScriptedLLM()], "retry_policy": 3}, "retry_policy", "must be a RetryPolicy"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_naming_the_field(
    arguments: dict, field: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        FallbackLLM(**arguments)
    assert caught.value.field == field and message in caught.value.message
