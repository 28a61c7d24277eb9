"""Tool turns of the loop: pruning, extras, final answers, limits, concurrency, timeouts."""

from __future__ import annotations

import json
import threading
from typing import Annotated, Any

import anyio
import pytest
from openai_server import Reply, ScriptedServer, completion
from pydantic import BaseModel
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    FailReason,
    FromExtras,
    LLMResponse,
    ScriptedLLM,
    Step,
    SubAgent,
    Tool,
    ToolCall,
    ToolOutput,
    ToolPolicy,
    ToolSourceLostError,
    TurnOutcome,
    TurnType,
    tool,
)
from subagent.llm import OpenAIChat
from subagent.protocols._action import format_action
from subagent.tools._execute import TOOL_RECORD_LIMIT, TOOL_RESULT_LIMIT

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


def call(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)])


def calls(*pairs: tuple[str, dict[str, Any]]) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=n, arguments=a) for n, a in pairs])


@tool(run_in_thread=False)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def run(agent: SubAgent[Any], script: list[Any], **options: Any) -> Step[Any]:
    return await agent.run(llm=ScriptedLLM(script), **options)


# --- arguments ---


async def test_unknown_arguments_are_pruned_and_recorded_by_default(traced: Traced) -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add], max_turns=2)
    llm = ScriptedLLM([call("add", a=1, b=2, c=3, note="x"), '{"x": 3}'])
    step = await agent.run(llm=llm, tracer_provider=traced.provider)
    result = step.turns[0].tool_results[0]
    assert result.ok and result.pruned_arguments == ["c", "note"]
    assert "3" in result.content
    span = attrs(traced.one("execute_tool add"))
    # The names are the model's text: counted on the span, named only with content capture
    # (tests/test_telemetry.py checks the capture-on side).
    assert span["subagent.tool.pruned_count"] == 2
    assert "subagent.tool.pruned_arguments" not in span


async def test_unknown_arguments_are_reported_when_pruning_is_off() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add], max_turns=2,
                     tool_policy=ToolPolicy(prune_unknown_args=False))  # fmt: skip
    step = await run(agent, [call("add", a=1, b=2, c=3), '{"x": 3}'])
    result = step.turns[0].tool_results[0]
    assert not result.ok and result.error_type == "invalid_arguments"
    assert "- c: Extra inputs are not permitted" in result.content


@pytest.mark.parametrize(("max_turns", "told_to_call_again"), [(3, True), (2, False)])
async def test_invalid_arguments_are_told_to_call_again_only_while_a_tool_turn_is_left(
    max_turns: int, told_to_call_again: bool
) -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add], max_turns=max_turns)
    step = await run(agent, [call("add", a=1), '{"x": 3}'])
    result = step.turns[0].tool_results[0]
    assert result.error_type == "invalid_arguments" and "- b: Field required" in result.content
    assert ("call add again" in result.content) is told_to_call_again
    # The next turn is must_return exactly when it is not told to call again.
    assert (step.turns[1].type == TurnType.MUST_RETURN) is not told_to_call_again


async def test_a_tool_can_keep_unknown_arguments_an_error_on_its_own() -> None:
    strict = Tool(add.function, prune_unknown_args=False, run_in_thread=False)
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[strict], max_turns=2)
    step = await run(agent, [call("add", a=1, b=2, c=3), '{"x": 3}'])
    assert step.turns[0].tool_results[0].error_type == "invalid_arguments"


async def test_missing_required_arguments_are_named_in_the_feedback() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add], max_turns=2)
    llm = ScriptedLLM([call("add", a=1), '{"x": 3}'])
    step = await agent.run(llm=llm)
    assert "- b: Field required" in step.turns[0].tool_results[0].content
    tool_message = llm.requests[1].messages[-2]
    assert tool_message.role == "tool" and "- b: Field required" in tool_message.content


# --- results: conversion and limits ---


class Circular:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "value",
    [b"\xff", _circular(), Circular(), {"key": Circular()}],
    ids=["bytes", "cycle", "repr", "nested"],
)
async def test_a_result_that_cannot_become_text_is_a_tool_error_not_a_crash(value: object) -> None:
    def produce() -> object:
        return value

    producer = Tool(produce, run_in_thread=False)
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[producer], max_turns=2)
    step = await run(agent, [calls(("produce", {}), ("produce", {})), '{"x": 1}'])
    assert step.ok
    results = step.turns[0].tool_results
    assert [r.error_type for r in results] == ["unserializable_result"] * 2
    assert "cannot be turned into text" in results[0].content
    assert Step[Answer].model_validate_json(step.model_dump_json()) == step


@pytest.mark.parametrize(("size", "kept_whole"), [(100_000, True), (TOOL_RECORD_LIMIT + 1, False)])
async def test_a_long_result_is_cut_for_the_model_with_a_note(size: int, kept_whole: bool) -> None:
    def dump() -> str:
        return "`" * size  # the worst case: a fence must be longer than what it encloses

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[Tool(dump, run_in_thread=False)],
                     max_turns=2)  # fmt: skip
    llm = ScriptedLLM([call("dump"), '{"x": 1}'])
    step = await agent.run(llm=llm)
    result = step.turns[0].tool_results[0]
    assert result.cut_chars == size  # all backticks: not even one fits inside its fences
    assert len(result.content) < TOOL_RESULT_LIMIT + 300  # the header and the note
    assert f"{size} of its {size} characters were cut" in result.content
    assert (result.full_output is not None) is kept_whole
    sent = llm.requests[1].messages[-2].content
    assert sent == result.content


async def test_a_long_plain_result_keeps_as_much_as_fits() -> None:
    def dump() -> str:
        return "x" * 5_000_000

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[Tool(dump, run_in_thread=False)],
                     max_turns=2)  # fmt: skip
    result = (await run(agent, [call("dump"), '{"x": 1}'])).turns[0].tool_results[0]
    assert result.cut_chars == 5_000_000 - (TOOL_RESULT_LIMIT - 6)  # two 3-backtick fences
    assert result.full_output is None  # over the record limit too


async def test_the_result_limit_is_configurable_on_the_agent() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add], max_turns=2,
                     tool_policy=ToolPolicy(max_tool_result_chars=7))  # fmt: skip
    step = await run(agent, [call("add", a=20, b=3), '{"x": 23}'])
    result = step.turns[0].tool_results[0]
    assert result.cut_chars == 1 and result.full_output == "23"
    assert "\n```\n2\n```\n" in result.content


# --- tools from a JSON schema ---

_PICK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "blue"]}, "x": {"type": "integer"}},
    "required": ["colour", "x"],
    "additionalProperties": False,
}


def _pick(colour: str, x: int) -> ToolOutput:
    return ToolOutput(Answer(x=x), final=True)


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_a_schema_tool_is_offered_as_given_checked_and_can_end_the_run(
    protocol: str,
) -> None:
    picker = Tool.from_schema("pick", "Pick a colour.", _PICK_SCHEMA, _pick, run_in_thread=False)
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[picker], max_turns=3,
                     tool_policy=ToolPolicy(protocol=protocol))  # fmt: skip

    def reply(**arguments: Any) -> LLMResponse | str:
        if protocol == "native":
            return call("pick", **arguments)
        return format_action("pick", arguments)

    llm = ScriptedLLM([reply(colour="green", x=1), reply(colour="red", x=5)])
    step = await agent.run(llm=llm)
    assert step.ok and step.output == Answer(x=5)
    first = step.turns[0].tool_results[0]
    assert first.error_type == "invalid_arguments"
    assert '- colour: should be one of: "red", "blue" (received "green")' in first.content
    request = llm.requests[0]
    if protocol == "native":
        assert request.tools[0].parameters == _PICK_SCHEMA
    else:
        system = request.messages[0].content
        assert json.dumps(_PICK_SCHEMA, separators=(",", ":")) in system


# --- ToolOutput: final answers and extras ---


async def test_a_final_tool_output_ends_the_run_with_its_value() -> None:
    @tool(run_in_thread=False)
    def lookup(key: str) -> ToolOutput:
        return ToolOutput(Answer(x=42), final=True)

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[lookup], max_turns=3)
    step = await run(agent, [call("lookup", key="k")])
    assert step.ok and step.output == Answer(x=42)
    assert [(t.type, t.outcome) for t in step.turns] == [(TurnType.NORMAL, TurnOutcome.SUCCESS)]
    assert step.turns[0].tool_results[0].ok


async def run_an_invalid_final_tool_output(max_turns: int) -> tuple[Step[Any], ScriptedLLM]:
    """A run whose tool gives an invalid final answer, then whose reply is ``{"x": 7}``."""

    @tool(run_in_thread=False)
    def lookup(key: str) -> ToolOutput:
        return ToolOutput({"x": "not a number"}, final=True)

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[lookup], max_turns=max_turns)
    llm = ScriptedLLM([call("lookup", key="k"), '{"x": 7}'])
    return await agent.run(llm=llm), llm


async def test_an_invalid_final_tool_output_is_fed_back_and_the_run_goes_on() -> None:
    step, llm = await run_an_invalid_final_tool_output(max_turns=3)
    assert step.ok and step.output == Answer(x=7)
    first = step.turns[0]
    assert (first.outcome, first.error_type) == (TurnOutcome.ERROR, "invalid_output")
    assert (
        first.feedback is not None and "gave a final answer, but it is not valid" in first.feedback
    )
    assert llm.requests[1].messages[-1].content == first.feedback
    assert "Call a tool again" in first.feedback  # turns with tools are left


async def test_an_invalid_final_tool_output_on_the_last_work_turn_is_not_told_to_call_again() -> (
    None
):
    step, llm = await run_an_invalid_final_tool_output(max_turns=2)
    assert step.ok and step.output == Answer(x=7)
    feedback = step.turns[0].feedback
    assert feedback is not None and "Reply with a valid answer." in feedback
    assert "Call a tool again" not in feedback and "Tools are no longer available" in feedback
    assert llm.requests[1].tools == []


async def test_extras_reach_the_next_tool_call_only_and_never_the_model() -> None:
    seen: list[object] = []
    handle = object()

    @tool(run_in_thread=False)
    def open_db(path: str) -> ToolOutput:
        return ToolOutput("opened", extras={"conn": handle})

    @tool(run_in_thread=False)
    def query(sql: str, conn: Annotated[object, FromExtras] = None) -> str:
        seen.append(conn)
        return "rows"

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[open_db, query], max_turns=4)
    llm = ScriptedLLM([call("open_db", path="x"), call("query", sql="s"), call("query", sql="s"),
                       '{"x": 1}'])  # fmt: skip
    step = await agent.run(llm=llm)
    assert step.ok
    assert seen == [handle, None]  # handed to the next call, then cleared
    assert all(repr(handle) not in m.content for r in llm.requests for m in r.messages)
    assert "conn" not in str(llm.requests[0].tools[1].parameters)


# --- concurrency ---


async def test_parallel_tool_calls_overlap_and_keep_call_order() -> None:
    started = {"first": anyio.Event(), "second": anyio.Event()}

    async def meet(me: str, other: str) -> str:
        started[me].set()
        await started[other].wait()  # only returns if both calls run at once
        return me

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[meet], max_turns=2)
    with anyio.fail_after(10):  # a sequential run would wait forever
        step = await run(agent, [calls(("meet", {"me": "first", "other": "second"}),
                                       ("meet", {"me": "second", "other": "first"})),
                                 '{"x": 1}'])  # fmt: skip
    results = step.turns[0].tool_results
    assert [r.call_id for r in results] == [c.id for c in step.turns[0].tool_calls]
    assert ["\nfirst\n" in results[0].content, "\nsecond\n" in results[1].content] == [True, True]


async def test_calls_run_one_after_another_when_parallel_tool_calls_is_off() -> None:
    log: list[str] = []

    async def step_tool(name: str) -> str:
        log.append(f"{name} starts")
        await anyio.lowlevel.checkpoint()
        log.append(f"{name} ends")
        return name

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[Tool(step_tool, name="work")],
                     max_turns=2, tool_policy=ToolPolicy(parallel_tool_calls=False))  # fmt: skip
    await run(agent, [calls(("work", {"name": "a"}), ("work", {"name": "b"})), '{"x": 1}'])
    assert log == ["a starts", "a ends", "b starts", "b ends"]


# --- deeply nested arguments ---


def _deep_arguments(depth: int) -> str:
    return '{"data": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [150, 900, 100_000])
async def test_deeply_nested_arguments_from_a_server_are_fed_back_as_invalid(
    server: ScriptedServer, depth: int
) -> None:
    @tool(run_in_thread=False)
    def look(data: object = None) -> str:
        return "seen"

    call_body = {"id": "c1", "type": "function",
                 "function": {"name": "look", "arguments": _deep_arguments(depth)}}  # fmt: skip
    server.script(Reply.json(completion(None, tool_calls=[call_body], finish_reason="tool_calls")),
                  Reply.json(completion('{"x": 1}')))  # fmt: skip
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[look], max_turns=2)
    async with OpenAIChat(model="m", base_url=server.base_url, api_key="sk-test") as llm:
        step = await agent.run(llm=llm)
    assert step.ok  # the run went on to its answer
    result = step.turns[0].tool_results[0]
    assert result.error_type == "invalid_arguments"
    assert "must be a JSON object nested at most 100 levels deep" in result.content
    assert Step[Answer].model_validate_json(step.model_dump_json()) == step  # storable


@pytest.mark.parametrize("depth", [150, 900, 100_000])
async def test_deeply_nested_arguments_in_a_react_action_are_fed_back(depth: int) -> None:
    schema_tool = Tool.from_schema("look", "Look.", {"type": "object"}, lambda **_: "seen")
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[schema_tool], max_turns=2,
                     tool_policy=ToolPolicy(protocol="react"))  # fmt: skip
    action = 'Thought: look.\nAction: {"tool": "look", "input": ' + _deep_arguments(depth) + "}"
    step = await run(agent, [action, 'Final Answer: {"x": 1}'])
    assert step.ok
    first = step.turns[0]
    assert first.feedback is not None
    if first.tool_results:  # read as an action: its arguments are invalid
        assert first.tool_results[0].error_type == "invalid_arguments"
        assert "nested at most 100 levels deep" in first.tool_results[0].content
    else:  # too deep for the action itself to be read: an invalid action, named
        assert (first.error_type, depth) == ("invalid_action", 100_000)
        assert "Nesting too deep" in first.feedback


async def test_deeply_nested_arguments_from_any_model_are_never_walked() -> None:
    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    call_made = ToolCall(name="add", arguments={"a": deep})
    assert call_made.arguments == "(arguments nested more than 100 levels deep)"
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add], max_turns=2)
    step = await run(agent, [LLMResponse(tool_calls=[call_made]), '{"x": 1}'])
    assert step.turns[0].tool_results[0].error_type == "invalid_arguments"


# --- the calls of one reply ---


async def test_calls_past_the_per_turn_limit_are_refused_never_run() -> None:
    ran: list[int] = []

    @tool(run_in_thread=False)
    def send(n: int) -> str:
        ran.append(n)
        return "sent"

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[send], max_turns=2)
    llm = ScriptedLLM([calls(*[("send", {"n": n}) for n in range(40)]), '{"x": 1}'])
    step = await agent.run(llm=llm)
    assert step.ok
    assert sorted(ran) == list(range(32))  # the default limit: the first 32 ran, no others
    turn = step.turns[0]
    assert len(turn.tool_calls) == len(turn.tool_results) == 40
    refused = turn.tool_results[32:]
    assert {r.error_type for r in refused} == {"too_many_calls"}
    assert all(r.ok for r in turn.tool_results[:32])
    assert "made 40 tool calls and only the first 32 of a reply are run" in refused[0].content
    assert turn.error_type == "tool_error"
    assert turn.error_summary == "tool_error: 8 call(s) too_many_calls"
    # The model reads an answer to each of its calls (a native tool message per call id).
    answered = [m.tool_call_id for m in llm.requests[1].messages if m.role == "tool"]
    assert answered == [c.id for c in turn.tool_calls]


async def test_the_per_turn_call_limit_is_an_agent_option() -> None:
    ran: list[int] = []

    @tool(run_in_thread=False)
    def send(n: int) -> str:
        ran.append(n)
        return "sent"

    policy = ToolPolicy(max_tool_calls_per_turn=2, parallel_tool_calls=False)
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[send], max_turns=2,
                     tool_policy=policy)  # fmt: skip
    step = await run(agent, [calls(*[("send", {"n": n}) for n in range(3)]), '{"x": 1}'])
    assert ran == [0, 1]
    assert [r.error_type for r in step.turns[0].tool_results] == [None, None, "too_many_calls"]


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "32", None])
def test_the_per_turn_call_limit_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ConfigurationError, match="max_tool_calls_per_turn") as caught:
        SubAgent(
            name="a", prompt="p", tools=[add], tool_policy=ToolPolicy(max_tool_calls_per_turn=value)
        )  # type: ignore[arg-type]
    assert caught.value.field == "max_tool_calls_per_turn"


# --- timeouts and cancellation reach tools ---


async def test_a_tool_over_its_own_timeout_is_a_tool_error() -> None:
    @tool(timeout=0.01)
    async def stuck() -> str:
        await anyio.sleep_forever()
        return "never"

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[stuck], max_turns=2)
    step = await run(agent, [call("stuck"), '{"x": 1}'])
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.error_type) == (False, "timeout")
    assert "did not finish within 0.01 s" in result.content


@pytest.mark.parametrize("timeout", [None, 30.0])
@pytest.mark.parametrize("in_thread", [True, False])
async def test_a_timeout_error_raised_by_the_tool_itself_is_fed_back_not_raised(
    timeout: float | None, in_thread: bool
) -> None:
    def fetch(url: str) -> str:
        raise TimeoutError("timed out")  # socket.timeout, what urlopen(timeout=...) raises

    tools = [Tool(fetch, timeout=timeout, run_in_thread=in_thread)]
    agent = SubAgent(name="a", prompt="p", output=Answer, tools=tools, max_turns=2)
    step = await run(agent, [call("fetch", url="http://x"), '{"x": 1}'])
    assert step.ok
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.error_type) == (False, "TimeoutError")
    assert "TimeoutError: timed out (an operation inside the tool timed out)" in result.content
    assert "did not finish within" not in result.content  # not the tool's own time limit


async def test_a_bare_timeout_error_from_wait_for_inside_an_async_tool_is_fed_back() -> None:
    async def slow() -> str:
        with anyio.fail_after(0):  # wait_for / fail_after inside the tool
            await anyio.sleep_forever()
        return "never"

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[slow], max_turns=2)
    step = await run(agent, [call("slow"), '{"x": 1}'])
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.error_type) == (False, "TimeoutError")
    assert "an operation inside the tool timed out" in result.content


async def test_a_blocking_sync_tool_does_not_hold_the_run_past_its_mission_timeout() -> None:
    release = threading.Event()
    entered = threading.Event()

    def blocking() -> str:
        entered.set()
        release.wait(30)
        return "late"

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[blocking], max_turns=2)
    try:
        with anyio.fail_after(10):
            step = await run(agent, [call("blocking"), '{"x": 1}'], mission_timeout=0.2)
    finally:
        release.set()  # the abandoned worker thread finishes; its result is dropped
    assert entered.is_set()
    assert step.failure is not None and step.failure.reason is FailReason.TIMEOUT
    turn = step.turns[0]
    assert [c.name for c in turn.tool_calls] == ["blocking"]
    (result,) = turn.tool_results
    assert (result.completed, result.error_type) == (False, "cancelled")


# --- a tool source lost mid-run ---


async def test_a_tool_whose_source_is_lost_ends_the_run_failed_keeping_the_turns_results(
    traced: Traced,
) -> None:
    async def lookup(key: str) -> str:
        raise ToolSourceLostError("store server 'kv' went away: reset", source="kv")

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[add, lookup], max_turns=4)
    llm = ScriptedLLM([calls(("add", {"a": 1, "b": 2}), ("lookup", {"key": "k"})), '{"x": 3}'])
    step = await agent.run(llm=llm, tracer_provider=traced.provider)
    assert step.failure is not None
    assert step.failure.reason is FailReason.TOOL_SERVER_LOST
    assert step.failure.message == "tool 'lookup': store server 'kv' went away: reset"
    assert step.retryable
    assert len(llm.requests) == 1  # no further call to the model
    (turn,) = step.turns
    expected = (TurnOutcome.FAIL, "failed", "tool_server_lost")
    assert (turn.outcome, turn.phase_after, turn.error_type) == expected
    added, lost = turn.tool_results
    assert added.ok and "3" in added.content  # the other call finished and is kept
    assert (lost.ok, lost.error_type) == (False, "tool_server_lost")
    assert "store server 'kv' went away: reset" in lost.content  # what the model would read
    assert turn.work_remaining == 3  # the turn spent its work turn
    run_span = traced.one("invoke_agent a")
    assert attrs(run_span)["subagent.failure.reason"] == "tool_server_lost"
    assert attrs(run_span)["error.type"] == "tool_server_lost"
    assert run_span.status.description == step.failure.message  # names the tool and server
    assert attrs(traced.one("agent_turn normal"))["error.type"] == "tool_server_lost"


async def test_a_lost_source_under_react_ends_the_run_the_same_way() -> None:
    def lookup(key: str) -> str:
        raise ToolSourceLostError("store server 'kv' went away", source="kv")

    agent = SubAgent(name="a", prompt="p", output=Answer, tools=[lookup], max_turns=3,
                     tool_policy=ToolPolicy(protocol="react"))  # fmt: skip
    step = await agent.run(llm=ScriptedLLM([format_action("lookup", {"key": "k"}), '{"x": 1}']))
    assert step.failure is not None and step.failure.reason is FailReason.TOOL_SERVER_LOST
    assert step.turns[0].tool_results[0].error_type == "tool_server_lost"
