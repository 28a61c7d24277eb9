"""Hooks (subagent/_hooks.py): the loop's one seam, public.

A hook's methods are called with the keyword arguments they name, in one documented order
(approval, usage limits, the agent's hooks, the run's hooks, on_state); a hook that raises
is raised as itself with the run's turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from subagent import (
    ConfigurationError,
    Correction,
    FailReason,
    LLMResponse,
    RunContext,
    RunHook,
    RunState,
    ScriptedLLM,
    SubAgent,
    Tool,
    ToolBatch,
    ToolCall,
    ToolResult,
    Turn,
    UsageLimits,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def deploy(env: str) -> str:
    """Deploy."""
    return env


def add_then_answer() -> ScriptedLLM:
    return ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})]),
        '{"x": 3}',
    ])  # fmt: skip


def adder(**fields: Any) -> SubAgent[Answer]:
    return SubAgent(name="adder", prompt="Add", output=Answer, max_turns=3,
                    tools=[Tool(add, run_in_thread=False)], **fields)  # fmt: skip


class Recorder(RunHook):
    """Records each seam it is called at, with what it was given."""

    def __init__(self, label: str, log: list[str]) -> None:
        self.label, self.log = label, log

    def before_call(self, *, run: RunContext[Any]) -> str | None:
        self.log.append(f"{self.label} before_call turn {run.turn}")
        return None

    def after_reply(self, *, response: LLMResponse, run: RunContext[Any]) -> str | None:
        self.log.append(f"{self.label} after_reply {len(response.tool_calls)} call(s)")
        return None

    def before_tools(self, *, batch: ToolBatch, run: RunContext[Any]) -> None:
        self.log.append(f"{self.label} before_tools {[c.name for c in batch.calls]}")

    def after_tools(
        self, *, batch: ToolBatch, results: Sequence[ToolResult], run: RunContext[Any]
    ) -> None:
        self.log.append(f"{self.label} after_tools {[r.ok for r in results]}")

    def after_turn(self, *, turn: Turn, state: RunState, run: RunContext[Any]) -> None:
        self.log.append(f"{self.label} after_turn {turn.index} {state.phase}")


async def test_each_seam_is_called_in_turn_order_with_what_it_names() -> None:
    log: list[str] = []
    step = await adder(hooks=[Recorder("agent", log)]).run(llm=add_then_answer())
    assert step.output == Answer(x=3)
    assert log == [
        "agent before_call turn 1",
        "agent after_reply 1 call(s)",
        "agent before_tools ['add']",
        "agent after_tools [True]",
        "agent after_turn 1 normal",
        "agent before_call turn 2",
        "agent after_reply 0 call(s)",
    ]  # no after_turn after the last turn


async def test_the_agents_hooks_come_before_the_runs_and_on_state_last() -> None:
    log: list[str] = []
    step = await adder(hooks=[Recorder("agent", log)]).run(
        llm=add_then_answer(), hooks=[Recorder("run", log)],
        on_state=lambda state: log.append("on_state"),
    )  # fmt: skip
    assert step.ok
    assert log[:4] == ["agent before_call turn 1", "run before_call turn 1",
                       "agent after_reply 1 call(s)", "run after_reply 1 call(s)"]  # fmt: skip
    turn_end = [line for line in log if "after_turn" in line or line == "on_state"]
    assert turn_end == ["agent after_turn 1 normal", "run after_turn 1 normal", "on_state"]


async def test_approval_comes_first_a_paused_batch_reaches_no_later_hook() -> None:
    log: list[str] = []
    agent = SubAgent(name="ops", prompt="Ship", output=Answer, max_turns=3,
                     tools=[Tool(deploy, requires_approval=True, run_in_thread=False)],
                     hooks=[Recorder("agent", log)])  # fmt: skip
    step = await agent.run(llm=ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="deploy", arguments={"env": "a"})])
    ]))  # fmt: skip
    assert step.paused
    assert not any("before_tools" in line for line in log)
    assert log[-1] == "agent after_turn 1 paused"


class Nosy(RunHook):
    """Names only what it uses, or takes everything with **kwargs."""

    def __init__(self) -> None:
        self.given: list[set[str]] = []

    def after_tools(self, **given: Any) -> None:
        self.given.append(set(given))

    def after_turn(self, *, turn: Turn) -> None:
        self.given.append({"turn"})


async def test_a_method_gets_the_arguments_it_names_and_all_of_them_with_kwargs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from subagent._live import LiveRun

    frozen: list[int] = []
    freeze = LiveRun.freeze
    monkeypatch.setattr(LiveRun, "freeze", lambda self, *a: frozen.append(1) or freeze(self, *a))
    hook = Nosy()
    await adder(hooks=[hook]).run(llm=add_then_answer())
    assert hook.given == [{"batch", "results", "run"}, {"turn"}]
    assert frozen == []  # no hook asked for the state: none was taken


async def test_after_reply_is_told_the_model_that_produced_the_reply() -> None:
    seen: list[str | None] = []

    class Models(RunHook):
        def after_reply(self, *, model: str | None) -> None:  # type: ignore[override]
            seen.append(model)

    agent = SubAgent(name="a", prompt="p", output=Answer, max_turns=1, hooks=[Models()])
    small = ScriptedLLM(["three"], model_name="small")
    large = ScriptedLLM(['{"x": 3}'], model_name="large")
    step = await agent.run(llm=small, return_retries=1, correction=Correction(llm=large))
    assert step.ok and seen == ["small", "large"]


class AsksTooMuch(RunHook):
    def before_call(self, *, run: RunContext[Any], budget: int) -> str | None:
        return None


def test_a_method_that_asks_for_an_argument_it_is_not_given_is_refused_at_once() -> None:
    with pytest.raises(ConfigurationError, match=r"AsksTooMuch.before_call\(\) asks for "
                       r"\['budget'\]") as refused:  # fmt: skip
        adder(hooks=[AsksTooMuch()])
    assert refused.value.field == "hooks"


def test_a_hook_that_is_no_run_hook_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="is not a RunHook"):
        adder(hooks=[print])


class Broken(RunHook):
    def after_tools(self, *, results: Sequence[ToolResult]) -> None:
        raise KeyError("audit store unreachable")


async def test_a_hook_that_raises_is_raised_as_itself_with_the_turns_so_far() -> None:
    with pytest.raises(KeyError, match="audit store unreachable") as raised:
        await adder(hooks=[Broken()]).run(llm=add_then_answer())
    turns = raised.value.turns  # type: ignore[attr-defined]
    assert [turn.index for turn in turns] == [1]
    assert turns[0].tool_results[0].ok  # the call ran, then the hook broke


class Stop(RunHook):
    """Ends the run before a second model call."""

    def before_call(self, *, run: RunContext[Any]) -> str | None:
        return "one call is enough" if run.turn > 1 else None


async def test_a_reason_from_before_call_ends_the_run_before_the_call_is_sent() -> None:
    llm = add_then_answer()
    step = await adder(hooks=[Stop()]).run(llm=llm)
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert "one call is enough" in step.failure.message
    assert len(llm.requests) == 1


async def test_usage_limits_still_come_before_the_users_hooks() -> None:
    log: list[str] = []
    step = await adder(hooks=[Recorder("agent", log)]).run(
        llm=add_then_answer(), usage_limits=UsageLimits(max_tool_calls=0)
    )
    assert step.failure is not None and step.failure.reason is FailReason.USAGE_LIMIT
    assert not any("before_tools" in line for line in log)  # the limit refused the batch


async def test_a_resumed_run_takes_hooks_of_its_own() -> None:
    agent = SubAgent(name="ops", prompt="Ship", output=Answer, max_turns=3,
                     tools=[Tool(deploy, requires_approval=True, run_in_thread=False)])  # fmt: skip
    paused = await agent.run(llm=ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="deploy", arguments={"env": "a"})])
    ]))  # fmt: skip
    assert paused.state is not None
    log: list[str] = []
    done = await agent.resume(paused.state, {"c1": True}, llm=ScriptedLLM(['{"x": 1}']),
                              hooks=[Recorder("resumed", log)])  # fmt: skip
    assert done.output == Answer(x=1)
    assert log[0] == "resumed before_tools ['deploy']"
