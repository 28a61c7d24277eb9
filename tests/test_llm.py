"""The LLM protocol types and ScriptedLLM."""

from __future__ import annotations

import pytest

from subagent import (
    LLM,
    ConfigurationError,
    LLMRequest,
    LLMResponse,
    Message,
    ScriptedLLM,
    ScriptExhaustedError,
    StopReason,
    ToolCall,
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
