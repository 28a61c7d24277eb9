"""agent.override(...) (subagent/_override.py): an agent's model, deps, tools or
instructions replaced in a block."""

from __future__ import annotations

import anyio
import pytest
from support import Answer

from subagent import (
    ConfigurationError,
    LLMResponse,
    RetryPolicy,
    RunContext,
    RunEnded,
    ScriptedLLM,
    SubAgent,
    TestLLM,
    Tool,
    ToolCall,
    run_many,
)

pytestmark = pytest.mark.anyio

# Built with a real model, as application code does; the tests never reach it (no key is
# needed to build an agent with a spec string, and a call to it would fail).
APP_AGENT = SubAgent(name="app", prompt="Compute {{question}}", output=Answer,
                     llm="openai:gpt-4o-mini@http://127.0.0.1:9/v1")  # fmt: skip


async def app_code(question: str) -> Answer:
    """Application code that runs its own agent on its own model."""
    step = await APP_AGENT.run({"question": question}, llm="openai:gpt-4o@http://127.0.0.1:9/v1")
    step.raise_for_failure()
    return step.output


async def test_the_override_wins_over_the_agents_model_and_the_runs_inside_the_block() -> None:
    with APP_AGENT.override(llm=TestLLM(output=Answer(value=3))):
        assert await app_code("1+2") == Answer(value=3)
    step = await APP_AGENT.run({"question": "1+2"}, max_turns=1, retry_policy=RetryPolicy.none())
    assert step.failure is not None and step.failure.reason.value == "llm_error"  # its own again


async def test_the_override_reaches_runs_started_in_the_block() -> None:
    with APP_AGENT.override(llm=ScriptedLLM(['{"value": 1}', '{"value": 2}', '{"value": 3}'])):
        async with APP_AGENT.stream({"question": "?"}) as events:
            ended = [event async for event in events if isinstance(event, RunEnded)]
        assert ended[0].step.output == Answer(value=1)
        async with APP_AGENT.start({"question": "?"}) as run:
            assert (await run.result()).output == Answer(value=2)
        batch = await run_many(APP_AGENT, [{"question": "?"}])
        assert [step.output for step in batch] == [Answer(value=3)]


async def test_the_override_reaches_an_overridden_agent_run_as_a_tool_of_another() -> None:
    outer = SubAgent(name="outer", prompt="Ask app", output=Answer, tools=[APP_AGENT.as_tool()])
    test_llm = TestLLM()
    with APP_AGENT.override(llm=TestLLM(output=Answer(value=5))):
        step = await outer.run(llm=test_llm)
    assert step.ok
    (result,) = step.turns[0].tool_results
    assert result.ok and result.step is not None and result.step.output == Answer(value=5)


async def test_a_nested_agent_without_a_model_runs_on_its_overridden_caller_s() -> None:
    inner = SubAgent(name="inner", prompt="Inner {{question}}", output=Answer, max_turns=1)
    outer = SubAgent(name="outer", prompt="Ask", output=Answer, tools=[inner.as_tool()],
                     llm="openai:gpt-4o-mini@http://127.0.0.1:9/v1")  # fmt: skip
    test_llm = TestLLM()
    with outer.override(llm=test_llm):
        step = await outer.run()
    assert step.ok and step.turns[0].tool_results[0].step is not None
    assert [request.turn.agent for request in test_llm.requests if request.turn] == [
        "outer", "inner", "outer"
    ]  # fmt: skip


async def test_the_innermost_block_wins_and_the_outer_one_comes_back() -> None:
    with APP_AGENT.override(llm=TestLLM(output=Answer(value=1))):
        with APP_AGENT.override(llm=TestLLM(output=Answer(value=2))):
            assert await app_code("?") == Answer(value=2)
        assert await app_code("?") == Answer(value=1)


async def test_concurrent_overrides_of_one_agent_do_not_leak_into_each_other() -> None:
    answers: dict[int, Answer] = {}
    both_inside = [anyio.Event(), anyio.Event()]

    async def a_test(value: int) -> None:
        with APP_AGENT.override(llm=TestLLM(output=Answer(value=value))):
            both_inside[value].set()
            await both_inside[1 - value].wait()  # the other test is inside its block too
            answers[value] = await app_code("?")

    async with anyio.create_task_group() as group:
        group.start_soon(a_test, 0)
        group.start_soon(a_test, 1)
    assert answers == {0: Answer(value=0), 1: Answer(value=1)}


@pytest.mark.parametrize(("llm", "message"), [(3, "3 is not an LLM"),
                                              ("gpt-4o", "expected 'openai:MODEL'")])  # fmt: skip
def test_an_override_with_something_else_than_a_model_is_refused(llm: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"^llm: .*{message}"):
        APP_AGENT.override(llm=llm)  # type: ignore[arg-type]


# --- deps, tools and instructions ---


class Db:
    def __init__(self, rows: dict[str, int]) -> None:
        self.rows = rows


def count(ctx: RunContext[Db], table: str) -> int:
    """Rows of a table."""
    return ctx.deps.rows[table]


def fake_count(table: str) -> int:
    """Rows of a table (a fake)."""
    return 7


COUNTER = SubAgent(name="counter", prompt="Rows of {{table}}?", output=Answer, max_turns=2,
                   tools=[Tool(count, run_in_thread=False)], deps_type=Db)  # fmt: skip


def counts_then_answers() -> ScriptedLLM:
    return ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c", name="count", arguments={"table": "t"})]),
        lambda request: '{"value": 7}' if any("\n7\n" in str(m.content)
                                               for m in request.messages) else '{"value": 1}',
    ])  # fmt: skip


async def test_deps_given_to_the_override_win_over_the_runs_inside_the_block_only() -> None:
    real, test = Db({"t": 1}), Db({"t": 7})
    with COUNTER.override(llm=counts_then_answers(), deps=test):
        inside = await COUNTER.run({"table": "t"}, deps=real)
    assert inside.output == Answer(value=7)
    outside = await COUNTER.run({"table": "t"}, deps=real, llm=counts_then_answers())
    assert outside.output == Answer(value=1)


async def test_tools_given_to_the_override_replace_the_agents_for_new_runs_in_the_block() -> None:
    fake = Tool(fake_count, name="count", run_in_thread=False)
    llm = counts_then_answers()
    with COUNTER.override(tools=[fake]):
        step = await COUNTER.run({"table": "t"}, deps=Db({"t": 1}), llm=llm)
        handled = await COUNTER.start({"table": "t"}, deps=Db({"t": 1}),
                                      llm=counts_then_answers()).execute()  # fmt: skip
    assert step.output == Answer(value=7) and handled.output == Answer(value=7)
    assert llm.requests[0].tools[0].description == "Rows of a table (a fake)."
    outside = await COUNTER.run({"table": "t"}, deps=Db({"t": 1}), llm=counts_then_answers())
    assert outside.output == Answer(value=1)


async def test_instructions_given_to_the_override_reach_the_system_prompt() -> None:
    llm = ScriptedLLM(['{"value": 2}'])
    with APP_AGENT.override(llm=llm, instructions="Answer in one word."):
        await app_code("1+1")
    assert str(llm.requests[0].messages[0].content).endswith("Answer in one word.")


def test_an_override_of_nothing_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="give what to replace") as refused:
        APP_AGENT.override()
    assert refused.value.field == "override"
