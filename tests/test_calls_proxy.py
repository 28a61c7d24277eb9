"""The calls proxy (eval/calls_proxy.py): the model's calls written as text, as native calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import calls_proxy
import httpx
import pytest
from openai_server import Reply, ScriptedServer, completion

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
REQUEST = {
    "model": "m",
    "messages": [{"role": "user", "content": "Weather and time in Oslo?"}],
    "tools": TOOLS,
}


@pytest.fixture(scope="module")
def proxy(shared_server: ScriptedServer) -> Iterator[str]:
    """One proxy per module, in front of the module's scripted server."""
    with calls_proxy.running(shared_server.base_url) as url:
        yield url


def ask(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json=body, timeout=30)


def test_calls_written_in_the_models_syntax_come_back_as_native_calls(
    server: ScriptedServer, proxy: str
) -> None:
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    )
    server.script(Reply.json(completion(text, prompt_tokens=321)))
    reply = ask(proxy, REQUEST).json()
    (choice,) = reply["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {"zone": "CET"}),
    ]
    assert len({call["id"] for call in calls}) == 2
    assert reply["usage"]["prompt_tokens"] == 321  # the server's own usage, kept
    (request,) = server.requests
    assert request.json == REQUEST  # the request reaches the server as sent


@pytest.mark.parametrize(
    "text",
    [
        "It is sunny in Oslo.",
        '{"name": "book_flight", "arguments": {}}',  # not one of the tools offered
        'Call get_weather with {"city": "Oslo"}.',  # prose around it: not wholly a call
    ],
)
def test_a_reply_that_is_not_wholly_calls_of_the_offered_tools_passes_as_sent(
    server: ScriptedServer, proxy: str, text: str
) -> None:
    sent = completion(text)
    server.script(Reply.json(sent))
    assert ask(proxy, REQUEST).json() == sent


def test_without_tools_offered_a_call_written_as_text_stays_text(
    server: ScriptedServer, proxy: str
) -> None:
    sent = completion('{"name": "get_weather", "arguments": {}}')
    server.script(Reply.json(sent))
    assert ask(proxy, {k: v for k, v in REQUEST.items() if k != "tools"}).json() == sent


def test_native_calls_and_errors_pass_through(server: ScriptedServer, proxy: str) -> None:
    native = [{"id": "c1", "type": "function",
               "function": {"name": "get_time", "arguments": "{}"}}]  # fmt: skip
    sent = completion(None, tool_calls=native, finish_reason="tool_calls")
    server.script(Reply.json(sent), Reply.error(500, "model crashed"))
    assert ask(proxy, REQUEST).json() == sent
    failed = ask(proxy, REQUEST)
    assert failed.status_code == 500
    assert "model crashed" in failed.text


def test_a_streamed_request_is_refused_by_name(server: ScriptedServer, proxy: str) -> None:
    refused = ask(proxy, {**REQUEST, "stream": True})
    assert refused.status_code == 400
    assert "stream" in refused.json()["error"]["message"]
    assert server.requests == []


def test_a_body_over_the_limit_is_refused_unread(
    server: ScriptedServer, proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls_proxy, "MAX_BODY", 100)
    refused = ask(proxy, REQUEST | {"messages": [{"role": "user", "content": "x" * 200}]})
    assert refused.status_code == 413
    assert "over 100" in refused.json()["error"]["message"]
    assert server.requests == []
