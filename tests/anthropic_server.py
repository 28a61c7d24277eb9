"""A small, real, scriptable server of Anthropic's Messages API, for tests.

It listens on 127.0.0.1 on an ephemeral port, in a background thread, and answers each
``POST /v1/messages`` with the next :class:`Reply` of its script, recording every request
(headers and JSON body). Before using a scripted reply it checks the request as the
documented API does, and refuses what the API refuses with its own error shape
(``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``): a
missing or wrong ``x-api-key`` (401), no ``anthropic-version``, no ``model`` or
``max_tokens``, a role other than ``user`` and ``assistant``, roles that do not alternate,
an empty text block, a ``tool_use`` whose ``tool_result`` is not in the next message (or not
first in it), a tool without an object ``input_schema``, a ``tool_choice`` naming no tool
offered, and a forced tool while thinking is on. A refused request keeps the script.

Replies can be a message (:func:`message`), an error with headers (``retry-after``), a
dropped connection (before or in the middle of the body), or a server-sent-event stream
(:func:`events_of` makes the documented events of a message: ``message_start``, ``ping``,
``content_block_start``/``delta``/``stop``, ``message_delta``, ``message_stop``) that may be
cut in the middle of an event.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "API_KEY",
    "AnthropicServer",
    "RecordedRequest",
    "Reply",
    "events_of",
    "message",
    "running_anthropic",
    "text",
    "thinking",
    "tool_use",
]

API_KEY = "sk-ant-test-0123456789abcdef"
"""The key the server expects in ``x-api-key``."""

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


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        status: HTTP status.
        body: Bytes, text, or anything JSON-serialisable.
        headers: Extra response headers.
        drop: ``"before"`` closes the socket without answering; ``"mid"`` sends the headers
            and half the body, then closes.
        events: A server-sent-event stream: dicts are sent as ``event: <type>`` and their
            JSON as ``data``; strings as they are (a malformed event).
        cut_after: Stream only: after this many events, send half of the next one and
            hang up.
        hold_after: Stream only: after this many events, wait for the client to hang up
            (records :attr:`AnthropicServer.client_hung_up`).
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: str | None = None
    events: Sequence[Any] | None = None
    cut_after: int | None = None
    hold_after: int | None = None

    @classmethod
    def json(cls, body: Any, status: int = 200, **kwargs: Any) -> Reply:
        return cls(status=status, body=body, **kwargs)

    @classmethod
    def error(cls, status: int, kind: str, message: str, **kwargs: Any) -> Reply:
        """An error in the API's shape (``kind``: ``overloaded_error``, ``rate_limit_error``...)."""
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return cls(status=status, body=body, **kwargs)

    @classmethod
    def sse(cls, events: Sequence[Any], **kwargs: Any) -> Reply:
        return cls(events=list(events), **kwargs)

    @classmethod
    def stream_of(cls, body: dict[str, Any], **kwargs: Any) -> Reply:
        """The stream of events that sends the message ``body``."""
        return cls(events=events_of(body), **kwargs)


# -- messages and their events ------------------------------------------------------------------


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, arguments: dict[str, Any], id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def thinking(value: str, signature: str = "sig-EqQBCgYIARABGAISDA") -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def message(
    *content: dict[str, Any],
    stop_reason: str | None = "end_turn",
    model: str = "claude-served-1",
    input_tokens: int = 11,
    output_tokens: int = 7,
    cache_read: int = 0,
    cache_write: int = 0,
) -> dict[str, Any]:
    """A Messages API reply body."""
    return {
        "id": "msg_01TestReply",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output_tokens,
        },
    }


def events_of(body: dict[str, Any], pieces: int = 3) -> list[dict[str, Any]]:
    """The documented events that stream the message ``body``.

    Text, thinking and a tool's input JSON are each sent in up to ``pieces`` deltas; the
    usage comes as the API sends it (input and cache counts in ``message_start``, the
    output count in ``message_delta``).
    """
    usage = body["usage"]
    start = {**body, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}  # fmt: skip
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        if kind == "text":
            opened, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": part} for part in _split(block["text"], pieces)],
            )
        elif kind == "thinking":
            opened = {"type": "thinking", "thinking": ""}
            deltas = [{"type": "thinking_delta", "thinking": part}
                      for part in _split(block["thinking"], pieces)]  # fmt: skip
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in _split(json.dumps(block["input"]), pieces)]  # fmt: skip
        else:
            opened, deltas = block, []
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        events.extend({"type": "content_block_delta", "index": index, "delta": delta}
                      for delta in deltas)  # fmt: skip
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta",
                   "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                   "usage": {"output_tokens": usage["output_tokens"]}})  # fmt: skip
    events.append({"type": "message_stop"})
    return events


def _split(value: str, pieces: int) -> list[str]:
    size = max(1, -(-len(value) // pieces))
    return [value[start : start + size] for start in range(0, len(value), size)] or [""]


# -- the API's refusals -------------------------------------------------------------------------


def _refusal(recorded: RecordedRequest, key: str) -> Reply | None:
    """The API's answer to a request it refuses, if it does."""
    if recorded.path != "/v1/messages":
        return Reply.error(404, "not_found_error", f"Not found: {recorded.path}")
    if recorded.headers.get("x-api-key") != key:
        return Reply.error(401, "authentication_error", "invalid x-api-key")
    if "anthropic-version" not in recorded.headers:
        return _invalid("anthropic-version: header is required")
    body = recorded.body
    if not isinstance(body, dict):
        return _invalid("The request body is not valid JSON")
    if not isinstance(body.get("model"), str):
        return _invalid("model: Field required")
    tokens = body.get("max_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        return _invalid("max_tokens: Field required")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return _invalid("system: Input should be a valid string or list")
    problem = _messages_problem(body.get("messages"))
    return _invalid(problem) if problem else _tools_refusal(body)


def _invalid(detail: str) -> Reply:
    return Reply.error(400, "invalid_request_error", detail)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content if isinstance(block, dict)]


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    pending: list[str] = []  # the tool_use ids the next message must answer
    for position, item in enumerate(messages):
        where = f"messages.{position}"
        role = item.get("role") if isinstance(item, dict) else None
        if role not in ("user", "assistant"):
            return f"{where}.role: Input should be 'user' or 'assistant'"
        if position == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if position and messages[position - 1]["role"] == role:
            return f'{where}: roles must alternate between "user" and "assistant"'
        content = item.get("content")
        if not content or not isinstance(content, str | list):
            return f"{where}: all messages must have non-empty content"
        blocks = _blocks(content)
        if any(b.get("type") == "text" and not b.get("text") for b in blocks):
            return f"{where}: text content blocks must be non-empty"
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if pending:
            firsts = [b.get("type") for b in blocks[: len(pending)]]
            if (
                role != "user"
                or sorted(pending) != sorted(results)
                or set(firsts) != {"tool_result"}
            ):
                return (
                    f"{where}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(pending)}. Each `tool_use` block must "
                    f"have a corresponding `tool_result` block in the next message."
                )
        elif results:
            return f"{where}: unexpected `tool_use_id` found in `tool_result` blocks"
        pending = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
    return None


def _tools_refusal(body: dict[str, Any]) -> Reply | None:
    tools = body.get("tools") or []
    names = []
    for position, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return _invalid(f"tools.{position}.name: Field required")
        names.append(tool["name"])
        if tool.get("type", "custom") != "custom":
            continue  # a server tool (web_search_20250305...): Anthropic runs it
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return _invalid(f"tools.{position}.input_schema.type: Input should be 'object'")
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        return _invalid("tool_choice: Input tag does not match any of the expected tags")
    if choice["type"] == "tool" and choice.get("name") not in names:
        return _invalid(f"tool_choice.name: no tool named {choice.get('name')!r} was offered")
    thought = body.get("thinking")
    if isinstance(thought, dict) and thought.get("type") == "enabled" and choice["type"] in (
        "any", "tool"
    ):  # fmt: skip
        return _invalid("Thinking may not be enabled when tool_choice forces tool use.")
    return None


# -- the server -----------------------------------------------------------------------------------


class AnthropicServer:
    """The server's state: the script, the recorded requests and the stop signal."""

    def __init__(self, key: str = API_KEY) -> None:
        self.key = key
        self._lock = threading.Lock()
        self._script: list[Reply] = []
        self.requests: list[RecordedRequest] = []
        self.refused: list[Reply] = []
        self.stopping = threading.Event()
        self.client_hung_up = threading.Event()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.scripted = self
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        """Append replies, answered in order; an empty script answers 599."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next(self, recorded: RecordedRequest) -> Reply:
        refused = _refusal(recorded, self.key)
        with self._lock:
            self.requests.append(recorded)
            if refused is not None:  # refused as the API would: the script is kept
                self.refused.append(refused)
                return refused
            if not self._script:
                return Reply.error(599, "api_error", "the test server has no scripted reply left")
            return self._script.pop(0)

    def reset(self) -> None:
        """Forget the script and the requests, and release replies still waiting."""
        self.stopping.set()
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.refused.clear()
        self.stopping = threading.Event()
        self.client_hung_up = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(MAX_WAIT)


@contextmanager
def running_anthropic(key: str = API_KEY) -> Iterator[AnthropicServer]:
    server = AnthropicServer(key)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    scripted: AnthropicServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hangs up: what some tests do
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
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
        reply = self.server.scripted._next(recorded)
        with suppress(OSError):  # a client that went away: what some tests do
            self._play(reply)

    def _play(self, reply: Reply) -> None:
        if reply.drop == "before":
            self._hang_up()
            return
        if reply.events is not None:
            self._stream(reply)
            return
        payload = _encode(reply.body)
        if reply.drop == "mid":
            self._head(reply.status, "application/json", reply.headers, len(payload) + 100)
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self._hang_up()
            return
        self._head(reply.status, "application/json", reply.headers, len(payload))
        self.wfile.write(payload)
        self.wfile.flush()

    def _head(self, status: int, content_type: str, headers: dict[str, str],
              length: int | None) -> None:  # fmt: skip
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("request-id", "req_01TestRequest")
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _stream(self, reply: Reply) -> None:
        assert reply.events is not None
        self._head(reply.status, "text/event-stream; charset=utf-8", reply.headers, None)
        for sent, event in enumerate(reply.events):
            payload = _event(event)
            if reply.hold_after is not None and sent == reply.hold_after:
                self._wait_for_hang_up()
                return
            if reply.cut_after is not None and sent == reply.cut_after:
                self._chunk(payload[: len(payload) // 2])
                self._hang_up()
                return
            self._chunk(payload)
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


def _event(event: Any) -> bytes:
    if isinstance(event, str):
        return f"data: {event}\n\n".encode()
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _encode(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()
