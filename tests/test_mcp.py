"""MCP servers as tool sources, against real servers the tests start (tests/mcp_server.py):
one over stdio, one over streamable HTTP on 127.0.0.1, both written with the SDK's server."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from anyio.abc import SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream
from support import Traced, attrs

from subagent import (
    ConfigurationError,
    FailReason,
    LLMResponse,
    ScriptedLLM,
    SubAgent,
    ToolCall,
    ToolPolicy,
    TurnOutcome,
    run_many,
)
from subagent.mcp import MCPServer, MCPServerHTTP, MCPServerStdio
from subagent.mcp._results import result_text

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).with_name("mcp_server.py"))


@contextlib.contextmanager
def running_http_server() -> Iterator[str]:
    """A streamable HTTP server process on an ephemeral port of 127.0.0.1: its URL."""
    process = subprocess.Popen([sys.executable, SERVER, "http"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()  # nothing to do when a test killed it already
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The streamable HTTP server, one process per module, on an ephemeral port."""
    with running_http_server() as url:
        yield url


@pytest.fixture
def devnull() -> Iterator[Any]:
    with open(os.devnull, "w") as sink:
        yield sink


def stdio_server(devnull: Any, name: str = "calc", **options: Any) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [SERVER, "stdio"], name=name, errlog=devnull,
                          **options)  # fmt: skip


@pytest.fixture(params=["stdio", "http"])
async def server(request: pytest.FixtureRequest, devnull: Any) -> AsyncIterator[MCPServer]:
    made: MCPServer
    if request.param == "stdio":
        made = stdio_server(devnull)
    else:
        made = MCPServerHTTP(request.getfixturevalue("http_url"), name="calc")
    async with made:
        yield made


@contextlib.asynccontextmanager
async def own_server(kind: str, devnull: Any) -> AsyncIterator[MCPServer]:
    """A connected server of the test's own (one it may kill), over stdio or HTTP."""
    if kind == "stdio":
        async with stdio_server(devnull) as server:
            yield server
    else:
        with running_http_server() as url:
            async with MCPServerHTTP(url, name="calc") as server:
                yield server


def call(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)])


def react_call(name: str, **arguments: Any) -> str:
    return "Action: " + json.dumps({"tool": name, "input": arguments})


# --- offered and called like any tool ---


@pytest.mark.parametrize("protocol", ["native", "react"])
async def test_a_servers_tool_is_offered_and_called_under_both_protocols(
    server: MCPServer, protocol: str
) -> None:
    agent = SubAgent(name="calc", prompt="Add 1 and 2", tools=[server], max_turns=3,
                     tool_policy=ToolPolicy(protocol=protocol))  # type: ignore[arg-type]  # fmt: skip
    if protocol == "native":
        llm = ScriptedLLM([call("add", a=1, b=2), "3"])
    else:
        llm = ScriptedLLM(['Action: {"tool": "add", "input": {"a": 1, "b": 2}}', "Final Answer: 3"])
    step = await agent.run(llm=llm)
    assert step.ok, step.failure
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.name) == (True, "add")
    assert "3" in result.content
    listed = {tool.name: tool for tool in server.listed_tools}
    if protocol == "native":
        offered = {tool.name: tool.parameters for tool in llm.requests[0].tools}
        assert offered["add"] == listed["add"].input_schema  # sent exactly as listed
    else:
        assert "add" in llm.requests[0].messages[0].content


async def test_invalid_arguments_are_fed_back_without_calling_the_server(
    server: MCPServer,
) -> None:
    agent = SubAgent(name="calc", prompt="Add", tools=[server], max_turns=3)
    step = await agent.run(llm=ScriptedLLM([call("add", a="one", b=2), call("add", a=1, b=2),
                                            "3"]))  # fmt: skip
    first, second = (turn.tool_results[0] for turn in step.turns[:2])
    assert first.error_type == "invalid_arguments"
    assert "a: should be of type integer" in first.content
    assert second.ok


async def test_a_tool_error_of_the_server_reaches_the_model(server: MCPServer) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
    step = await agent.run(llm=ScriptedLLM([call("refuse", reason="no"), "gave up"]))
    result = step.turns[0].tool_results[0]
    assert (result.ok, result.error_type) == (False, "MCPToolError")
    assert "refused: no" in result.content


async def test_only_the_sdks_tool_error_gives_the_model_the_servers_text(
    server: MCPServer,
) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=4)
    llm = ScriptedLLM([call("explain", reason="no key"), call("stumble", reason="no key"), "no"])
    step = await agent.run(llm=llm)
    explained, stumbled = (turn.tool_results[0] for turn in step.turns[:2])
    assert explained.error_type == stumbled.error_type == "MCPToolError"
    assert "cannot: no key" in explained.content
    assert "Error executing tool stumble" in stumbled.content
    assert "cannot: no key" not in stumbled.content  # the SDK masks a plain exception


async def test_tools_are_stripped_outside_normal_and_never_called_there(
    server: MCPServer,
) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=2, return_retries=1)
    llm = ScriptedLLM([call("slow", seconds=0), call("crash"), "done"])
    step = await agent.run(llm=llm)
    assert [turn.type for turn in step.turns] == ["normal", "must_return", "retry"]
    assert llm.requests[1].tools == [] and llm.requests[2].tools == []
    assert step.turns[1].tool_results[0].error_type == "tools_unavailable"
    assert server.connected  # `crash` was refused, never run
    assert step.ok


async def test_a_long_result_is_cut_like_any_tools(server: MCPServer) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3,
                     tool_policy=ToolPolicy(max_tool_result_chars=20))  # fmt: skip
    step = await agent.run(llm=ScriptedLLM([call("picture"), "ok"]))
    result = step.turns[0].tool_results[0]
    assert result.ok and result.cut_chars > 0
    assert result.full_output is not None and result.full_output.startswith("a small picture")


async def test_a_slow_call_times_out_with_feedback_and_the_server_serves_on(
    devnull: Any,
) -> None:
    async with stdio_server(devnull, timeout=0.5) as server:
        agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
        step = await agent.run(llm=ScriptedLLM([call("slow", seconds=30), call("add", a=2, b=2),
                                                "4"]))  # fmt: skip
        timed_out, added = (turn.tool_results[0] for turn in step.turns[:2])
        assert timed_out.error_type == "timeout"
        assert added.ok and "4" in added.content


# --- one connection, many runs ---


async def test_one_connection_serves_the_concurrent_runs_of_a_batch(server: MCPServer) -> None:
    count = 6
    agent = SubAgent(name="calc", prompt="Run {{n}}", tools=[server], max_turns=3)
    llm = ScriptedLLM([call("gather", count=count)] * count + ["done"] * count)
    steps = await run_many(agent, [{"n": n} for n in range(count)], llm=llm, concurrency=count)
    assert all(step.ok for step in steps)
    # Each call waited until all of them were in flight on the one connection.
    assert {step.turns[0].tool_results[0].content.count("together") for step in steps} == {1}


# --- filtering, prefixes and clashes ---


async def test_select_filters_by_allow_deny_and_predicate(server: MCPServer) -> None:
    cases = {
        "allow": (server.select(allow=["add", "slow"]), {"add", "slow"}),
        "deny": (server.select(deny=["crash"]), {t.name for t in server.listed_tools} - {"crash"}),
        "where": (
            server.select(where=lambda tool: "integers" in (tool.description or "")),
            {"add"},
        ),
        "prefix": (server.select(allow=["add"], prefix="calc"), {"calc_add"}),
    }
    for selection, expected in cases.values():  # one connection, four views
        agent = SubAgent(name="calc", prompt="Go", tools=[selection], max_turns=2)
        llm = ScriptedLLM(["done"])
        await agent.run(llm=llm)
        assert {tool.name for tool in llm.requests[0].tools} == expected


async def test_a_prefixed_tool_calls_the_servers_own_name(server: MCPServer) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server.select(prefix="calc")], max_turns=3)
    step = await agent.run(llm=ScriptedLLM([call("calc_add", a=2, b=5), "7"]))
    assert "7" in step.turns[0].tool_results[0].content


async def test_a_name_clash_with_a_python_tool_is_an_error_when_the_agent_is_built(
    server: MCPServer,
) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(ConfigurationError, match="two tools are named 'add': a Python tool"):
        SubAgent(name="calc", prompt="Go", tools=[add, server])
    SubAgent(name="calc", prompt="Go", tools=[add, server.select(prefix="mcp")])  # opt-in prefix


async def test_a_clash_between_two_servers_is_an_error(server: MCPServer, devnull: Any) -> None:
    async with stdio_server(devnull, name="other") as other:
        with pytest.raises(ConfigurationError, match=r"'add'.*MCP server 'calc'.*'other'"):
            SubAgent(name="calc", prompt="Go", tools=[server, other])


async def test_a_clash_found_when_a_run_starts_if_the_server_was_not_connected(
    devnull: Any,
) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    server = stdio_server(devnull)
    agent = SubAgent(name="calc", prompt="Go", tools=[add, server], max_turns=2)
    with pytest.raises(ConfigurationError, match="not connected"):
        await agent.run(llm=ScriptedLLM(["x"]))
    async with server:
        with pytest.raises(ConfigurationError, match="two tools are named 'add'"):
            await agent.run(llm=ScriptedLLM(["x"]))


async def test_allow_naming_a_tool_the_server_lacks_is_an_error(server: MCPServer) -> None:
    with pytest.raises(ConfigurationError, match="lists no tool named nope"):
        SubAgent(name="calc", prompt="Go", tools=[server.select(allow=["add", "nope"])])


# --- the tool list: cached, refreshed ---


async def test_the_tool_list_is_refreshed_when_the_server_says_it_changed(
    devnull: Any,
) -> None:
    async with stdio_server(devnull) as server:
        agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
        before = server.current_tools()[0]
        llm = ScriptedLLM([call("grow"), "grown"])
        await agent.run(llm=llm)
        assert "extra" not in {tool.name for tool in llm.requests[1].tools}  # a run keeps its list
        with anyio.fail_after(10):  # the refetch runs in the server's own task
            await server.wait_for_tools(after=before)
        llm = ScriptedLLM(["done"])
        await agent.run(llm=llm)
        assert "extra" in {tool.name for tool in llm.requests[0].tools}


async def test_refresh_tools_fetches_the_list_again(server: MCPServer) -> None:
    revision = server.current_tools()[0]
    await server.refresh_tools()
    assert server.current_tools()[0] != revision


# --- a server that dies, cancellation ---


async def kill_when_called(listener: Any) -> None:
    """Wait for the server's ``hold`` call to connect, read its process id, kill it."""
    stream = await listener.accept()
    async with stream:
        pid = int(await BufferedByteReceiveStream(stream).receive_until(b"\n", 32))
    os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("protocol", ["native", "react"])
@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_a_server_killed_mid_call_ends_the_run_failed_tool_server_lost(
    kind: str, protocol: str, devnull: Any, traced: Traced
) -> None:
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listeners,
        own_server(kind, devnull) as server,
    ):
        (listener,) = listeners.listeners
        port = listener.extra(SocketAttribute.local_port)
        agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3,
                         tool_policy=ToolPolicy(protocol=protocol))  # type: ignore[arg-type]  # fmt: skip
        held = call("hold", port=port) if protocol == "native" else react_call("hold", port=port)
        llm = ScriptedLLM([held, "never asked"])
        with anyio.fail_after(30):  # never a hang
            async with anyio.create_task_group() as group:
                group.start_soon(kill_when_called, listener)
                step = await agent.run(llm=llm, tracer_provider=traced.provider)
        assert not server.connected
    assert step.failure is not None
    assert step.failure.reason is FailReason.TOOL_SERVER_LOST
    assert step.failure.message.startswith("tool 'hold': MCP server 'calc' went away: ")
    assert step.retryable
    assert len(llm.requests) == 1  # the model is not asked again
    (turn,) = step.turns
    assert (turn.outcome, turn.error_type) == (TurnOutcome.FAIL, "tool_server_lost")
    (result,) = turn.tool_results
    assert (result.ok, result.error_type) == (False, "tool_server_lost")
    assert "MCP server 'calc' went away" in result.content  # what the model would read
    assert attrs(traced.one("invoke_agent calc"))["subagent.failure.reason"] == "tool_server_lost"


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_a_server_that_exits_mid_call_fails_that_run_and_later_ones_at_once(
    kind: str, devnull: Any
) -> None:
    async with own_server(kind, devnull) as server:
        agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
        with anyio.fail_after(20):
            died = await agent.run(llm=ScriptedLLM([call("crash"), "never asked"]))
            later = await agent.run(llm=ScriptedLLM([call("add", a=1, b=1), "never asked"]))
        assert not server.connected
    for step, tool in ((died, "crash"), (later, "add")):
        assert step.failure is not None
        assert step.failure.reason is FailReason.TOOL_SERVER_LOST
        assert step.failure.message.startswith(f"tool {tool!r}: MCP server 'calc' went away")
        assert len(step.turns) == 1
        assert step.turns[0].tool_results[0].error_type == "tool_server_lost"


async def test_a_stopped_run_cancels_its_call_and_the_connection_serves_on(
    server: MCPServer,
) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
    with anyio.fail_after(20):
        step = await agent.run(llm=ScriptedLLM([call("slow", seconds=60), "x"]),
                               mission_timeout=0.5)  # fmt: skip
    assert step.failure is not None and step.failure.reason.value == "timeout"
    again = await agent.run(llm=ScriptedLLM([call("add", a=1, b=1), "2"]))
    assert again.ok and "2" in again.turns[0].tool_results[0].content


# --- traces ---


async def test_the_tool_span_carries_mcp_attributes_and_the_trace_reaches_the_server(
    server: MCPServer, traced: Traced
) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
    step = await agent.run(llm=ScriptedLLM([call("traceparent"), "ok"]),
                           tracer_provider=traced.provider)  # fmt: skip
    span = traced.one("execute_tool traceparent")
    found = attrs(span)
    assert found["mcp.method.name"] == "tools/call"
    assert found["mcp.protocol.version"]
    assert found["network.transport"] in {"pipe", "tcp"}
    carried = step.turns[0].tool_results[0].content
    assert span.context is not None
    assert f"{span.context.trace_id:032x}" in carried  # same trace on the server's side


# --- results ---


def test_results_map_text_images_resources_and_structured_content() -> None:
    image = base64.b64encode(bytes(100)).decode()
    result = mcp_types.CallToolResult(content=[
        mcp_types.TextContent(type="text", text="caption"),
        mcp_types.ImageContent(type="image", data=image, mime_type="image/png"),
        mcp_types.EmbeddedResource(type="resource", resource=mcp_types.TextResourceContents(
            uri="file:///a.txt", text="inside")),
        mcp_types.ResourceLink(type="resource_link", uri="file:///b.txt", name="b"),
    ])  # fmt: skip
    assert result_text(result).splitlines() == [
        "caption",
        "[image image/png, 100 bytes: not shown]",
        "inside",
        "[resource link file:///b.txt (b)]",
    ]
    structured = mcp_types.CallToolResult(content=[], structured_content={"sum": 3})
    assert result_text(structured) == '{"sum": 3}'


async def test_an_image_result_is_named_not_pasted(server: MCPServer) -> None:
    agent = SubAgent(name="calc", prompt="Go", tools=[server], max_turns=3)
    step = await agent.run(llm=ScriptedLLM([call("picture"), "seen"]))
    content = step.turns[0].tool_results[0].content
    assert "a small picture" in content and "[image image/png, 100 bytes: not shown]" in content


# --- configuration ---


def test_bad_server_options_are_errors_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match="url"):
        MCPServerHTTP("ftp://example")
    with pytest.raises(ConfigurationError, match="timeout"):
        MCPServerStdio("python", timeout=None)
    with pytest.raises(ConfigurationError, match="prefix"):
        MCPServerStdio("python", prefix="a b")
    with pytest.raises(ConfigurationError, match="args"):
        MCPServerStdio("python", "server.py")  # type: ignore[arg-type]


def test_the_library_never_imports_the_mcp_sdk_unless_asked() -> None:
    code = (
        "import subagent, sys; print(any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)  # fmt: skip
    assert result.stdout.strip() == "False"


def test_the_http_test_server_answers_without_waiting_on_nagle() -> None:
    # Without TCP_NODELAY on the accepted connection, each MCP call over HTTP waited about
    # 40 ms on loopback for the client's delayed ACK (docs/performance.md).
    import asyncio

    from mcp_server import listening_socket

    async def accepted_nodelay() -> int:
        found: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connection(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted = writer.get_extra_info("socket")
            found.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connection, sock=listening_socket())
        try:
            port = server.sockets[0].getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                return await asyncio.wait_for(found, 10)
            finally:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) != 0
