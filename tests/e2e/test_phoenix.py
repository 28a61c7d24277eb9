"""End to end: a run's spans exported over OTLP/HTTP and OTLP/gRPC to a real receiver.

The receiver is Arize Phoenix, started by the test on 127.0.0.1 from its own cached venv
(see scripts/phoenix_server.py; the first run installs it, about a minute). Each protocol and
event loop sends to its own Phoenix project, picked by the ``openinference.project.name``
resource attribute, and the test reads the spans back from Phoenix's REST API.

Phoenix keeps names, parent ids, attributes, events and statuses, but neither the OTLP span
kind nor resource attributes: tests/test_tracing.py checks those on the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from phoenix_server import PHOENIX_VERSION, PhoenixServer, ensure_installed
from pydantic import BaseModel

from subagent import (
    ErrorKind,
    LLMError,
    LLMResponse,
    RetryPolicy,
    ScriptedLLM,
    SubAgent,
    ToolCall,
    Usage,
)
from subagent.tracing import PROJECT_NAME_ATTRIBUTE, configure

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


class Answer(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(scope="module")
def phoenix(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PhoenixServer]:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def log(message: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"\n[phoenix] {message}", flush=True)

    python = ensure_installed(log)
    workdir: Path = tmp_path_factory.mktemp("phoenix")
    with PhoenixServer(python, workdir, log) as server:
        yield server


def scripted_model() -> ScriptedLLM:
    """Rate-limited once, a tool call, an invalid answer, a valid one."""
    return ScriptedLLM(
        [
            LLMError(ErrorKind.RATE_LIMIT, "too many requests", status_code=429),
            LLMResponse(
                tool_calls=[ToolCall(name="add", arguments={"a": 1, "b": 2}, id="call-add")],
                usage=Usage(input_tokens=100, output_tokens=10),
            ),
            LLMResponse(text='{"value": "three"}', usage=Usage(input_tokens=200, output_tokens=5)),
            LLMResponse(text='{"value": 3}', usage=Usage(input_tokens=300, output_tokens=4)),
        ]
    )


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_a_corrected_run_arrives_in_phoenix_as_one_trace(
    phoenix: PhoenixServer, protocol: str, anyio_backend: str
) -> None:
    project = f"e2e-{anyio_backend}-{protocol.replace('/', '-')}"
    endpoint = phoenix.grpc_endpoint if protocol == "grpc" else phoenix.base_url
    agent = SubAgent(name="calc", prompt="Compute {{question}}", output=Answer, tools=[add])
    with configure(
        f"subagent-e2e-{protocol}",
        endpoint=endpoint,
        protocol=protocol,
        resource_attributes={PROJECT_NAME_ATTRIBUTE: project},
        console=False,
        set_global=False,
    ) as handle:
        step = await agent.run(
            {"question": "1+2"},
            llm=scripted_model(),
            max_turns=2,
            return_retries=1,
            retry_policy=RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0),
            tracer_provider=handle.provider,
        )
    assert step.ok and step.output == Answer(value=3)

    spans = await anyio.to_thread.run_sync(phoenix.wait_for_spans, project, 8)
    assert len(spans) == 8, f"Phoenix {PHOENIX_VERSION} holds {len(spans)} spans"
    by_id = {span["context"]["span_id"]: span for span in spans}

    def named(name: str) -> list[dict[str, Any]]:
        return [span for span in spans if span["name"] == name]

    def one(name: str) -> dict[str, Any]:
        (found,) = named(name)
        return found

    def children(span: dict[str, Any]) -> list[str]:
        return sorted(s["name"] for s in spans if s["parent_id"] == span["context"]["span_id"])

    # the tree
    run = one("invoke_agent calc")
    normal, must_return, retry = (
        one(f"agent_turn {t}") for t in ("normal", "must_return", "retry")
    )
    tool = one("execute_tool add")
    assert run["parent_id"] is None
    assert {span["context"]["trace_id"] for span in spans} == {run["context"]["trace_id"]}
    assert children(run) == ["agent_turn must_return", "agent_turn normal", "agent_turn retry"]
    assert children(normal) == ["chat scripted", "execute_tool add"]
    assert children(must_return) == ["chat scripted"]
    assert children(retry) == ["chat scripted"]
    assert tool["parent_id"] == normal["context"]["span_id"]
    assert all(span["parent_id"] in by_id for span in spans if span is not run)

    # statuses: the run recovered, so it looks fine; the failed turn is red
    assert run["status_code"] == "UNSET"
    assert must_return["status_code"] == "ERROR"
    # content capture is off: the status names the error, not the model's words
    assert must_return["status_message"] == "invalid_output: value: int_parsing"
    assert {normal["status_code"], retry["status_code"], tool["status_code"]} == {"UNSET"}
    assert {chat["status_code"] for chat in named("chat scripted")} == {"UNSET"}

    # attributes
    a = run["attributes"]
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.agent.name"] == "calc"
    assert a["gen_ai.provider.name"] == "scripted"
    assert (a["subagent.max_turns"], a["subagent.return_retries"]) == (2, 1)
    assert (a["subagent.outcome"], a["subagent.turns"]) == ("done", 3)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (600, 19)
    a = must_return["attributes"]
    assert (a["subagent.turn.index"], a["subagent.turn.type"]) == (2, "must_return")
    assert (a["subagent.phase.before"], a["subagent.phase.after"]) == ("must_return", "retry")
    assert (a["subagent.turn.outcome"], a["error.type"]) == ("error", "invalid_output")
    assert (a["subagent.budget.work_remaining"], a["subagent.budget.retries_remaining"]) == (0, 1)
    assert a["subagent.turn.tools_offered"] == 0
    assert a["subagent.turn.error"] == "invalid_output: value: int_parsing"
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    a = retry["attributes"]
    assert (a["subagent.retry.attempt"], a["subagent.retry.total"]) == (1, 1)
    assert a["subagent.turn.outcome"] == "success"
    assert normal["attributes"]["subagent.turn.tools_offered"] == 1
    assert tool["attributes"]["gen_ai.tool.name"] == "add"
    assert tool["attributes"]["gen_ai.tool.call.id"] == "call-add"
    first_chat = next(
        c for c in named("chat scripted") if c["parent_id"] == normal["context"]["span_id"]
    )
    a = first_chat["attributes"]
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"]) == ("chat", "scripted")
    assert a["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (100, 10)

    # the transport retry is an event of the first chat span
    assert [event["name"] for event in first_chat["events"]] == ["transport_retry"]
    event = first_chat["events"][0]["attributes"]
    assert event["error.type"] == "rate_limit"
    assert event["subagent.retry.attempt"] == 1
    assert event["subagent.retry.delay_s"] == 0.0
    other_chats = [c for c in named("chat scripted") if c is not first_chat]
    assert all(chat["events"] == [] for chat in other_chats)
