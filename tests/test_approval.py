"""Approval of tool calls: the run pauses before a turn's calls, and resumes as decided."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ValidationError
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    Decision,
    LLMResponse,
    RunEnded,
    RunEvent,
    RunPaused,
    RunPausedError,
    ScriptedLLM,
    Step,
    SubAgent,
    Tool,
    ToolCall,
    ToolPolicy,
    TurnEnded,
    TurnOutcome,
    run_many,
    summarize,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


class Ledger:
    """Tools with side effects this test can count."""

    def __init__(self) -> None:
        self.deployed: list[str] = []
        self.read: list[str] = []

    def tools(self) -> list[Tool]:
        def deploy(env: str) -> str:
            """Deploy to an environment."""
            self.deployed.append(env)
            return f"deployed to {env}"

        def status(service: str) -> str:
            """Read a service's status."""
            self.read.append(service)
            return f"{service} is up"

        return [Tool(deploy, requires_approval=True, run_in_thread=False),
                Tool(status, run_in_thread=False)]  # fmt: skip


def calls(*items: tuple[str, dict[str, Any]]) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(id=f"c{n}", name=name, arguments=arguments)
                                   for n, (name, arguments) in enumerate(items, 1)])  # fmt: skip


def deploy(env: str = "prod") -> tuple[str, dict[str, Any]]:
    return ("deploy", {"env": env})


STATUS = ("status", {"service": "api"})


def ops(ledger: Ledger, **options: Any) -> SubAgent[Answer]:
    return SubAgent(name="ops", prompt="Ship it", output=Answer, tools=ledger.tools(),
                    max_turns=4, **options)  # fmt: skip


async def test_a_call_needing_approval_pauses_the_run_before_any_call_of_its_turn() -> None:
    ledger = Ledger()
    step = await ops(ledger).run(llm=ScriptedLLM([calls(STATUS, deploy())]))
    assert (ledger.deployed, ledger.read) == ([], [])  # neither call ran
    assert step.paused and not step.ok and step.failure is None and step.output is None
    assert step.state is not None and step.state.phase == "paused"
    assert step.pending is not None
    assert [c.id for c in step.pending.waiting] == ["c2"]
    assert [c.name for c in step.pending.calls] == ["status", "deploy"]
    (turn,) = step.turns
    assert (turn.outcome, turn.phase_after, turn.tool_results) == (TurnOutcome.PAUSED, "paused", [])
    assert turn.work_remaining == 4  # the pause spent nothing
    assert step.summary() == "paused (1 call(s) awaiting approval) in 1 turn (normal)"


async def test_approved_calls_run_and_the_turn_spends_what_an_unpaused_one_does() -> None:
    ledger = Ledger()
    script = [calls(STATUS, deploy()), '{"x": 1}']
    model = ScriptedLLM(script)
    paused = await ops(ledger).run(llm=model)
    assert paused.state is not None
    done = await ops(ledger).resume(paused.state, {"c2": Decision.approve()}, llm=model)
    assert done.ok and done.output == Answer(x=1)
    assert (ledger.deployed, ledger.read) == (["prod"], ["api"])
    first = done.turns[0]
    assert first.outcome is TurnOutcome.CONTINUE and first.phase_after == "normal"
    assert first.decisions == {"c2": Decision.approve()}
    # The same turns and budgets as a run whose tools need no approval.
    plain = await SubAgent(name="ops", prompt="Ship it", output=Answer, max_turns=4,
                           tools=[*Ledger().tools()[1:],
                                  Tool(lambda env: f"deployed to {env}", name="deploy")],
                           ).run(llm=ScriptedLLM(script))  # fmt: skip
    assert [(t.outcome, t.work_remaining, t.messages_sent) for t in done.turns] == [
        (t.outcome, t.work_remaining, t.messages_sent) for t in plain.turns
    ]
    assert len(model.requests) == 2  # the paused turn's reply was not asked for again


async def test_a_denied_call_is_not_run_and_the_model_is_told_the_reason() -> None:
    ledger = Ledger()
    model = ScriptedLLM([calls(deploy()), '{"x": 1}'])
    paused = await ops(ledger).run(llm=model)
    assert paused.state is not None
    done = await ops(ledger).resume(paused.state, {"c1": Decision.deny("prod is frozen")},
                                    llm=model)  # fmt: skip
    assert ledger.deployed == []
    first = done.turns[0]
    assert (first.outcome, first.error_type) == (TurnOutcome.ERROR, "tool_error")
    (result,) = first.tool_results
    assert (result.ok, result.error_type) == (False, "denied")
    assert "prod is frozen" in result.content
    told = model.requests[1].messages[-1]
    assert told.role == "tool" and "denied" in told.content and "prod is frozen" in told.content
    assert first.work_remaining == 3  # a tool turn: one work turn, as the table says


async def test_an_edited_call_runs_with_the_new_arguments_and_both_are_recorded() -> None:
    ledger = Ledger()
    model = ScriptedLLM([calls(deploy("prod")), '{"x": 1}'])
    paused = await ops(ledger).run(llm=model)
    assert paused.state is not None
    edit = Decision.edit({"env": "staging"})
    done = await ops(ledger).resume(paused.state, {"c1": edit}, llm=model)
    assert ledger.deployed == ["staging"]
    first = done.turns[0]
    assert first.tool_calls[0].arguments == {"env": "prod"}  # what the model asked
    assert first.decisions == {"c1": edit}  # what ran instead
    assert "deployed to staging" in first.tool_results[0].content


async def test_an_approvers_edit_the_tool_does_not_take_is_refused_before_anything_runs() -> None:
    ledger = Ledger()
    model = ScriptedLLM([calls(deploy()), '{"x": 1}'])
    paused = await ops(ledger).run(llm=model)
    assert paused.state is not None
    with pytest.raises(ConfigurationError) as typo:  # "place" for "env": never pruned away
        await ops(ledger).resume(paused.state, {"c1": Decision.edit({"place": 1})}, llm=model)
    assert typo.value.field == "decisions"
    assert "['place']" in str(typo.value) and "['env']" in str(typo.value)
    with pytest.raises(ConfigurationError, match="env: Input should be a valid string"):
        await ops(ledger).resume(paused.state, {"c1": Decision.edit({"env": 5})}, llm=model)
    assert ledger.deployed == [] and model.remaining == 1


async def test_the_model_is_told_the_approver_changed_its_call() -> None:
    ledger = Ledger()
    model = ScriptedLLM([calls(deploy()), '{"x": 1}'])
    paused = await ops(ledger).run(llm=model)
    assert paused.state is not None and paused.pending is not None
    edit = paused.pending.edit("c1", {"env": "staging"})
    done = await ops(ledger).resume(paused.state, {"c1": edit}, llm=model)
    assert done.ok and ledger.deployed == ["staging"]
    result = done.turns[0].tool_results[0].content
    assert result.startswith("The approver changed this call before it ran")
    assert '{"env": "staging"}' in result
    assert done.turns[0].tool_calls[0].arguments == {"env": "prod"}  # the model's own call


async def test_a_run_can_pause_twice_and_resume_each_time_across_json() -> None:
    ledger = Ledger()
    model = ScriptedLLM([calls(deploy("staging")), calls(deploy("prod")), '{"x": 2}'])
    first = await ops(ledger).run(llm=model)
    assert first.state is not None
    second = await ops(ledger).resume(first.state.model_dump_json(), {"c1": True}, llm=model)
    assert second.paused and second.state is not None
    assert [t.outcome for t in second.turns] == [TurnOutcome.CONTINUE, TurnOutcome.PAUSED]
    assert second.state.work_remaining == 3
    done = await ops(ledger).resume(second.state.model_dump_json(), {"c1": False}, llm=model)
    assert done.ok and ledger.deployed == ["staging"]
    assert [t.index for t in done.turns] == [1, 2, 3]
    assert [t.work_remaining for t in done.turns] == [3, 2, 1]
    assert done.turns[1].tool_results[0].error_type == "denied"


async def test_a_policy_sees_each_calls_name_and_arguments() -> None:
    ledger = Ledger()
    seen: list[tuple[str, dict[str, Any]]] = []

    def policy(name: str, arguments: Any) -> bool:
        seen.append((name, dict(arguments)))
        return name == "status" and arguments.get("service") == "db"

    agent = SubAgent(name="ops", prompt="Ship it", output=Answer, max_turns=4,
                     tool_policy=ToolPolicy(approval=policy),
                     tools=[Tool(t.function, name=t.name, run_in_thread=False)
                            for t in ledger.tools()])  # fmt: skip
    model = ScriptedLLM([calls(STATUS), calls(("status", {"service": "db"})), '{"x": 1}'])
    step = await agent.run(llm=model)
    assert step.paused and ledger.read == ["api"]  # the first turn needed no approval
    assert seen == [("status", {"service": "api"}), ("status", {"service": "db"})]


class Transfers:
    """A transfer tool whose arguments a careful policy reads by type."""

    def __init__(self) -> None:
        self.made: list[tuple[int, bool]] = []
        self.seen: list[dict[str, Any]] = []

    def agent(self, policy: Any = None) -> SubAgent[Answer]:
        def transfer(amount: int, dry_run: bool = True) -> str:
            """Move money."""
            self.made.append((amount, dry_run))
            return "done"

        def careful(name: str, arguments: Any) -> bool:
            self.seen.append(dict(arguments))
            return not arguments["dry_run"] or arguments["amount"] > 100

        return SubAgent(name="bank", prompt="Pay", output=Answer, max_turns=4,
                        tools=[Tool(transfer, run_in_thread=False)],
                        tool_policy=ToolPolicy(approval=policy or careful))  # fmt: skip


async def test_a_policy_sees_the_arguments_the_tool_would_run_with_coerced() -> None:
    bank = Transfers()
    # "5000" and "false" are what a model writes; the tool runs transfer(5000, False).
    reply = calls(("transfer", {"amount": "5000", "dry_run": "false"}))
    step = await bank.agent().run(llm=ScriptedLLM([reply]))
    assert bank.seen == [{"amount": 5000, "dry_run": False}]
    assert step.paused and bank.made == []


async def test_a_call_whose_arguments_do_not_fit_needs_no_approval_and_never_runs() -> None:
    bank = Transfers()
    reply = calls(("transfer", {"amount": "lots"}))
    step = await bank.agent().run(llm=ScriptedLLM([reply, '{"x": 1}']))
    assert bank.seen == [] and bank.made == []
    assert step.ok and step.turns[0].tool_results[0].error_type == "invalid_arguments"


async def test_a_policy_that_raises_is_raised_as_itself_with_the_turn_kept() -> None:
    def broken(name: str, arguments: Any) -> bool:
        return arguments["amount"] > "100"  # a plain bug: int > str

    bank = Transfers()
    with pytest.raises(TypeError) as caught:
        await bank.agent(broken).run(llm=ScriptedLLM([calls(("transfer", {"amount": 5}))]))
    (turn,) = caught.value.turns  # type: ignore[attr-defined]
    assert turn.error_type == "TypeError" and turn.tool_calls[0].name == "transfer"
    assert any("approval policy" in note for note in caught.value.__notes__)
    assert bank.made == []


async def test_no_approval_is_asked_in_must_return_or_retry_where_tools_are_stripped() -> None:
    ledger = Ledger()
    model = ScriptedLLM([calls(deploy()), calls(deploy()), '{"x": 1}'])
    step = await ops(ledger).run(llm=model, max_turns=1, return_retries=2)
    assert step.ok and not step.paused and ledger.deployed == []
    assert [t.error_type for t in step.turns[:2]] == ["tools_unavailable", "tools_unavailable"]
    assert all(request.tools == [] for request in model.requests)


async def test_decisions_must_name_each_waiting_call_and_nothing_else() -> None:
    ledger = Ledger()
    paused = await ops(ledger).run(llm=ScriptedLLM([calls(STATUS, deploy())]))
    assert paused.state is not None
    agent = ops(ledger)
    with pytest.raises(ConfigurationError, match=r"call 'c2' \(deploy\) needs a decision"):
        await agent.resume(paused.state, {}, llm=ScriptedLLM([]))
    with pytest.raises(ConfigurationError, match=r"no call waiting for approval has the id"):
        await agent.resume(paused.state, {"c1": True, "c2": True}, llm=ScriptedLLM([]))
    with pytest.raises(ConfigurationError, match="must be a Decision or a bool"):
        await agent.resume(paused.state, {"c2": "yes"}, llm=ScriptedLLM([]))  # type: ignore[dict-item]
    assert ledger.deployed == ledger.read == []


def test_a_decision_is_data_and_an_edit_needs_its_arguments() -> None:
    for decision in (Decision.approve(), Decision.deny("no"), Decision.edit({"env": "x"})):
        assert Decision.model_validate_json(decision.model_dump_json()) == decision
    with pytest.raises(ValidationError, match="needs the corrected arguments"):
        Decision(action="edit")
    with pytest.raises(ValidationError, match="takes no arguments"):
        Decision(action="approve", arguments={"env": "x"})


async def test_a_paused_step_round_trips_through_json_and_raises_for_its_output() -> None:
    step = await ops(Ledger()).run(llm=ScriptedLLM([calls(deploy())]))
    back = Step[Answer].model_validate_json(step.model_dump_json())
    assert back == step and back.paused and back.state == step.state
    with pytest.raises(RunPausedError, match="1 tool call"):
        step.output_or_raise()
    with pytest.raises(RunPausedError):
        step.raise_for_failure()


async def test_stream_and_on_event_report_the_pause_before_the_runs_end() -> None:
    events: list[RunEvent] = []
    await ops(Ledger()).run(llm=ScriptedLLM([calls(deploy())]), on_event=events.append)
    assert [type(e).__name__ for e in events][-3:] == ["TurnEnded", "RunPaused", "RunEnded"]
    streamed: list[RunEvent] = []
    async with ops(Ledger()).stream(llm=ScriptedLLM([calls(deploy())])) as run:
        async for event in run:
            streamed.append(event)
    paused = [e for e in streamed if isinstance(e, RunPaused)]
    assert len(paused) == 1 and [c.id for c in paused[0].calls] == ["c1"]
    assert isinstance(streamed[-1], RunEnded) and streamed[-1].step.paused
    ended = [e for e in streamed if isinstance(e, TurnEnded)]
    assert ended[-1].outcome is TurnOutcome.PAUSED


async def test_a_batch_counts_paused_runs_apart_from_done_and_failed() -> None:
    def model_for(n: int) -> ScriptedLLM:
        return ScriptedLLM([calls(deploy())] if n % 2 else ['{"x": 1}'])

    agent = ops(Ledger())
    steps = [await agent.run(llm=model_for(n)) for n in range(4)]
    summary = summarize(steps)
    assert (summary.runs, summary.done, summary.paused, summary.failed) == (4, 2, 2, 0)
    assert "paused" in summary.table()
    many = await run_many(agent, [{}, {}], llm=ScriptedLLM([calls(deploy()), calls(deploy())]),
                          concurrency=1)  # fmt: skip
    assert [step.paused for step in many] == [True, True]


async def test_the_paused_runs_span_says_it_paused(traced: Traced) -> None:
    await ops(Ledger()).run(llm=ScriptedLLM([calls(deploy())]), tracer_provider=traced.provider)
    run = attrs(traced.one("invoke_agent ops"))
    assert (run["subagent.outcome"], run["subagent.paused"], run["subagent.pending_calls"]) == (
        "paused",
        True,
        1,
    )
    assert attrs(traced.one("agent_turn normal"))["subagent.turn.outcome"] == "paused"
    assert traced.named("execute_tool deploy") == []


# --- nested agents -----------------------------------------------------------------------


def test_an_agent_asking_for_approval_cannot_be_another_agents_tool() -> None:
    child = ops(Ledger())
    with pytest.raises(ConfigurationError, match="cannot be another agent's tool"):
        child.as_tool()


async def test_a_nested_agent_can_need_approval_in_its_parent_instead() -> None:
    child = SubAgent(name="child", prompt="Say {{word}}", max_turns=1)
    parent = SubAgent(name="parent", prompt="Delegate", max_turns=3,
                      tools=[child.as_tool(requires_approval=True)])  # fmt: skip
    model = ScriptedLLM([calls(("child", {"word": "hi"})), "hi", "the child said hi"])
    paused = await parent.run(llm=model)
    assert paused.paused and len(model.requests) == 1  # the child has not started
    assert paused.state is not None
    done = await parent.resume(paused.state, {"c1": True}, llm=model)
    assert done.ok and done.output == "the child said hi"
    nested = done.turns[0].tool_results[0].step
    assert nested is not None and nested.output == "hi"


async def test_under_react_a_call_read_from_the_text_pauses_and_resumes_alike() -> None:
    ledger = Ledger()
    agent = SubAgent(name="ops", prompt="Ship it", output=Answer, tools=ledger.tools(),
                     max_turns=3, tool_policy=ToolPolicy(protocol="react"))  # fmt: skip
    action = 'Thought: ship.\nAction: {"tool": "deploy", "input": {"env": "prod"}}'
    model = ScriptedLLM([action, 'Final Answer: {"x": 5}'])
    paused = await agent.run(llm=model)
    assert paused.pending is not None and paused.state is not None
    (waiting,) = paused.pending.waiting
    assert (waiting.name, waiting.arguments) == ("deploy", {"env": "prod"})
    done = await agent.resume(paused.state, {waiting.id: True}, llm=model)
    assert done.ok and done.output == Answer(x=5) and ledger.deployed == ["prod"]
    assert model.requests[1].messages[-1].content.startswith("Observation:")


async def test_a_resumed_turn_cut_short_keeps_its_record_and_fails_as_timed_out() -> None:
    async def deploy(env: str) -> str:
        """Deploy, never finishing."""
        await anyio.Event().wait()
        return env

    agent = SubAgent(name="ops", prompt="Ship it", output=Answer, max_turns=3,
                     tools=[Tool(deploy, requires_approval=True)])  # fmt: skip
    paused = await agent.run(llm=ScriptedLLM([calls(("deploy", {"env": "prod"}))]))
    assert paused.state is not None
    step = await agent.resume(paused.state, {"c1": True}, llm=ScriptedLLM([]),
                              mission_timeout=0.2)  # fmt: skip
    assert step.failure is not None and step.failure.reason.value == "timeout"
    (turn,) = step.turns
    assert turn.error_type == "cancelled" and turn.phase_after == "failed"
    assert turn.tool_results[0].completed is False
    assert turn.decisions == {"c1": Decision.approve()}


async def test_a_reply_that_repeats_a_call_id_pauses_into_a_state_that_resumes() -> None:
    ledger = Ledger()
    twice = LLMResponse(tool_calls=[
        ToolCall(id="c1", name="deploy", arguments={"env": "a"}),
        ToolCall(id="c1", name="deploy", arguments={"env": "b"}),
    ])  # fmt: skip
    step = await ops(ledger).run(llm=ScriptedLLM([twice]))
    assert step.state is not None and step.pending is not None
    ids = [call.id for call in step.pending.calls]
    assert ids[0] == "c1" and len(set(ids)) == 2
    done = await ops(ledger).resume(step.state, {ids[0]: True, ids[1]: Decision.deny("no")},
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert done.output == Answer(x=1) and ledger.deployed == ["a"]
    results = done.turns[-2].tool_results
    assert [(r.call_id, r.ok) for r in results] == [(ids[0], True), (ids[1], False)]
