"""The public API types user code: mypy infers an agent's output type from ``output=``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SNIPPET = """
from typing import reveal_type
from pydantic import BaseModel
from subagent import ScriptedLLM, SubAgent, sections_parser

class Answer(BaseModel):
    value: int

typed = SubAgent(name="a", prompt="p", output=Answer)
reveal_type(typed)
reveal_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])).output)
reveal_type(SubAgent(name="t", prompt="p"))
reveal_type(SubAgent(name="s", prompt="p", output=sections_parser(["[Plan]"])))
reveal_type(SubAgent(name="l", prompt="p", output=list[int]))
"""


def test_mypy_infers_the_output_type_without_annotations(tmp_path: Path) -> None:
    source = tmp_path / "user_code.py"
    source.write_text(SNIPPET)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    revealed = [line.split("Revealed type is ")[1] for line in result.stdout.splitlines()
                if "Revealed type is" in line]  # fmt: skip
    assert revealed == [
        '"subagent._agent.SubAgent[user_code.Answer]"',
        '"user_code.Answer | None"',
        '"subagent._agent.SubAgent[Any]"',
        '"subagent._agent.SubAgent[Any]"',
        '"subagent._agent.SubAgent[list[int]]"',
    ], result.stdout
    assert "error" not in result.stdout, result.stdout
