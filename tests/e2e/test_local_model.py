"""End to end against real local models (llama-cpp-python's server, see scripts/local_llm.py).

The session fixtures (tests/e2e/conftest.py) set everything up on first use (build, install,
download, verify: see docs/models.md), start one server per model and stop it afterwards.
Small models are not reliable, so the tests assert the path the runtime recorded, which must
hold whatever the model says, and only the adapter's mechanics (stop reasons, tool-call
plumbing, streaming).
"""

from __future__ import annotations

import json
import re
import sys
from contextlib import aclosing
from pathlib import Path
from typing import Any

import local_llm
import pytest
from pydantic import BaseModel

from subagent import (
    ErrorKind,
    FailReason,
    OpenAIChat,
    RetryPolicy,
    Step,
    StopReason,
    SubAgent,
    TurnOutcome,
    TurnType,
)
from subagent.llm import LLMRequest, Message

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

POLICY = RetryPolicy(max_attempts=3, initial_delay=0.2)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # both backends are covered by the unit tests; these calls are slow


def adapter(server: local_llm.LocalServer, **kwargs: Any) -> OpenAIChat:
    return OpenAIChat(model="local", base_url=server.base_url, timeout=120, _environ={}, **kwargs)


class Sum(BaseModel):
    answer: int


class Weather(BaseModel):
    city: str
    celsius: int


def lookup(city: str) -> str:
    """Look up the current temperature of a city, in degrees Celsius."""
    return json.dumps({"city": city, "celsius": -7})


ADDER = SubAgent(name="adder", prompt="What is {{a}} + {{b}}?", output=Sum)
WEATHER = SubAgent(
    name="weather",
    prompt="How cold is it in {{city}} right now? Use the lookup tool, then answer.",
    output=Weather,
    tools=[lookup],
)


def assert_state_table_path(step: Step[Any], max_turns: int, return_retries: int) -> None:
    """The turn sequence must be one the state machine allows, whatever the model said."""
    turns = step.turns
    assert 1 <= len(turns) <= max_turns + return_retries
    expected: list[TurnType] = []
    work, retries = max_turns, return_retries
    phase = TurnType.NORMAL if max_turns > 1 else TurnType.MUST_RETURN
    for _ in turns:
        expected.append(phase)
        if phase is TurnType.NORMAL:
            work -= 1
            phase = TurnType.MUST_RETURN if work == 1 else TurnType.NORMAL
        elif phase is TurnType.MUST_RETURN:
            phase = TurnType.RETRY
        else:
            retries -= 1
    assert [turn.type for turn in turns] == expected
    assert all(t.outcome in (TurnOutcome.ERROR, TurnOutcome.CONTINUE) for t in turns[:-1])
    for turn in turns:
        assert turn.stop_reason is not None
        assert turn.usage.input_tokens > 0
        assert turn.duration_s > 0
        assert turn.transport_retries == []  # a healthy local server needs none
    if step.ok:
        assert turns[-1].outcome is TurnOutcome.SUCCESS
    else:
        assert step.failure is not None
        assert step.failure.reason in (FailReason.BUDGET_EXHAUSTED, FailReason.EXPLICIT_FAIL)
        if step.failure.reason is FailReason.BUDGET_EXHAUSTED:
            assert len(turns) == max_turns + return_retries
            assert turns[-1].outcome is TurnOutcome.ERROR
        else:
            assert turns[-1].outcome is TurnOutcome.FAIL


async def test_smollm2_single_shot_with_corrections(smollm2: local_llm.LocalServer) -> None:
    async with adapter(smollm2) as llm:
        step = await ADDER.run(
            {"a": 2, "b": 3},
            llm=llm,
            max_turns=1,
            return_retries=2,
            retry_policy=POLICY,
            timeout=120,
            mission_timeout=600,
            settings={"temperature": 0, "max_tokens": 64},
        )
    assert_state_table_path(step, max_turns=1, return_retries=2)
    if step.ok:
        assert isinstance(step.output, Sum)
    # collapse: every correction request holds the task, the latest failed reply and its
    # feedback only, so the message count stays constant across retries.
    corrections = {turn.messages_sent for turn in step.turns[1:]}
    assert len(corrections) <= 1
    assert all(count == step.turns[0].messages_sent + 2 for count in corrections)


async def test_qwen_native_tool_call_then_answer(qwen: local_llm.LocalServer) -> None:
    # llama-cpp-python 0.3.36 produces native tool calls only for a named tool_choice (see
    # docs/models.md); the adapter sends it only in turns that offer tools.
    named = {"type": "function", "function": {"name": "lookup"}}
    async with adapter(qwen) as llm:
        step = await WEATHER.run(
            {"city": "Oslo"},
            llm=llm,
            max_turns=2,
            return_retries=1,
            retry_policy=POLICY,
            timeout=120,
            mission_timeout=600,
            settings={"temperature": 0, "max_tokens": 128, "tool_choice": named},
        )
    assert_state_table_path(step, max_turns=2, return_retries=1)
    tool_turn = step.turns[0]
    assert (tool_turn.type, tool_turn.outcome) == (TurnType.NORMAL, TurnOutcome.CONTINUE)
    assert tool_turn.stop_reason is StopReason.TOOL_CALLS
    (call,) = tool_turn.tool_calls
    assert call.name == "lookup"
    assert isinstance(call.arguments, dict) and isinstance(call.arguments.get("city"), str)
    assert call.id  # the server's id, echoed back with the result
    (result,) = tool_turn.tool_results
    assert result.ok and result.call_id == call.id
    assert '"celsius": -7' in result.content
    # The answer turn saw the assistant's call and the tool's result on top of the task.
    assert step.turns[1].type is TurnType.MUST_RETURN
    assert step.turns[1].messages_sent >= tool_turn.messages_sent + 2
    assert step.turns[1].tool_calls == []  # no tools offered, none asked for
    if step.ok:
        assert isinstance(step.output, Weather)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_streaming_through_the_adapter(qwen: local_llm.LocalServer) -> None:
    request = LLMRequest(
        messages=(
            Message(role="system", content="You are a helpful assistant."),
            Message(role="user", content="Count from 1 to 10, separated by spaces."),
        ),
        settings={"temperature": 0, "max_tokens": 40},
    )
    async with adapter(qwen) as llm:
        deltas = [delta async for delta in llm.stream(request)]
        final = deltas[-1].response
        assert final is not None
        assert len(deltas) > 2
        assert "".join(delta.text for delta in deltas[:-1]) == final.text
        assert final.text.strip()
        assert final.stop_reason in (StopReason.STOP, StopReason.LENGTH)
        assert final.raw_stop_reason in ("stop", "length")
        assert final.model == "local"

        # Hang up after the first piece; the server must be fine for the next call.
        async with aclosing(llm.stream(request)) as stream:
            async for delta in stream:
                assert delta.response is None
                break
        again = await llm.complete(request)
    assert again.text == final.text  # temperature 0: the same reply, served after the hang-up


async def test_a_tiny_max_tokens_is_recorded_as_cut_off(qwen: local_llm.LocalServer) -> None:
    async with adapter(qwen) as llm:
        step = await ADDER.run(
            {"a": 20, "b": 22},
            llm=llm,
            max_turns=1,
            return_retries=1,
            retry_policy=POLICY,
            timeout=120,
            settings={"max_tokens": 5},
        )
    assert_state_table_path(step, max_turns=1, return_retries=1)
    first = step.turns[0]
    assert first.stop_reason is StopReason.LENGTH
    assert first.raw_stop_reason == "length"
    assert first.usage.output_tokens == 5
    assert first.outcome is TurnOutcome.ERROR
    assert first.error is not None and "cut off" in first.error
    assert first.transport_retries == []  # never retried blindly: a correction turn follows
    assert step.stop_reasons.get("length", 0) >= 1


async def test_a_request_over_the_context_window_is_classified_and_not_rerun(
    qwen: local_llm.LocalServer,
) -> None:
    agent = SubAgent(name="long", prompt="{{text}}", retry_policy=POLICY)
    async with adapter(qwen) as llm:
        step = await agent.run({"text": "hello " * 40_000}, llm=llm, max_turns=1, timeout=120)
    assert step.failure is not None and step.failure.error_kind is ErrorKind.CONTEXT_LENGTH
    assert step.retryable is False
    assert [turn.transport_retries for turn in step.turns] == [[]]


def test_the_demo_runs_its_agents_on_the_model_from_the_environment(
    qwen: local_llm.LocalServer,
) -> None:
    import os
    import subprocess

    demo = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
    environ = {**os.environ, "SUBAGENT_LLM": f"openai:{local_llm.MODEL_ALIAS}@{qwen.base_url}"}
    result = subprocess.run([sys.executable, str(demo)], capture_output=True, text=True,
                            env=environ, timeout=900, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"at {qwen.base_url} (from the environment)" in out
    assert "== calc" in out and "== extract" in out and "== tags, corrected as structured" in out
    assert "== tags, corrected with the defaults" in out
    # each run's table ends with its Step summary: done or failed, never an llm_error
    # (a failure's summary quotes the last error, which may run over several lines)
    summary = re.compile(r"^(done in \d+ turns? \(|failed \()")
    summaries = [line for line in out.splitlines() if summary.match(line)]
    assert len(summaries) == 5, out
    assert all(line.startswith(("done", "failed (budget_exhausted")) for line in summaries), out


def test_the_react_example_uses_its_tool_through_the_text_protocol(
    qwen: local_llm.LocalServer,
) -> None:
    import os
    import subprocess

    example = Path(__file__).resolve().parents[2] / "examples" / "react_local.py"
    environ = {**os.environ, "SUBAGENT_LLM": f"openai:{local_llm.MODEL_ALIAS}@{qwen.base_url}"}
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                            env=environ, timeout=900, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # the model wrote an Action the runtime read and ran, then answered with a valid record
    assert out.count("turn 1 normal      continue current_temperature(") == 2, out
    assert "output: Weather(city=" in out, out


def load_demo() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
    spec = importlib.util.spec_from_file_location("demo", path)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


async def test_the_demos_correction_runs_follow_the_state_table_and_send_their_corrections_as_asked(
    qwen: local_llm.LocalServer,
) -> None:
    async with adapter(qwen, text_tool_calls=True) as llm:
        same, structured, default = await load_demo().run_corrections(llm)
    for step in (same, structured, default):
        assert_state_table_path(step, max_turns=1, return_retries=1)
    assert [turn.output_mode for turn in same.turns] == [None] * len(same.turns)
    # a correction turn of the second run is asked for under the output's schema
    for turn in structured.turns[1:]:
        assert (turn.corrected, turn.output_mode) == (True, "json_schema")
    # by default (a list, not an object) its corrections, the first attempt as it is
    assert (default.turns[0].corrected, default.turns[0].output_mode) == (False, None)
    for turn in default.turns[1:]:
        assert (turn.corrected, turn.output_mode) == (True, "json_schema")


def _prompt_tokens(server: local_llm.LocalServer, text: str, where: str) -> int:
    """The prompt tokens of a request holding ``text`` in a message (nothing generated).

    ``where`` is ``tool`` (a tool result after a call) or ``user`` (the question).
    """
    import httpx

    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'},
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Answer from the tool's result."},
        {"role": "user", "content": text if where == "user" else "How cold is it?"},
    ]
    if where == "tool":
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": text},
        ]
    body = {
        "model": "local",
        "max_tokens": 1,
        "temperature": 0,
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}],
        "messages": messages,
    }  # fmt: skip
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"])


@pytest.mark.parametrize(
    ("setup", "where"), [("template", "tool"), ("template", "user"), ("tools", "user")]
)
def test_a_quote_reaches_the_model_as_a_quote(
    setup: str, where: str, request: pytest.FixtureRequest
) -> None:
    """Under every set-up of scripts/local_llm.py, no HTML escaping of what the model reads.

    An escaped quote (``&#34;``) is several tokens where ``"`` is one or shares one: quoting
    20 words adds about 20 prompt tokens as text, about 140 escaped (measured on Qwen with
    llama-cpp-python's own launcher: 92 -> 233).
    The tools chat format renders no tool result at all (only system, user and assistant
    messages): that set-up is checked on the question.
    """
    server = request.getfixturevalue("qwen" if setup == "template" else "qwen_tools")
    words = ", ".join(f"word{n}" for n in range(20))
    plain = _prompt_tokens(server, words, where)
    quotes = _prompt_tokens(server, ", ".join(f'"word{n}"' for n in range(20)), where)
    assert plain + 10 < quotes <= plain + 40, (plain, quotes)


def test_max_tokens_bounds_a_tool_call_under_the_tools_chat_format(
    qwen_tools: local_llm.LocalServer,
) -> None:
    """llama-cpp-python 0.3.36 generates a call's arguments with ``max_tokens=None`` under
    ``tool_choice="auto"``; the launcher bounds them (measured with its own launcher: 399
    completion tokens for ``max_tokens=24``, the whole list of numbers).
    """
    import httpx

    body = {
        "model": "local",
        "max_tokens": 24,
        "temperature": 0,
        "tool_choice": "auto",
        "tools": [{"type": "function", "function": {
            "name": "record", "description": "Record every number.",
            "parameters": {"type": "object", "required": ["numbers"], "properties": {
                "numbers": {"type": "array", "items": {"type": "integer"}}}},
        }}],
        "messages": [{"role": "user", "content": "Record every whole number from 1 to 1000."}],
    }  # fmt: skip
    response = httpx.post(f"{qwen_tools.base_url}/chat/completions", json=body, timeout=300)
    response.raise_for_status()
    reply = response.json()
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "record"
    assert reply["usage"]["completion_tokens"] <= 24


def test_the_tools_chat_format_shows_the_model_no_tool_result(
    qwen_tools: local_llm.LocalServer,
) -> None:
    """Why `make eval` and the demo use the model's own template: this one drops tool results."""
    short = _prompt_tokens(qwen_tools, "5", "tool")
    long = _prompt_tokens(qwen_tools, " ".join(["five"] * 200), "tool")
    assert long == short


def test_the_tools_chat_format_lists_the_functions_only_in_a_system_message(
    qwen_tools: local_llm.LocalServer,
) -> None:
    """Why the raw call and the peers chose BFCL's functions by name only on this set-up.

    llama-cpp-python 0.3.36's ``chatml-function-calling`` writes the functions' list inside
    the system message: a request with tools and none (a BFCL question, as the raw call and
    the peers send it) reaches the model as the question alone, and the grammar then offers
    the functions' names and their parameters' schema. Given a system message, the list is
    read, and Qwen 0.5B under ``auto`` chooses "message" and writes no call (it did on each
    of six probes): neither way serves a model that sees its tools. Left as shipped; the
    page says what it means for the peers' rows (docs/evaluation.md).
    """
    import httpx

    tool = {"type": "function", "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
    question = {"role": "user", "content": "How cold is it in Oslo?"}

    def prompt_tokens(messages: list[dict[str, str]], **extra: Any) -> int:
        body = {"model": "local", "max_tokens": 1, "temperature": 0, "messages": messages}
        response = httpx.post(
            f"{qwen_tools.base_url}/chat/completions", json={**body, **extra}, timeout=120
        )
        response.raise_for_status()
        return int(response.json()["usage"]["prompt_tokens"])

    bare = prompt_tokens([question])
    blind = prompt_tokens([question], tools=[tool], tool_choice="auto")
    shown = prompt_tokens([{"role": "system", "content": ""}, question], tools=[tool],
                          tool_choice="auto")  # fmt: skip
    assert blind < bare + 10  # the question and the format's markers: no function
    assert shown > bare + 100  # the functions and the format's instructions
