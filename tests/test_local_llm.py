"""scripts/local_llm.py: the set-up's lock (the rest runs in the e2e tests, tests/e2e/).

Nothing is built here: the step under the lock (``_run``, which runs each set-up command) is
stubbed in two real processes sharing a temporary ``SUBAGENT_CACHE``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ProcessLines

ROOT = Path(__file__).resolve().parent.parent

# One process of `ensure_server()` with its commands stubbed: the first one says so on
# stdout and waits for a line on stdin (held under the lock that long), then makes the
# venv's python; the others do nothing.
SETUP = """
import sys
import local_llm

name, commands = sys.argv[1], []

def stub(command, *, env=None):
    if not commands:
        print(f"{name} is in the step", flush=True)
        sys.stdin.readline()
        local_llm.venv_python().parent.mkdir(parents=True, exist_ok=True)
        local_llm.venv_python().touch()
    commands.append(command)

local_llm._run = stub
local_llm.ensure_server()
print(f"{name} done after {len(commands)} commands", flush=True)
"""


def start_setup(name: str, cache: Path, started: list[ProcessLines]) -> ProcessLines:
    """A set-up process; its output (stdout and stderr) read line by line."""
    env = {**os.environ, "SUBAGENT_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "scripts"), str(ROOT)])}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-c", SETUP, name], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    started.append(ProcessLines(process))
    return started[-1]


def release(setup: ProcessLines) -> None:
    """Let a set-up leave its step: the line its stub waits for."""
    assert setup.process.stdin is not None
    setup.process.stdin.write("\n")
    setup.process.stdin.flush()


@pytest.fixture
def setups() -> Iterator[list[ProcessLines]]:
    started: list[ProcessLines] = []
    yield started
    for setup in started:
        setup.close()


def test_a_second_set_up_waits_for_the_first_and_finds_its_work_done(
    tmp_path: Path, setups: list[ProcessLines]
) -> None:
    first = start_setup("first", tmp_path, setups)
    assert first.next_line().endswith("creating the server's virtual environment in "
                                      f"{tmp_path / 'llama-venv'}")  # fmt: skip
    assert first.next_line() == "first is in the step"  # and holds the lock until released
    second = start_setup("second", tmp_path, setups)
    # Without the lock, the second would be in the step now, building beside the first.
    assert second.next_line() == (
        f"[local_llm] waiting for another process setting up {tmp_path} "
        f"(lock: {tmp_path / 'setup.lock'})"
    )
    release(first)
    assert first.rest()[-1] == "first done after 5 commands"  # venv, pip, wheel, install, check
    assert second.rest() == ["second done after 0 commands"]  # it found the server installed
    assert first.process.returncode == second.process.returncode == 0
