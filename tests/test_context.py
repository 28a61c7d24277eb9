"""RunContext: deps and the run's whereabouts reach tools, validators and instructions."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel
from support import Traced

from subagent import (
    ConfigurationError,
    LLMResponse,
    RunContext,
    ScriptedLLM,
    SubAgent,
    Tool,
    ToolCall,
    ToolPolicy,
    Usage,
    Validation,
    run_many,
    tool,
)
from subagent._context import takes_run_context

pytestmark = pytest.mark.anyio


@dataclass
class Db:
    users: dict[str, str]
    secret: str = "s3cr3t-token"


class Answer(BaseModel):
    x: int


DB = Db({"u1": "Ada"})


@tool(run_in_thread=False)
def user_name(ctx: RunContext[Db], user_id: str) -> str:
    """The name of a user."""
    return ctx.deps.users[user_id]


def call(name: str, usage: Usage | None = None, **arguments: Any) -> LLMResponse:
    return LLMResponse(
        tool_calls=[ToolCall(name=name, arguments=arguments)], usage=usage or Usage()
    )


def react_call(name: str, usage: Usage | None = None, **arguments: Any) -> LLMResponse:
    action = json.dumps({"tool": name, "input": arguments})
    return LLMResponse(text=f"Thought: look it up.\nAction: {action}", usage=usage or Usage())


def answer(protocol: str, text: str, usage: Usage | None = None) -> LLMResponse:
    body = f"Final Answer: {text}" if protocol == "react" else text
    return LLMResponse(text=body, usage=usage or Usage())


def tool_call(protocol: str, name: str, usage: Usage | None = None, **arguments: Any) -> Any:
    return (react_call if protocol == "react" else call)(name, usage, **arguments)


# --- detection ---


def test_a_first_parameter_annotated_run_context_is_detected() -> None:
    def plain(a: int) -> int:
        return a

    def typed(ctx: RunContext[Db], a: int) -> int:
        return a

    def bare(ctx: RunContext, a: int) -> int:  # type: ignore[type-arg]
        return a

    def second(a: int, ctx: RunContext[Db]) -> int:
        return a

    assert takes_run_context(typed) and takes_run_context(bare)
    assert not takes_run_context(plain) and not takes_run_context(second)
    assert not takes_run_context(print)  # no signature to read


def test_the_context_parameter_is_not_in_the_tool_schema() -> None:
    schema = user_name.definition.parameters
    assert list(schema["properties"]) == ["user_id"]
    assert schema["required"] == ["user_id"]
    assert user_name.takes_context


def test_a_run_context_past_the_first_parameter_is_refused_naming_it() -> None:
    def late(user_id: str, ctx: RunContext[Db]) -> str:
        return user_id

    with pytest.raises(ConfigurationError, match=r"'ctx' of tool 'late'.*first parameter"):
        Tool(late)


def test_deps_never_show_in_the_context_repr() -> None:
    context = RunContext(deps=DB, agent="a", turn=1, phase="normal")
    assert "s3cr3t" not in repr(context) and "users" not in repr(context)


async def test_a_tool_called_without_a_context_says_it_needs_one() -> None:
    with pytest.raises(TypeError, match="takes a RunContext"):
        await user_name.call({"user_id": "u1"})


# --- tools ---


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_a_tool_gets_the_run_deps_and_where_the_run_is(protocol: str, traced: Traced) -> None:
    seen: list[RunContext[Db]] = []

    def name_of(ctx: RunContext[Db], user_id: str) -> str:
        seen.append(ctx)
        return ctx.deps.users[user_id]

    agent = SubAgent(name="lookup", prompt="p", output=str, tools=[name_of], max_turns=3,
                     tool_policy=ToolPolicy(protocol=protocol), deps_type=Db)  # type: ignore[arg-type]  # fmt: skip
    llm = ScriptedLLM([
        tool_call(protocol, "name_of", Usage(input_tokens=10, output_tokens=2), user_id="u1"),
        tool_call(protocol, "name_of", Usage(input_tokens=20, output_tokens=3), user_id="u1"),
        answer(protocol, "Ada"),
    ])  # fmt: skip
    step = await agent.run(llm=llm, deps=DB, tracer_provider=traced.provider)
    assert step.ok and step.output == "Ada"
    assert step.turns[0].tool_results[0].content.count("Ada") == 1
    first, second = seen
    assert first.deps is DB and first.agent == "lookup" and first.phase == "normal"
    assert (first.turn, second.turn) == (1, 2)
    # Usage so far includes the current turn's reply; tool calls count the earlier ones.
    assert first.usage == Usage(input_tokens=10, output_tokens=2)
    assert second.usage == Usage(input_tokens=30, output_tokens=5)
    assert (first.tool_calls, second.tool_calls) == (0, 1)
    assert first.depth == 0
    # deps reach neither the record nor a span.
    assert "s3cr3t" not in step.model_dump_json()
    for span in traced.spans:
        assert "s3cr3t" not in json.dumps(dict(span.attributes or {}), default=str)


async def test_an_async_tool_and_a_threaded_tool_get_the_context_too() -> None:
    async def async_name(ctx: RunContext[Db], user_id: str) -> str:
        return ctx.deps.users[user_id]

    def threaded_name(ctx: RunContext[Db], user_id: str) -> str:
        return ctx.deps.users[user_id].upper()

    agent = SubAgent(name="a", prompt="p", tools=[async_name, threaded_name], max_turns=2)
    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="async_name", arguments={"user_id": "u1"}),
                                ToolCall(name="threaded_name", arguments={"user_id": "u1"})]),
        "done",
    ])  # fmt: skip
    step = await agent.run(llm=llm, deps=DB)
    first, second = step.turns[0].tool_results
    assert first.ok and "Ada" in first.content
    assert second.ok and "ADA" in second.content


async def test_a_tool_from_a_json_schema_may_take_the_context() -> None:
    def lookup(ctx: RunContext[Db], **arguments: Any) -> str:
        return ctx.deps.users[arguments["user_id"]]

    schema = {"type": "object", "properties": {"user_id": {"type": "string"}},
              "required": ["user_id"]}  # fmt: skip
    lookup_tool = Tool.from_schema("lookup", "Look a user up.", schema, lookup)
    agent = SubAgent(name="a", prompt="p", tools=[lookup_tool], max_turns=2)
    step = await agent.run(llm=ScriptedLLM([call("lookup", user_id="u1"), "ok"]), deps=DB)
    assert lookup_tool.definition.parameters == schema
    assert "Ada" in step.turns[0].tool_results[0].content


# --- validators and instructions ---


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_a_validator_taking_a_context_judges_with_the_deps(protocol: str) -> None:
    phases: list[str] = []

    def known_user(ctx: RunContext[Db], output: str) -> Validation:
        phases.append(ctx.phase)
        if output in ctx.deps.users.values():
            return Validation.ok()
        return Validation.fail(f"{output!r} is not a user")

    def short(output: str) -> Validation:  # a plain validator beside it
        return Validation.ok() if len(output) < 10 else Validation.fail("too long")

    agent = SubAgent(name="a", prompt="p", output=str, validators=[known_user, short],
                     max_turns=1, return_retries=1, tool_policy=ToolPolicy(protocol=protocol))  # type: ignore[arg-type]  # fmt: skip
    llm = ScriptedLLM([answer(protocol, "Bob"), answer(protocol, "Ada")])
    step = await agent.run(llm=llm, deps=DB)
    assert step.ok and step.output == "Ada"
    assert "'Bob' is not a user" in (step.turns[0].feedback or "")
    assert phases == ["must_return", "retry"]


async def test_instructions_taking_a_context_see_the_deps_and_the_values() -> None:
    def instructions(ctx: RunContext[Db], values: Mapping[str, Any]) -> str:
        return f"Serve {ctx.deps.users[values['user']]} (turn {ctx.turn}, {ctx.phase})."

    agent = SubAgent(name="a", prompt="Help {{user}}", instructions=instructions)
    llm = ScriptedLLM(["ok"])
    await agent.run({"user": "u1"}, llm=llm, deps=DB)
    system = llm.requests[0].messages[0].content
    assert system.endswith("Serve Ada (turn 0, normal).")


# --- deps_type ---


async def test_an_agent_declaring_deps_refuses_a_run_without_them() -> None:
    agent = SubAgent(name="a", prompt="p", deps_type=Db)
    with pytest.raises(ConfigurationError, match=r"deps.*declares deps_type=Db"):
        await agent.run(llm=ScriptedLLM(["x"]))
    with pytest.raises(ConfigurationError, match="deps_type=Db, got a str instance"):
        await agent.run(llm=ScriptedLLM(["x"]), deps="nope")  # type: ignore[arg-type]


def test_a_deps_type_that_is_no_type_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="deps_type"):
        SubAgent(name="a", prompt="p", deps_type=DB)  # type: ignore[arg-type]


async def test_deps_are_checked_before_a_batch_starts() -> None:
    agent = SubAgent(name="a", prompt="p", deps_type=Db, llm=ScriptedLLM(["x"]))
    with pytest.raises(ConfigurationError, match="deps"):
        await run_many(agent, [{}], deps=None)


async def test_a_stream_and_a_batch_hand_the_deps_to_tools() -> None:
    agent = SubAgent(name="a", prompt="p {{n}}", tools=[user_name], max_turns=2)
    llm = ScriptedLLM([call("user_name", user_id="u1"), "done"])
    async with agent.stream({"n": 0}, llm=llm, deps=DB) as run:
        step = await run.result()
    assert "Ada" in step.turns[0].tool_results[0].content
    llm = ScriptedLLM([call("user_name", user_id="u1"), "done"] * 2)
    steps = await run_many(agent, [{"n": 1}, {"n": 2}], llm=llm, deps=DB, concurrency=1)
    assert all("Ada" in s.turns[0].tool_results[0].content for s in steps)


# --- nesting ---


async def test_a_nested_agent_gets_the_calling_run_deps_by_default() -> None:
    inner = SubAgent(name="inner", prompt="who is {{user_id}}", tools=[user_name],
                     max_turns=2, deps_type=Db)  # fmt: skip
    outer = SubAgent(name="outer", prompt="p", tools=[inner.as_tool()], max_turns=2)
    llm = ScriptedLLM([
        call("inner", user_id="u1"),  # the outer agent calls the inner one
        call("user_name", user_id="u1"),  # the inner one its tool
        "Ada",  # the inner one answers
        "The user is Ada",  # the outer one answers
    ])  # fmt: skip
    step = await outer.run(llm=llm, deps=DB)
    assert step.ok
    nested = step.turns[0].tool_results[0]
    assert nested.ok and nested.step is not None and nested.step.output == "Ada"
    assert "user_id" in inner.as_tool().definition.parameters["properties"]
    assert "run" not in inner.as_tool().definition.parameters["properties"]


async def test_a_nested_agent_given_its_own_deps_uses_them() -> None:
    other = Db({"u1": "Grace"})
    inner = SubAgent(name="inner", prompt="who is {{user_id}}", tools=[user_name], max_turns=2)
    outer = SubAgent(name="outer", prompt="p", tools=[inner.as_tool(deps=other)], max_turns=2)
    llm = ScriptedLLM([call("inner", user_id="u1"), call("user_name", user_id="u1"),
                       "Grace", "done"])  # fmt: skip
    step = await outer.run(llm=llm, deps=DB)
    inner_step = step.turns[0].tool_results[0].step
    assert inner_step is not None
    assert "Grace" in inner_step.turns[0].tool_results[0].content


async def test_a_nested_agent_needing_deps_the_caller_lacks_is_a_tool_error() -> None:
    inner = SubAgent(name="inner", prompt="who is {{user_id}}", deps_type=Db)
    outer = SubAgent(name="outer", prompt="p", tools=[inner.as_tool()], max_turns=2)
    step = await outer.run(llm=ScriptedLLM([call("inner", user_id="u1"), "gave up"]))
    result = step.turns[0].tool_results[0]
    assert not result.ok and "declares deps_type=Db" in result.content


def test_a_partial_keeps_its_context_parameter_detected() -> None:
    def lookup(ctx: RunContext[Db], table: str, user_id: str) -> str:
        return ctx.deps.users[user_id]

    bound = functools.partial(lookup, table="users")
    assert takes_run_context(bound)


async def test_a_nested_agent_whose_prompt_has_a_variable_named_run_still_works() -> None:
    inner = SubAgent(name="inner", prompt="do {{run}}")
    outer = SubAgent(name="outer", prompt="p", tools=[inner.as_tool()], max_turns=2)
    step = await outer.run(llm=ScriptedLLM([call("inner", run="laps"), "ran", "done"]))
    assert step.turns[0].tool_results[0].ok
    assert list(inner.as_tool().definition.parameters["properties"]) == ["run"]
