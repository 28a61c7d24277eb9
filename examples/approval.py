"""Approval of a tool call, answered from another process.

Run it with `python examples/approval.py`. The agent may deploy only with approval
(`Tool(deploy, requires_approval=True)`). Its run pauses before the deploy: this process
writes the paused run's state to a JSON file and starts a second `python` process, the
approver. The approver reads the state, denies the deploy to production (with a reason the
model is told), and resumes the run; the model then asks for staging, the run pauses again,
and the approver approves. The deploy runs once, in the approver's process, and the final
Step shows every turn of both processes.

The model is scripted (`ScriptedLLM`): each process plays the replies of its own turns.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from subagent import Decision, LLMResponse, RunState, ScriptedLLM, SubAgent, Tool, ToolCall

DEPLOYED: list[str] = []


def deploy(env: str) -> str:
    """Deploy the release to an environment (production or staging)."""
    DEPLOYED.append(env)
    return f"release 1.4 is live on {env}"


AGENT = SubAgent(
    name="release",
    prompt="Ship release 1.4.",
    tools=[Tool(deploy, requires_approval=True, run_in_thread=False)],
    max_turns=4,
)


def call(env: str) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(id=f"deploy-{env}", name="deploy",
                                            arguments={"env": env})])  # fmt: skip


async def request() -> str:
    """The first process: run until the pause; return the state to save, as JSON."""
    step = await AGENT.run(llm=ScriptedLLM([call("production")]))
    assert step.state is not None
    print(f"[runner]   {step.summary()}")
    for pending in step.state.pending.waiting if step.state.pending else []:
        print(f"[runner]   waiting: {pending.name}({pending.arguments})")
    return step.state.model_dump_json()


async def approve(saved: str) -> None:
    """The second process: decide, resume, decide again, print the final Step."""
    state = RunState.model_validate_json(saved)
    model = ScriptedLLM([call("staging"), "Release 1.4 is live on staging."])
    decisions = {c.id: Decision.deny("production is frozen this week; use staging")
                 for c in state.pending.waiting} if state.pending else {}  # fmt: skip
    step = await AGENT.resume(state, decisions, llm=model)
    print(f"[approver] denied production; {step.summary()}")
    assert step.state is not None and step.state.pending is not None
    step = await AGENT.resume(step.state, {c.id: True for c in step.state.pending.waiting},
                              llm=model)  # fmt: skip
    print(f"[approver] approved staging; {step.summary()}")
    for turn in step.turns:
        decided = {i: d.action for i, d in turn.decisions.items()}
        print(f"[approver]   turn {turn.index}: {turn.outcome.value:<8} {decided}")
    print(f"[approver] output: {step.output}")
    print(f"[approver] deployed from this process: {DEPLOYED}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "approve":
        anyio.run(approve, Path(sys.argv[2]).read_text(encoding="utf-8"))
        return
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        path.write_text(anyio.run(request), encoding="utf-8")
        argv = [sys.executable, __file__, "approve", str(path)]
        approver = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        print(approver.stdout, end="")
    print(f"[runner]   deployed from this process: {DEPLOYED}")


if __name__ == "__main__":
    main()
