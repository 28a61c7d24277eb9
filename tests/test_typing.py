"""The public API types user code: mypy infers an agent's output type from ``output=``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SNIPPET = """
from typing import Any
from typing_extensions import assert_type
from pydantic import BaseModel
from subagent import ParseResult, ScriptedLLM, Step, SubAgent, sections_parser

class Answer(BaseModel):
    value: int

typed = SubAgent(name="a", prompt="p", output=Answer)
assert_type(typed, SubAgent[Answer])
assert_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])), Step[Answer])
assert_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])).output, Answer | None)
assert_type(typed.run_sync(llm=ScriptedLLM(['{"value": 1}'])).output_or_raise(), Answer)
assert_type(SubAgent(name="t", prompt="p"), SubAgent[str])
assert_type(SubAgent(name="t", prompt="p").run_sync(llm=ScriptedLLM(["hi"])).output, str | None)
def count(text: str) -> ParseResult[int]:
    return ParseResult.success(len(text))
assert_type(SubAgent(name="c", prompt="p", output=count), SubAgent[int])
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


DEPS_SNIPPET = """
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing_extensions import assert_type
from pydantic import BaseModel
from subagent import RunContext, ScriptedLLM, Step, SubAgent, Validation, tool

@dataclass
class Db:
    name: str

class Answer(BaseModel):
    value: int

@tool
def lookup(ctx: RunContext[Db], key: str) -> str:
    assert_type(ctx.deps, Db)
    return ctx.deps.name + key

def known(ctx: RunContext[Db], output: Answer) -> Validation:
    return Validation.ok()

def instructions(ctx: RunContext[Db], values: Mapping[str, Any]) -> str:
    return ctx.deps.name

agent = SubAgent(name="a", prompt="p", output=Answer, deps_type=Db, tools=[lookup],
                 validators=[known], instructions=instructions)
assert_type(agent, SubAgent[Answer, Db])
untyped = SubAgent(name="u", prompt="p", output=Answer)
assert_type(untyped, SubAgent[Answer])

async def main() -> None:
    assert_type(await agent.run(llm=ScriptedLLM([]), deps=Db("x")), Step[Answer])
    await untyped.run(llm=ScriptedLLM([]), deps="anything: deps_type not declared")
    await agent.run(llm=ScriptedLLM([]), deps="not a Db")  # the control: must be reported
"""


def test_mypy_types_the_deps_of_an_agent_that_declares_them(tmp_path: Path) -> None:
    source = tmp_path / "user_code.py"
    source.write_text(DEPS_SNIPPET)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    control = len(DEPS_SNIPPET.strip().splitlines()) + 1  # the file starts with a blank line
    assert len(errors) == 1, result.stdout
    assert f"user_code.py:{control}: error:" in errors[0], result.stdout
    assert '"deps"' in errors[0] and "Db" in errors[0], result.stdout
