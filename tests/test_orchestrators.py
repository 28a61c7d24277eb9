"""Agents inside orchestrators (docs/orchestrators.md): the LangGraph example, and what it
promises beyond its printout. The page's own blocks run as Sybil tests; the batch deadline
is tested in test_batch.py, on a mock clock."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import run_example

from subagent import InvalidStateError, LLMResponse, ScriptedLLM, ToolCall

pytest.importorskip("langgraph", reason="langgraph is in the dev extra")

from langgraph.types import Command

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LangGraph's async API runs on asyncio


@pytest.fixture
def example() -> ModuleType:
    """examples/langgraph_approval.py, imported afresh (its ``deployed`` list starts empty)."""
    spec = importlib.util.spec_from_file_location(
        "langgraph_approval", EXAMPLES / "langgraph_approval.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def deploys(*envs: str) -> list[LLMResponse]:
    return [
        LLMResponse(tool_calls=[ToolCall(name="deploy", arguments={"env": env})]) for env in envs
    ]


def test_the_langgraph_example_denies_then_approves_and_calls_the_model_once_a_reply() -> None:
    assert run_example("langgraph_approval.py").splitlines() == [
        "interrupted: ops asks deploy({'env': 'production'}) -> deny",
        "interrupted: ops asks deploy({'env': 'staging'}) -> approve",
        "report: Release 1.4 is live on staging.",
        "deployed: ['staging']; model calls: 3",
    ]


@pytest.mark.anyio
async def test_an_interrupted_graph_holds_the_signed_state_and_the_waiting_calls(
    example: ModuleType,
) -> None:
    model = ScriptedLLM([*deploys("production"), "done"])
    app = example.build(model)
    thread: Any = {"configurable": {"thread_id": "t1"}}
    result = await app.ainvoke({"version": "2.0"}, thread)
    (asked,) = result["__interrupt__"]
    assert asked.value["agent"] == "ops"
    assert asked.value["calls"] == [
        {"name": "deploy", "arguments": {"env": "production"}, "id": "call_1_1"}
    ]
    assert asked.value["state"] == result["paused"]  # the signed state, kept by the graph
    assert example.RunState.from_signed(result["paused"], example.KEY).paused
    assert len(model.requests) == 1 and example.deployed == []  # nothing ran yet


@pytest.mark.anyio
async def test_refused_decisions_are_asked_for_again_with_the_reason(example: ModuleType) -> None:
    model = ScriptedLLM([*deploys("production"), "done"])
    app = example.build(model)
    thread: Any = {"configurable": {"thread_id": "t2"}}
    await app.ainvoke({"version": "2.0"}, thread)
    refused = []
    for wrong in ({"call_9_9": {"action": "approve"}},  # another call's id
                  {"call_1_1": {"action": "edit"}},  # an edit without its arguments
                  {"call_1_1": {"action": "edit", "arguments": {"region": "eu"}}}):  # fmt: skip
        result = await app.ainvoke(Command(resume=wrong), thread)
        (asked,) = result["__interrupt__"]  # interrupted again, saying why
        refused.append(asked.value["refused"])
    assert "call_9_9" in refused[0] and "call_1_1" in refused[0]
    assert "arguments" in refused[1] and "region" in refused[2]
    result = await app.ainvoke(Command(resume={"call_1_1": {"action": "approve"}}), thread)
    assert result["report"] == "done" and example.deployed == ["production"]
    assert len(model.requests) == 2  # the refused answers ran nothing and called no model


@pytest.mark.anyio
async def test_a_state_changed_in_the_checkpointer_is_refused(example: ModuleType) -> None:
    model = ScriptedLLM([*deploys("staging"), "done"])
    app = example.build(model)
    thread: Any = {"configurable": {"thread_id": "t3"}}
    result = await app.ainvoke({"version": "2.0"}, thread)
    forged = result["paused"].replace("staging", "production")
    await app.aupdate_state(thread, {"paused": forged})
    with pytest.raises(InvalidStateError) as refused:
        await app.ainvoke(Command(resume={"call_1_1": {"action": "approve"}}), thread)
    assert refused.value.field == "signature" and example.deployed == []
