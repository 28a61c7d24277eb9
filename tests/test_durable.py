"""subagent.durable in one process: the steps a durable run records, and its options.

Each test launches DBOS on a SQLite system database of its own (DBOS runs on asyncio only).
The crash tests (kills and restarts) are tests/test_durable_crash.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from dbos import DBOS
from opentelemetry import trace
from support import Traced, attrs, parent_id, span_id

from subagent import (
    ConfigurationError,
    Decision,
    FailReason,
    LLMError,
    RunContext,
    SubAgent,
    Tool,
    tool,
)
from subagent.durable import DurableAgent, DurableLLM, comparable, durable_tool
from subagent.durable._tools import _Recorded
from subagent.llm import LLMRequest, LLMResponse, Message, ToolCall
from subagent.testing import ScriptedLLM


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # DBOS runs its async workflows on asyncio


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Launches DBOS on a fresh SQLite database, after the test built its durable agents."""

    def start() -> None:
        DBOS(config={"name": "durable-tests", "log_level": "WARNING",
                     "system_database_url": f"sqlite:///{tmp_path}/dbos.sqlite"})  # fmt: skip
        DBOS.launch()

    try:
        yield start
    finally:
        DBOS.destroy(destroy_registry=True)


ADDED: list[tuple[int, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    ADDED.append((a, b))
    return a + b


def _adder(*replies: Any) -> tuple[SubAgent[int], ScriptedLLM]:
    llm = ScriptedLLM(list(replies))
    agent = SubAgent(name="adder", prompt="Add 1 and 2.", tools=[add], output=int, max_turns=3)
    return agent, llm


def _calls(*calls: tuple[str, dict[str, Any]]) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=args) for name, args in calls])


async def _step_names(workflow_id: str) -> list[str]:
    return [info["function_name"] for info in await DBOS.list_workflow_steps_async(workflow_id)]


@pytest.mark.anyio
async def test_each_llm_call_and_each_tool_call_is_one_recorded_step(
    launch: Callable[[], None],
) -> None:
    agent, llm = _adder(_calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})), "3")
    durable = DurableAgent(agent, llm=llm)
    launch()
    step = await durable.run(workflow_id="steps")
    assert step.ok and step.output == 3
    assert await _step_names("steps") == [
        "subagent.llm:adder", "subagent.tool:add", "subagent.tool:add", "subagent.llm:adder",
    ]  # fmt: skip


@pytest.mark.anyio
async def test_running_a_workflow_id_again_returns_its_step_without_calling_anything(
    launch: Callable[[], None],
) -> None:
    ADDED.clear()
    agent, llm = _adder(_calls(("add", {"a": 1, "b": 2})), "3")
    durable = DurableAgent(agent, llm=llm)
    launch()
    first = await durable.run(workflow_id="once")
    again = await durable.run(workflow_id="once")  # the script is spent: a call would raise
    assert comparable(again) == comparable(first)
    assert again == await durable.result("once")
    assert ADDED == [(1, 2)]
    assert len(llm.requests) == 2


class _Hanging:
    """A model that never answers (until cancelled)."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await anyio.Event().wait()
        raise AssertionError("unreachable")


@pytest.mark.anyio
async def test_a_timed_out_call_is_recorded_as_its_steps_error(
    launch: Callable[[], None],
) -> None:
    agent = SubAgent(name="waiter", prompt="Wait.", max_turns=1)
    durable = DurableAgent(agent, llm=_Hanging(), timeout=0.05)
    launch()
    step = await durable.run(workflow_id="timeout")
    assert not step.ok and step.failure is not None
    assert step.failure.reason == "timeout"
    # Each attempt (the first and each transport retry) is a step that recorded its error.
    infos = await DBOS.list_workflow_steps_async("timeout")
    assert len(infos) == 1 + len(step.turns[0].transport_retries)
    for info in infos:
        assert info["function_name"] == "subagent.llm:waiter"
        assert isinstance(info["error"], LLMError)
        assert "no reply within 0.05 s" in str(info["error"])


class _Odd(Exception):
    """An exception that does not survive pickling (its constructor takes two values)."""

    def __init__(self, code: int, detail: str):
        super().__init__(f"code {code}: {detail}")


@pytest.mark.anyio
async def test_a_tool_error_that_does_not_pickle_reaches_the_model_by_name_and_message(
    launch: Callable[[], None],
) -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        raise _Odd(7, f"no {key}")

    llm = ScriptedLLM([_calls(("lookup", {"key": "k"})), "done"])
    agent = SubAgent(name="looker", prompt="Look k up.", tools=[lookup], max_turns=2)
    durable = DurableAgent(agent, llm=llm)
    launch()
    step = await durable.run(workflow_id="odd")
    (result,) = step.turns[0].tool_results
    assert result.error_type == "_Odd"
    assert "_Odd: code 7: no k" in result.content


def test_a_recorded_error_is_raised_again_as_the_same_type_when_it_pickles() -> None:
    with pytest.raises(KeyError, match="gone"):
        _Recorded.of_error(KeyError("gone")).unwrap()
    odd = _Recorded.of_error(_Odd(1, "x"))
    assert odd.error is None and odd.error_type == "_Odd"
    with pytest.raises(Exception, match="code 1: x") as raised:
        odd.unwrap()
    assert type(raised.value).__name__ == "_Odd"


def test_a_durable_tool_keeps_its_name_description_and_schema() -> None:
    wrapped = durable_tool(add)
    assert isinstance(wrapped, Tool)
    assert wrapped.definition == add.definition
    assert durable_tool(wrapped) is wrapped
    assert wrapped.timeout is None


@pytest.mark.anyio
async def test_outside_a_workflow_the_wrappers_call_through(
    launch: Callable[[], None],
) -> None:
    launch()
    llm = DurableLLM(ScriptedLLM(["hi"]))
    request = LLMRequest(messages=(Message(role="user", content="hello"),))
    assert (await llm.complete(request)).text == "hi"
    assert await durable_tool(add).call({"a": 2, "b": 5}) == 7


def test_a_durable_agent_needs_a_model() -> None:
    with pytest.raises(ConfigurationError, match="llm"):
        DurableAgent(SubAgent(name="modelless", prompt="x"))


@pytest.mark.parametrize(
    "option", ["on_event", "on_text", "on_state", "tracer_provider", "llm", "timeout"]
)
@pytest.mark.anyio
async def test_process_local_options_are_refused_naming_where_they_go(option: str) -> None:
    agent, llm = _adder()
    durable = DurableAgent(agent, llm=llm, name=f"refusing-{option}")
    with pytest.raises(TypeError, match=f"does not take {option}="):
        await durable.run(**{option: None})  # type: ignore[misc]


@pytest.mark.anyio
async def test_an_unknown_option_is_refused_by_name() -> None:
    agent, llm = _adder()
    with pytest.raises(TypeError, match="'max_turn'"):
        await DurableAgent(agent, llm=llm).run(max_turn=2)  # type: ignore[call-arg]


@pytest.mark.anyio
async def test_a_durable_batch_returns_one_step_per_context_in_order(
    launch: Callable[[], None],
) -> None:
    llm = ScriptedLLM(["1", "2", "3"])
    agent = SubAgent(name="counter", prompt="Say {{n}}.", output=int, max_turns=1)
    durable = DurableAgent(agent, llm=llm)
    launch()
    steps = await durable.run_many([{"n": 1}, {"n": 2}, {"n": 3}], batch_id="b", concurrency=1)
    assert [step.output for step in steps] == [1, 2, 3]
    children = await DBOS.list_workflows_async(workflow_ids=["b/0", "b/1", "b/2"])
    assert sorted(status.workflow_id for status in children) == ["b/0", "b/1", "b/2"]


@pytest.mark.anyio
async def test_a_durable_run_is_a_child_of_the_callers_span(
    launch: Callable[[], None], traced: Traced
) -> None:
    agent, llm = _adder("3")
    durable = DurableAgent(agent, llm=llm, tracer_provider=traced.provider)
    launch()
    with traced.provider.get_tracer("test").start_as_current_span("caller") as caller:
        await durable.run()
    run = traced.one("invoke_agent adder")
    assert parent_id(run) == caller.get_span_context().span_id
    assert run.context is not None and run.context.trace_id == caller.get_span_context().trace_id
    assert span_id(run) != caller.get_span_context().span_id
    assert attrs(run)["gen_ai.agent.name"] == "adder"


@pytest.mark.anyio
async def test_without_a_callers_span_a_durable_run_still_has_a_recorded_trace(
    launch: Callable[[], None], traced: Traced
) -> None:
    agent, llm = _adder("3")
    durable = DurableAgent(agent, llm=llm, tracer_provider=traced.provider)
    launch()
    assert not trace.get_current_span().get_span_context().is_valid
    await durable.run(workflow_id="rooted")
    run = traced.one("invoke_agent adder")
    assert run.parent is not None and run.parent.is_remote  # the made-up, recorded parent
    (status,) = await DBOS.list_workflows_async(workflow_ids=["rooted"])
    assert status is not None


def _ops(deployed: list[str], *script: Any) -> tuple[SubAgent[str], ScriptedLLM]:
    def deploy(env: str) -> str:
        """Deploy the service to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    agent = SubAgent(name="ops", prompt="Deploy the service.",
                     tools=[Tool(deploy, requires_approval=True)], max_turns=3)  # fmt: skip
    return agent, ScriptedLLM(list(script))


@pytest.mark.anyio
async def test_a_paused_durable_run_waits_for_decisions_sent_as_a_message(
    launch: Callable[[], None],
) -> None:
    deployed: list[str] = []
    agent, llm = _ops(deployed, _calls(("deploy", {"env": "prod"})), "done: staging")
    durable = DurableAgent(agent, llm=llm)
    launch()
    steps: list[Any] = []

    async def run() -> None:
        steps.append(await durable.run(workflow_id="ops-1"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        waiting = await durable.pending("ops-1", timeout=30)  # until the run pauses
        assert [call.arguments for call in waiting] == [{"env": "prod"}]
        assert deployed == []
        with pytest.raises(ConfigurationError, match="missing"):
            await durable.decide("ops-1", {})
        await durable.decide("ops-1", {waiting[0].id: Decision.edit({"env": "staging"})})
    (step,) = steps
    assert step.ok and step.output == "done: staging"
    assert deployed == ["staging"]
    assert await durable.pending("ops-1") == []
    with pytest.raises(ConfigurationError, match="not waiting"):
        await durable.decide("ops-1", {waiting[0].id: True})
    # The same Step as the plain run resumed with the same decision.
    plain_llm = ScriptedLLM([_calls(("deploy", {"env": "prod"})), "done: staging"])
    paused = await agent.run(llm=plain_llm)
    assert paused.state is not None
    resumed = await agent.resume(
        paused.state, {waiting[0].id: Decision.edit({"env": "staging"})}, llm=plain_llm
    )
    assert comparable(step) == comparable(resumed)


@pytest.mark.anyio
async def test_a_durable_run_left_without_decisions_ends_paused_after_its_timeout(
    launch: Callable[[], None],
) -> None:
    agent, llm = _ops([], _calls(("deploy", {"env": "prod"})))
    durable = DurableAgent(agent, llm=llm, approval_timeout=0.2)
    launch()
    step = await durable.run(workflow_id="ops-2")
    assert step.paused and step.state is not None
    assert [call.arguments for call in (await durable.pending("ops-2"))] == [{"env": "prod"}]


def test_an_unbounded_approval_wait_is_refused() -> None:
    agent, llm = _ops([])
    with pytest.raises(ConfigurationError, match="approval_timeout"):
        DurableAgent(agent, llm=llm, approval_timeout=None)  # type: ignore[arg-type]


class _Inventory:
    """Deps that could not be recorded: a lock (it does not pickle) and a live count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stock = {"paper": 3}
        self.looked_up: list[tuple[str, str, int]] = []


def lookup(ctx: RunContext[_Inventory], item: str) -> int:
    """How many of an item are in stock.

    Args:
        item: The item.
    """
    with ctx.deps.lock:
        ctx.deps.looked_up.append((ctx.agent, item, ctx.turn))
        return ctx.deps.stock[item]


@pytest.mark.anyio
async def test_a_tool_taking_a_run_context_gets_the_durable_agents_deps(
    launch: Callable[[], None],
) -> None:
    inventory = _Inventory()
    agent = SubAgent(name="stock", prompt="How much paper?", tools=[lookup], output=int,
                     deps_type=_Inventory, max_turns=2)  # fmt: skip
    llm = ScriptedLLM([_calls(("lookup", {"item": "paper"})), "3"])
    durable = DurableAgent(agent, llm=llm, deps=inventory)
    launch()
    step = await durable.run(workflow_id="stock-1")
    assert step.ok and step.output == 3, step.turns[0].tool_results
    assert inventory.looked_up == [("stock", "paper", 1)]
    assert await _step_names("stock-1") == [
        "subagent.llm:stock", "subagent.tool:lookup", "subagent.llm:stock",
    ]  # fmt: skip


def test_deps_of_the_wrong_type_are_refused_when_the_durable_agent_is_built() -> None:
    agent = SubAgent(name="stock", prompt="p", tools=[lookup], deps_type=_Inventory)
    with pytest.raises(ConfigurationError, match="deps"):
        DurableAgent(agent, llm=ScriptedLLM([]), deps="not an inventory")


@pytest.mark.anyio
async def test_deps_given_to_a_durable_run_are_refused_naming_where_they_go() -> None:
    agent, llm = _adder()
    durable = DurableAgent(agent, llm=llm, name="refusing-deps")
    with pytest.raises(TypeError, match=r"DurableAgent\(deps=\.\.\.\)"):
        await durable.run(deps=_Inventory())  # type: ignore[call-arg]


@pytest.mark.anyio
async def test_an_agent_as_a_durable_agents_tool_runs_in_one_tool_step(
    launch: Callable[[], None],
) -> None:
    # as_tool()'s function takes the calling run's RunContext first, as any such tool.
    inventory = _Inventory()
    clerk = SubAgent(name="clerk", prompt="How many {{item}}?", tools=[lookup], output=int,
                     max_turns=2)  # fmt: skip
    buyer = SubAgent(name="buyer", prompt="Check the paper.",
                     tools=[clerk.as_tool(deps=inventory)], max_turns=2)  # fmt: skip
    llm = ScriptedLLM([
        _calls(("clerk", {"item": "paper"})),  # buyer, turn 1
        _calls(("lookup", {"item": "paper"})), "3",  # clerk, in the buyer's tool step
        "3 in stock",  # buyer, turn 2
    ])  # fmt: skip
    durable = DurableAgent(buyer, llm=llm)
    launch()
    step = await durable.run(workflow_id="buyer-1")
    assert step.ok and step.output == "3 in stock", step.turns[0].tool_results
    assert inventory.looked_up == [("clerk", "paper", 1)]
    # The nested run is inside the buyer's tool step: checkpointed as one step.
    assert await _step_names("buyer-1") == [
        "subagent.llm:buyer", "subagent.tool:clerk", "subagent.llm:buyer",
    ]  # fmt: skip


@pytest.mark.anyio
async def test_a_raising_run_of_a_durable_batch_is_a_failed_step_and_the_batch_completes(
    launch: Callable[[], None],
) -> None:
    llm = ScriptedLLM(["1", "3"])
    agent = SubAgent(name="counter", prompt="Say {{n}}.", output=int, max_turns=2)
    durable = DurableAgent(agent, llm=llm)
    launch()
    # The second context lacks the prompt's variable: its run raises before any turn.
    contexts: list[dict[str, int]] = [{"n": 1}, {}, {"n": 3}]
    steps = await durable.run_many(contexts, batch_id="mixed", concurrency=1)
    assert [step.output for step in steps] == [1, None, 3]
    failure = steps[1].failure
    assert failure is not None and failure.reason is FailReason.ERROR
    assert failure.message.startswith("MissingVariableError: ") and "'n'" in failure.message
    assert (steps[1].agent, steps[1].turns, steps[1].max_turns) == ("counter", [], 2)
    # The batch id is complete: asked again, it returns the same Steps, calling nothing.
    again = await durable.run_many(contexts, batch_id="mixed", concurrency=1)
    assert [comparable(step) for step in again] == [comparable(step) for step in steps]
    assert len(llm.requests) == 2
    (status,) = await DBOS.list_workflows_async(workflow_ids=["mixed"])
    assert status.status == "SUCCESS"
