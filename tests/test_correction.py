"""Correction turns that differ from the failed attempt: output mode, sampling, model, repeats."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai_server import LLAMA_CPP_PYTHON, Reply, ScriptedServer, completion
from pydantic import BaseModel
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    Correction,
    FailReason,
    LLMResponse,
    OpenAIChat,
    ScriptedLLM,
    SubAgent,
    TurnOutcome,
    Usage,
    summarize,
)
from subagent.llm import forget_profiles

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    value: int


GOOD = '{"value": 3}'
BAD = "three"
AGENT = SubAgent(name="calc", prompt="Compute 1 + 2", output=Answer, max_turns=1)


def scripted(*replies: Any, name: str = "small") -> ScriptedLLM:
    return ScriptedLLM(list(replies), model_name=name)


async def test_without_a_correction_every_turn_is_sent_alike() -> None:
    llm = scripted(BAD, GOOD)
    step = await AGENT.run(llm=llm, return_retries=1)
    assert step.ok
    assert [r.output for r in llm.requests] == [None, None]
    assert [t.corrected for t in step.turns] == [False, False]
    assert [t.model for t in step.turns] == ["small", "small"]


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


async def test_a_repeat_is_marked_on_the_turns_span(traced: Traced) -> None:
    await AGENT.run(llm=scripted(BAD, BAD, GOOD), return_retries=2,
                    tracer_provider=traced.provider)  # fmt: skip
    retries = traced.named("agent_turn retry")
    assert [attrs(span).get("subagent.turn.repeated") for span in retries] == [True, None]


async def test_a_correction_may_not_give_up_when_it_is_told_so() -> None:
    fail = '{"fail": "cannot"}'
    allowed = await AGENT.run(llm=scripted(BAD, fail), return_retries=2)
    assert allowed.failure is not None and allowed.failure.reason is FailReason.EXPLICIT_FAIL
    refused = await AGENT.run(llm=scripted(BAD, fail, GOOD), return_retries=2,
                              correction=Correction(allow_fail=False))  # fmt: skip
    assert refused.ok
    gave_up = refused.turns[1]
    assert (gave_up.outcome, gave_up.error_type) == (TurnOutcome.ERROR, "explicit_fail_refused")
    assert "cannot" in (gave_up.feedback or "")


async def test_a_work_turn_may_still_give_up_when_corrections_may_not() -> None:
    step = await AGENT.run(llm=scripted('{"fail": "no"}'), return_retries=2,
                           correction=Correction(allow_fail=False))  # fmt: skip
    assert step.failure is not None and step.failure.reason is FailReason.EXPLICIT_FAIL


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
