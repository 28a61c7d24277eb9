"""A chat-completions proxy that returns the model's calls written as text as native calls.

    python eval/calls_proxy.py --upstream http://127.0.0.1:8000/v1 [--port N]

llama-cpp-python 0.3.36 serving Qwen with the model's own chat template (the ``template``
set-up) shows the model its tools, and the model calls them in its own syntax
(``<tool_call>{...}</tool_call>``), which that server leaves in the reply's text: a client
that reads native ``tool_calls`` only (pydantic-ai, the Agents SDK, a raw call) sees no
call. vLLM's and llama.cpp's own servers parse that syntax into ``tool_calls`` for Qwen;
this proxy does the same in front of the template server, with subagent's reader
(:func:`subagent.llm.tool_calls_in_text`, the one subagent's own runs use on that server),
so those clients are served as such a server would serve them: the ``parsed`` set-up of
``eval/run_bfcl.py``.

What it changes: a non-streamed chat completion whose request offered tools and whose reply
has no native call but text that is wholly one or more calls of the offered tools comes
back with those calls as ``tool_calls`` (``content`` null, ``finish_reason`` ``tool_calls``).
Everything else passes through as the server sent it. A streamed request is refused (HTTP
400): no peer here streams. Bounds: a request body of at most :data:`MAX_BODY` bytes, one
upstream request at a time per connection, :data:`UPSTREAM_TIMEOUT` seconds per request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from subagent.llm._text_calls import tool_calls_in_text

MAX_BODY = 16 * 1024 * 1024
"""The largest request body the proxy reads (bytes); a larger one gets HTTP 413."""
UPSTREAM_TIMEOUT = 600.0
"""Seconds one upstream request may take (a 1.5B model's long reply on a busy CPU)."""


def with_native_calls(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` with the calls its text holds as native calls, when it has them.

    Args:
        request: The chat-completions request body (its ``tools`` name the calls allowed).
        reply: The server's response body.

    Returns:
        A new response body, or ``reply`` itself when nothing is to change.
    """
    names = {
        tool.get("function", {}).get("name")
        for tool in request.get("tools") or []
        if isinstance(tool, dict)
    }
    names.discard(None)
    choices = reply.get("choices")
    if not names or not isinstance(choices, list) or not choices:
        return reply
    message = choices[0].get("message") or {}
    text = message.get("content")
    if message.get("tool_calls") or not isinstance(text, str):
        return reply
    calls = tool_calls_in_text(text, names)
    if not calls:
        return reply
    native = [
        {
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for index, call in enumerate(calls)
    ]
    first = {
        **choices[0],
        "message": {**message, "content": None, "tool_calls": native},
        "finish_reason": "tool_calls",
    }
    return {**reply, "choices": [first, *choices[1:]]}


def _handler(upstream: str, client: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the runner prints its own progress

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            self._send(status, json.dumps({"error": {"message": message}}).encode())

        def do_GET(self) -> None:
            response = client.get(upstream + self.path.removeprefix("/v1"))
            self._send(response.status_code, response.content, response.headers["content-type"])

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._error(413, f"request body of {length} bytes, over {MAX_BODY}")
                return
            raw = self.rfile.read(length)
            try:
                request = json.loads(raw)
            except ValueError as exc:
                self._error(400, f"request body is not JSON: {exc}")
                return
            if request.get("stream"):
                self._error(400, "stream: the calls proxy serves non-streamed requests only")
                return
            response = client.post(upstream + self.path.removeprefix("/v1"), content=raw,
                                   headers={"Content-Type": "application/json"})  # fmt: skip
            body = response.content
            if response.status_code == 200 and self.path.endswith("/chat/completions"):
                body = json.dumps(with_native_calls(request, response.json())).encode()
            self._send(response.status_code, body, response.headers["content-type"])

    return Handler


@contextlib.contextmanager
def running(upstream: str, port: int = 0) -> Iterator[str]:
    """Serve the proxy on 127.0.0.1 while the block runs; yields its base URL (``.../v1``).

    Args:
        upstream: The server's base URL, ``http://host:port/v1``.
        port: The port to listen on (0: a free one).
    """
    upstream = upstream.rstrip("/")
    with httpx.Client(timeout=UPSTREAM_TIMEOUT) as client:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(upstream, client))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def main(argv: list[str] | None = None) -> None:
    """Serve the proxy until the process is stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the server's base URL (.../v1)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with running(args.upstream, args.port) as url:
        print(f"calls proxy at {url} -> {args.upstream}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
