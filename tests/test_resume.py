"""A saved state is untrusted input: what resume checks before it runs anything."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from pydantic import BaseModel

from subagent import (
    ConfigurationError,
    Decision,
    InvalidStateError,
    LLMResponse,
    MemoryClaims,
    RunState,
    ScriptedLLM,
    Step,
    SubAgent,
    Tool,
    ToolCall,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    x: int


class Ledger:
    """A deploy tool that needs approval and a status tool that does not, counted."""

    def __init__(self) -> None:
        self.deployed: list[str] = []

    def agent(self, **options: Any) -> SubAgent[Answer]:
        def deploy(env: str) -> str:
            """Deploy to an environment."""
            self.deployed.append(env)
            return f"deployed to {env}"

        def status(service: str) -> str:
            """Read a service's status."""
            return f"{service} is up"

        tools = [Tool(deploy, requires_approval=True, run_in_thread=False),
                 Tool(status, run_in_thread=False)]  # fmt: skip
        return SubAgent(name="ops", prompt="Ship it", output=Answer, tools=tools, max_turns=4,
                        **options)  # fmt: skip


def calls(*items: tuple[str, dict[str, Any]]) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(id=f"c{n}", name=name, arguments=arguments)
                                   for n, (name, arguments) in enumerate(items, 1)])  # fmt: skip


async def paused(ledger: Ledger, *items: tuple[str, dict[str, Any]]) -> Step[Answer]:
    step = await ledger.agent().run(llm=ScriptedLLM([calls(*items)]))
    assert step.state is not None and step.pending is not None
    return step


def edited(state: RunState, change: Any) -> str:
    """The state's JSON, changed by ``change`` (a function of its data)."""
    data = json.loads(state.model_dump_json())
    change(data)
    return json.dumps(data)


# --- which calls need a decision: the agent's rule, never the state's list ----------------


async def test_a_call_whose_needs_approval_was_emptied_still_needs_a_decision() -> None:
    ledger = Ledger()
    step = await paused(ledger, ("deploy", {"env": "prod"}))
    assert step.state is not None
    text = edited(step.state, lambda data: data["pending"].update(needs_approval=[]))
    with pytest.raises(ConfigurationError, match="'c1' \\(deploy\\) needs a decision"):
        await ledger.agent().resume(text, llm=ScriptedLLM(['{"x": 1}']))
    assert ledger.deployed == []


async def test_a_call_added_to_the_pending_calls_needs_its_own_decision() -> None:
    ledger = Ledger()
    ledger_step = await paused(ledger, ("deploy", {"env": "staging"}))
    assert ledger_step.state is not None
    added = {"id": "c9", "name": "deploy", "arguments": {"env": "prod"}}
    text = edited(ledger_step.state, lambda data: data["pending"]["calls"].append(added))
    approve_first = {"c1": ledger_step.pending.approve("c1")}  # type: ignore[union-attr]
    with pytest.raises(ConfigurationError, match="'c9' \\(deploy\\) needs a decision"):
        await ledger.agent().resume(text, approve_first, llm=ScriptedLLM(['{"x": 1}']))
    assert ledger.deployed == []


async def test_a_bound_decision_refuses_arguments_changed_after_it_was_made() -> None:
    ledger = Ledger()
    step = await paused(ledger, ("deploy", {"env": "staging"}))
    assert step.state is not None and step.pending is not None
    approved = {"c1": step.pending.approve("c1")}  # what the approver saw: staging
    changed = edited(step.state, lambda data: data["pending"]["calls"][0].update(
        arguments={"env": "prod"}))  # fmt: skip
    with pytest.raises(InvalidStateError) as refused:
        await ledger.agent().resume(changed, approved, llm=ScriptedLLM(['{"x": 1}']))
    assert refused.value.field == "pending.calls[c1]" and "deploy" in str(refused.value)
    assert ledger.deployed == []
    done = await ledger.agent().resume(step.state, approved, llm=ScriptedLLM(['{"x": 1}']))
    assert done.ok and ledger.deployed == ["staging"]


def test_pending_calls_make_decisions_bound_to_the_call_they_name() -> None:
    call = ToolCall(id="c1", name="deploy", arguments={"env": "prod"})
    other = call.model_copy(update={"arguments": {"env": "dev"}})
    decision = Decision.approve(call)
    assert decision.decides(call) and not decision.decides(other)
    assert Decision.approve().decides(other)  # unbound: answers whatever call has the id
    round_tripped = Decision.model_validate_json(decision.model_dump_json())
    assert round_tripped == decision
    assert "call_digest" not in Decision.approve().model_dump()  # unbound JSON unchanged


# --- fields that do not fit together ----------------------------------------------------


async def saved_after_a_turn() -> RunState:
    ledger = Ledger()
    states: list[RunState] = []
    await ledger.agent().run(llm=ScriptedLLM([calls(("status", {"service": "api"})),
                                              '{"x": 1}']), on_state=states.append)  # fmt: skip
    return states[0]


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("work_remaining", lambda d: d.update(work_remaining=50)),
        ("work_remaining", lambda d: d.update(work_remaining=-1)),
        ("retries_remaining", lambda d: d.update(retries_remaining=-2)),
        ("retry_total", lambda d: d.update(retry_total=3)),
        ("elapsed_s", lambda d: d.update(elapsed_s=-5.0)),
        ("max_turns", lambda d: d.update(max_turns=0)),
        ("phase", lambda d: d.update(phase="retry")),
        ("pending", lambda d: d.update(phase="paused")),
        ("turns", lambda d: d["turns"][0].update(index=7)),
        ("history", lambda d: d.update(history=[])),
    ],
)
async def test_a_state_whose_fields_do_not_fit_together_is_refused_naming_the_field(
    field: str, change: Any
) -> None:
    state = await saved_after_a_turn()
    with pytest.raises(InvalidStateError) as refused:
        await Ledger().agent().resume(edited(state, change), llm=ScriptedLLM([]))
    assert refused.value.field == field


async def test_a_paused_state_without_its_pending_calls_is_refused() -> None:
    step = await paused(Ledger(), ("deploy", {"env": "prod"}))
    assert step.state is not None
    text = edited(step.state, lambda data: data.update(pending=None))
    with pytest.raises(InvalidStateError) as refused:
        await Ledger().agent().resume(text, llm=ScriptedLLM([]))
    assert refused.value.field == "pending"


async def test_a_state_that_is_not_a_run_state_is_refused_naming_the_field() -> None:
    state = await saved_after_a_turn()
    text = edited(state, lambda data: data.update(work_remaining="lots"))
    with pytest.raises(InvalidStateError) as refused:
        await Ledger().agent().resume(text, llm=ScriptedLLM([]))
    assert refused.value.field == "work_remaining"


# --- signed states and single use --------------------------------------------------------

KEY = b"the application's secret"


async def test_a_signed_state_resumes_and_a_changed_one_is_refused() -> None:
    ledger = Ledger()
    step = await paused(ledger, ("deploy", {"env": "staging"}))
    assert step.state is not None
    signed = step.state.signed(KEY)
    envelope = json.loads(signed)
    envelope["state"] = envelope["state"].replace("staging", "prod")
    with pytest.raises(InvalidStateError) as changed:
        await ledger.agent().resume(json.dumps(envelope), {"c1": True}, key=KEY,
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert changed.value.field == "signature"
    with pytest.raises(InvalidStateError, match="another key"):
        await ledger.agent().resume(signed, {"c1": True}, key=b"another",
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    with pytest.raises(InvalidStateError, match="not a signed state"):
        await ledger.agent().resume(step.state.model_dump_json(), {"c1": True}, key=KEY,
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert ledger.deployed == []
    done = await ledger.agent().resume(signed, {"c1": True}, key=KEY,
                                       llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert done.ok and ledger.deployed == ["staging"]


async def test_a_state_resumed_once_only_is_refused_the_second_time() -> None:
    ledger = Ledger()
    step = await paused(ledger, ("deploy", {"env": "prod"}))
    assert step.state is not None
    claims = MemoryClaims()
    await ledger.agent().resume(step.state, {"c1": True}, claims=claims,
                                llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    with pytest.raises(InvalidStateError) as again:
        await ledger.agent().resume(step.state, {"c1": True}, claims=claims,
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert again.value.field == "id"
    assert ledger.deployed == ["prod"]  # once
    # Without claims, a state resumed twice runs its approved call twice (documented).
    await ledger.agent().resume(step.state, {"c1": True}, llm=ScriptedLLM(['{"x": 1}']))
    assert ledger.deployed == ["prod", "prod"]


async def test_one_pause_resumes_once_from_whichever_copy_of_its_state() -> None:
    ledger = Ledger()
    copies: list[RunState] = []
    step = await ledger.agent().run(
        llm=ScriptedLLM([calls(("deploy", {"env": "prod"}))]), on_state=copies.append
    )
    assert step.state is not None and copies[-1].phase == "paused"
    assert copies[-1].id == step.state.id  # two snapshots of one point, one name
    claims = MemoryClaims()
    await ledger.agent().resume(copies[-1], {"c1": True}, claims=claims,
                                llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    with pytest.raises(InvalidStateError) as again:
        await ledger.agent().resume(step.state, {"c1": True}, claims=claims,
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert again.value.field == "id" and ledger.deployed == ["prod"]


async def test_each_point_of_a_run_and_its_resumed_part_has_its_own_state_id() -> None:
    ledger = Ledger()
    first: list[RunState] = []
    step = await ledger.agent().run(
        llm=ScriptedLLM([calls(("status", {"service": "api"})), calls(("deploy", {"env": "a"}))]),
        on_state=first.append,
    )
    assert step.state is not None
    later: list[RunState] = []
    await ledger.agent().resume(step.state, {"c1": True}, on_state=later.append,
                                llm=ScriptedLLM([calls(("deploy", {"env": "b"}))]))  # fmt: skip
    ids = [state.id for state in (*first, *later)]
    assert len(set(ids)) == len(ids)
    assert {state_id.partition(".")[0] for state_id in ids} == {step.state.id.partition(".")[0]}


def test_memory_claims_keep_the_last_ids_within_their_limit() -> None:
    claims = MemoryClaims(limit=2)
    assert [claims.claim(i) for i in ("a", "b", "a")] == [True, True, False]
    assert claims.claim("c") and claims.claim("a")  # "a" was the oldest, forgotten


@pytest.mark.parametrize(
    "text",
    [
        '{"subagent_state": 1, "state": "{}", "hmac": "\u00e9\u00e9"}',
        "[" * 100_000 + "]" * 100_000,
        '{"subagent_state": 1, "state": "\\ud800", "hmac": "00"}',
        b"\xff\xfe not utf-8",
    ],
    ids=["non-ascii-hmac", "nested-deeply", "lone-surrogate", "not-utf8"],
)
async def test_any_text_that_is_not_a_validly_signed_state_is_refused_as_its_signature(
    text: str | bytes,
) -> None:
    with pytest.raises(InvalidStateError) as refused:
        await Ledger().agent().resume(text, key=KEY, llm=ScriptedLLM([]))
    assert refused.value.field == "signature"


async def test_a_key_given_with_a_state_object_is_refused_its_signature_unchecked() -> None:
    ledger = Ledger()
    step = await paused(ledger, ("deploy", {"env": "prod"}))
    assert step.state is not None
    with pytest.raises(InvalidStateError, match="pass the signed text") as refused:
        await ledger.agent().resume(step.state, {"c1": True}, key=KEY,
                                    llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert refused.value.field == "signature" and ledger.deployed == []


def test_memory_claims_let_one_of_many_threads_claim_an_id_at_once() -> None:
    claims = MemoryClaims(limit=8)
    barrier = threading.Barrier(16)
    won: list[bool] = []

    def claim(state_id: str) -> None:
        barrier.wait()
        won.append(claims.claim(state_id))

    for round_ in range(50):
        threads = [threading.Thread(target=claim, args=(f"s{round_}.{n % 2}",))
                   for n in range(16)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sum(won) == 100  # two ids a round, each claimed once, evictions included


def test_a_bound_decision_keeps_128_bits_of_its_call() -> None:
    call = ToolCall(id="c1", name="deploy", arguments={"env": "prod"})
    digest = Decision.approve(call).call_digest
    assert digest is not None and len(digest) == 32 and int(digest, 16) >= 0
