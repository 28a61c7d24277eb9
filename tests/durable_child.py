"""A durable run in a process of its own, for the crash tests (tests/test_durable_crash.py).

``python durable_child.py BASE_URL DB_URL SIDE_EFFECTS [CRASH [batch]]`` runs the ``ledger``
agent durably against the OpenAI-compatible server at BASE_URL, with DBOS's system database
at DB_URL, and prints ``STEPS <json>``: the run's Step as :func:`subagent.durable.comparable`
data, in a list (with ``batch``: a durable batch of three runs, tags r1 to r3, one at a
time). Its tool appends each recorded item to the file SIDE_EFFECTS (the side-effect
counter). CRASH may be empty. With DURABLE_APPROVAL=1 the call recording ``<tag>-b``
needs approval (sent as a DBOS message), and the child prints ``READY`` once DBOS is
launched (its system database set up). With DURABLE_SPANS set, the run's spans are
appended to that file as JSON lines as each span ends. DURABLE_SETTINGS (a JSON object)
is the run's ``settings`` (for a real model: temperature, max_tokens, a named
``tool_choice``; tests/e2e/test_durable_local.py). With DURABLE_MCP=1 the ``record`` tool
is served by an MCP server over stdio (tests/durable_mcp_server.py, writing the same file;
the child hands it the DURABLE_MCP_* variables), connected before DBOS is launched. A run
that raises prints ``ERROR <type>: <message>`` instead of its Steps.

CRASH names a point where the process stops, prints ``AT <point>`` and waits on its
standard input for the SIGKILL that the test sends: ``tool:<item>`` inside the tool call
recording ``item`` (``r2-c``, say) before its side effect; ``between:<n>`` in the
workflow's body after turn n-1's steps completed and before the LLM call of turn n
starts. (A kill during an LLM call is the server's doing: it holds the request.)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from dbos import DBOS
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from pydantic import BaseModel

from subagent import OpenAIChat, SubAgent, ToolPolicy, tool
from subagent.durable import DurableAgent, DurableLLM, comparable
from subagent.llm import LLMRequest, LLMResponse

CRASH = sys.argv[4] if len(sys.argv) > 4 else ""
MCP_SERVER = str(Path(__file__).with_name("durable_mcp_server.py"))
BATCH = len(sys.argv) > 5 and sys.argv[5] == "batch"
SIDE_EFFECTS = sys.argv[3]


def _stop_here(point: str) -> None:
    sys.stdout.write(f"AT {point}\n")
    sys.stdout.flush()
    sys.stdin.readline()  # the test never writes: its SIGKILL ends the process here
    raise SystemExit(f"reached {point} and was not killed")


@tool(run_in_thread=False)
def record(item: str) -> str:
    """Record one item in the ledger.

    Args:
        item: The item to record.
    """
    if f"tool:{item}" == CRASH:
        _stop_here(CRASH)
    with open(SIDE_EFFECTS, "a", encoding="utf-8") as ledger:
        ledger.write(f"{item}\n")
    return f"recorded {item}"


class Count(BaseModel):
    count: int


class _StopsBetween(DurableLLM):
    """Stops before the LLM call of turn ``n`` when CRASH is ``between:<n>``."""

    calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        type(self).calls += 1
        if f"between:{type(self).calls}" == CRASH:
            _stop_here(CRASH)
        return await super().complete(request)


def _needs_approval(name: str, arguments: Mapping[str, Any]) -> bool:
    return str(arguments.get("item", "")).endswith("-b")


def _mcp_server() -> Any:
    """DURABLE_MCP=1: the record tool is an MCP server's (it records in the same file)."""
    if not os.environ.get("DURABLE_MCP"):
        return None
    from subagent.mcp import MCPServerStdio  # the mcp extra, only where it is used

    forwarded = {key: value for key, value in os.environ.items() if key.startswith("DURABLE_MCP_")}
    return MCPServerStdio(sys.executable, [MCP_SERVER, SIDE_EFFECTS], name="ledger",
                          env=forwarded)  # fmt: skip


server = _mcp_server()

agent = SubAgent(
    name="ledger",
    # DURABLE_APPROVAL=1: recording b needs approval (the run pauses before turn 2's calls).
    tool_policy=ToolPolicy(
        approval=_needs_approval if os.environ.get("DURABLE_APPROVAL") else None,
        parallel_tool_calls=False,
    ),
    prompt="Record a, b and c for {{tag}} with the record tool, then return how many you recorded.",
    tools=[record] if server is None else [server],
    output=Count,
    max_turns=3,
    return_retries=1,
)


class _SpansToFile(SpanExporter):
    """Appends each ended span (name, ids) to a file as a JSON line, as it ends."""

    def __init__(self, path: str):
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as out:
            for span in spans:
                assert span.context is not None
                parent = span.parent.span_id if span.parent is not None else None
                out.write(
                    json.dumps(
                        {
                            "name": span.name,
                            "trace_id": span.context.trace_id,
                            "span_id": span.context.span_id,
                            "parent": parent,
                        }
                    )
                    + "\n"
                )
        return SpanExportResult.SUCCESS


def _tracer_provider() -> TracerProvider | None:
    path = os.environ.get("DURABLE_SPANS")
    if not path:
        return None
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_SpansToFile(path)))
    return provider


def _options() -> dict[str, Any]:
    settings = os.environ.get("DURABLE_SETTINGS")
    return {"settings": json.loads(settings)} if settings else {}


async def main(base_url: str, db_url: str) -> None:
    # A read may wait on a local model that shares two busy cores: 60 s is not always enough.
    llm = OpenAIChat(model="served-model", base_url=base_url, api_key="test-key", timeout=300)
    durable = DurableAgent(agent, llm=_StopsBetween(llm, step_name="subagent.llm:ledger"),
                           tracer_provider=_tracer_provider())  # fmt: skip
    DBOS(config={"name": "durable-crash", "system_database_url": db_url,
                 "log_level": "WARNING"})  # fmt: skip
    async with AsyncExitStack() as stack:
        if server is not None:  # connected before DBOS.launch(), which resumes the run
            await stack.enter_async_context(server)
        DBOS.launch()
        if os.environ.get("DURABLE_APPROVAL"):
            sys.stdout.write("READY\n")
            sys.stdout.flush()
        try:
            if BATCH:
                tags = [{"tag": f"r{index}"} for index in range(1, 4)]
                steps = await durable.run_many(
                    tags, batch_id="ledger-batch", concurrency=1, **_options()
                )
            else:
                steps = [await durable.run({"tag": "solo"}, workflow_id="ledger-run", **_options())]
            data = [comparable(step) for step in steps]
            sys.stdout.write("STEPS " + json.dumps(data, sort_keys=True) + "\n")
        except Exception as exc:
            sys.stdout.write(f"ERROR {type(exc).__name__}: {exc}\n")
        finally:
            sys.stdout.flush()
            await llm.aclose()
            DBOS.destroy()


if __name__ == "__main__":
    os.environ.pop("OTEL_TRACES_EXPORTER", None)
    anyio.run(main, sys.argv[1], sys.argv[2])
