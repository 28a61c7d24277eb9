"""Approval from the command line: `subagent run` pauses, `subagent resume` decides.

Run it with `python examples/approval_cli.py`. The agent below may deploy only with approval
(`Tool(deploy, requires_approval=True)`). The script runs the command line as a user would,
each command a process of its own, each Step kept in a file for the next command:

    subagent run examples/approval_cli.py:AGENT --json > paused.json          # 4: paused
    subagent resume examples/approval_cli.py:AGENT paused.json --json \\
        --deny deploy-production="production is frozen; use staging" > again.json  # 4
    subagent resume examples/approval_cli.py:AGENT again.json --json \\
        --approve deploy-staging > done.json                                  # 0: done

Each pause shows the calls waiting, with the arguments an approver approves. The agent's
model is a stand-in of its own that reads the conversation, so any process can resume the
run: it asks for production, asks for staging once production is denied, and reports once a
deployment ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from subagent import LLMRequest, LLMResponse, Step, SubAgent, Tool, ToolCall
from subagent.cli._show import turn_table


def deploy(env: str) -> str:
    """Deploy release 1.4 to an environment (production or staging)."""
    return f"release 1.4 is live on {env}"


class ReleaseManager:
    """The model: production first, staging when production is denied, then a report."""

    model_name = "release-manager"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        last = request.messages[-1]
        if last.role != "tool":
            return _deploy("production")
        if "was not run" in last.content:  # denied: the reason is in the tool's result
            return _deploy("staging")
        return LLMResponse(text="Release 1.4 is live on staging.")


def _deploy(env: str) -> LLMResponse:
    call = ToolCall(id=f"deploy-{env}", name="deploy", arguments={"env": env})
    return LLMResponse(tool_calls=[call])


AGENT = SubAgent(
    name="release",
    prompt="Ship release 1.4.",
    tools=[Tool(deploy, requires_approval=True, run_in_thread=False)],
    max_turns=4,
    llm=ReleaseManager(),
)


def subagent(folder: Path, saved: str, *argv: str) -> int:
    """One command, in a process of its own, its Step (``--json``) saved as ``saved``.

    Prints the command, the turn table of the Step it printed, and its exit status.
    """
    shown = " ".join(json.dumps(arg) if " " in arg else arg for arg in argv)
    shown = shown.replace(__file__, "examples/approval_cli.py").replace(f"{folder}/", "")
    print(f"$ subagent {shown} --json > {saved}")
    done = subprocess.run([sys.executable, "-m", "subagent", *argv, "--json"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    if done.returncode not in (0, 4):
        raise SystemExit(done.stderr)
    (folder / saved).write_text(done.stdout, encoding="utf-8")
    print(turn_table(Step[str].model_validate_json(done.stdout)))
    print(f"exit status {done.returncode}")
    return done.returncode


def main() -> None:
    agent = f"{__file__}:AGENT"
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        assert subagent(folder, "paused.json", "run", agent) == 4
        assert (
            subagent(
                folder,
                "again.json",
                "resume",
                agent,
                str(folder / "paused.json"),
                "--deny",
                "deploy-production=production is frozen; use staging",
            )
            == 4
        )
        assert (
            subagent(
                folder,
                "done.json",
                "resume",
                agent,
                str(folder / "again.json"),
                "--approve",
                "deploy-staging",
            )
            == 0
        )


if __name__ == "__main__":
    main()
