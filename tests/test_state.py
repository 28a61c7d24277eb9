"""A run's state between turns (subagent/_state.py): taking it, JSON, resuming from it."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import Traced, attrs

import subagent._run as run_module
from subagent import (
    ConfigurationError,
    Decision,
    InvalidStateError,
    LLMResponse,
    ReplyPolicy,
    RunState,
    ScriptedLLM,
    StateMismatchError,
    Step,
    SubAgent,
    ToolCall,
    ToolPolicy,
    tool,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


@tool(run_in_thread=False)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


Protocol = Literal["native", "react"]
Action = Literal["tool", "bad_tool", "invalid", "valid", "fail"]

#: The Step fields that are wall-clock time: the only ones a resumed run may differ in.
WALL_CLOCK = frozenset({"duration_s", "elapsed_s"})


def comparable(value: Any) -> Any:
    """A Step's JSON data without its wall-clock fields (at every depth)."""
    if isinstance(value, Step):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in WALL_CLOCK}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def reply(protocol: Protocol, action: Action) -> str | LLMResponse:
    if protocol == "native":
        if action in ("tool", "bad_tool"):
            arguments = {"key": "k"} if action == "tool" else {}
            return LLMResponse(tool_calls=[ToolCall(id="", name="lookup", arguments=arguments)])
        return {"invalid": "not json at all", "valid": '{"x": 1}', "fail": '{"fail": "no"}'}[action]
    if action in ("tool", "bad_tool"):
        arguments = '{"key": "k"}' if action == "tool" else "{}"
        return f'Thought: look.\nAction: {{"tool": "lookup", "input": {arguments}}}'
    answer = {"invalid": "nope", "valid": '{"x": 1}', "fail": '{"fail": "no"}'}[action]
    return f"Final Answer: {answer}"


def agent(protocol: Protocol = "native", **options: Any) -> SubAgent[Answer]:
    return SubAgent(name="probe", prompt="Find x", output=Answer, tools=[lookup],
                    tool_policy=ToolPolicy(protocol=protocol), **options)  # fmt: skip


async def run_saving(
    probe: SubAgent[Answer], script: list[Any], **options: Any
) -> tuple[Step[Answer], list[str]]:
    saved: list[str] = []
    step = await probe.run(llm=ScriptedLLM(script), on_state=lambda s: saved.append(
        s.model_dump_json()), **options)  # fmt: skip
    return step, saved


# --- the property: resume after any turn, get the same Step ---------------------------------


# Misses weigh more than the rest: streaks of them are where the context is collapsed.
ACTIONS = st.sampled_from(["tool", "bad_tool", "invalid", "invalid", "invalid", "valid", "fail"])


@pytest.mark.filterwarnings("ignore:agent 'probe' has tools but runs with max_turns=1")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    protocol=st.sampled_from(["native", "react"]),
    max_turns=st.integers(1, 5),
    return_retries=st.integers(0, 3),
    policy=st.sampled_from(["collapse", "accumulate", "quote"]),
    actions=st.lists(ACTIONS, min_size=8, max_size=8),
)
def test_resuming_the_state_saved_after_any_turn_gives_the_same_step(
    protocol: Protocol, max_turns: int, return_retries: int, policy: str, actions: list[Action]
) -> None:
    probe = agent(protocol, reply_policy=ReplyPolicy(context_policy=policy))
    script = [reply(protocol, action) for action in actions]
    options = {"max_turns": max_turns, "return_retries": return_retries}

    async def check() -> None:
        whole, saved = await run_saving(probe, script, **options)
        assert len(saved) == len(whole.turns) - 1  # one state per turn but the last
        for text in saved:
            state = RunState.model_validate_json(text)
            taken = len(state.turns)
            resumed = await probe.resume(text, llm=ScriptedLLM(script[taken:]))
            assert comparable(resumed) == comparable(whole), taken

    anyio.run(check)


# --- the record ------------------------------------------------------------------------


async def test_a_state_round_trips_through_json_exactly() -> None:
    _, saved = await run_saving(agent(), [reply("native", "tool"), "bad", '{"x": 2}'],
                                max_turns=3, return_retries=1)  # fmt: skip
    for text in saved:
        state = RunState.model_validate_json(text)
        assert state.model_dump_json() == text
        assert RunState.model_validate_json(state.model_dump_json()) == state


async def test_the_state_after_a_turn_holds_its_phase_budgets_conversation_and_usage() -> None:
    states: list[RunState] = []
    script = [LLMResponse(tool_calls=[ToolCall(id="c1", name="lookup", arguments={"key": "k"})],
                          usage={"input_tokens": 7, "output_tokens": 3}),
              '{"x": 1}']  # fmt: skip
    step = await agent().run(llm=ScriptedLLM(script), max_turns=3, on_state=states.append)
    (state,) = states
    assert (state.version, state.agent, state.phase) == (1, "probe", "normal")
    assert (state.work_remaining, state.retries_remaining, state.max_turns) == (2, 0, 3)
    assert [m.role for m in state.history] == ["user", "assistant", "tool"]
    assert state.turns == step.turns[:1]
    assert (state.usage.input_tokens, state.usage.output_tokens) == (7, 3)
    assert state.pending is None and not state.paused
    assert set(state.fingerprint) == {"output", "tools", "prompts", "protocol"}


async def test_no_state_is_taken_when_nobody_asks_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: object) -> RunState:
        raise AssertionError("a state was taken")

    monkeypatch.setattr(run_module._Run, "snapshot", refuse)
    step = await agent().run(llm=ScriptedLLM([reply("native", "tool"), '{"x": 1}']))
    assert step.ok


async def test_on_state_is_called_after_every_turn_that_leaves_the_run_going() -> None:
    states: list[RunState] = []
    script = ["bad", "worse", '{"x": 1}']
    step = await agent().run(llm=ScriptedLLM(script), max_turns=2, return_retries=1,
                             on_state=states.append)  # fmt: skip
    assert [s.phase for s in states] == ["must_return", "retry"]
    assert [len(s.turns) for s in states] == [1, 2]
    assert [(s.work_remaining, s.retries_remaining) for s in states] == [
        (t.work_remaining, t.retries_remaining) for t in step.turns[:2]
    ]


async def test_an_async_on_state_is_refused_before_the_run() -> None:
    async def keep(state: RunState) -> None: ...

    with pytest.raises(ConfigurationError, match="on_state"):
        await agent().run(llm=ScriptedLLM(['{"x": 1}']), on_state=keep)  # type: ignore[arg-type]


async def test_a_resumed_run_keeps_the_system_prompt_of_its_context() -> None:
    def speak(context: Any) -> str:
        return f"Speak as {context.get('who', '?')}."

    probe = SubAgent(name="probe", prompt="Find x", output=Answer, tools=[lookup],
                     instructions=speak)  # fmt: skip
    saved: list[RunState] = []
    await probe.run({"who": "Ada"}, llm=ScriptedLLM([reply("native", "tool"), '{"x": 1}']),
                    on_state=saved.append)  # fmt: skip
    model = ScriptedLLM(['{"x": 1}'])
    await probe.resume(saved[0], llm=model)
    assert "Speak as Ada." in model.requests[0].messages[0].content


# --- what must match ----------------------------------------------------------------------


async def saved_state() -> RunState:
    saved: list[RunState] = []
    await agent().run(llm=ScriptedLLM([reply("native", "tool"), '{"x": 1}']),
                      on_state=saved.append)  # fmt: skip
    return saved[0]


@tool(run_in_thread=False)
def other(key: str) -> str:
    """Another tool."""
    return key


class Other(BaseModel):
    y: str


@pytest.mark.parametrize(
    ("changed", "part"),
    [
        ({"name": "someone"}, "agent"),
        ({"output": Other}, "output"),
        ({"tools": [lookup, other]}, "tools"),
        ({"tools": [tool(lookup.function, requires_approval=True)]}, "tools"),
        ({"prompt": "Find y"}, "prompts"),
        ({"prompts": {"truncated_reply": "Shorter."}}, "prompts"),
        ({"tool_policy": ToolPolicy(protocol="react")}, "protocol"),
    ],
)
async def test_a_state_is_refused_by_an_agent_that_differs_naming_what(
    changed: dict[str, Any], part: str
) -> None:
    state = await saved_state()
    fields = {"name": "probe", "prompt": "Find x", "output": Answer, "tools": [lookup]} | changed
    with pytest.raises(StateMismatchError, match=f"{part} differs") as caught:
        await SubAgent(**fields).resume(state, llm=ScriptedLLM(['{"x": 1}']))
    assert caught.value.part == part


async def test_budgets_and_models_may_differ_but_budgets_come_from_the_state() -> None:
    state = await saved_state()
    probe = agent(max_turns=9, return_retries=4, llm=ScriptedLLM([]))
    step = await probe.resume(state, llm=ScriptedLLM(['{"x": 1}']))
    assert (step.max_turns, step.return_retries) == (state.max_turns, state.return_retries)


async def test_a_state_of_another_version_is_refused_naming_the_field() -> None:
    text = (await saved_state()).model_dump_json().replace('"version":1', '"version":2')
    with pytest.raises(InvalidStateError) as refused:
        await agent().resume(text, llm=ScriptedLLM([]))
    assert refused.value.field == "version"


async def test_decisions_for_a_state_that_is_not_paused_are_refused() -> None:
    state = await saved_state()
    with pytest.raises(ConfigurationError, match="not paused"):
        await agent().resume(state, {"c1": Decision.approve()}, llm=ScriptedLLM([]))


# --- traces ----------------------------------------------------------------------------


async def test_the_resumed_part_is_a_trace_of_its_own_linked_to_the_first(
    traced: Traced,
) -> None:
    saved: list[RunState] = []
    script = [reply("native", "tool"), '{"x": 1}']
    await agent().run(llm=ScriptedLLM(script), tracer_provider=traced.provider,
                      on_state=saved.append)  # fmt: skip
    (first,) = traced.named("invoke_agent probe")
    assert saved[0].traceparent is not None
    assert saved[0].traceparent.split("-")[1] == f"{first.context.trace_id:032x}"
    await agent().resume(saved[0].model_dump_json(), llm=ScriptedLLM(script[1:]),
                         tracer_provider=traced.provider)  # fmt: skip
    later = [s for s in traced.named("invoke_agent probe") if s is not first]
    (resumed,) = later
    # Its own trace, whose root says how the run ended (a trace list shows it finished),
    # linked to the part it goes on from.
    assert resumed.context.trace_id != first.context.trace_id
    assert resumed.parent is None
    assert [link.context.span_id for link in resumed.links] == [first.context.span_id]
    assert attrs(resumed)["subagent.resumed"] is True
    assert attrs(resumed)["subagent.outcome"] == "done"
    assert "subagent.resumed" not in attrs(first)


async def test_an_exception_in_on_state_ends_the_run_raised_as_it_is_with_its_turns() -> None:
    def broken(state: RunState) -> None:
        raise KeyError("the store is down")

    with pytest.raises(KeyError, match="the store is down") as caught:
        await agent().run(llm=ScriptedLLM([reply("native", "tool"), '{"x": 1}']),
                          on_state=broken)  # fmt: skip
    assert len(caught.value.turns) == 1  # type: ignore[attr-defined]
