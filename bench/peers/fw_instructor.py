"""instructor: ``from_openai(AsyncOpenAI)`` over an ``httpx.MockTransport``.

instructor patches the real ``openai`` client, so the fake sits at the HTTP boundary: a
mock transport answering chat completions with canned JSON bodies. Every figure therefore
includes the openai SDK's own cost (building the request, httpx, parsing the response into
its types). Default mode (``Mode.TOOLS``); the correction budget is ``max_retries``.
instructor is a structured-output library, not an agent loop: it runs no tools (S2, S4)
and has no tracing of its own (S3).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import instructor
from openai import AsyncOpenAI
from scenarios import (
    INSTRUCTIONS,
    PROMPT,
    Answer,
    Outcome,
    RunFn,
    Scenario,
    Script,
    ToolCallSpec,
    Unsupported,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

NAME = "instructor"
DISTRIBUTIONS = ("instructor", "openai", "httpx")
NOTES = (
    "real `openai` client over `httpx.MockTransport` (includes the openai SDK's cost); "
    "`Mode.TOOLS`, `max_retries=2`; no tool loop, no tracing. The openai client detects "
    "the platform once, in asyncio's default executor thread (`asyncio_0`, during warm-up)"
)


def _body(text: str, index: int) -> bytes:
    call = {"id": f"call_{index}", "type": "function",
            "function": {"name": Answer.__name__, "arguments": text}}  # fmt: skip
    completion: dict[str, Any] = {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }
    return json.dumps(completion).encode()


class _Server:
    """The mock transport's handler: canned bodies, in script order."""

    def __init__(self, scenario: Scenario):
        self.bodies: dict[str, bytes] = {}
        for index, reply in enumerate(scenario.script):
            if isinstance(reply, ToolCallSpec):
                raise Unsupported("instructor runs no tools")
            self.bodies[reply] = _body(reply, index)
        self.script = Script(())

    def __call__(self, request: httpx.Request) -> httpx.Response:
        reply = self.script.next(len(request.content))
        assert isinstance(reply, str)
        headers = {"content-type": "application/json"}
        return httpx.Response(200, headers=headers, content=self.bodies[reply])


def build(scenario: Scenario, tracer_provider: TracerProvider | None) -> RunFn:
    if scenario.traced:
        raise Unsupported("no tracing of its own")
    server = _Server(scenario)
    http = httpx.AsyncClient(transport=httpx.MockTransport(server))
    openai = AsyncOpenAI(api_key="unused", base_url="http://fake.invalid/v1", http_client=http,
                         max_retries=0)  # fmt: skip
    client = instructor.from_openai(openai)
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": PROMPT}]

    async def run() -> Outcome:
        server.script = script = Script(scenario.script)
        answer = await client.chat.completions.create(
            model="fake",
            response_model=Answer,
            messages=messages,  # type: ignore[arg-type]
            max_retries=scenario.corrections,
        )
        return Outcome(answer, script.sizes)

    return run
