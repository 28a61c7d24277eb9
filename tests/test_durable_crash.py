"""Durable runs killed with SIGKILL at chosen points and restarted (subagent.durable).

Each test runs the ledger agent (tests/durable_child.py) in a process of its own against a
real scripted HTTP server, kills it at one point, starts it again on the same SQLite system
database, and compares the resumed run's Step with the Step of a run that never stopped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from durable_harness import Ledger, child, crash_and_resume, decide_while_dead, run_and_kill
from openai_server import ScriptedServer


@pytest.fixture(scope="module")
def uncrashed(
    shared_server: ScriptedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """The Step and the side effects of the ledger run that never stopped."""
    shared_server.reset()
    folder = tmp_path_factory.mktemp("uncrashed")
    Ledger().script(shared_server)
    with child(shared_server.base_url, f"sqlite:///{folder}/dbos.sqlite",
               folder / "ledger.txt") as run:  # fmt: skip
        (step,) = run.steps()
    yield step, (folder / "ledger.txt").read_text().splitlines()
    shared_server.reset()


def test_the_uncrashed_run_records_each_item_once_and_succeeds(
    uncrashed: tuple[dict[str, Any], list[str]],
) -> None:
    step, side_effects = uncrashed
    assert step["ok"] is True
    assert step["output"] == {"count": 3}
    assert [turn["type"] for turn in step["turns"]] == ["normal", "normal", "must_return",
                                                         "retry"]  # fmt: skip
    assert side_effects == ["solo-a", "solo-b", "solo-c"]


# (point, the LLM calls made again after the restart: those cut off by the kill)
POINTS = [
    pytest.param("llm:4", [4], id="during-an-llm-call"),
    pytest.param("between:3", [], id="between-turns"),
    pytest.param("tool:solo-c", [], id="during-a-tool-call"),
    pytest.param("llm:10", [10], id="during-a-correction-turn"),
]


@pytest.mark.parametrize(("point", "repeated"), POINTS)
def test_a_run_killed_at_a_point_resumes_to_the_uncrashed_step(
    server: ScriptedServer,
    tmp_path: Path,
    uncrashed: tuple[dict[str, Any], list[str]],
    point: str,
    repeated: list[int],
) -> None:
    side_effects = tmp_path / "ledger.txt"
    (step,), ledger = crash_and_resume(
        server, f"sqlite:///{tmp_path}/dbos.sqlite", side_effects, point
    )
    expected_step, expected_effects = uncrashed
    assert step == expected_step
    # Each completed tool call happened exactly once (a call cut off before its side effect
    # ran again), and each completed LLM call was never made again.
    assert side_effects.read_text().splitlines() == expected_effects
    calls = Counter(ledger.sizes)
    assert calls == Counter({2: 1, 4: 1, 8: 1, 10: 1}) + Counter(repeated)
    assert ledger.resumed_log == ""  # nothing to warn about (DBOS included)


def test_a_killed_batch_resumes_without_repeating_finished_runs_or_steps(
    server: ScriptedServer, tmp_path: Path, uncrashed: tuple[dict[str, Any], list[str]]
) -> None:
    side_effects = tmp_path / "ledger.txt"
    steps, ledger = crash_and_resume(
        server, f"sqlite:///{tmp_path}/dbos.sqlite", side_effects, "tool:r2-c", batch=True
    )
    expected, _ = uncrashed
    # Each run's Step is the uncrashed run's, its tag in place of "solo".
    assert [json.dumps(step, sort_keys=True) for step in steps] == [
        json.dumps(expected, sort_keys=True).replace("solo", f"r{run}") for run in (1, 2, 3)
    ]
    assert side_effects.read_text().splitlines() == [
        f"r{run}-{item}" for run in (1, 2, 3) for item in "abc"
    ]
    # Run 1 finished before the kill and run 2's first two turns completed: none of their
    # LLM calls was made again.
    tags = Counter(
        (request.json["messages"][1]["content"].split()[6], len(request.json["messages"]))
        for request in ledger.requests
    )
    assert set(tags.values()) == {1}
    assert len(tags) == 12
    assert ledger.resumed_log == ""


def test_the_resumed_part_of_a_run_continues_its_original_trace(
    server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    monkeypatch.setenv("DURABLE_SPANS", str(spans_file))
    crash_and_resume(
        server, f"sqlite:///{tmp_path}/dbos.sqlite", tmp_path / "ledger.txt", "between:3"
    )
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    turns = [span for span in spans if span["name"].startswith("agent_turn ")]
    (run,) = [span for span in spans if span["name"] == "invoke_agent ledger"]
    # The first process ended turns 1 and 2 before it was killed (its run span never ended
    # and was never exported); the resumed process replays them from the checkpoints and
    # takes turns 3 and 4, all under its run span, in the same trace and under the parent
    # the workflow recorded with its input.
    assert len(turns) == 2 + 4
    dead_run = turns[0]["parent"]
    assert [turn["parent"] for turn in turns] == [dead_run] * 2 + [run["span_id"]] * 4
    assert dead_run != run["span_id"]
    assert {span["trace_id"] for span in spans} == {run["trace_id"]}
    assert run["parent"] is not None


def test_a_run_killed_while_it_waits_for_approval_goes_on_with_decisions_from_elsewhere(
    server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    uncrashed: tuple[dict[str, Any], list[str]],
) -> None:
    monkeypatch.setenv("DURABLE_APPROVAL", "1")
    side_effects = tmp_path / "ledger.txt"
    step, ledger, before = decide_while_dead(
        server, f"sqlite:///{tmp_path}/dbos.sqlite", side_effects
    )
    assert before == ["solo-a"]
    assert step["ok"] is True and step["output"] == {"count": 3}
    assert side_effects.read_text().splitlines() == ["solo-a", "solo-b", "solo-c"]
    assert Counter(ledger.sizes) == Counter({2: 1, 4: 1, 8: 1, 10: 1})
    # The uncrashed run without approval, but for the decision recorded on turn 2: the
    # approval, not the messages around it.
    decided = step["turns"][1].pop("decisions")
    assert decided == {"call_solo-b": {"action": "approve", "arguments": None, "reason": ""}}
    expected, _ = uncrashed
    assert step == {**expected, "turns": [
        {key: value for key, value in turn.items() if key != "decisions"} if i == 1 else turn
        for i, turn in enumerate(expected["turns"])
    ]}  # fmt: skip
    # The two messages before it were ignored, each with a line saying why; the one after
    # it was never read (the run did not pause again).
    ignored = [line for line in ledger.resumed_log.splitlines() if "ignored a decision" in line]
    assert [line.split("(", 1)[1].split(")")[0] for line in ignored] == [
        "it does not parse: pause: Field required; digest: Field required; decisions: "
        "Field required",
        "it answers pause 2; the run waits on pause 1",
    ]


# --- the record tool served by an MCP server (tests/durable_mcp_server.py, over stdio) ---

MCP = {"DURABLE_MCP": "1"}


def server_calls(side_effects: Path) -> list[str]:
    """The calls that reached the MCP servers (each process has its own), in order."""
    return side_effects.with_name(side_effects.name + ".calls").read_text().splitlines()


@pytest.fixture(scope="module")
def uncrashed_mcp(
    shared_server: ScriptedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The Step of the ledger run, its tool an MCP server's, that never stopped."""
    shared_server.reset()
    folder = tmp_path_factory.mktemp("uncrashed-mcp")
    Ledger().script(shared_server)
    with child(shared_server.base_url, f"sqlite:///{folder}/dbos.sqlite",
               folder / "ledger.txt", env=MCP) as run:  # fmt: skip
        (step,) = run.steps()
    assert (folder / "ledger.txt").read_text().splitlines() == ["solo-a", "solo-b", "solo-c"]
    assert server_calls(folder / "ledger.txt") == ["solo-a", "solo-b", "solo-c"]
    yield step
    shared_server.reset()


def test_the_uncrashed_run_with_an_mcp_tool_is_the_run_with_a_python_tool(
    uncrashed: tuple[dict[str, Any], list[str]], uncrashed_mcp: dict[str, Any]
) -> None:
    # Same turns, tool results and outcome: the server's tool is a tool like any other.
    assert uncrashed_mcp == uncrashed[0]


# (point, the server's calls after the restart, the LLM calls made again)
MCP_POINTS = [
    pytest.param("llm:4", ["solo-a", "solo-b", "solo-c"], [4], id="during-an-llm-call"),
    pytest.param("between:3", ["solo-a", "solo-b", "solo-c"], [], id="between-turns"),
    pytest.param(
        "mcp:solo-c", ["solo-a", "solo-b", "solo-c", "solo-c"], [], id="during-the-servers-call"
    ),
]


@pytest.mark.parametrize(("point", "calls", "repeated"), MCP_POINTS)
def test_a_run_with_an_mcp_tool_killed_at_a_point_never_calls_the_server_again_for_a_done_call(
    server: ScriptedServer,
    tmp_path: Path,
    uncrashed_mcp: dict[str, Any],
    point: str,
    calls: list[str],
    repeated: list[int],
) -> None:
    side_effects = tmp_path / "ledger.txt"
    (step,), ledger = crash_and_resume(
        server, f"sqlite:///{tmp_path}/dbos.sqlite", side_effects, point, env=MCP, resume_env=MCP
    )
    assert step == uncrashed_mcp
    # Each call the server completed before the kill was read back from its checkpoint;
    # only a call cut off by the kill (the held one) reached a server again.
    assert server_calls(side_effects) == calls
    assert side_effects.read_text().splitlines() == ["solo-a", "solo-b", "solo-c"]
    assert Counter(ledger.sizes) == Counter({2: 1, 4: 1, 8: 1, 10: 1}) + Counter(repeated)
    assert ledger.resumed_log == ""


def test_a_run_resumed_with_a_server_that_lists_more_tools_keeps_the_tools_it_started_with(
    server: ScriptedServer, tmp_path: Path, uncrashed_mcp: dict[str, Any]
) -> None:
    side_effects = tmp_path / "ledger.txt"
    (step,), ledger = crash_and_resume(
        server, f"sqlite:///{tmp_path}/dbos.sqlite", side_effects, "llm:4", env=MCP,
        resume_env={**MCP, "DURABLE_MCP_TOOLS": "record,extra"},
    )  # fmt: skip
    assert step == uncrashed_mcp
    # Turn 2's model call, cut off by the kill and made again by the resumed process, is
    # offered the tools the run started with, not the upgraded server's new one.
    again = [request for request in ledger.requests if len(request.json["messages"]) == 4]
    assert [[tool["function"]["name"] for tool in r.json["tools"]] for r in again] == [
        ["record"], ["record"]
    ]  # fmt: skip


def test_a_run_resumed_without_a_tool_it_called_is_refused_naming_it(
    server: ScriptedServer, tmp_path: Path
) -> None:
    side_effects = tmp_path / "ledger.txt"
    db_url = f"sqlite:///{tmp_path}/dbos.sqlite"
    ledger = run_and_kill(server, db_url, side_effects, "between:3", env=MCP)
    resumed = {**MCP, "DURABLE_MCP_TOOLS": "extra"}  # the server no longer lists record
    with child(server.base_url, db_url, side_effects, env=resumed) as second:
        error = second.error()
    assert error == (
        "ConfigurationError: tools: the durable run 'ledger-run' cannot go on: its tool "
        "sources no longer offer the tools it started with (gone: record). Its recorded "
        "steps need them: connect the sources it ran with (the same servers, tools and "
        "prefixes)"
    )
    # Nothing was called again: not the server, not the model.
    assert server_calls(side_effects) == ["solo-a", "solo-b", "solo-c"]
    assert Counter(ledger.sizes) == Counter({2: 1, 4: 1})
