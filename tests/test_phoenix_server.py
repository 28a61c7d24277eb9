"""scripts/phoenix_server.py without Phoenix: its process handling, on a stub of Phoenix.

The real Phoenix runs in the e2e tests (tests/e2e/test_phoenix.py). Here a temporary
``SUBAGENT_CACHE`` holds a "Phoenix venv" whose python is a stub: a small HTTP server that
answers ``/readyz`` on ``PHOENIX_PORT`` and writes its process id to a file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import phoenix_server
import pytest
from support import ProcessLines

ROOT = Path(__file__).resolve().parent.parent

STUB_PHOENIX = f"""#!{sys.executable}
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

with open(os.environ["STUB_PHOENIX_PID_FILE"], "w") as out:
    out.write(str(os.getpid()))


class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/readyz" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(os.environ["PHOENIX_PORT"])), Ready).serve_forever()
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def stub_cache(tmp_path: Path) -> Path:
    """A cache whose Phoenix venv is installed, as far as the script can tell: the stub."""
    venv = tmp_path / "cache" / "phoenix-venv"
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB_PHOENIX)
    python.chmod(0o755)
    (venv / f".installed-arize-phoenix-{phoenix_server.PHOENIX_VERSION}").write_text("stub\n")
    return tmp_path / "cache"


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "phoenix.pid"
    yield path
    if path.exists() and alive(pid := int(path.read_text())):  # left behind: clean up
        os.kill(pid, signal.SIGKILL)


def test_serve_stopped_by_sigterm_stops_its_phoenix(stub_cache: Path, pid_file: Path) -> None:
    env = {**os.environ, "SUBAGENT_CACHE": str(stub_cache), "STUB_PHOENIX_PID_FILE": str(pid_file)}
    serve = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "phoenix_server.py"), "serve"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    output = ProcessLines(serve)
    try:
        assert output.next_line().startswith("UI and OTLP/HTTP: http://127.0.0.1:")  # ready
        child = int(pid_file.read_text())
        assert alive(child)
        serve.send_signal(signal.SIGTERM)
        serve.wait(output.timeout)
    finally:
        output.close()
    assert not alive(child)  # stopped and reaped, not left running without its parent
