"""Probes of the limits in docs/reliability.md: memory, CPU and exit time at each.

    python bench/limits.py body SIZE_MB {length,chunked}   # peak memory of a huge reply
    python bench/limits.py braces SIZE_MB                  # CPU to judge a reply of '{'
    python bench/limits.py exit RUNS                       # exit time, OTLP receiver down
    python bench/limits.py bomb SIZE_MB {complete,stream}  # peak memory of a gzip bomb
    python bench/limits.py keepalive SIZE_MB               # a gzipped stream of keep-alives

Each prints one line. Servers run in child processes, so only the client is measured.
"""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import time

import anyio
from pydantic import BaseModel

from subagent import LLMError, ScriptedLLM, SubAgent
from subagent.llm import LLMRequest, Message, OpenAIChat

_HUGE_SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

size, mode = int(sys.argv[1]), sys.argv[2]
head = (b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,'
        b'"finish_reason":"stop","message":{"role":"assistant","content":"')
tail = b'"}}]}'

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if mode == "length":
            self.send_header("Content-Length", str(len(head) + size + len(tail)))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        piece = b"a" * (1 << 20)

        def write(data):
            if mode != "length":
                data = b"%x\r\n" % len(data) + data + b"\r\n"
            self.wfile.write(data)

        try:
            write(head)
            for start in range(0, size, len(piece)):
                write(piece[: min(len(piece), size - start)])
            write(tail)
            if mode != "length":
                self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client stopped reading
            pass
        self.close_connection = True

server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

_GZIP_SERVER = r"""
import sys, zlib
from http.server import BaseHTTPRequestHandler, HTTPServer

size, kind = int(sys.argv[1]), sys.argv[2]
if kind == "keepalive":
    content_type, unit = "text/event-stream", b":\n"
else:
    content_type, unit = "application/json", b"a"
compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
parts, block = [], unit * ((1 << 20) // len(unit))
for start in range(0, size, len(block)):
    parts.append(compressor.compress(block[: size - start]))
parts.append(compressor.flush())
body = b"".join(parts)

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:  # the client stopped reading
            pass
        self.close_connection = True

server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], len(body), flush=True)
server.serve_forever()
"""

_TRACED_RUNS = r"""
import sys, time
import anyio
from subagent import ScriptedLLM, SubAgent, tracing

tracing.configure(service_name="probe", endpoint=sys.argv[2], console=False)
agent = SubAgent(name="probe", prompt="hi", max_turns=2)

async def main():
    for _ in range(int(sys.argv[1])):
        await agent.run(llm=ScriptedLLM(["done"]))

anyio.run(main)
print(time.time(), flush=True)
"""


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def body(size_mb: float, mode: str) -> None:
    """Peak memory of ``OpenAIChat.complete`` against a reply of ``size_mb`` MB."""
    size = int(size_mb * 1_000_000)
    with subprocess.Popen(
        [sys.executable, "-c", _HUGE_SERVER, str(size), mode], stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None
        port = int(server.stdout.readline())

        async def call() -> None:
            async with OpenAIChat(base_url=f"http://127.0.0.1:{port}/v1", api_key="k") as llm:
                request = LLMRequest(messages=(Message(role="user", content="hi"),))
                before = _rss_mib()
                started = time.perf_counter()
                try:
                    reply = await llm.complete(request)
                    outcome = f"accepted ({len(reply.text):,} characters)"
                except LLMError as exc:
                    outcome = f"refused ({exc.kind.value})"
                elapsed = time.perf_counter() - started
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                grown = max(0.0, peak - before)
                print(
                    f"{size_mb:g} MB reply ({mode}): {outcome}; peak RSS +{grown:.0f} MiB "
                    f"over {before:.0f} MiB, {elapsed:.2f} s"
                )

        try:
            anyio.run(call)
        finally:
            server.kill()


def bomb(size_mb: float, mode: str) -> None:
    """Peak memory of one call whose gzip body decodes to ``size_mb`` MB (``mode``: complete
    or stream, a JSON body either way)."""
    _gzip_probe(size_mb, "bomb", mode)


def keepalive(size_mb: float) -> None:
    """Wall time of one streamed call (``total_timeout=1``) whose gzip body decodes to
    ``size_mb`` MB of SSE keep-alive comments, and how often the event loop ran meanwhile."""
    _gzip_probe(size_mb, "keepalive", "stream")


def _gzip_probe(size_mb: float, kind: str, mode: str) -> None:
    size = int(size_mb * 1_000_000)
    with subprocess.Popen(
        [sys.executable, "-c", _GZIP_SERVER, str(size), kind], stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None
        port, sent = (int(word) for word in server.stdout.readline().split())

        async def call() -> None:
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await anyio.sleep(0.01)
                    ticks += 1

            llm = OpenAIChat(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", total_timeout=1)
            async with llm, anyio.create_task_group() as group:
                group.start_soon(ticker)
                request = LLMRequest(messages=(Message(role="user", content="hi"),))
                before = _rss_mib()
                started = time.perf_counter()
                try:
                    if mode == "stream":
                        async for _ in llm.stream(request):
                            pass
                    else:
                        await llm.complete(request)
                    outcome = "accepted"
                except LLMError as exc:
                    outcome = f"refused ({exc.kind.value})"
                elapsed = time.perf_counter() - started
                group.cancel_scope.cancel()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{kind} of {sent:,} gzip bytes -> {size_mb:g} MB ({mode}): {outcome}; "
                f"peak RSS +{max(0.0, peak - before):.0f} MiB over {before:.0f} MiB, "
                f"{elapsed:.2f} s, loop ran {ticks} times (100/s if never blocked)"
            )

        try:
            anyio.run(call)
        finally:
            server.kill()


class _Answer(BaseModel):
    value: int


def braces(size_mb: float) -> None:
    """CPU spent by a run judging one reply of ``size_mb`` MB of ``{``."""
    text = "{" * int(size_mb * 1_000_000)
    agent = SubAgent(name="probe", prompt="hi", output=_Answer, max_turns=1)
    started = time.process_time()
    step = agent.run_sync(llm=ScriptedLLM([text]))
    cpu = time.process_time() - started
    error = (step.turns[0].error or "").splitlines()[0][:70]
    print(f"{size_mb:g} MB of '{{': {cpu:.2f} s of CPU; feedback: {error!r}")


def exit_time(runs: int) -> None:
    """Seconds between the last of ``runs`` traced runs and process exit, receiver down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with subprocess.Popen(
        [sys.executable, "-c", _TRACED_RUNS, str(runs), f"http://127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as child:
        assert child.stdout is not None
        last_run_ended = float(child.stdout.readline())
        child.wait()
    print(f"{runs} runs, receiver down: exit {time.time() - last_run_ended:.1f} s after the last")


def main() -> None:
    probe, *args = sys.argv[1:] or ["help"]
    if probe == "body" and len(args) == 2:
        body(float(args[0]), args[1])
    elif probe == "braces" and len(args) == 1:
        braces(float(args[0]))
    elif probe == "bomb" and len(args) == 2:
        bomb(float(args[0]), args[1])
    elif probe == "keepalive" and len(args) == 1:
        keepalive(float(args[0]))
    elif probe == "exit" and len(args) == 1:
        exit_time(int(args[0]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
