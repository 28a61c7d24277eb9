"""The public API types user code: mypy infers an agent's output type from ``output=``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SNIPPET = """
from typing import Any
from typing_extensions import assert_type
from pydantic import BaseModel
from subagent import ScriptedLLM, Step, SubAgent, sections_parser

class Answer(BaseModel):
    value: int

typed = SubAgent(name="a", prompt="p", output=Answer)
assert_type(typed, SubAgent[Answer])
assert_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])), Step[Answer])
assert_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])).output, Answer | None)
assert_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])).output_or_raise(), Answer)
assert_type(SubAgent(name="t", prompt="p"), SubAgent[Any])
assert_type(SubAgent(name="s", prompt="p", output=sections_parser(["[Plan]"])), SubAgent[Any])
assert_type(SubAgent(name="l", prompt="p", output=list[int]), SubAgent[list[int]])
assert_type(typed, SubAgent[int])  # the control: a wrong type must be reported
"""


def test_mypy_infers_the_output_type_without_annotations(tmp_path: Path) -> None:
    source = tmp_path / "user_code.py"
    source.write_text(SNIPPET)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    control = len(SNIPPET.strip().splitlines()) + 1  # the file starts with a blank line
    assert len(errors) == 1, result.stdout
    assert f"user_code.py:{control}: error:" in errors[0], result.stdout
    assert "SubAgent[int" in errors[0], result.stdout
