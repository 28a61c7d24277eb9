"""A durable run whose tool is an MCP server's, killed between turns and resumed.

    python examples/durable_mcp.py

The agent deploys two services with the ``deploy`` tool of an MCP server (this file, run
with ``--server``: it appends each deploy to a ledger file). The script runs the agent in a
child process that connects the server, launches DBOS and is killed (SIGKILL) after the
first deploy, before its next model call; a second child connects a server of its own and
launches DBOS on the same system database (SQLite, in a temporary directory), which resumes
the run: the first deploy is read back from its checkpoint, never sent to a server again.
Needs the ``dbos`` and ``mcp`` extras; no model server (a small deterministic model stands
in for one).
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

from subagent import SubAgent
from subagent.durable import DurableAgent
from subagent.llm import LLMRequest, LLMResponse, ToolCall


class Planner:
    """A stand-in model: deploys api, then web, then answers; with ``crash``, the process
    dies before its call after the first deploy."""

    def __init__(self, crash: bool):
        self.crash = crash

    async def complete(self, request: LLMRequest) -> LLMResponse:
        done = sum(message.role == "tool" for message in request.messages)
        if self.crash and done == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if done < 2:
            service = ["api", "web"][done]
            return LLMResponse(tool_calls=[ToolCall(name="deploy", arguments={"service": service})])
        return LLMResponse(text="api and web are live")


async def child(work: Path, crash: bool) -> None:
    from subagent.mcp import MCPServerStdio

    server = MCPServerStdio(sys.executable, [__file__, "--server", str(work)], name="deployer")
    agent = SubAgent(name="deployer", prompt="Deploy api, then web.", tools=[server],
                     max_turns=3)  # fmt: skip
    durable = DurableAgent(agent, llm=Planner(crash))  # before DBOS.launch()
    DBOS(config={"name": "deployer", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{work}/dbos.sqlite"})  # fmt: skip
    async with server:  # connected before DBOS.launch(), which resumes pending runs at once
        DBOS.launch()
        try:
            step = await durable.run(workflow_id="deploy-2026-11-26")
            print(f"done in {len(step.turns)} turns: {step.output}")
        finally:
            DBOS.destroy()


def serve(work: Path) -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("deployer", log_level="CRITICAL")

    @server.tool()
    def deploy(service: str) -> str:
        """Deploy one service."""
        with (work / "ledger.txt").open("a") as ledger:
            ledger.write(f"{service}\n")
        return f"{service} is live"

    server.run("stdio")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        command = [sys.executable, __file__, "--child", str(work)]
        first = subprocess.run([*command, "--crash"], capture_output=True, text=True,
                               check=False)  # fmt: skip
        assert first.returncode == -signal.SIGKILL, first.stderr
        print(f"first process: killed after deploying {(work / 'ledger.txt').read_text().split()}")
        second = subprocess.run(command, capture_output=True, text=True, check=True)
        print(f"second process: {second.stdout.strip()}")
        ledger = (work / "ledger.txt").read_text().split()
        print(f"ledger: {', '.join(ledger)} (each deploy reached a server once)")


if __name__ == "__main__":
    if "--server" in sys.argv:
        serve(Path(sys.argv[2]))
    elif "--child" in sys.argv:
        anyio.run(child, Path(sys.argv[2]), "--crash" in sys.argv)
    else:
        main()
