"""Arize Phoenix as a real local OTLP receiver: for the e2e tests and the docs screenshot.

Phoenix (``arize-phoenix`` on PyPI, Elastic-2.0) is a development and test tool here, never
a dependency of the library. It lives in its own virtual environment, so its many
dependencies never mix with the project's:

    ${SUBAGENT_CACHE:-~/.cache/subagent-runtime}/phoenix-venv

:func:`ensure_installed` creates it on first use (about a minute) and is a no-op afterwards.
:class:`PhoenixServer` starts Phoenix on 127.0.0.1 with free ports, a temporary working
directory, telemetry and every outbound request switched off, and waits until it is ready.

Command line::

    python scripts/phoenix_server.py install          # create the cached venv
    python scripts/phoenix_server.py serve            # run one, print its URLs, until Ctrl-C
                                                      # or SIGTERM (Phoenix is stopped too)
    python scripts/phoenix_server.py screenshot       # docs/images/phoenix-trace.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import urlopen

PHOENIX_VERSION = "20.26.1"
"""The Phoenix release the e2e tests are written against."""

ROOT = Path(__file__).resolve().parent.parent
Log = Callable[[str], None]

# The project's cache (SUBAGENT_CACHE) and port helpers live with the local model's set-up,
# beside this file (on sys.path when run as a script, and for the tests through pytest's
# pythonpath).
from local_llm import cache_dir, cache_lock, free_port  # noqa: E402


def _print(message: str) -> None:
    print(f"[phoenix] {message}", file=sys.stderr, flush=True)


def venv_dir() -> Path:
    """Where Phoenix's own virtual environment lives."""
    return cache_dir() / "phoenix-venv"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_installed(log: Log = _print) -> Path:
    """Install the pinned Phoenix into its cached venv unless it is there; return its python.

    Idempotent and safe to run from two processes at once (a file lock serialises them).

    Raises:
        RuntimeError: The installation failed (the end of pip's log is in the message).
    """
    venv = venv_dir()
    python = _venv_python(venv)
    stamp = venv / f".installed-arize-phoenix-{PHOENIX_VERSION}"
    if stamp.exists() and python.exists():
        return python
    with cache_lock("phoenix-venv"):
        if stamp.exists() and python.exists():
            return python
        started = time.monotonic()
        if venv.exists():
            log(f"replacing {venv} (no stamp for arize-phoenix=={PHOENIX_VERSION})")
            shutil.rmtree(venv)
        log(f"creating {venv} (a one-time step, about a minute)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip_log = venv / "pip-install.log"
        log(f"installing arize-phoenix=={PHOENIX_VERSION} (log: {pip_log})")
        with open(pip_log, "w") as out:
            result = subprocess.run(
                [str(python), "-m", "pip", "install", "--disable-pip-version-check",
                 "--no-input", f"arize-phoenix=={PHOENIX_VERSION}"],
                stdout=out, stderr=subprocess.STDOUT, check=False,
            )  # fmt: skip
        if result.returncode != 0:
            tail = "\n".join(pip_log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"installing arize-phoenix=={PHOENIX_VERSION} failed:\n{tail}")
        stamp.write_text(f"{time.time()}\n")
        log(f"installed arize-phoenix=={PHOENIX_VERSION} in {time.monotonic() - started:.0f} s")
    return python


def _get_json(url: str, timeout: float = 10.0) -> Any:
    with urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class PhoenixServer:
    """One Phoenix process on 127.0.0.1 with free ports and its own working directory.

    Args:
        python: The Phoenix venv's interpreter (from :func:`ensure_installed`).
        workdir: ``PHOENIX_WORKING_DIR`` (its SQLite database goes there) and the log.
        log: Progress messages.
    """

    def __init__(self, python: Path, workdir: Path, log: Log = _print):
        self.python = python
        self.workdir = workdir
        self.log = log
        self.port = free_port()
        self.grpc_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "phoenix.log"

    @property
    def base_url(self) -> str:
        """The UI and REST API; also the OTLP/HTTP base endpoint (``/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_endpoint(self) -> str:
        """The OTLP/gRPC endpoint (plaintext)."""
        return f"http://127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 180.0) -> None:
        """Start Phoenix and wait until ``/readyz`` answers.

        Raises:
            RuntimeError: It exited, or was not ready within ``timeout`` seconds.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update(
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_WORKING_DIR=str(self.workdir),
            PHOENIX_TELEMETRY_ENABLED="false",
            # No public-internet requests of its own (web fonts, WASM sandbox, docs server).
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
            PHOENIX_DISABLE_AGENT_ASSISTANT="true",
            PHOENIX_ALLOWED_SANDBOX_PROVIDERS="NONE",
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log(f"starting Phoenix {PHOENIX_VERSION} at {self.base_url} (gRPC {self.grpc_port})")
        started = time.monotonic()
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(
                [str(self.python), "-m", "phoenix.server.main", "serve"],
                env=env, cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            self._wait_until_ready(self.process, started + timeout, timeout)
        except BaseException:  # not ready, or interrupted (Ctrl-C, SIGTERM): no orphan
            self.stop()
            raise
        self.log(f"Phoenix ready in {time.monotonic() - started:.1f} s")

    def _wait_until_ready(
        self, process: subprocess.Popen[bytes], deadline: float, timeout: float
    ) -> None:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {process.returncode}:\n{self._tail()}")
            try:
                with urlopen(f"{self.base_url}/readyz", timeout=2) as response:
                    if response.status == 200:
                        return
            except (URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Phoenix was not ready after {timeout:.0f} s:\n{self._tail()}")
            time.sleep(0.25)  # polling a separate process for readiness

    def stop(self) -> None:
        """Stop the process (terminate, then kill after 15 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)

    def _tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> PhoenixServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- REST API ---

    def projects(self) -> dict[str, str]:
        """Project name -> project id."""
        data = _get_json(f"{self.base_url}/v1/projects")["data"]
        return {project["name"]: project["id"] for project in data}

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of ``project`` (``[]`` while the project does not exist)."""
        spans: list[dict[str, Any]] = []
        cursor = None
        while True:
            url = f"{self.base_url}/v1/projects/{quote(project, safe='')}/spans?limit=1000"
            if cursor:
                url += f"&cursor={quote(cursor)}"
            try:
                page = _get_json(url)
            except HTTPError as exc:
                if exc.code == 404:
                    return []
                raise
            spans.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans

    def wait_for_spans(self, project: str, count: int, timeout: float = 60.0) -> list[Any]:
        """Poll until ``project`` holds at least ``count`` spans; return them.

        Raises:
            TimeoutError: Fewer spans arrived within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans(project)
            if len(spans) >= count:
                return spans
            if time.monotonic() > deadline:
                names = sorted(span["name"] for span in spans)
                raise TimeoutError(f"{len(spans)}/{count} spans in {project!r}: {names}")
            time.sleep(0.2)  # Phoenix inserts spans in batches, asynchronously


@contextlib.contextmanager
def running_phoenix(log: Log = _print) -> Iterator[PhoenixServer]:
    """Install if needed, start Phoenix in a temporary directory, stop it afterwards."""
    python = ensure_installed(log)
    with (
        tempfile.TemporaryDirectory(prefix="phoenix-") as workdir,
        PhoenixServer(python, Path(workdir), log) as server,
    ):
        yield server


# --- the docs screenshot ---


def chromium() -> str:
    """Path to a Chromium binary (Debian's ``chromium`` package)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no chromium: apt-get update && apt-get install -y chromium")


def screenshot(out: Path, width: int = 1600, height: int = 1000) -> Path:
    """Send the tracing demo's trace to a fresh Phoenix and take a picture of it.

    The picture shows the trace tree with the failed ``must_return`` turn selected.
    """
    project = "subagent-demo"
    browser = chromium()
    with running_phoenix() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=server.base_url,
            OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        )
        subprocess.run([sys.executable, str(ROOT / "examples" / "tracing_demo.py")],
                       env=env, check=True)  # fmt: skip
        spans = server.wait_for_spans(project, 8)
        root = next(span for span in spans if span["parent_id"] is None)
        trace_id = root["context"]["trace_id"]
        failed_turn = next(span for span in spans if span["name"] == "agent_turn must_return")
        project_id = server.projects()[project]
        url = (
            f"{server.base_url}/projects/{project_id}/traces/{trace_id}"
            f"?selectedSpanNodeId={quote(failed_turn['id'])}"
        )
        _print(f"screenshot of {url}")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
            subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", f"--user-data-dir={profile}",
                 "--hide-scrollbars", "--force-prefers-reduced-motion",
                 "--run-all-compositor-stages-before-draw", "--virtual-time-budget=20000",
                 f"--window-size={width},{height}", f"--screenshot={out}", url],
                check=True, timeout=180, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
    _print(f"wrote {out}")
    return out


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """``install``, ``serve`` or ``screenshot``.

    Ctrl-C and SIGTERM stop the command and the Phoenix it started (by default SIGTERM
    would end this process at once, leaving Phoenix running).
    """
    parser = argparse.ArgumentParser(description="Arize Phoenix for subagent's e2e tests")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="create the cached Phoenix venv")
    sub.add_parser("serve", help="run Phoenix until Ctrl-C")
    shot = sub.add_parser("screenshot", help="docs screenshot of the tracing demo's trace")
    shot.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "phoenix-trace.png")
    shot.add_argument("--width", type=int, default=1600)
    shot.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    # Also when started in the background, where a non-interactive shell ignores SIGINT.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    if args.command == "install":
        print(ensure_installed())
    elif args.command == "serve":
        with contextlib.suppress(KeyboardInterrupt), running_phoenix() as server:
            print(f"UI and OTLP/HTTP: {server.base_url}   OTLP/gRPC: {server.grpc_endpoint}",
                  flush=True)  # fmt: skip
            print(f"point an application at it: OTEL_EXPORTER_OTLP_ENDPOINT={server.base_url} "
                  f"OTEL_METRICS_EXPORTER=none (Phoenix takes no metrics)", flush=True)  # fmt: skip
            if server.process is not None:
                server.process.wait()
    else:
        screenshot(args.out, args.width, args.height)


if __name__ == "__main__":
    main()
