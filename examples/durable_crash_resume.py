"""A durable run killed in the middle of a tool call, then resumed by a new process.

    python examples/durable_crash_resume.py

The agent deploys two services with a tool that writes to a ledger file. The script runs
the agent in a child process that kills itself (SIGKILL, as an OOM kill or a lost node
would) in the middle of the second deploy, then starts a second child on the same DBOS
system database (SQLite, in a temporary directory): DBOS resumes the run from its last
completed step. The first deploy and the model calls already made are read back from their
checkpoints, never made again; the interrupted deploy runs again, from its start. Needs the
``dbos`` extra (``pip install 'subagent-runtime[dbos]'``); no model server (a small
deterministic model stands in for one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from dbos import DBOS
from pydantic import BaseModel

from subagent import SubAgent, tool
from subagent.durable import DurableAgent
from subagent.llm import LLMRequest, LLMResponse, ToolCall


class Deployed(BaseModel):
    services: list[str]


class Planner:
    """A stand-in model: deploys api, then web, then answers (by what it has seen)."""

    def __init__(self, calls_file: Path):
        self.calls_file = calls_file

    async def complete(self, request: LLMRequest) -> LLMResponse:
        with self.calls_file.open("a") as calls:
            calls.write("call\n")
        done = sum(message.role == "tool" for message in request.messages)
        if done < 2:
            service = ["api", "web"][done]
            return LLMResponse(tool_calls=[ToolCall(name="deploy", arguments={"service": service})])
        return LLMResponse(text='{"services": ["api", "web"]}')


def build(work: Path, crash: bool) -> DurableAgent[Deployed]:
    @tool(run_in_thread=False)
    def deploy(service: str) -> str:
        """Deploy one service.

        Args:
            service: The service's name.
        """
        if crash and service == "web":
            os.kill(os.getpid(), signal.SIGKILL)  # dies here, before the deploy happens
        with (work / "ledger.txt").open("a") as ledger:
            ledger.write(f"{service}\n")
        return f"{service} is live"

    agent = SubAgent(name="deployer", prompt="Deploy api, then web.", tools=[deploy],
                     output=Deployed, max_turns=3)  # fmt: skip
    return DurableAgent(agent, llm=Planner(work / "model_calls.txt"))


async def child(work: Path, crash: bool) -> None:
    durable = build(work, crash)  # before DBOS.launch(): DBOS finds the workflow by name
    DBOS(config={"name": "deployer", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{work}/dbos.sqlite"})  # fmt: skip
    DBOS.launch()  # resumes the workflows a dead process left pending
    try:
        step = await durable.run(workflow_id="deploy-2026-11-24")  # idempotent by its id
        assert step.output is not None
        print(f"done in {len(step.turns)} turns, deployed {', '.join(step.output.services)}")
    finally:
        DBOS.destroy()


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        command = [sys.executable, __file__, "--child", str(work)]
        first = subprocess.run([*command, "--crash"], capture_output=True, text=True,
                               check=False)  # fmt: skip
        assert first.returncode == -signal.SIGKILL, first.stderr
        print("first process: killed by SIGKILL during deploy('web')")
        calls_before = len((work / "model_calls.txt").read_text().splitlines())
        second = subprocess.run(command, capture_output=True, text=True, check=True)
        print(f"second process: {second.stdout.strip()}")
        calls = len((work / "model_calls.txt").read_text().splitlines()) - calls_before
        ledger = (work / "ledger.txt").read_text().split()
        print(f"ledger: {', '.join(ledger)} (each deploy happened once)")
        print(f"model calls made by the second process: {calls} of 3")


if __name__ == "__main__":
    if "--child" in sys.argv:
        anyio.run(child, Path(sys.argv[2]), "--crash" in sys.argv)
    else:
        main()
