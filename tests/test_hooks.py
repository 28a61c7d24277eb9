"""Hooks (subagent/_hooks.py): the loop's one seam, public.

A hook's methods are called with the keyword arguments they name, in one documented order
(approval, usage limits, the agent's hooks, the run's hooks, on_state); a hook that raises
is raised as itself with the run's turns. An input guardrail (``before_run``) checks the
task before the first model call; a refusal ends the run ``failed(input_refused)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from opentelemetry.trace import StatusCode
from pydantic import BaseModel
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    Correction,
    FailReason,
    InputGuardrail,
    LLMResponse,
    Message,
    RunContext,
    RunHook,
    RunState,
    ScriptedLLM,
    Step,
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


# --- before_run: input guardrails --------------------------------------------------------


def no_homework(messages: Sequence[Message]) -> str | None:
    """Refuses a task that asks for homework."""
    return "homework is not what this agent is for" if "homework" in messages[-1].content else None


def helper(**fields: Any) -> SubAgent[Answer]:
    fields.setdefault("max_turns", 2)
    return SubAgent(name="helper", prompt="{{question}}", output=Answer, **fields)


async def test_a_refused_task_fails_input_refused_with_the_reason_and_no_model_call() -> None:
    llm = ScriptedLLM(['{"x": 1}'])
    step = await helper(hooks=[InputGuardrail(no_homework)]).run(
        {"question": "Do my homework"}, llm=llm
    )
    assert step.failure is not None and step.failure.reason is FailReason.INPUT_REFUSED
    assert step.failure.message == "homework is not what this agent is for"
    assert llm.requests == [] and step.turns == []
    assert not step.retryable
    assert step.summary() == (
        "failed (input_refused: homework is not what this agent is for) in 0 turns ()"
    )


async def test_a_refused_runs_step_loads_back_from_its_json() -> None:
    step = await helper(hooks=[InputGuardrail(no_homework)]).run(
        {"question": "homework, please"}, llm=ScriptedLLM([])
    )
    again = Step[Answer].model_validate_json(step.model_dump_json())
    assert again == step
    assert again.failure is not None and again.failure.reason is FailReason.INPUT_REFUSED


async def test_a_passing_guardrail_leaves_the_run_as_it_was() -> None:
    plain = ScriptedLLM(['{"x": 1}'])
    guarded = ScriptedLLM(['{"x": 1}'])
    without = await helper().run({"question": "1?"}, llm=plain)
    with_it = await helper(hooks=[InputGuardrail(no_homework)]).run({"question": "1?"},
                                                                   llm=guarded)  # fmt: skip
    assert with_it.output == without.output == Answer(x=1)
    assert guarded.requests == plain.requests
    assert [t.model_dump(exclude={"duration_s"}) for t in with_it.turns] == [
        t.model_dump(exclude={"duration_s"}) for t in without.turns
    ]


async def test_an_async_guardrail_is_awaited_and_may_refuse() -> None:
    seen: list[str] = []

    async def moderated(messages: Sequence[Message]) -> str | None:
        await anyio.lowlevel.checkpoint()  # a moderation model would be asked here
        seen.append(messages[-1].content)
        return "flagged" if "flag" in messages[-1].content else None

    agent = helper(hooks=[InputGuardrail(moderated)])
    refused = await agent.run({"question": "flag me"}, llm=ScriptedLLM([]))
    passed = await agent.run({"question": "2?"}, llm=ScriptedLLM(['{"x": 2}']))
    assert refused.failure is not None and refused.failure.reason is FailReason.INPUT_REFUSED
    assert refused.failure.message == "flagged"
    assert passed.output == Answer(x=2)
    assert seen == ["flag me", "2?"]


async def test_a_guardrail_sees_the_task_as_given_and_the_runs_deps_at_turn_0() -> None:
    seen: list[Any] = []

    def check(messages: Sequence[Message], run: RunContext[Any]) -> None:
        seen.append(([(m.role, m.content) for m in messages], run.deps, run.turn, run.agent))

    # max_turns=1: the must_return notice joins the task the model sees, not the one checked.
    agent = helper(hooks=[InputGuardrail(check)], max_turns=1)
    llm = ScriptedLLM(['{"x": 3}'])
    await agent.run({"question": "3?"}, llm=llm, deps="the deps")
    assert seen == [([("user", "3?")], "the deps", 0, "helper")]
    assert llm.requests[0].messages[-1].content != "3?"


async def test_the_agents_guardrails_run_first_and_the_first_refusal_ends_the_run() -> None:
    log: list[str] = []

    def named(label: str, refuse: bool) -> InputGuardrail:
        def check(messages: Sequence[Message]) -> str | None:
            log.append(label)
            return f"{label} refused" if refuse else None

        return InputGuardrail(check)

    agent = helper(hooks=[named("agent", False)])
    step = await agent.run({"question": "1?"}, llm=ScriptedLLM([]),
                           hooks=[named("run", True), named("later", True)])  # fmt: skip
    assert log == ["agent", "run"]
    assert step.failure is not None and step.failure.message == "run refused"


async def test_a_guardrail_given_to_one_run_checks_that_run_only() -> None:
    agent = helper()
    refused = await agent.run({"question": "homework"}, llm=ScriptedLLM([]),
                              hooks=[InputGuardrail(no_homework)])  # fmt: skip
    answered = await agent.run({"question": "homework"}, llm=ScriptedLLM(['{"x": 4}']))
    assert refused.failure is not None and refused.failure.reason is FailReason.INPUT_REFUSED
    assert answered.output == Answer(x=4)


class Screen(RunHook):
    """A hook of one's own on the same point: async, asking for what it uses."""

    async def before_run(self, *, run: RunContext[Any]) -> str | None:
        await anyio.lowlevel.checkpoint()
        return None if run.deps == "allowed" else "not allowed"


async def test_before_run_is_a_seam_any_hook_may_override_async() -> None:
    agent = helper(hooks=[Screen()])
    refused = await agent.run({"question": "1?"}, llm=ScriptedLLM([]), deps="other")
    passed = await agent.run({"question": "1?"}, llm=ScriptedLLM(['{"x": 1}']), deps="allowed")
    assert refused.failure is not None and refused.failure.message == "not allowed"
    assert passed.ok


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_guardrail_that_raises_is_raised_as_itself(asynchronous: bool) -> None:
    def broken(messages: Sequence[Message]) -> str | None:
        raise KeyError("moderation service down")

    async def broken_async(messages: Sequence[Message]) -> str | None:
        await anyio.lowlevel.checkpoint()
        raise KeyError("moderation service down")

    llm = ScriptedLLM([])
    agent = helper(hooks=[InputGuardrail(broken_async if asynchronous else broken)])
    with pytest.raises(KeyError, match="moderation service down") as raised:
        await agent.run({"question": "1?"}, llm=llm)
    assert raised.value.turns == ()  # type: ignore[attr-defined]
    assert "raised by the hook InputGuardrail(" in "".join(raised.value.__notes__)
    assert llm.requests == []


async def test_a_guardrail_answering_neither_a_reason_nor_none_is_a_type_error() -> None:
    agent = helper(hooks=[InputGuardrail(lambda messages: True)])
    with pytest.raises(TypeError, match=r"InputGuardrail\(<lambda>\).before_run returned True: "
                       r"return why the task is refused"):  # fmt: skip
        await agent.run({"question": "1?"}, llm=ScriptedLLM([]))


def test_a_guardrail_asking_for_an_argument_it_is_not_given_is_refused_at_once() -> None:
    def check(messages: Sequence[Message], user: str) -> None:
        return None

    with pytest.raises(ConfigurationError, match=r"asks for \['user'\]") as refused:
        InputGuardrail(check)
    assert refused.value.field == "hooks"
    with pytest.raises(ConfigurationError, match="needs a function"):
        InputGuardrail("no homework")  # type: ignore[arg-type]


async def test_a_resumed_run_does_not_check_its_task_again() -> None:
    checked: list[int] = []

    def count(messages: Sequence[Message]) -> None:
        checked.append(len(messages))

    agent = SubAgent(name="ops", prompt="Ship", output=Answer, max_turns=3,
                     tools=[Tool(deploy, requires_approval=True, run_in_thread=False)],
                     hooks=[InputGuardrail(count)])  # fmt: skip
    paused = await agent.run(llm=ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="deploy", arguments={"env": "a"})])
    ]))  # fmt: skip
    assert paused.state is not None
    done = await agent.resume(paused.state, {"c1": True}, llm=ScriptedLLM(['{"x": 1}']))
    assert done.ok
    assert checked == [1]


async def test_a_guardrail_runs_within_the_runs_mission_timeout() -> None:
    async def never_answers(messages: Sequence[Message]) -> None:
        await anyio.Event().wait()

    step = await helper(hooks=[InputGuardrail(never_answers)]).run(
        {"question": "1?"}, llm=ScriptedLLM([]), mission_timeout=0.001
    )
    assert step.failure is not None and step.failure.reason is FailReason.TIMEOUT
    refused = await helper(hooks=[InputGuardrail(no_homework)]).run(
        {"question": "homework"}, llm=ScriptedLLM([]), mission_timeout=60
    )
    assert refused.failure is not None and refused.failure.reason is FailReason.INPUT_REFUSED


async def test_a_refused_run_is_traced_failed_with_its_reason(traced: Traced) -> None:
    await helper(hooks=[InputGuardrail(no_homework)]).run(
        {"question": "homework"}, llm=ScriptedLLM([]), tracer_provider=traced.provider
    )
    run = traced.one("invoke_agent helper")
    attributes = attrs(run)
    assert attributes["subagent.outcome"] == "failed"
    assert attributes["subagent.failure.reason"] == "input_refused"
    assert attributes["error.type"] == "input_refused"
    assert run.status.status_code is StatusCode.ERROR
    assert traced.names() == ["invoke_agent helper"]  # no turn, no chat span
