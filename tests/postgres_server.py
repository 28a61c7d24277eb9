"""A throwaway PostgreSQL server on 127.0.0.1, from Debian's packages, for the tests.

``running_postgres()`` runs ``initdb`` and ``pg_ctl`` (waiting until the server accepts
connections) in a temporary directory and stops the server and removes the directory on
exit. The server refuses to run as root, so as root it runs as the ``postgres`` user that
Debian's package creates. When the binaries are not installed, :func:`why_unavailable`
says so, and the tests using it are skipped with that reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _user() -> str | None:
    """The user to run the server as: ours, or ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "missing"
    return "postgres"


def why_unavailable() -> str | None:
    """Why no server can be started here (``None``: one can)."""
    if _bin_dir() is None:
        return (
            "PostgreSQL is not installed (no initdb): apt-get install -y postgresql "
            "(.ci/run installs it)"
        )
    if _user() == "missing":
        return "running as root and there is no postgres user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def running_postgres() -> Iterator[str]:
    """A server for the duration of the block; yields the URL of its ``postgres`` database."""
    reason = why_unavailable()
    assert reason is None, reason
    bin_dir = _bin_dir()
    assert bin_dir is not None
    user = _user()
    folder = Path(tempfile.mkdtemp(prefix="subagent-pg-"))
    data = folder / "data"
    if user is not None:
        shutil.chown(folder, user)
    port = _free_port()

    def run(*args: str) -> None:
        subprocess.run(args, check=True, user=user, capture_output=True, timeout=START_TIMEOUT)

    started = False
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
            "--no-sync")  # fmt: skip
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
            str(folder / "server.log"), "-w", "-t", str(START_TIMEOUT), "start")  # fmt: skip
        started = True
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
