"""subagent.durable in one process: the steps a durable run records, and its options.

Each test launches DBOS on a SQLite system database of its own (DBOS runs on asyncio only).
The crash tests (kills and restarts) are tests/test_durable_crash.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from dbos import DBOS
from durable_harness import dbos_on_sqlite
from opentelemetry import trace
from postgres_server import running_postgres, why_unavailable
from support import Traced, attrs, parent_id, span_id

from subagent import (
    ConfigurationError,
    Correction,
    Decision,
    FailReason,
    InvalidStateError,
    LLMError,
    RunContext,
    SubAgent,
    Tool,
    UsageLimits,
    tool,
)
from subagent.durable import (
    APPROVAL_TOPIC,
    AlreadyDecidedError,
    DurableAgent,
    DurableLLM,
    PendingApproval,
    comparable,
    decisions_message,
    durable_tool,
)
from subagent.durable._tools import _Recorded
from subagent.llm import LLMRequest, LLMResponse, Message, ToolCall
from subagent.records import digest
from subagent.testing import ScriptedLLM


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # DBOS runs its async workflows on asyncio


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Launches DBOS on a fresh SQLite database, after the test built its durable agents."""
    with dbos_on_sqlite(tmp_path, "durable-tests") as start:
        yield start


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A PostgreSQL server for this module's tests on Postgres (started when one asks)."""
    with running_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def launch_each(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], None]]:
    """As ``launch``, once on SQLite and once on a real PostgreSQL server (skipped, saying
    why, where none can be started): for what the system database itself must keep."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/dbos.sqlite"
    else:
        reason = why_unavailable()
        if reason is not None:
            pytest.skip(f"no PostgreSQL server to start: {reason}")
        server: str = request.getfixturevalue("postgres")
        # A database of its own per test (DBOS creates it on launch).
        url = server.rsplit("/", 1)[0] + "/t_" + digest(request.node.nodeid)

    def start() -> None:
        DBOS(config={"name": "durable-tests", "log_level": "WARNING",
                     "system_database_url": url})  # fmt: skip
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


@contextlib.asynccontextmanager
async def _paused(
    durable: DurableAgent[Any], workflow_id: str, **options: Any
) -> AsyncIterator[tuple[PendingApproval, list[Any]]]:
    """A durable run started in a task, once it paused: its pause, and a list that holds
    its Step once the run ends (after the block)."""
    steps: list[Any] = []

    async def run() -> None:
        steps.append(await durable.run(workflow_id=workflow_id, **options))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        pending = await durable.pending(workflow_id, timeout=30)
        assert pending is not None
        yield pending, steps


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


@pytest.mark.anyio
async def test_the_id_of_another_workflow_is_refused_naming_it(
    launch: Callable[[], None],
) -> None:
    agent, llm = _adder("3")
    durable = DurableAgent(agent, llm=llm)
    launch()
    await durable.run(workflow_id="taken")
    with pytest.raises(ConfigurationError, match=r"'taken' is the id of another workflow "
                                                 r"\(subagent.run:adder\)"):  # fmt: skip
        await durable.run_many([{}], batch_id="taken")


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
    launch_each: Callable[[], None],
) -> None:
    deployed: list[str] = []
    agent, llm = _ops(deployed, _calls(("deploy", {"env": "prod"})), "done: staging")
    durable = DurableAgent(agent, llm=llm)
    launch_each()
    steps: list[Any] = []

    async def run() -> None:
        steps.append(await durable.run(workflow_id="ops-1"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        pending = await durable.pending("ops-1", timeout=30)  # until the run pauses
        assert pending is not None and (pending.workflow_id, pending.pause) == ("ops-1", 1)
        assert [call.arguments for call in pending.waiting] == [{"env": "prod"}]
        assert deployed == []
        with pytest.raises(ConfigurationError, match="missing"):
            await durable.decide(pending, {})
        # A pause made up by hand, its calls not those that wait: refused.
        forged = PendingApproval(workflow_id="ops-1", pause=1, waiting=[
            pending.waiting[0].model_copy(update={"arguments": {"env": "staging"}})
        ])  # fmt: skip
        with pytest.raises(ConfigurationError, match="waits on other calls"):
            await durable.decide(forged, {pending.waiting[0].id: True})
        ahead = pending.model_copy(update={"pause": 2})
        with pytest.raises(ConfigurationError, match="has not reached pause 2"):
            await durable.decide(ahead, {pending.waiting[0].id: True})
        await durable.decide(pending, {pending.waiting[0].id: Decision.edit({"env": "staging"})})
    (step,) = steps
    assert step.ok and step.output == "done: staging"
    assert deployed == ["staging"]
    assert await durable.pending("ops-1") is None
    with pytest.raises(ConfigurationError, match="not waiting"):
        await durable.decide(pending, {pending.waiting[0].id: True})
    # The same Step as the plain run resumed with the same decision.
    plain_llm = ScriptedLLM([_calls(("deploy", {"env": "prod"})), "done: staging"])
    paused = await agent.run(llm=plain_llm)
    assert paused.state is not None
    resumed = await agent.resume(
        paused.state, {pending.waiting[0].id: Decision.edit({"env": "staging"})}, llm=plain_llm
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
    pending = await durable.pending("ops-2")
    assert pending is not None and [call.arguments for call in pending.waiting] == [{"env": "prod"}]
    with pytest.raises(ConfigurationError, match=r"not waiting for approval: it ended \(SUCCESS\)"):
        await durable.decide(pending, {pending.waiting[0].id: True})


def _deploy_twice(deployed: list[str]) -> tuple[SubAgent[str], ScriptedLLM]:
    """The ops agent whose model asks deploy(prod) twice, with the same call id each time."""
    again = LLMResponse(
        tool_calls=[ToolCall(id="call_1", name="deploy", arguments={"env": "prod"})]
    )
    return _ops(deployed, again, again, "done")


@pytest.mark.anyio
async def test_a_decision_answers_its_own_pause_never_the_next_one_on_the_same_calls(
    launch_each: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    deployed: list[str] = []
    agent, llm = _deploy_twice(deployed)
    durable = DurableAgent(agent, llm=llm)
    launch_each()
    steps: list[Any] = []

    async def run() -> None:
        steps.append(await durable.run(workflow_id="ops-twice"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        first = await durable.pending("ops-twice", timeout=30)
        assert first is not None and first.pause == 1
        await durable.decide(first, {"call_1": True})
        # Deciding pause 1 again is refused, whether or not the run went on meanwhile.
        with pytest.raises(AlreadyDecidedError, match="pause 1 of the run 'ops-twice'"):
            await durable.decide(first, {"call_1": True})
        second = await durable.pending("ops-twice", pause=2, timeout=30)
        assert second is not None and second.pause == 2
        # The same call (name, id, arguments) as pause 1: only the pause tells them apart.
        assert second.waiting == first.waiting and second.digest == first.digest
        assert deployed == ["prod"]
        with pytest.raises(AlreadyDecidedError, match="it now waits on pause 2"):
            await durable.decide(first, {"call_1": True})
        # A stale approval of pause 1, sent as a plain message (a client that retried), then
        # the decision of pause 2: the run takes the second and ignores the first.
        with caplog.at_level(logging.WARNING, logger="subagent.durable"):
            await DBOS.send_async("ops-twice", decisions_message(first, {"call_1": True}),
                                  APPROVAL_TOPIC)  # fmt: skip
            await durable.decide(second, {"call_1": Decision.deny("once is enough")})
    (step,) = steps
    assert step.ok and step.output == "done"
    assert deployed == ["prod"]
    assert [turn.decisions for turn in step.turns] == [
        {"call_1": Decision.approve()}, {"call_1": Decision.deny("once is enough")}, {},
    ]  # fmt: skip
    (record,) = [r for r in caplog.records if r.name == "subagent.durable"]
    assert record.getMessage() == (
        "durable run 'ops-twice', pause 2: ignored a decision message (it answers pause 1; the "
        "run waits on pause 2); still waiting for decisions"
    )


@pytest.mark.anyio
async def test_two_decisions_of_one_pause_at_once_one_is_sent_and_one_refused(
    launch_each: Callable[[], None],
) -> None:
    deployed: list[str] = []
    agent, llm = _ops(deployed, _calls(("deploy", {"env": "prod"})), "done")
    durable = DurableAgent(agent, llm=llm)
    launch_each()
    outcomes: list[str] = []

    async def decide(pending: PendingApproval, decision: Decision) -> None:
        try:
            await durable.decide(pending, {call.id: decision for call in pending.waiting})
            outcomes.append(decision.action)
        except AlreadyDecidedError:
            outcomes.append("refused")

    steps: list[Any] = []

    async def run() -> None:
        steps.append(await durable.run(workflow_id="ops-race"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        pending = await durable.pending("ops-race", timeout=30)
        assert pending is not None
        async with anyio.create_task_group() as deciders:
            deciders.start_soon(decide, pending, Decision.approve())
            deciders.start_soon(decide, pending, Decision.deny("no"))
    assert sorted(outcomes) in (["approve", "refused"], ["deny", "refused"])
    (step,) = steps
    (sent,) = set(outcomes) - {"refused"}
    assert step.ok and deployed == (["prod"] if sent == "approve" else [])
    assert step.turns[0].decisions is not None
    assert step.turns[0].decisions[pending.waiting[0].id].action == sent


@pytest.mark.parametrize(
    ("message", "why"),
    [
        pytest.param({"reason": 5}, "it does not parse: pause: Field required", id="a-dict"),
        pytest.param("approve it!", "it does not parse: message: Invalid JSON", id="not-json"),
        pytest.param(
            {"pause": 1, "digest": "0" * 16, "decisions": {"call_1_1": {
                "action": "edit", "arguments": {"env": "SECRET-prod"}}}},
            "it was made for other calls", id="other-calls",
        ),
        pytest.param(
            {"pause": 1, "digest": "<digest>", "decisions": {"call_1_1": {"action": "run"}}},
            "it does not parse: decisions.call_1_1.action: Input should be", id="bad-action",
        ),
        pytest.param({"pause": 1, "digest": "<digest>", "decisions": {}},
                     "it decides 0 call(s), not each of ['call_1_1']", id="no-decision"),
        pytest.param(
            {"pause": 1, "digest": "<digest>", "decisions": {"call_1_1": {
                "action": "edit", "arguments": {"env": 5}}}},
            "resume() refuses it: decisions: the edit of call 'call_1_1' (deploy) does not fit",
            id="edit-that-does-not-fit",
        ),
        pytest.param(
            {"pause": 1, "digest": "<digest>", "decisions": {"call_1_1": {
                "action": "edit", "arguments": {"env": "SECRET", "region": "eu"}}}},
            "names what the tool does not take: ['region']", id="edit-naming-no-argument",
        ),
        pytest.param(
            {"pause": 1, "digest": "<digest>", "decisions": {"call_1_1": {
                "action": "approve", "call_digest": "f" * 64}}},
            "is not the call the decision was made for", id="bound-to-another-call",
        ),
    ],
)  # fmt: skip
@pytest.mark.anyio
async def test_a_message_that_does_not_answer_the_pause_is_logged_and_the_run_waits_on(
    launch: Callable[[], None], caplog: pytest.LogCaptureFixture, message: Any, why: str
) -> None:
    deployed: list[str] = []
    agent, llm = _ops(deployed, _calls(("deploy", {"env": "prod"})), "done")
    durable = DurableAgent(agent, llm=llm)
    launch()
    with caplog.at_level(logging.WARNING, logger="subagent.durable"):
        async with _paused(durable, "ops-bad") as (pending, steps):
            if isinstance(message, dict) and message.get("digest") == "<digest>":
                message = {**message, "digest": pending.digest}
            await DBOS.send_async("ops-bad", message, APPROVAL_TOPIC)
            await durable.decide(pending, {"call_1_1": True})
    (step,) = steps
    assert step.ok and deployed == ["prod"]
    (record,) = [r for r in caplog.records if r.name == "subagent.durable"]
    assert record.levelno == logging.WARNING
    assert why in record.getMessage()
    assert "SECRET" not in record.getMessage()  # the reason, never the message's values


@pytest.mark.parametrize(
    ("decision", "refused"),
    [
        pytest.param(Decision.edit({"env": 5}), ConfigurationError, id="edit-that-does-not-fit"),
        pytest.param(
            Decision(action="approve", call_digest="f" * 64),
            InvalidStateError,
            id="bound-to-another-call",
        ),
    ],
)
@pytest.mark.anyio
async def test_decide_refuses_what_resume_would_refuse_before_sending_and_the_run_waits_on(
    launch: Callable[[], None], decision: Decision, refused: type[Exception]
) -> None:
    deployed: list[str] = []
    agent, llm = _ops(deployed, _calls(("deploy", {"env": "prod"})), "done")
    durable = DurableAgent(agent, llm=llm)
    launch()
    async with _paused(durable, "ops-refused") as (pending, steps):
        with pytest.raises(refused):
            await durable.decide(pending, {"call_1_1": decision})
        assert await durable.pending("ops-refused") == pending  # still waiting, same pause
        await durable.decide(pending, {"call_1_1": Decision.edit({"env": "staging"})})
    (step,) = steps
    assert step.ok and deployed == ["staging"]


@pytest.mark.anyio
async def test_a_paused_durable_runs_correction_and_limits_go_on_to_its_resumed_part(
    launch: Callable[[], None],
) -> None:
    deployed: list[str] = []

    def deploy(env: str) -> str:
        """Deploy the service to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    llm = ScriptedLLM([_calls(("deploy", {"env": "prod"})), "not a number", "3"])
    agent = SubAgent(name="counted", prompt="Deploy, then count.", output=int, max_turns=2,
                     return_retries=1, tools=[Tool(deploy, requires_approval=True)])  # fmt: skip
    durable = DurableAgent(agent, llm=llm)
    launch()
    correction = Correction(settings={"temperature": 0.9})
    limits = UsageLimits(max_tool_calls=5)
    async with _paused(durable, "ops-go-on", correction=correction, usage_limits=limits) as (
        pending, steps,
    ):  # fmt: skip
        await durable.decide(pending, {pending.waiting[0].id: True})
    (step,) = steps
    assert step.ok and step.output == 3 and deployed == ["prod"]
    correcting = llm.requests[-1]
    assert correcting.turn is not None and correcting.turn.type == "retry"
    assert correcting.settings.get("temperature") == 0.9  # the run's correction, resumed


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
    launch_each: Callable[[], None],
) -> None:
    inventory = _Inventory()
    agent = SubAgent(name="stock", prompt="How much paper?", tools=[lookup], output=int,
                     deps_type=_Inventory, max_turns=2)  # fmt: skip
    llm = ScriptedLLM([_calls(("lookup", {"item": "paper"})), "3"])
    durable = DurableAgent(agent, llm=llm, deps=inventory)
    launch_each()
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
    launch_each: Callable[[], None],
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
    launch_each()
    step = await durable.run(workflow_id="buyer-1")
    assert step.ok and step.output == "3 in stock", step.turns[0].tool_results
    assert inventory.looked_up == [("clerk", "paper", 1)]
    # The nested run is inside the buyer's tool step: checkpointed as one step.
    assert await _step_names("buyer-1") == [
        "subagent.llm:buyer", "subagent.tool:clerk", "subagent.llm:buyer",
    ]  # fmt: skip


@pytest.mark.anyio
async def test_a_raising_run_of_a_durable_batch_is_a_failed_step_and_the_batch_completes(
    launch_each: Callable[[], None],
) -> None:
    llm = ScriptedLLM(["1", "3"])
    agent = SubAgent(name="counter", prompt="Say {{n}}.", output=int, max_turns=2)
    durable = DurableAgent(agent, llm=llm)
    launch_each()
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
