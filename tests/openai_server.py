"""A small, real, scriptable OpenAI-compatible HTTP server for tests.

It listens on 127.0.0.1 on an ephemeral port, in a background thread, and answers each
``POST .../chat/completions`` with the next :class:`Reply` of its script. It records every
request it received (headers and JSON body), so tests can assert what went over the wire
(:class:`RecordedRequest` reads the output-mode fields: ``response_format``, ``tool_choice``,
the tools offered), and every ``GET`` (the model list a client asks to identify the server).

It can emulate a server's dialect (:class:`Dialect`): what its model list says of it
(``owned_by``), and which output-mode fields it takes; a request carrying one it does not
take is refused, as the real server refuses it, without using a scripted reply.

Replies can be JSON, an HTTP error with headers (``Retry-After``), malformed bytes, a slow
answer, a dropped connection (before or in the middle of the body), or a server-sent-event
stream that may stop and wait for the client to hang up.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "EVERY_FIELD",
    "LLAMA_CPP_PYTHON",
    "Dialect",
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "completion",
    "running_server",
    "sse_chunk",
]

MAX_WAIT = 10.0  # upper bound of any server-side wait, so a broken test cannot hang


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def json(self) -> dict[str, Any]:
        assert isinstance(self.body, dict), f"request body is not a JSON object: {self.body!r}"
        return self.body

    @property
    def response_format(self) -> Any:
        """The body's ``response_format``, or ``None``."""
        return self.json.get("response_format")

    @property
    def tool_choice(self) -> Any:
        """The body's ``tool_choice``, or ``None``."""
        return self.json.get("tool_choice")

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools the body offers, in order."""
        return [tool["function"]["name"] for tool in self.json.get("tools", [])]


# The output-mode fields a server may take or refuse (Dialect.takes).
EVERY_FIELD = frozenset(
    {"json_schema", "json_object", "guided_json", "structured_outputs", "named_tool_choice"}
)


@dataclass(frozen=True)
class Dialect:
    """The server a test server plays, as far as output modes go.

    Attributes:
        owned_by: What ``GET /models`` says owns the model (``None``: nothing).
        takes: The output-mode fields it takes, of :data:`EVERY_FIELD`: a
            ``response_format`` of type ``json_schema`` or ``json_object``, ``guided_json``,
            ``structured_outputs``, a named ``tool_choice``.
        refusal_status: The status of a refusal (llama-cpp-python answers a request its
            model does not validate with 500 and pydantic's message).
    """

    owned_by: str | None = None
    takes: frozenset[str] = EVERY_FIELD
    refusal_status: int = 400

    def refusal(self, body: Any) -> Reply | None:
        """The refusal of a request carrying a field this server does not take, if any."""
        if not isinstance(body, dict):
            return None
        carried: list[tuple[str, tuple[str, ...]]] = []
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") != "text":
            kind = str(response_format.get("type"))
            carried.append((kind, ("response_format", "type")))
        for field_name in ("guided_json", "structured_outputs"):
            if field_name in body:
                carried.append((field_name, (field_name,)))
        if isinstance(body.get("tool_choice"), dict):
            carried.append(("named_tool_choice", ("tool_choice",)))
        for field_name, location in carried:
            if field_name not in self.takes:
                return Reply.error(self.refusal_status, self._message(location, field_name))
        return None

    def _message(self, location: tuple[str, ...], field_name: str) -> str:
        if self.refusal_status == 500:  # llama-cpp-python 0.3.36's words, as it sends them
            return (
                f"1 validation error:\n  {{'type': 'literal_error', 'loc': "
                f"{('body', *location)!r}, 'msg': \"Input should be 'text' or "
                f"'json_object'\", 'input': {field_name!r}}}"
            )
        return f"Unrecognized request argument supplied: {'.'.join(location)}"


LLAMA_CPP_PYTHON = Dialect(
    owned_by="me", takes=frozenset({"json_object", "named_tool_choice"}), refusal_status=500
)
"""llama-cpp-python 0.3.36's server: ``response_format`` of type ``json_object`` (with a
schema) only, named tool choices; its model list says ``owned_by: "me"``."""


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        status: HTTP status.
        body: Bytes, or anything JSON-serialisable.
        headers: Extra response headers.
        delay: Seconds to wait before answering (cut short when the server stops).
        drop: ``"before"`` closes the socket without answering; ``"mid"`` sends the headers
            and half the body, then closes.
        events: For a server-sent-event stream: the ``data`` payloads (dicts are JSON-encoded).
        hold_after: Stream only: after this many events, stop and wait for the client to
            hang up (records :attr:`ScriptedServer.client_hung_up`).
        drop_after: Stream only: after this many events, close the socket mid-stream.
        content_type: Overrides the default content type.
        forever: Stream only: after the events, send ``events[-1]`` again and again until
            the client hangs up (or :data:`MAX_WAIT` passes), every ``delay_between`` s.
        delay_between: Stream only: seconds between two events.
        pieces: A body produced piece by piece (never held whole by the server), sent with
            ``Content-Length: length`` when ``length`` is set, else chunked.
        length: The declared length of ``pieces``.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: str | None = None
    events: Sequence[Any] | None = None
    hold_after: int | None = None
    drop_after: int | None = None
    content_type: str | None = None
    forever: bool = False
    delay_between: float = 0.0
    pieces: Callable[[], Iterable[bytes]] | None = None
    length: int | None = None

    @classmethod
    def json(cls, body: Any, status: int = 200, **kwargs: Any) -> Reply:
        return cls(status=status, body=body, **kwargs)

    @classmethod
    def error(cls, status: int, message: str | None = None, **kwargs: Any) -> Reply:
        body = {"error": {"message": message, "type": "test_error"}} if message else b""
        return cls(status=status, body=body, **kwargs)

    @classmethod
    def sse(cls, events: Sequence[Any], **kwargs: Any) -> Reply:
        return cls(events=list(events), **kwargs)

    @classmethod
    def huge_completion(cls, size: int, *, declare_length: bool, **kwargs: Any) -> Reply:
        """A valid completion whose text is ``size`` bytes of ``a``, sent in 1 MiB pieces."""
        head = json.dumps(completion("CONTENT")).encode().split(b"CONTENT")
        piece = b"a" * (1 << 20)

        def pieces() -> Iterator[bytes]:
            yield head[0]
            for start in range(0, size, len(piece)):
                yield piece[: min(len(piece), size - start)]
            yield head[1]

        length = len(head[0]) + size + len(head[1]) if declare_length else None
        return cls(pieces=pieces, length=length, **kwargs)


def completion(
    text: str | None = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = "stop",
    model: str | None = "served-model",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> dict[str, Any]:
    """A chat-completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if model is not None:
        body["model"] = model
    return body


def sse_chunk(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    model: str = "served-model",
    reasoning: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    delta: dict[str, Any] = {}
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


ReplySource = Reply | Callable[[RecordedRequest], Reply]


class ScriptedServer:
    """The server's state: the script, the recorded requests and the stop signal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: list[ReplySource] = []
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self.client_hung_up = threading.Event()
        self.errors: list[BaseException] = []
        self.gets: list[str] = []
        self.dialect = Dialect()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.scripted = self
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: ReplySource) -> None:
        """Append replies, answered in order; an empty script answers 599."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next(self, recorded: RecordedRequest) -> Reply:
        refused = self.dialect.refusal(recorded.body)
        with self._lock:
            self.requests.append(recorded)
            if refused is not None:  # refused as the emulated server would: script kept
                return refused
            source = self._script.pop(0) if self._script else None
        if source is None:
            return Reply.error(599, "the test server has no scripted reply left")
        return source(recorded) if callable(source) else source

    def reset(self) -> None:
        """Forget the script and the requests, and release replies still waiting."""
        self.stopping.set()
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.gets.clear()
        self.stopping = threading.Event()
        self.client_hung_up = threading.Event()
        self.errors.clear()
        self.dialect = Dialect()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(MAX_WAIT)


@contextmanager
def running_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    scripted: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that stops reading and hangs up: what some tests do
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        scripted = self.server.scripted
        with scripted._lock:
            scripted.gets.append(self.path)
        if self.path.rstrip("/").endswith("/models"):
            entry: dict[str, Any] = {"id": "served-model", "object": "model"}
            if scripted.dialect.owned_by is not None:
                entry["owned_by"] = scripted.dialect.owned_by
            self._send(200, {"object": "list", "data": [entry]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        scripted = self.server.scripted
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        recorded = RecordedRequest(
            method="POST",
            path=self.path,
            headers={key.lower(): value for key, value in self.headers.items()},
            body=body,
        )
        reply = scripted._next(recorded)
        try:
            self._play(reply)
        except OSError as error:  # the client went away: that is what some tests do
            scripted.errors.append(error)
            self.close_connection = True

    # -- replies ---------------------------------------------------------------------------

    def _play(self, reply: Reply) -> None:
        scripted = self.server.scripted
        if reply.delay:
            scripted.stopping.wait(min(reply.delay, MAX_WAIT))
        if reply.drop == "before":
            self._hang_up()
            return
        if reply.events is not None:
            self._stream(reply)
            return
        if reply.pieces is not None:
            self._head(reply.status, reply.content_type or "application/json", reply.headers,
                       length=reply.length)  # fmt: skip
            for piece in reply.pieces():
                if reply.length is None:
                    self._chunk(piece)
                else:
                    self.wfile.write(piece)
            if reply.length is None:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        payload = _encode(reply.body)
        content_type = reply.content_type or "application/json"
        if reply.drop == "mid":
            self._head(reply.status, content_type, reply.headers, length=len(payload) + 100)
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self._hang_up()
            return
        self._send(reply.status, payload, content_type=content_type, headers=reply.headers)

    def _send(
        self,
        status: int,
        body: Any,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        payload = _encode(body)
        self._head(status, content_type, headers or {}, length=len(payload))
        self.wfile.write(payload)
        self.wfile.flush()

    def _head(
        self, status: int, content_type: str, headers: dict[str, str], *, length: int | None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _stream(self, reply: Reply) -> None:
        content_type = reply.content_type or "text/event-stream"
        self._head(reply.status, content_type, reply.headers, length=None)
        assert reply.events is not None
        scripted = self.server.scripted
        for sent, event in enumerate(reply.events):
            if reply.hold_after is not None and sent == reply.hold_after:
                self._wait_for_hang_up()
                return
            if reply.drop_after is not None and sent == reply.drop_after:
                self._hang_up()
                return
            if sent and reply.delay_between:
                scripted.stopping.wait(reply.delay_between)
            data = event if isinstance(event, str) else json.dumps(event)
            self._chunk(f"data: {data}\n\n".encode())
        if reply.forever and reply.events:
            last = reply.events[-1]
            data = last if isinstance(last, str) else json.dumps(last)
            payload = f"data: {data}\n\n".encode()
            until = time.monotonic() + MAX_WAIT
            while time.monotonic() < until and not scripted.stopping.is_set():
                if reply.delay_between:
                    scripted.stopping.wait(reply.delay_between)
                self._chunk(payload)  # raises OSError once the client has hung up
            self.close_connection = True
            return
        if reply.hold_after is not None and reply.hold_after >= len(reply.events):
            self._wait_for_hang_up()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _wait_for_hang_up(self) -> None:
        scripted = self.server.scripted
        self.connection.settimeout(0.05)
        waited = 0.0
        while waited < MAX_WAIT and not scripted.stopping.is_set():
            try:
                if self.connection.recv(1) == b"":
                    scripted.client_hung_up.set()
                    break
            except TimeoutError:
                waited += 0.05
            except OSError:
                scripted.client_hung_up.set()
                break
        self.close_connection = True

    def _hang_up(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _encode(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()
