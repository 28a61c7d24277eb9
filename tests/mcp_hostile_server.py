"""A hostile MCP server for the tests: raw JSON-RPC, written by hand, so every byte is ours.

``python tests/mcp_hostile_server.py stdio [options]`` serves newline-delimited JSON-RPC on
stdin/stdout; ``... http [options]`` serves the same answers over streamable HTTP (a bare
ASGI app: JSON bodies, or one server-sent event per reply with ``--sse``) on 127.0.0.1 at an
ephemeral port, printed as the first line of its stdout. It speaks the handshake-era
protocol (``server/discover`` is refused as an unknown method, as an older server does).

Its tools are what a server the runtime does not control may send:

- ``add(a, b)``: an honest tool, to show the connection serves on;
- ``shaped(length=26)``: a result whose ``structuredContent`` meets an ``outputSchema``
  with a backtracking pattern (``^(a+)+$`` against ``"a" * length + "!"``);
- ``flood(count)``: a result of ``count`` tiny text blocks;
- ``badbytes()``: a result whose text holds a byte that is not UTF-8;
- ``fail()``: a tool error with a traceback written to stderr.

Options: ``--silent`` answers nothing at all (a server that hangs in the handshake);
``--tools N`` lists N more small tools (``--padding N``: their descriptions N characters
longer); ``--properties N`` gives ``add`` N more optional properties; ``--sse`` answers
over HTTP as server-sent events; ``--description TEXT`` gives ``add`` that description.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

PROTOCOL = "2025-06-18"
BAD_BYTE = b"\xff"


def options(argv: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {"silent": False, "tools": 0, "properties": 0, "sse": False,
                             "description": "Add two integers.", "padding": 0}  # fmt: skip
    rest = iter(argv)
    for word in rest:
        if word in ("--silent", "--sse"):
            found[word[2:]] = True
        else:
            value = next(rest)
            found[word[2:]] = value if word == "--description" else int(value)
    return found


def tool_list(settings: dict[str, Any]) -> list[dict[str, Any]]:
    add_properties: dict[str, Any] = {"a": {"type": "integer"}, "b": {"type": "integer"}}
    add_properties.update({f"p{n}": {"type": "string"} for n in range(settings["properties"])})
    tools = [
        {"name": "add", "description": settings["description"],
         "inputSchema": {"type": "object", "properties": add_properties,
                         "required": ["a", "b"]}},
        {"name": "shaped", "description": "A structured result.",
         "inputSchema": {"type": "object"},
         "outputSchema": {"type": "object",
                          "properties": {"v": {"type": "string", "pattern": "^(a+)+$"}}}},
        {"name": "flood", "description": "Many tiny text blocks.",
         "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}}},
        {"name": "badbytes", "description": "Text that is not UTF-8.",
         "inputSchema": {"type": "object"}},
        {"name": "fail", "description": "A tool that fails.", "inputSchema": {"type": "object"}},
    ]  # fmt: skip
    tools += [
        {"name": f"t{n}", "description": "A small tool." + "." * settings["padding"],
         "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}}
        for n in range(settings["tools"])
    ]  # fmt: skip
    return tools


def text(value: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": error}


def result_of(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "add":
        return text(str(arguments["a"] + arguments["b"]))
    if name == "shaped":
        length = int(arguments.get("length", 26))
        return {"content": [{"type": "text", "text": "shaped"}],
                "structuredContent": {"v": "a" * length + "!"}}  # fmt: skip
    if name == "flood":
        return {"content": [{"type": "text", "text": "x"}] * int(arguments["count"])}
    if name == "badbytes":
        return text("before BAD after")
    if name == "fail":
        try:
            {}["the tool broke"]
        except KeyError:
            traceback.print_exc()  # to stderr, as a server's logging does
        return text("Error executing tool fail", error=True)
    return text(f"unknown tool {name}", error=True)


def answer(message: dict[str, Any], settings: dict[str, Any]) -> bytes | None:
    """The bytes of the reply to one message (None for a notification)."""
    if "id" not in message or "method" not in message:
        return None
    method = message["method"]
    params = message.get("params") or {}
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {"protocolVersion": PROTOCOL,
                           "capabilities": {"tools": {"listChanged": False}},
                           "serverInfo": {"name": "hostile", "version": "1"}}  # fmt: skip
    elif method == "tools/list":
        reply["result"] = {"tools": tool_list(settings)}
    elif method == "tools/call":
        reply["result"] = result_of(params["name"], params.get("arguments") or {})
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
    return json.dumps(reply).encode().replace(b"BAD", BAD_BYTE)


def serve_stdio(settings: dict[str, Any]) -> None:
    for line in sys.stdin.buffer:
        if settings["silent"] or not line.strip():
            continue
        reply = answer(json.loads(line), settings)
        if reply is not None:
            sys.stdout.buffer.write(reply + b"\n")
            sys.stdout.buffer.flush()


def http_app(settings: dict[str, Any]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        if scope["method"] != "POST":
            await send({"type": "http.response.start", "status": 405, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        reply = None if settings["silent"] else answer(json.loads(body), settings)
        if reply is None:
            if settings["silent"]:
                await receive()  # hold the request until the client gives up
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        kind = b"text/event-stream" if settings["sse"] else b"application/json"
        payload = b"event: message\r\ndata: " + reply + b"\r\n\r\n" if settings["sse"] else reply
        headers = [(b"content-type", kind), (b"mcp-session-id", b"hostile")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


if __name__ == "__main__":
    settings = options(sys.argv[2:])
    if sys.argv[1] == "stdio":
        serve_stdio(settings)
    else:
        import anyio
        import uvicorn
        from mcp_server import listening_socket

        sock = listening_socket()
        print(sock.getsockname()[1], flush=True)
        config = uvicorn.Config(http_app(settings), log_level="critical")
        anyio.run(uvicorn.Server(config).serve, [sock])
