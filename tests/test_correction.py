"""Correction turns that differ from the failed attempt: output mode, sampling, model, repeats."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from openai_server import LLAMA_CPP_PYTHON, Dialect, Reply, ScriptedServer, completion, sse_chunk
from pydantic import BaseModel
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    Correction,
    ErrorKind,
    FailReason,
    LLMResponse,
    OpenAIChat,
    ReplyPolicy,
    ScriptedLLM,
    SubAgent,
    ToolCall,
    TurnOutcome,
    Usage,
    Validation,
    summarize,
)
from subagent.llm import ModelProfile, forget_profiles

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    value: int


GOOD = '{"value": 3}'
BAD = "three"
AGENT = SubAgent(name="calc", prompt="Compute 1 + 2", output=Answer, max_turns=1)


def scripted(*replies: Any, name: str = "small") -> ScriptedLLM:
    return ScriptedLLM(list(replies), model_name=name)


async def test_by_default_a_typed_agents_final_turn_and_corrections_ask_for_its_schema() -> None:
    llm = scripted(BAD, GOOD)
    step = await AGENT.run(llm=llm, return_retries=1)
    assert step.ok
    for request in llm.requests:
        assert request.output is not None
        assert (request.output.mode, request.output.fallback) == ("json_schema", "text")
        assert request.output.json_schema == Answer.model_json_schema()
    assert [(t.corrected, t.output_mode) for t in step.turns] == [(True, "json_schema")] * 2
    assert [t.model for t in step.turns] == ["small", "small"]


async def test_by_default_a_list_output_is_free_on_its_final_turn_and_corrected_under_schema() -> (
    None
):
    llm = scripted("one, two", "[1, 2]")
    numbers = SubAgent(name="numbers", prompt="p", output=list[int], max_turns=1)
    step = await numbers.run(llm=llm, return_retries=1)
    assert step.ok and step.output == [1, 2]
    first, correction = llm.requests
    assert first.output is None
    assert correction.output is not None and correction.output.json_schema == {
        "type": "array", "items": {"type": "integer"},
    }  # fmt: skip


async def test_by_default_work_turns_before_the_final_one_carry_no_schema() -> None:
    llm = scripted(BAD, BAD, GOOD)
    agent = SubAgent(name="calc", prompt="p", output=Answer, max_turns=2)
    step = await agent.run(llm=llm, return_retries=1)
    assert [t.type.value for t in step.turns] == ["normal", "must_return", "retry"]
    assert [r.output is not None for r in llm.requests] == [False, True, True]


async def test_by_default_an_untyped_agent_sends_every_turn_alike() -> None:
    llm = scripted("3", "three")
    in_words = SubAgent(name="t", prompt="p", max_turns=1,
                        validators=[lambda text: Validation.ok() if text.isalpha()
                                    else Validation.fail("in words")])  # fmt: skip
    step = await in_words.run(llm=llm, return_retries=1)
    assert step.ok and step.output == "three"
    assert [r.output for r in llm.requests] == [None, None]
    assert [t.corrected for t in step.turns] == [False, False]


async def test_an_empty_correction_sends_every_turn_as_the_work_turns() -> None:
    llm = scripted(BAD, GOOD)
    step = await AGENT.run(llm=llm, return_retries=1, correction=Correction())
    assert step.ok
    assert [r.output for r in llm.requests] == [None, None]
    assert [t.corrected for t in step.turns] == [False, True]
    assert [t.output_mode for t in step.turns] == [None, None]


async def test_auto_asks_for_a_given_schema_and_nothing_for_an_untyped_output() -> None:
    calls = {"type": "array", "items": {"type": "string"}}
    llm = scripted('["a"]')
    text = SubAgent(name="t", prompt="p", max_turns=1)
    await text.run(llm=llm, correction=Correction(output="auto", json_schema=calls, when="final"))
    output = llm.requests[0].output
    assert output is not None and (output.json_schema, output.fallback) == (calls, "text")
    llm = scripted("x")
    await text.run(llm=llm, correction=Correction(output="auto", when="final"))
    assert llm.requests[0].output is None


async def test_a_json_schema_correction_asks_for_the_outputs_schema_on_correction_turns_only() -> (
    None
):
    llm = scripted(BAD, GOOD)
    step = await AGENT.run(llm=llm, return_retries=1, correction=Correction(output="json_schema"))
    assert step.ok
    first, correction = llm.requests
    assert first.output is None
    assert correction.output is not None and correction.output.mode == "json_schema"
    assert correction.output.json_schema == Answer.model_json_schema()
    assert [(t.corrected, t.output_mode) for t in step.turns] == [
        (False, None),
        (True, "json_schema"),
    ]


async def test_a_forced_answer_tool_is_asked_for_with_the_outputs_schema() -> None:
    llm = scripted(BAD, GOOD)
    await AGENT.run(llm=llm, return_retries=1, correction=Correction(output="tool"))
    output = llm.requests[1].output
    assert output is not None and (output.mode, output.name) == ("tool", "final_answer")
    assert output.json_schema == Answer.model_json_schema()


async def test_correction_settings_are_merged_over_the_runs_on_correction_turns() -> None:
    llm = scripted(BAD, GOOD)
    agent = SubAgent(name="calc", prompt="p", output=Answer, max_turns=1,
                     settings={"temperature": 0.0, "max_tokens": 50},
                     correction=Correction(settings={"temperature": 0.7, "seed": 3}))  # fmt: skip
    await agent.run(llm=llm, return_retries=1)
    assert llm.requests[0].settings == {"temperature": 0.0, "max_tokens": 50}
    assert llm.requests[1].settings == {"temperature": 0.7, "max_tokens": 50, "seed": 3}


async def test_corrections_escalate_to_another_model_with_usage_and_spans_split_by_model(
    traced: Traced,
) -> None:
    small = scripted(LLMResponse(text=BAD, usage=Usage(input_tokens=10, output_tokens=2)))
    large = scripted(LLMResponse(text=GOOD, usage=Usage(input_tokens=30, output_tokens=5)),
                     name="large")  # fmt: skip
    step = await AGENT.run(llm=small, return_retries=1, correction=Correction(llm=large),
                           tracer_provider=traced.provider)  # fmt: skip
    assert step.ok and len(small.requests) == len(large.requests) == 1
    assert [t.model for t in step.turns] == ["small", "large"]
    assert step.usage.by_model == {
        "small": Usage(input_tokens=10, output_tokens=2),
        "large": Usage(input_tokens=30, output_tokens=5),
    }
    chats = [span for span in traced.spans if span.name.startswith("chat ")]
    assert [span.name for span in chats] == ["chat small", "chat large"]
    assert [attrs(span)["gen_ai.request.model"] for span in chats] == ["small", "large"]
    corrected = traced.one("agent_turn retry")
    assert attrs(corrected)["subagent.turn.corrected"] is True


async def test_final_takes_the_correction_on_the_last_work_turn_too() -> None:
    llm = scripted(BAD, GOOD)
    correction = Correction(output="json_schema", when="final")
    await AGENT.run(llm=llm, return_retries=1, correction=correction)
    assert [r.output is not None for r in llm.requests] == [True, True]


async def test_final_leaves_normal_turns_as_they_are() -> None:
    llm = scripted(BAD, BAD, GOOD)
    agent = SubAgent(name="calc", prompt="p", output=Answer, max_turns=2,
                     correction=Correction(output="json_schema", when="final"))  # fmt: skip
    step = await agent.run(llm=llm, return_retries=1)
    assert [t.type.value for t in step.turns] == ["normal", "must_return", "retry"]
    assert [r.output is not None for r in llm.requests] == [False, True, True]


async def test_repeat_takes_the_correction_only_after_a_correction_repeated_itself() -> None:
    llm = scripted(BAD, BAD, BAD, GOOD)
    correction = Correction(output="json_schema", when="repeat")
    step = await AGENT.run(llm=llm, return_retries=3, correction=correction)
    assert step.ok
    # The third reply repeats too (the same word under the grammar): still corrected.
    assert [t.repeated for t in step.turns] == [False, True, True, False]
    assert [r.output is not None for r in llm.requests] == [False, False, True, True]
    assert [t.corrected for t in step.turns] == [False, False, True, True]


async def test_a_repeat_is_the_same_reply_whitespace_aside_and_only_on_correction_turns() -> None:
    llm = scripted("the answer  is\nthree", "the answer is three", "the answer is four", GOOD)
    step = await AGENT.run(llm=llm, return_retries=3)
    assert [t.repeated for t in step.turns] == [False, True, False, False]
    summary = summarize([step])
    assert (summary.corrected_runs, summary.salvaged, summary.repeated_corrections) == (1, 1, 1)
    assert "1 repeat(s) of 3 correction turn(s)" in summary.table()


async def test_a_correction_that_sends_any_earlier_refused_reply_again_is_a_repeat() -> None:
    llm = scripted(BAD, "about three", BAD, GOOD)
    step = await AGENT.run(llm=llm, return_retries=3)
    assert [t.repeated for t in step.turns] == [False, False, True, False]


async def test_a_correction_that_sends_the_first_turns_refused_call_again_is_a_repeat() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    refused_call = LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": "x", "b": 2})])
    agent = SubAgent(name="calc", prompt="p", output=Answer, tools=[add], max_turns=2)
    step = await agent.run(llm=scripted(refused_call, BAD, refused_call), return_retries=1)
    assert [t.type.value for t in step.turns] == ["normal", "must_return", "retry"]
    assert [t.outcome for t in step.turns] == [TurnOutcome.ERROR] * 3
    assert [t.repeated for t in step.turns] == [False, False, True]


async def test_a_repeat_is_marked_on_the_turns_span(traced: Traced) -> None:
    await AGENT.run(llm=scripted(BAD, BAD, GOOD), return_retries=2,
                    tracer_provider=traced.provider)  # fmt: skip
    retries = traced.named("agent_turn retry")
    assert [attrs(span).get("subagent.turn.repeated") for span in retries] == [True, None]


# An agent offered the explicit fail (it is not by default).
OFFERING = dataclasses.replace(AGENT, reply_policy=ReplyPolicy(allow_fail=True))


async def test_a_correction_may_not_give_up_when_it_is_told_so() -> None:
    fail = '{"fail": "cannot"}'
    allowed = await OFFERING.run(llm=scripted(BAD, fail), return_retries=2)
    assert allowed.failure is not None and allowed.failure.reason is FailReason.EXPLICIT_FAIL
    refused = await OFFERING.run(llm=scripted(BAD, fail, GOOD), return_retries=2,
                              correction=Correction(allow_fail=False))  # fmt: skip
    assert refused.ok
    gave_up = refused.turns[1]
    assert (gave_up.outcome, gave_up.error_type) == (TurnOutcome.ERROR, "explicit_fail_refused")
    assert "cannot" in (gave_up.feedback or "")


async def test_a_work_turn_may_still_give_up_when_corrections_may_not() -> None:
    step = await OFFERING.run(llm=scripted('{"fail": "no"}'), return_retries=2,
                              correction=Correction(allow_fail=False))  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.EXPLICIT_FAIL


async def test_an_agent_that_may_not_fail_is_not_offered_it_and_a_fail_is_corrected() -> None:
    llm = scripted('{"fail": "cannot"}', GOOD)
    agent = SubAgent(
        name="calc",
        prompt="p",
        output=Answer,
        max_turns=1,
        reply_policy=ReplyPolicy(allow_fail=False),
    )
    step = await agent.run(llm=llm, return_retries=1)
    assert step.ok and step.output == Answer(value=3)
    system = llm.requests[0].messages[0].content
    assert '{"fail"' not in system and system.rstrip().endswith("}")  # ends with the schema
    assert step.turns[0].error_type == "explicit_fail_refused"


async def test_a_typed_agent_is_not_offered_the_explicit_fail_by_default() -> None:
    llm = scripted('{"fail": "cannot"}', '{"value": 3}')
    agent = SubAgent(name="calc", prompt="p", output=Answer, max_turns=1, return_retries=1)
    step = await agent.run(llm=llm)
    assert '{"fail"' not in llm.requests[0].messages[0].content
    assert step.turns[0].error_type == "explicit_fail_refused"
    assert step.ok  # the fail was corrected into an answer
    offered = SubAgent(name="calc", prompt="p", output=Answer, max_turns=1,
                       reply_policy=ReplyPolicy(allow_fail=True))  # fmt: skip
    llm = scripted('{"fail": "cannot"}')
    step = await offered.run(llm=llm)
    assert '{"fail": "<why>"}' in llm.requests[0].messages[0].content
    assert step.failure is not None and step.failure.reason is FailReason.EXPLICIT_FAIL


async def test_a_text_agent_is_not_offered_the_explicit_fail_by_default() -> None:
    llm = scripted('{"fail": "cannot"}', "Paris.")
    chat = SubAgent(name="guide", prompt="Capital of France?", max_turns=2)
    step = await chat.run(llm=llm)
    assert step.ok and step.output == "Paris."
    assert '{"fail"' not in llm.requests[0].messages[0].content
    assert step.turns[0].error_type == "explicit_fail_refused"
    offered = SubAgent(
        name="guide", prompt="p", max_turns=1, reply_policy=ReplyPolicy(allow_fail=True)
    )
    llm = scripted('{"fail": "cannot"}')
    assert (await offered.run(llm=llm)).failure.reason is FailReason.EXPLICIT_FAIL  # type: ignore[union-attr]
    assert '{"fail": "<why>"}' in llm.requests[0].messages[0].content


def test_allow_fail_is_checked_when_the_agent_is_made() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="calc", prompt="p", reply_policy=ReplyPolicy(allow_fail="no"))  # type: ignore[arg-type]
    assert caught.value.field == "allow_fail"


def test_a_correction_is_checked_when_it_is_made() -> None:
    with pytest.raises(ConfigurationError) as bad_output:
        Correction(output="grammar")  # type: ignore[arg-type]
    assert bad_output.value.field == "correction.output"
    with pytest.raises(ConfigurationError) as bad_when:
        Correction(when="always")  # type: ignore[arg-type]
    assert bad_when.value.field == "correction.when"
    with pytest.raises(ConfigurationError) as not_one:
        SubAgent(name="a", prompt="p", correction={"output": "tool"})  # type: ignore[arg-type]
    assert not_one.value.field == "correction"


async def test_a_narrower_schema_is_sent_and_the_answer_is_still_validated() -> None:
    narrow = {"type": "object", "properties": {"value": {"enum": [3, 4]}}, "required": ["value"]}
    llm = scripted(BAD, '{"value": "x"}', GOOD)
    correction = Correction(output="json_schema", json_schema=narrow)
    step = await AGENT.run(llm=llm, return_retries=2, correction=correction)
    assert step.ok and step.output == Answer(value=3)
    sent = [r.output.json_schema if r.output else None for r in llm.requests]
    assert sent == [None, narrow, narrow]
    assert step.turns[1].outcome is TurnOutcome.ERROR  # the output's own validation ran


async def test_a_given_schema_constrains_an_untyped_output() -> None:
    text = SubAgent(name="t", prompt="p", max_turns=1)
    llm = scripted("x", '"y"')
    schema = {"type": "string"}
    correction = Correction(output="tool", json_schema=schema, when="final")
    await text.run(llm=llm, return_retries=1, correction=correction)
    output = llm.requests[0].output
    assert output is not None and (output.mode, output.json_schema) == ("tool", schema)


def test_a_given_schema_needs_a_schema_mode_and_a_mapping() -> None:
    with pytest.raises(ConfigurationError) as text_mode:
        Correction(json_schema={"type": "string"})
    assert text_mode.value.field == "correction.json_schema" and "None" in text_mode.value.message
    with pytest.raises(ConfigurationError) as not_a_schema:
        Correction(output="json_schema", json_schema="string")  # type: ignore[arg-type]
    assert not_a_schema.value.field == "correction.json_schema"
    assert "'string'" in not_a_schema.value.message


async def test_a_schema_mode_needs_a_typed_output() -> None:
    text = SubAgent(name="t", prompt="p", max_turns=1)
    with pytest.raises(ConfigurationError) as caught:
        await text.run(llm=scripted("x"), correction=Correction(output="json_schema"))
    assert caught.value.field == "correction.output" and "typed output" in caught.value.message
    with pytest.raises(ConfigurationError) as no_model:
        await AGENT.run(llm=scripted(GOOD), correction=Correction(llm=42))  # type: ignore[arg-type]
    assert no_model.value.field == "correction.llm"


# --- what the requests carry, on the wire ------------------------------------------------


@pytest.fixture(autouse=True)
def no_profiles_found_yet() -> Iterator[None]:
    forget_profiles()
    yield
    forget_profiles()


def server_llm(server: ScriptedServer) -> OpenAIChat:
    return OpenAIChat(model="served-model", base_url=server.base_url, api_key="sk-test",
                      timeout=5.0, _environ={})  # fmt: skip


async def test_on_llama_cpp_python_only_the_correction_carries_the_schema_as_its_grammar(
    server: ScriptedServer,
) -> None:
    server.dialect = LLAMA_CPP_PYTHON
    server.script(Reply.json(completion(BAD)), Reply.json(completion(GOOD)))
    async with server_llm(server) as llm:
        step = await AGENT.run(llm=llm, return_retries=1,
                               correction=Correction(output="json_schema"))  # fmt: skip
    assert step.ok
    work, correction = server.requests
    assert work.response_format is None
    assert correction.response_format == {
        "type": "json_object", "schema": Answer.model_json_schema(),
    }  # fmt: skip


async def test_a_server_that_cannot_serve_the_mode_ends_the_run_naming_mode_and_server(
    server: ScriptedServer,
) -> None:
    server.script(Reply.json(completion(BAD)))
    llm = OpenAIChat(model="served-model", base_url=server.base_url, api_key="sk-test",
                     profile="ollama", _environ={})  # fmt: skip
    # Ollama ignores a forced tool choice: the profile refuses the mode before sending.
    async with llm:
        step = await AGENT.run(llm=llm, return_retries=1, correction=Correction(output="tool"))
    assert step.failure is not None and step.failure.reason is FailReason.LLM_ERROR
    assert len(server.requests) == 1  # the refused correction was never sent
    message = step.failure.message
    assert "tool" in message and server.base_url in message
    assert "sk-test" not in message
    assert [t.error_type for t in step.turns] == ["invalid_output", "bad_request"]


async def test_by_default_llama_cpp_python_gets_the_schema_as_the_final_turns_grammar(
    server: ScriptedServer,
) -> None:
    server.dialect = LLAMA_CPP_PYTHON
    server.script(Reply.json(completion(GOOD)))
    async with server_llm(server) as llm:
        step = await AGENT.run(llm=llm)
    assert step.ok
    (request,) = server.requests
    assert request.response_format == {
        "type": "json_object", "schema": Answer.model_json_schema(),
    }  # fmt: skip


async def test_by_default_a_server_without_structured_output_is_asked_in_the_prompt_alone(
    server: ScriptedServer,
) -> None:
    server.script(Reply.json(completion(GOOD)))
    plain = ModelProfile("plain", structured_output=None, forced_tool=False)
    llm = OpenAIChat(model="served-model", base_url=server.base_url, api_key="sk-test",
                     profile=plain, _environ={})  # fmt: skip
    async with llm:
        step = await AGENT.run(llm=llm)
    assert step.ok
    (request,) = server.requests
    assert request.response_format is None
    assert "JSON schema" in request.json["messages"][0]["content"]  # asked in the prompt


async def test_a_server_that_refuses_the_default_grammar_is_asked_again_without_it_and_after(
    server: ScriptedServer,
) -> None:
    server.dialect = Dialect(owned_by=None, takes=frozenset())  # takes no structured output
    server.script(Reply.json(completion(GOOD)), Reply.json(completion(GOOD)))
    async with server_llm(server) as llm:
        first = await AGENT.run(llm=llm)
        second = await AGENT.run(llm=llm)
    assert first.ok and second.ok
    # The first run's request was refused (400) and sent again without the grammar, once;
    # the server's refusal is remembered, so the second run's goes without it at once.
    assert [r.response_format is not None for r in server.requests if r.method == "POST"] == [
        True, False, False,
    ]  # fmt: skip
    assert llm.profile.structured_output is None
    assert llm.profile.forced_tool  # what was refused is the grammar, not a forced tool


async def test_an_explicit_schema_mode_is_still_refused_by_a_server_without_it(
    server: ScriptedServer,
) -> None:
    server.dialect = Dialect(owned_by=None, takes=frozenset())
    server.script(Reply.json(completion(BAD)))
    async with server_llm(server) as llm:
        step = await AGENT.run(llm=llm, correction=Correction(output="json_schema", when="final"))
    assert step.failure is not None and step.failure.reason is FailReason.LLM_ERROR
    assert [r.response_format is not None for r in server.requests if r.method == "POST"] == [True]


async def test_a_refusal_that_names_no_output_field_is_the_error_not_a_fallback(
    server: ScriptedServer,
) -> None:
    server.script(Reply.error(400, "context length exceeded"), Reply.json(completion(GOOD)))
    async with server_llm(server) as llm:
        step = await AGENT.run(llm=llm)
        assert llm.profile.structured_output is not None  # nothing was learnt of the server
    assert step.failure is not None and step.failure.error_kind is ErrorKind.BAD_REQUEST
    assert len([r for r in server.requests if r.method == "POST"]) == 1


async def test_a_streamed_request_the_server_refuses_the_grammar_of_goes_again_as_text(
    server: ScriptedServer,
) -> None:
    server.dialect = Dialect(owned_by=None, takes=frozenset())
    server.script(Reply.sse([sse_chunk(GOOD), sse_chunk(None, finish_reason="stop"), "[DONE]"]))
    pieces: list[str] = []
    async with server_llm(server) as llm:
        step = await AGENT.run(llm=llm, on_text=pieces.append)
    assert step.ok and "".join(pieces) == GOOD
    posts = [r for r in server.requests if r.method == "POST"]
    assert [r.response_format is not None for r in posts] == [True, False]
    assert all(r.json.get("stream") is True for r in posts)


async def test_llama_cpp_python_behind_a_proxy_refuses_json_schema_with_500_and_gets_text(
    server: ScriptedServer,
) -> None:
    # Not identified (the proxy names no owner): OpenAI's json_schema goes first, and
    # llama-cpp-python's 500 (its request model's validation error) names the field.
    server.dialect = Dialect(owned_by=None, takes=frozenset({"json_object"}), refusal_status=500)
    server.script(Reply.json(completion(GOOD)))
    async with server_llm(server) as llm:
        step = await AGENT.run(llm=llm)
    assert step.ok and step.turns[0].transport_retries == []
    posts = [r for r in server.requests if r.method == "POST"]
    assert [r.response_format is not None for r in posts] == [True, False]
