"""subagent.testing beyond ScriptedLLM (tests/test_llm.py): TestLLM, FunctionLLM, and the
switch that blocks real model requests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import date
from typing import Literal

import anyio
import jsonschema
import pytest
from openai_server import Reply, ScriptedServer, completion
from pydantic import BaseModel, Field
from support import CALC, Answer

from subagent import (
    LLM,
    ConfigurationError,
    ErrorKind,
    FunctionLLM,
    LLMError,
    LLMRequest,
    LLMResponse,
    ModelRequestsBlockedError,
    OpenAIChat,
    RetryPolicy,
    ScriptedLLM,
    StreamDelta,
    SubAgent,
    TestLLM,
    ToolCall,
    ToolPolicy,
    TurnOutcome,
    TurnType,
    testing,
)

pytestmark = pytest.mark.anyio


class Stop(BaseModel):
    city: str = Field(min_length=2)
    day: date
    kind: Literal["museum", "park"]
    hours: float = Field(gt=0, le=12)
    tags: list[str]


class Plan(BaseModel):
    title: str
    stops: list[Stop] = Field(min_length=1)
    next: Plan | None


def weather(city: str, days: int = 1) -> str:
    """The forecast of a city."""
    return f"sunny in {city}"


def opening_hours(place: str, weekday: Literal["mon", "tue"]) -> dict[str, int]:
    """When a place is open."""
    return {"opens": 9, "closes": 17}


PLANNER = SubAgent(
    name="planner", prompt="Plan {{trip}}", output=Plan, tools=[weather, opening_hours]
)


# --- TestLLM ---


def test_the_test_llm_satisfies_the_protocol_and_is_not_collected_by_pytest() -> None:
    assert isinstance(TestLLM(), LLM)
    assert TestLLM.__test__ is False


async def test_the_test_llm_calls_every_offered_tool_once_then_returns_a_valid_output() -> None:
    llm = TestLLM()
    step = await PLANNER.run({"trip": "Lisbon"}, llm=llm)
    assert step.ok, step.failure
    assert [turn.outcome for turn in step.turns] == [TurnOutcome.CONTINUE, TurnOutcome.SUCCESS]
    calls = step.turns[0].tool_calls
    assert [call.name for call in calls] == ["weather", "opening_hours"]
    tools = {tool.name: tool for tool in llm.requests[0].tools}
    for call in calls:  # arguments the tools' schemas accept
        jsonschema.validate(call.arguments, tools[call.name].parameters)
    assert [result.ok for result in step.turns[0].tool_results] == [True, True]
    assert isinstance(step.output, Plan) and step.output.stops
    assert step.output.stops[0].kind == "museum" and 0 < step.output.stops[0].hours <= 12
    assert len(llm.requests) == 2 and step.usage.total.output_tokens > 0


async def test_the_test_llm_answers_at_once_when_no_tool_is_offered() -> None:
    llm = TestLLM()
    step = await PLANNER.run({"trip": "Porto"}, llm=llm, max_turns=1)
    assert step.ok and len(step.turns) == 1 and not step.turns[0].tool_calls
    assert llm.requests[0].tools == []


async def test_the_test_llm_calls_no_tool_where_the_request_allows_none() -> None:
    keeps_schemas = SubAgent(name="k", prompt="Plan {{trip}}", output=Plan, tools=[weather],
                             tool_policy=ToolPolicy(keep_tool_schemas=True),
                             max_turns=1)  # fmt: skip
    llm = TestLLM()
    step = await keeps_schemas.run({"trip": "Faro"}, llm=llm)
    assert llm.requests[0].tools and llm.requests[0].tool_choice == "none"
    assert step.ok and not step.turns[0].tool_calls


async def test_the_test_llm_calls_only_the_tools_it_is_told_to() -> None:
    step = await PLANNER.run({"trip": "Faro"}, llm=TestLLM(call_tools=["weather"]))
    assert [call.name for call in step.turns[0].tool_calls] == ["weather"]
    step = await PLANNER.run({"trip": "Faro"}, llm=TestLLM(call_tools=()))
    assert step.ok and len(step.turns) == 1


async def test_the_test_llm_told_to_call_a_tool_not_offered_raises_naming_it() -> None:
    with pytest.raises(ConfigurationError) as caught:
        await PLANNER.run({"trip": "Faro"}, llm=TestLLM(call_tools=["weather", "book"]))
    assert caught.value.field == "call_tools"
    assert "'book'" in caught.value.message and "offered: weather, opening_hours" in str(
        caught.value
    )


@pytest.mark.parametrize("bad", ["weather", 3, [1]])
def test_the_test_llm_refuses_call_tools_that_are_not_names(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^call_tools: must be \"all\" or a list"):
        TestLLM(call_tools=bad)  # type: ignore[arg-type]


async def test_the_test_llm_gives_the_output_it_is_given() -> None:
    given = Answer(value=42)
    step = await CALC.run({"question": "?"}, llm=TestLLM(output=given))
    assert step.output == given
    step = await CALC.run({"question": "?"}, llm=TestLLM(output={"value": "x"}), max_turns=1,
                          return_retries=0)  # fmt: skip
    assert not step.ok  # an invalid given output is treated like any invalid answer


async def test_the_test_llm_without_an_output_schema_answers_with_the_tool_results() -> None:
    agent = SubAgent(name="text", prompt="Go", tools=[weather])
    assert (await agent.run(llm=TestLLM())).output == '{"weather": "sunny in a"}'
    assert (await agent.run(llm=TestLLM(), max_turns=1)).output == "ok"


async def test_the_test_llm_seed_varies_the_values_it_makes_up() -> None:
    outputs = [
        (await PLANNER.run({"trip": "x"}, llm=TestLLM(seed=seed), max_turns=1)).output
        for seed in (0, 1)
    ]
    assert all(isinstance(output, Plan) for output in outputs)
    assert outputs[0] != outputs[1]


async def test_the_test_llm_reads_a_structured_output_setting_first() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5}},
              "required": ["n"]}  # fmt: skip
    settings = {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    step = await SubAgent(name="t", prompt="Go", max_turns=1).run(llm=TestLLM(), settings=settings)
    assert json.loads(step.output) == {"n": 5}


async def test_the_test_llm_says_when_it_cannot_make_up_an_output() -> None:
    class Code(BaseModel):
        code: str = Field(pattern=r"^\p{Greek}{3}$")  # Python's re does not read \p{...}

    agent = SubAgent(name="codes", prompt="Go", output=Code, max_turns=1)
    with pytest.raises(ConfigurationError) as caught:
        await agent.run(llm=TestLLM())
    assert caught.value.field == "output"
    assert "$.code: cannot write a string matching" in caught.value.message
    assert "TestLLM(output=...)" in caught.value.message
    step = await agent.run(llm=TestLLM(output=Code(code="αβγ")))
    assert step.output == Code(code="αβγ")


async def test_the_test_llm_streams_its_answer() -> None:
    pieces: list[str] = []
    step = await SubAgent(name="t", prompt="Go", output=Answer, max_turns=1).run(
        llm=TestLLM(), on_text=pieces.append
    )
    assert step.ok and "".join(pieces) == '{"value": 0}'


# --- FunctionLLM ---


async def test_the_function_llm_decides_each_reply_from_the_request() -> None:
    def reply(request: LLMRequest) -> str | LLMResponse:
        assert request.turn is not None
        if request.tools:  # the first turn: call the tool
            return LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})])
        (result,) = [m.content for m in request.messages if m.role == "tool"]
        return json.dumps({"value": 5 if "\n5\n" in result else -1})  # in the runtime's frame

    llm = FunctionLLM(reply)
    step = await CALC.run({"question": "2+3"}, llm=llm, max_turns=2)
    assert step.output == Answer(value=5)
    assert [request.turn.index for request in llm.requests if request.turn] == [1, 2]


async def test_a_requests_turn_type_is_the_same_enum_as_the_turns() -> None:
    def reply(request: LLMRequest) -> str | LLMResponse:
        assert request.turn is not None
        if request.turn.type is TurnType.NORMAL:  # a str here once took the wrong branch
            return LLMResponse(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})])
        return '{"value": 5}'

    llm = FunctionLLM(reply)
    step = await CALC.run({"question": "2+3"}, llm=llm, max_turns=2)
    assert step.output == Answer(value=5)
    assert [r.turn.type for r in llm.requests if r.turn] == [t.type for t in step.turns]
    assert [t.type for t in step.turns] == [TurnType.NORMAL, TurnType.MUST_RETURN]


async def test_the_function_llm_awaits_an_async_function() -> None:
    async def reply(request: LLMRequest) -> str:
        await anyio.lowlevel.checkpoint()
        return '{"value": 7}'

    assert (await CALC.run({"question": "?"}, llm=FunctionLLM(reply))).output == Answer(value=7)


async def test_an_llm_error_from_the_function_is_a_failed_call_the_runtime_retries() -> None:
    calls = 0

    def reply(request: LLMRequest) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise LLMError(ErrorKind.RATE_LIMIT, "slow down", status_code=429)
        return '{"value": 1}'

    step = await CALC.run({"question": "?"}, llm=FunctionLLM(reply),
                          retry_policy=RetryPolicy(initial_delay=0, jitter=0))  # fmt: skip
    assert step.ok
    (retry,) = step.turns[0].transport_retries
    assert retry.kind is ErrorKind.RATE_LIMIT


async def test_the_function_llm_streams_what_its_stream_function_yields() -> None:
    async def pieces(request: LLMRequest) -> AsyncIterator[str | StreamDelta]:
        yield '{"value": '
        yield StreamDelta(text="9}")

    seen: list[str] = []
    llm = FunctionLLM(lambda request: "unused", stream_function=pieces)
    step = await CALC.run({"question": "?"}, llm=llm, on_text=seen.append)
    assert step.output == Answer(value=9) and seen == ['{"value": ', "9}"]
    assert len(llm.requests) == 1


async def test_the_function_llm_streams_its_function_word_by_word_without_one() -> None:
    seen: list[str] = []
    llm = FunctionLLM(lambda request: '{"value": 4}')
    step = await CALC.run({"question": "?"}, llm=llm, on_text=seen.append)
    assert step.output == Answer(value=4) and seen == ['{"value": ', "4}"]


NOT_CALLABLE = [("function", {"function": "reply"}),
                ("stream_function", {"function": str, "stream_function": 3})]  # fmt: skip


@pytest.mark.parametrize(("field", "arguments"), NOT_CALLABLE)
def test_the_function_llm_refuses_what_is_not_callable(field: str, arguments: dict) -> None:
    with pytest.raises(ConfigurationError, match=rf"^{field}: must be callable"):
        FunctionLLM(**arguments)


# --- blocking real model requests ---


@pytest.fixture
def blocked() -> Iterator[None]:
    testing.block_model_requests()
    try:
        yield
    finally:
        testing.block_model_requests(False)


async def test_blocked_model_requests_raise_out_of_the_run_and_say_how_to_allow_them(
    blocked: None, server: ScriptedServer
) -> None:
    async with OpenAIChat(base_url=server.base_url, _environ={}) as llm:
        for options in ({}, {"on_text": lambda _: None}):  # streamed or not
            with pytest.raises(ModelRequestsBlockedError) as caught:
                await CALC.run({"question": "1+1"}, llm=llm, **options)
            assert "allow_model_requests()" in str(caught.value)
            assert caught.value.turns[-1].error_type == "ModelRequestsBlockedError"
    assert server.requests == []  # nothing was sent


async def test_a_spec_string_is_blocked_before_its_key_is_looked_for(
    blocked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelRequestsBlockedError, match="LLMSpec\\('openai:gpt-4o-mini'\\)"):
        await CALC.run({"question": "1+1"}, llm="openai:gpt-4o-mini")


async def test_test_models_are_never_blocked(blocked: None) -> None:
    assert (await CALC.run({"question": "?"}, llm=ScriptedLLM(['{"value": 1}']))).ok
    assert (await CALC.run({"question": "?"}, llm=TestLLM())).ok


async def test_allow_model_requests_lifts_the_block_inside_its_block_only(
    blocked: None, server: ScriptedServer
) -> None:
    server.script(Reply.json(completion('{"value": 2}')))
    async with OpenAIChat(base_url=server.base_url, _environ={}) as llm:
        with testing.allow_model_requests():
            assert (await CALC.run({"question": "1+1"}, llm=llm)).output == Answer(value=2)
        with pytest.raises(ModelRequestsBlockedError):
            await CALC.run({"question": "1+1"}, llm=llm)
    assert len(server.requests) == 1


async def test_a_block_in_one_task_leaves_a_task_beside_it_alone(server: ScriptedServer) -> None:
    server.script(Reply.json(completion('{"value": 2}')))
    outcomes: dict[str, object] = {}
    inside = anyio.Event()
    done = anyio.Event()

    async def run(name: str, llm: OpenAIChat) -> None:
        try:
            outcomes[name] = (await CALC.run({"question": "?"}, llm=llm)).output
        except ModelRequestsBlockedError as error:
            outcomes[name] = type(error)

    async def blocking_task(llm: OpenAIChat) -> None:
        with testing.allow_model_requests(False):
            inside.set()
            await run("blocked", llm)
            await done.wait()  # still inside its block while the other task runs

    async with (
        OpenAIChat(base_url=server.base_url, _environ={}) as llm,
        anyio.create_task_group() as group,
    ):
        group.start_soon(blocking_task, llm)
        await inside.wait()
        await run("beside", llm)
        done.set()
    assert outcomes == {"blocked": ModelRequestsBlockedError, "beside": Answer(value=2)}
