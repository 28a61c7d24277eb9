"""Durable runs whose agent has tool sources (subagent/durable/_sources.py).

The MCP tests run a real server the test starts (tests/mcp_server.py, over stdio and over
streamable HTTP on 127.0.0.1). A replay is made in one process with DBOS's own
``fork_workflow``: the forked workflow runs the body again, reading the steps before the
fork's step from their checkpoints, as a workflow resumed after a crash does; the crash
tests with real processes are in tests/test_durable_crash.py.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from dbos import DBOS
from durable_harness import dbos_on_sqlite
from support import ListedSource, run_example

from subagent import (
    ConfigurationError,
    FailReason,
    LLMResponse,
    ScriptedLLM,
    SubAgent,
    Tool,
    ToolCall,
    ToolSourceLostError,
)
from subagent.durable import DurableAgent, comparable
from subagent.mcp import MCPServer, MCPServerHTTP, MCPServerStdio
from subagent.tools import SourceNotReadyError

SERVER = str(Path(__file__).with_name("mcp_server.py"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # DBOS runs its async workflows on asyncio


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Launches DBOS on a fresh SQLite database, after the test built its durable agents."""
    with dbos_on_sqlite(tmp_path, "durable-sources") as start:
        yield start


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    """tests/mcp_server.py over streamable HTTP on an ephemeral port: its URL."""
    process = subprocess.Popen([sys.executable, SERVER, "http"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{int(process.stdout.readline())}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@contextlib.asynccontextmanager
async def connected(kind: str, **options: Any) -> AsyncIterator[MCPServer]:
    """A connected server of the test's own, over stdio or streamable HTTP."""
    if kind == "stdio":
        server = MCPServerStdio(sys.executable, [SERVER, "stdio"], name="calc", **options)
        async with server:
            yield server
    else:
        with http_server() as url:
            async with MCPServerHTTP(url, name="calc", **options) as server:
                yield server


def call(name: str, **arguments: Any) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(name=name, arguments=arguments)])


async def step_names(workflow_id: str) -> list[str]:
    return [info["function_name"] for info in await DBOS.list_workflow_steps_async(workflow_id)]


# --- an MCP server's tools, called as steps ---


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_an_mcp_tool_call_in_a_durable_run_is_one_recorded_step(
    launch: Callable[[], None], kind: str
) -> None:
    async with connected(kind) as server:
        agent = SubAgent(name="calc", prompt="Add 1 and 2.", tools=[server], output=int,
                         max_turns=3)  # fmt: skip
        durable = DurableAgent(agent, llm=ScriptedLLM([call("add", a=1, b=2), "3"]))
        launch()
        step = await durable.run(workflow_id="adds")
        assert step.ok and step.output == 3, step.failure
        result = step.turns[0].tool_results[0]
        assert (result.name, result.ok) == ("add", True)
        # The tools it started with, the model, the server's tool, the model.
        assert await step_names("adds") == [
            "subagent.tools:calc", "subagent.llm:calc", "subagent.tool:add", "subagent.llm:calc",
        ]  # fmt: skip
        steps = await DBOS.list_workflow_steps_async("adds")
        assert steps[2]["output"].unwrap() == "3"  # what the server answered, checkpointed
        assert "add" in steps[0]["output"] and "crash" in steps[0]["output"]


@pytest.mark.anyio
async def test_a_prefixed_tools_step_is_named_as_the_model_calls_it(
    launch: Callable[[], None],
) -> None:
    async with connected("stdio", prefix="calc") as server:
        agent = SubAgent(name="math", prompt="Add.", tools=[server.select(allow=["add"])],
                         max_turns=2)  # fmt: skip
        durable = DurableAgent(agent, llm=ScriptedLLM([call("calc_add", a=2, b=2), "4"]))
        launch()
        step = await durable.run(workflow_id="prefixed")
        assert step.ok and step.output == "4"
        assert await step_names("prefixed") == [
            "subagent.tools:math", "subagent.llm:math", "subagent.tool:calc_add",
            "subagent.llm:math",
        ]  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_a_server_lost_mid_run_ends_the_durable_run_failed_and_retryable(
    launch: Callable[[], None], kind: str
) -> None:
    async with connected(kind) as server:
        agent = SubAgent(name="calc", prompt="Crash.", tools=[server], max_turns=3)
        durable = DurableAgent(agent, llm=ScriptedLLM([call("crash"), "never asked"]))
        launch()
        step = await durable.run(workflow_id="lost")
        assert not step.ok and step.failure is not None
        assert step.failure.reason == FailReason.TOOL_SERVER_LOST
        assert step.retryable
        assert step.turns[0].tool_results[0].error_type == "tool_server_lost"
        # The step recorded the error itself (it pickles), so a replay ends the same way.
        recorded = (await DBOS.list_workflow_steps_async("lost"))[2]["output"]
        assert isinstance(recorded.error, ToolSourceLostError)
        assert recorded.error.source == "MCP server 'calc'"
        again = await durable.run(workflow_id="lost")
        assert comparable(again) == comparable(step)


@pytest.mark.anyio
async def test_a_durable_run_is_refused_before_anything_is_recorded_without_its_server(
    launch: Callable[[], None],
) -> None:
    server = MCPServerStdio(sys.executable, [SERVER, "stdio"], name="calc")
    agent = SubAgent(name="calc", prompt="Add.", tools=[server], max_turns=2)
    durable = DurableAgent(agent, llm=ScriptedLLM(["never asked"]))
    launch()
    with pytest.raises(SourceNotReadyError, match="MCP server 'calc' is not connected"):
        await durable.run(workflow_id="early")
    with pytest.raises(SourceNotReadyError, match="MCP server 'calc' is not connected"):
        await durable.run_many([{}], batch_id="early-batch")
    assert await DBOS.get_workflow_status_async("early") is None
    assert await DBOS.get_workflow_status_async("early-batch") is None


# --- a replay, and the tools its source lists then ---

LOOKED_UP: list[str] = []


def lookup(key: str) -> str:
    """Look a key up."""
    LOOKED_UP.append(key)
    return f"value of {key}"


def lookup_by_number(key: int) -> str:
    """Look a key up (the same name, another schema)."""
    return f"value of {key}"


def extra() -> str:
    """A tool added later."""
    return "extra"


LOOKUP = Tool(lookup, run_in_thread=False)


async def replayed(durable: DurableAgent[Any], workflow_id: str) -> Any:
    """The workflow run again from its last step: every earlier step read back."""
    last = (await DBOS.list_workflow_steps_async(workflow_id))[-1]["function_id"]
    handle = await DBOS.fork_workflow_async(workflow_id, last)
    return durable._step(await handle.get_result())


@pytest.mark.anyio
async def test_a_replay_with_the_same_tools_reads_the_sources_calls_back(
    launch: Callable[[], None],
) -> None:
    LOOKED_UP.clear()
    source = ListedSource(LOOKUP)
    llm = ScriptedLLM([call("lookup", key="a"), "found", "found again"])
    durable = DurableAgent(SubAgent(name="finder", prompt="Find a.", tools=[source],
                                    max_turns=3), llm=llm)  # fmt: skip
    launch()
    first = await durable.run(workflow_id="find")
    # Listed again (a new revision), its description changed: the same tools for a replay.
    source.lists(Tool(lookup, description="Look a key up, faster.", run_in_thread=False))
    again = await replayed(durable, "find")
    assert (first.output, again.output) == ("found", "found again")
    assert LOOKED_UP == ["a"]  # the call was read back from its checkpoint
    assert again.turns[0].tool_results[0].content == first.turns[0].tool_results[0].content


@pytest.mark.anyio
async def test_a_replay_whose_source_lists_more_tools_keeps_the_tools_it_started_with(
    launch: Callable[[], None],
) -> None:
    LOOKED_UP.clear()
    source = ListedSource(LOOKUP)
    llm = ScriptedLLM([call("lookup", key="a"), "found", "found again", "later"])
    agent = SubAgent(name="finder", prompt="Find a.", tools=[source], max_turns=3)
    durable = DurableAgent(agent, llm=llm)
    launch()
    await durable.run(workflow_id="grown")
    source.lists(LOOKUP, Tool(extra))
    again = await replayed(durable, "grown")
    assert again.ok and LOOKED_UP == ["a"]
    # The replayed run's model call (made again: it was the fork's step) is offered the
    # tools the run started with; a run started now gets the new list.
    assert [tool.name for tool in llm.requests[2].tools] == ["lookup"]
    await durable.run(workflow_id="new")
    assert [tool.name for tool in llm.requests[3].tools] == ["lookup", "extra"]


@pytest.mark.anyio
async def test_a_replay_before_its_source_is_connected_ends_saying_to_connect_it_first(
    launch: Callable[[], None],
) -> None:
    source = ListedSource(LOOKUP)
    durable = DurableAgent(SubAgent(name="finder", prompt="Find a.", tools=[source],
                                    max_turns=3), llm=ScriptedLLM([call("lookup", key="a"),
                                                                   "found"]))  # fmt: skip
    launch()
    await durable.run(workflow_id="early-replay")
    source.lists()  # not connected (yet) in the process that replays it
    with pytest.raises(SourceNotReadyError, match=r"the test's source is not connected \(the "
                       r"durable run '.+' needs it: connect every tool source before "
                       r"DBOS.launch\(\), which resumes the runs a dead process left "
                       r"pending\)"):  # fmt: skip
        await replayed(durable, "early-replay")


CHANGED = r"changed \(schema or approval\): lookup"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("now", "named"),
    [
        pytest.param((Tool(extra),), "gone: lookup", id="gone"),
        pytest.param((Tool(lookup_by_number, name="lookup"),), CHANGED, id="schema"),
        pytest.param((Tool(lookup, requires_approval=True),), CHANGED, id="approval"),
    ],
)
async def test_a_replay_whose_source_lost_or_changed_a_tool_it_started_with_is_refused(
    launch: Callable[[], None], now: tuple[Tool, ...], named: str
) -> None:
    LOOKED_UP.clear()
    source = ListedSource(LOOKUP)
    llm = ScriptedLLM([call("lookup", key="a"), "found"])
    durable = DurableAgent(SubAgent(name="finder", prompt="Find a.", tools=[source],
                                    max_turns=3), llm=llm)  # fmt: skip
    launch()
    await durable.run(workflow_id="moved")
    source.lists(*now)
    refused = (
        rf"the durable run '.+' cannot go on: its tool sources no longer offer the tools it "
        rf"started with \({named}\)"
    )
    with pytest.raises(ConfigurationError, match=refused):
        await replayed(durable, "moved")
    assert LOOKED_UP == ["a"] and len(llm.requests) == 2  # nothing ran again


@pytest.mark.anyio
async def test_a_run_reads_the_listing_it_recorded_even_when_the_list_moves_meanwhile(
    launch: Callable[[], None],
) -> None:
    class ListsLater(ListedSource):
        """Lists another tool once read in the workflow (a refresh just after the run's
        listing was recorded)."""

        def current_tools(self) -> tuple[int, Sequence[Tool]]:
            listing = super().current_tools()
            if DBOS.workflow_id is not None and self.tools[0].name == "lookup":
                self.lists(Tool(extra))
            return listing

    llm = ScriptedLLM(["none"])
    durable = DurableAgent(SubAgent(name="moving", prompt="Find.", tools=[ListsLater(LOOKUP)],
                                    max_turns=2), llm=llm)  # fmt: skip
    launch()
    await durable.run(workflow_id="moving")
    recorded = (await DBOS.list_workflow_steps_async("moving"))[0]["output"]
    assert list(recorded) == [tool.name for tool in llm.requests[0].tools] == ["lookup"]


def test_the_durable_mcp_example_resumes_without_calling_the_server_again() -> None:
    assert run_example("durable_mcp.py", timeout=180).splitlines() == [
        "first process: killed after deploying ['api']",
        "second process: done in 3 turns: api and web are live",
        "ledger: api, web (each deploy reached a server once)",
    ]


@pytest.mark.anyio
async def test_a_source_tool_that_needs_approval_pauses_the_durable_run_before_it_runs(
    launch: Callable[[], None],
) -> None:
    LOOKED_UP.clear()
    source = ListedSource(Tool(lookup, requires_approval=True, run_in_thread=False))
    agent = SubAgent(name="finder", prompt="Find a.", tools=[source], max_turns=3)
    durable = DurableAgent(agent, llm=ScriptedLLM([call("lookup", key="a"), "found"]),
                           approval_timeout=0.2)  # fmt: skip
    launch()
    step = await durable.run(workflow_id="asks")
    assert step.paused and LOOKED_UP == []
    pending = await durable.pending("asks")
    assert pending is not None and [c.name for c in pending.waiting] == ["lookup"]
