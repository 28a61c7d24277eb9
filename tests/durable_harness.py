"""Runs tests/durable_child.py in processes of its own, killed and restarted at will.

The scripted server answers by the request's number of messages (so a call made again
after a crash gets the same reply), and can hold one request until the test has killed the
process that sent it: a kill during an LLM call, synchronised by a server-side event.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSClient
from openai_server import MAX_WAIT, RecordedRequest, Reply, ScriptedServer, completion

from subagent import Decision
from subagent.durable import APPROVAL_TOPIC, PENDING_EVENT, PendingApproval, decisions_message

CHILD = Path(__file__).with_name("durable_child.py")
WAIT = 120.0  # the longest a test waits for the child (bounded; never a sleep)


@contextmanager
def dbos_on_sqlite(folder: Path, name: str) -> Iterator[Callable[[], None]]:
    """A launcher of DBOS on a fresh SQLite database in ``folder`` (called once the test
    built its durable agents); DBOS and its registry destroyed when the block ends."""

    def start() -> None:
        DBOS(config={"name": name, "log_level": "WARNING",
                     "system_database_url": f"sqlite:///{folder}/dbos.sqlite"})  # fmt: skip
        DBOS.launch()

    try:
        yield start
    finally:
        DBOS.destroy(destroy_registry=True)


def _call(item: str) -> dict[str, Any]:
    arguments = json.dumps({"item": item})
    return {"id": f"call_{item}", "type": "function",
            "function": {"name": "record", "arguments": arguments}}  # fmt: skip


def reply_to(request: RecordedRequest) -> dict[str, Any]:
    """The ledger agent's conversation, by the number of messages its request sends.

    Turn 1 records ``<tag>-a``, turn 2 records ``<tag>-b`` then ``<tag>-c`` (its last work
    turn), turn 3 (must_return) answers without JSON, turn 4 (the correction turn) answers.
    """
    messages = request.json["messages"]
    tag = _TAG.search(messages[1]["content"])
    assert tag is not None, messages[1]
    size = len(messages)
    if size == 2:
        return completion(None, tool_calls=[_call(f"{tag[1]}-a")], finish_reason="tool_calls")
    if size == 4:
        calls = [_call(f"{tag[1]}-b"), _call(f"{tag[1]}-c")]
        return completion(None, tool_calls=calls, finish_reason="tool_calls")
    if size == 8:
        return completion("I think it is three")
    assert size == 10, size
    return completion('{"count": 3}')


_TAG = re.compile(r"for (\S+) with")


@dataclass
class Ledger:
    """The scripted server's side of the ledger run, with an optional request to hold."""

    hold_at: int | None = None
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    sizes: list[int] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    resumed_log: str = ""  # what the resumed process wrote on its standard error

    def __call__(self, request: RecordedRequest) -> Reply:
        size = len(request.json["messages"])
        self.sizes.append(size)
        self.requests.append(request)
        if size == self.hold_at and not self.held.is_set():
            self.held.set()
            self.release.wait(MAX_WAIT)  # until the sender has been killed
            return Reply(drop="before")
        return Reply.json(reply_to(request))

    def script(self, server: ScriptedServer) -> None:
        server.script(*[self] * 32)


class Child:
    """One process of the ledger run; its standard output read line by line."""

    def __init__(
        self,
        base_url: str,
        db_url: str,
        side_effects: Path,
        crash: str = "",
        batch: bool = False,
        env: Mapping[str, str] | None = None,
    ):
        args = [sys.executable, str(CHILD), base_url, db_url, str(side_effects), crash]
        self.process = subprocess.Popen(
            [*args, "batch"] if batch else args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
        )  # fmt: skip
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next_line(self) -> str:
        line = self._lines.get(timeout=WAIT)
        if line is None:
            raise AssertionError(f"the child ended early:\n{self.stderr()}")
        return line

    def stderr(self) -> str:
        self.process.wait(WAIT)
        assert self.process.stderr is not None
        return self.process.stderr.read()[-4000:]

    def steps(self) -> list[dict[str, Any]]:
        """The Steps the child printed (it then exits)."""
        line = self.next_line()
        assert line.startswith("STEPS "), line
        assert self.process.wait(WAIT) == 0, self.stderr()
        result: list[dict[str, Any]] = json.loads(line[6:])
        return result

    def error(self) -> str:
        """The error the child's run raised, as it printed it (it then exits)."""
        line = self.next_line()
        assert line.startswith("ERROR "), line
        assert self.process.wait(WAIT) == 0, self.stderr()
        return line[6:]

    def kill(self) -> None:
        self.process.kill()  # SIGKILL
        self.process.wait(WAIT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def child(
    base_url: str,
    db_url: str,
    side_effects: Path,
    crash: str = "",
    batch: bool = False,
    env: Mapping[str, str] | None = None,
) -> Iterator[Child]:
    running = Child(base_url, db_url, side_effects, crash, batch, env)
    try:
        yield running
    finally:
        running.close()


def crash_and_resume(
    server: ScriptedServer,
    db_url: str,
    side_effects: Path,
    point: str,
    batch: bool = False,
    env: Mapping[str, str] | None = None,
    resume_env: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], Ledger]:
    """Run the ledger, kill it at ``point``, resume it (``env``, then ``resume_env``, added to
    each child's environment).

    ``point``: ``llm:<size>`` (the server holds that request), ``mcp:<item>`` (the MCP
    server holds the call recording ``item``: DURABLE_MCP runs; the server is killed after
    the child), or a child's own point.

    Returns the resumed run's Steps (comparable data) and the server's record.
    """
    ledger = run_and_kill(server, db_url, side_effects, point, batch, env)
    with child(server.base_url, db_url, side_effects, batch=batch, env=resume_env) as second:
        steps = second.steps()
        ledger.resumed_log = second.stderr()
        return steps, ledger


def run_and_kill(
    server: ScriptedServer,
    db_url: str,
    side_effects: Path,
    point: str,
    batch: bool = False,
    env: Mapping[str, str] | None = None,
) -> Ledger:
    """Run the ledger and kill it at ``point`` (see :func:`crash_and_resume`)."""
    kind, _, where = point.partition(":")
    ledger = Ledger(hold_at=int(where) if kind == "llm" else None)
    ledger.script(server)
    with ExitStack() as stack:
        env = dict(env or {})
        if kind == "mcp":
            listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
            listener.settimeout(WAIT)
            env["DURABLE_MCP_HOLD"] = f"{where}:{listener.getsockname()[1]}"
        try:
            with child(server.base_url, db_url, side_effects, "" if kind in ("llm", "mcp")
                       else point, batch, env) as first:  # fmt: skip
                if kind == "llm":
                    assert ledger.held.wait(WAIT), "the request to hold never came"
                    first.kill()
                elif kind == "mcp":
                    held, _ = listener.accept()  # the server's call has arrived
                    with held, held.makefile() as lines:
                        server_pid = int(lines.readline())
                        first.kill()  # the child first: a server that died first is lost
                        os.kill(server_pid, signal.SIGKILL)
                else:
                    assert first.next_line() == f"AT {point}"
                    first.kill()
        finally:
            ledger.release.set()
    return ledger


def decide_while_dead(
    server: ScriptedServer, db_url: str, side_effects: Path
) -> tuple[dict[str, Any], Ledger, list[str]]:
    """Kill the ledger run (DURABLE_APPROVAL=1) while it waits for approval, send messages
    from this process, which has neither the agent nor DBOS launched, and resume it.

    The messages, in order: one that does not parse, one for another pause, the approval
    of ``<tag>-b``, and a second decision of the same pause (a denial). The resumed run must
    take the approval and ignore the others.

    Returns:
        The resumed run's Step (comparable data), the server's record (``resumed_log``
        holding the resumed process's standard error) and the side effects before the
        decision.
    """
    ledger = Ledger()
    ledger.script(server)
    with child(server.base_url, db_url, side_effects) as first:
        assert first.next_line() == "READY"  # the system database is set up
        client = DBOSClient(system_database_url=db_url)
        try:
            # The run publishes what it waits on, then waits for a message: kill it there.
            value = client.get_event("ledger-run", PENDING_EVENT, timeout_seconds=WAIT)
            assert value is not None, "the run never paused"
            first.kill()
            before = side_effects.read_text().splitlines()
            pending = PendingApproval.model_validate_json(value)
            (call,) = pending.waiting
            for message in (
                {"reason": 5},
                decisions_message(pending.model_copy(update={"pause": 2}), {call.id: True}),
                decisions_message(pending, {call.id: Decision.approve()}),
                decisions_message(pending, {call.id: Decision.deny("too late")}),
            ):
                client.send(pending.workflow_id, message, APPROVAL_TOPIC)
        finally:
            client.destroy()
    with child(server.base_url, db_url, side_effects) as second:
        assert second.next_line() == "READY"
        (step,) = second.steps()
        ledger.resumed_log = second.stderr()
    return step, ledger, before
