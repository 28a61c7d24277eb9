"""The LLM protocol types and ScriptedLLM."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from subagent import (
    LLM,
    ConfigurationError,
    ErrorKind,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    OutputRequest,
    ScriptedLLM,
    ScriptExhaustedError,
    StopReason,
    ToolCall,
    UnsupportedOutputError,
)

pytestmark = pytest.mark.anyio

REQUEST = LLMRequest(messages=(Message(role="user", content="hi"),))


def test_stop_reason_defaults_follow_the_reply() -> None:
    assert LLMResponse(text="x").stop_reason is StopReason.STOP
    assert LLMResponse(tool_calls=[ToolCall(name="t")]).stop_reason is StopReason.TOOL_CALLS
    assert LLMResponse(text="x", stop_reason="length").stop_reason is StopReason.LENGTH


def test_scripted_llm_satisfies_the_protocol() -> None:
    assert isinstance(ScriptedLLM(), LLM)


async def test_scripted_llm_plays_strings_responses_callables_and_exceptions() -> None:
    async def echo(request: LLMRequest) -> str:
        return request.messages[-1].content

    llm = ScriptedLLM(["one", LLMResponse(text="two"), echo, lambda r: "four", ValueError("five")])
    assert [(await llm.complete(REQUEST)).text for _ in range(4)] == ["one", "two", "hi", "four"]
    with pytest.raises(ValueError, match="five"):
        await llm.complete(REQUEST)
    assert len(llm.requests) == 5 and llm.remaining == 0


async def test_scripted_llm_fails_loudly_when_the_script_runs_out() -> None:
    llm = ScriptedLLM(["only"])
    await llm.complete(REQUEST)
    with pytest.raises(ScriptExhaustedError, match="no reply for call 2: the script held 1"):
        await llm.complete(REQUEST)


def test_scripted_llm_checks_its_script_when_it_is_built() -> None:
    with pytest.raises(ConfigurationError, match=r"^script: item 1 is a int \(42\)"):
        ScriptedLLM(["fine", 42])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="must be a list of replies, got str"):
        ScriptedLLM("one reply")  # type: ignore[arg-type]
    llm = ScriptedLLM(["fine"])
    with pytest.raises(ConfigurationError, match=r"item 2 is a dict"):
        llm.extend([LLMResponse(text="ok"), {"text": "no"}])  # type: ignore[list-item]
    assert llm.remaining == 1  # a rejected extension adds nothing


async def test_a_scripted_callable_returning_the_wrong_type_fails_when_called() -> None:
    llm = ScriptedLLM([lambda request: 42])  # type: ignore[list-item,return-value]
    with pytest.raises(TypeError, match="got int"):
        await llm.complete(REQUEST)


async def test_scripted_stream_yields_deltas_then_the_response() -> None:
    llm = ScriptedLLM(["hello big world"])
    deltas = [delta async for delta in llm.stream(REQUEST)]
    assert "".join(d.text for d in deltas) == "hello big world"
    assert deltas[-1].response is not None and deltas[-1].response.text == "hello big world"


# --- output modes on the request ------------------------------------------------------------------

ANSWER_SCHEMA = {"type": "object", "properties": {"value": {"type": "integer"}}}


def test_a_request_asks_for_no_output_mode_by_default() -> None:
    assert REQUEST.output is None
    assert "output" not in REQUEST.model_fields_set


def test_an_output_request_checks_its_name_and_schema() -> None:
    with pytest.raises(ValidationError, match="mode 'json_schema' needs a json_schema"):
        OutputRequest(mode="json_schema")
    with pytest.raises(ValidationError, match="mode 'tool' needs a json_schema"):
        OutputRequest(mode="tool", json_schema={})
    with pytest.raises(ValidationError, match=r"1 to 64 letters, digits, '_' or '-'.*'my answer'"):
        OutputRequest(mode="tool", json_schema=ANSWER_SCHEMA, name="my answer")
    with pytest.raises(ValidationError, match="mode"):
        OutputRequest(mode="grammar", json_schema=ANSWER_SCHEMA)  # type: ignore[arg-type]
    assert OutputRequest(mode="text").json_schema is None  # text needs no schema
    output = OutputRequest(mode="tool", json_schema=ANSWER_SCHEMA, name="final-answer_2")
    with pytest.raises(ValidationError, match="frozen"):
        output.mode = "text"  # type: ignore[misc]


async def test_scripted_llm_records_the_output_mode_of_each_request() -> None:
    asked = REQUEST.model_copy(
        update={"output": OutputRequest(mode="json_schema", json_schema=ANSWER_SCHEMA)}
    )
    llm = ScriptedLLM(['{"value": 1}', "two"])
    await llm.complete(asked)
    await llm.complete(REQUEST)
    assert [request.output for request in llm.requests] == [asked.output, None]
    assert llm.requests[0].output is not None and llm.requests[0].output.mode == "json_schema"


def test_an_unsupported_output_error_is_a_bad_request_that_pickles_as_itself() -> None:
    error = UnsupportedOutputError("tool", "ollama at http://127.0.0.1:11434/v1", "no forcing")
    assert isinstance(error, LLMError) and error.kind is ErrorKind.BAD_REQUEST
    assert str(error) == (
        "bad_request: output mode 'tool' is not served by ollama at "
        "http://127.0.0.1:11434/v1: no forcing"
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is UnsupportedOutputError
    assert (copy.mode, copy.server, copy.reason, str(copy)) == (
        error.mode, error.server, error.reason, str(error)
    )  # fmt: skip
