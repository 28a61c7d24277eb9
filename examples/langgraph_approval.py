"""A sub-agent as a LangGraph node: its pause for approval is the graph's interrupt().

Run it with `python examples/langgraph_approval.py` (LangGraph is in the `dev` extra). The
graph has two nodes. `release` runs the agent; when its Step is paused (a call to
`deploy` needs approval), the graph keeps the run's state, signed, and goes to
`approval`, which calls LangGraph's `interrupt()` with the waiting calls. The graph stops
there, its state in the checkpointer; `Command(resume={call_id: decision})` resumes it, and
`approval` resumes the agent with the decisions, bound to the calls the approver saw. A
run that pauses again goes through `approval` again; decisions that `resume()` refuses
(a call left out, arguments the tool does not take) are asked for again, with the reason.

The agent's run is in a node of its own because LangGraph runs a node again from its start
when it is resumed: in the node that interrupts, only reading the state comes before
`interrupt()`, so resuming the graph never calls the model again.

Here the approver denies the production deploy, the model asks for staging instead, and
the approver approves that.
"""

from __future__ import annotations

from typing import Any, TypedDict

import anyio
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from subagent import (
    LLM,
    ConfigurationError,
    Decision,
    LLMResponse,
    PendingCalls,
    RunState,
    ScriptedLLM,
    Step,
    SubAgent,
    Tool,
    ToolCall,
)

KEY = b"a secret the application keeps"  # the graph's state is stored: its run states are signed

deployed: list[str] = []


def deploy(env: str) -> str:
    """Deploy the release to an environment."""
    deployed.append(env)
    return f"deployed to {env}"


ops = SubAgent(
    name="ops",
    prompt="Release {{version}}.",
    tools=[Tool(deploy, requires_approval=True)],
    max_turns=4,
)


class Release(TypedDict, total=False):
    """The graph's state: the version to release, the paused run, the agent's report."""

    version: str
    paused: str | None  # the agent's RunState, signed, while it waits for decisions
    report: str


def kept(step: Step[Any]) -> dict[str, Any]:
    """What the graph keeps of a Step: its signed state when paused, else its report."""
    if step.paused:
        assert step.state is not None
        return {"paused": step.state.signed(KEY)}
    report = step.output if step.ok else f"failed: {step.failure}"
    return {"paused": None, "report": report}


def bound(pending: PendingCalls, call_id: str, answer: Any) -> Decision:
    """The approver's answer (a Decision as JSON) bound to the call they were shown."""
    decision = Decision.model_validate(answer)
    if call_id not in pending.needs_approval:
        return decision  # no such call waits: resume() refuses it, naming it
    if decision.action == "approve":
        return pending.approve(call_id)
    if decision.action == "deny":
        return pending.deny(call_id, decision.reason)
    assert decision.arguments is not None  # an edit always has its arguments
    return pending.edit(call_id, decision.arguments)


def build(llm: LLM) -> CompiledStateGraph[Release, None, Release, Release]:
    """The release graph, its agent calling ``llm``, checkpointed in memory."""

    async def release(state: Release) -> dict[str, Any]:
        return kept(await ops.run({"version": state["version"]}, llm=llm))

    async def approval(state: Release) -> dict[str, Any]:
        signed = state["paused"]
        assert signed is not None
        pending = RunState.from_signed(signed, KEY).pending  # the calls, as signed
        assert pending is not None
        question: dict[str, Any] = {
            "agent": ops.name,
            "calls": [call.model_dump(mode="json") for call in pending.waiting],
            "state": signed,
        }
        while True:
            # The graph stops here; on resume the node runs again from its start, and each
            # interrupt() returns, in order, the values the graph was resumed with.
            answers = interrupt(question)
            try:
                decisions = {call_id: bound(pending, call_id, answer)
                             for call_id, answer in dict(answers).items()}  # fmt: skip
                step = await ops.resume(signed, decisions, key=KEY, llm=llm)
            except (ConfigurationError, ValueError, TypeError) as refused:
                # Refused before anything ran: ask again, saying why. (A node that raised
                # would keep the refused answer: LangGraph replays it on every resume.)
                question = {**question, "refused": str(refused)}
                continue
            return kept(step)

    def after(state: Release) -> str:
        return "approval" if state.get("paused") else END

    graph = StateGraph(Release)
    graph.add_node("release", release)
    graph.add_node("approval", approval)
    graph.add_edge(START, "release")
    graph.add_conditional_edges("release", after, ["approval", END])
    graph.add_conditional_edges("approval", after, ["approval", END])
    return graph.compile(checkpointer=InMemorySaver())


async def main() -> dict[str, Any]:
    model = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(name="deploy", arguments={"env": "production"})]),
        LLMResponse(tool_calls=[ToolCall(name="deploy", arguments={"env": "staging"})]),
        "Release 1.4 is live on staging.",
    ])  # fmt: skip
    app = build(model)
    thread: Any = {"configurable": {"thread_id": "release-1.4"}}
    result = await app.ainvoke({"version": "1.4"}, thread)
    answers = [
        {"action": "deny", "reason": "not production on a Friday; staging first"},
        {"action": "approve"},
    ]
    while "__interrupt__" in result:
        (asked,) = result["__interrupt__"]
        (call,) = asked.value["calls"]
        answer = answers.pop(0)
        print(f"interrupted: {asked.value['agent']} asks {call['name']}({call['arguments']})"
              f" -> {answer['action']}")  # fmt: skip
        result = await app.ainvoke(Command(resume={call["id"]: answer}), thread)
    print(f"report: {result['report']}")
    print(f"deployed: {deployed}; model calls: {len(model.requests)}")
    return dict(result)


if __name__ == "__main__":
    anyio.run(main)
