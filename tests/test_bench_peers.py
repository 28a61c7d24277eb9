"""Keeps `make bench-peers` honest without the peers installed.

The bare loop and this library run every scenario once, through the same checks the timed
runs get, and a short round-robin measurement goes end to end into the report. A framework
that skipped the model, the tool or the correction must fail the checks.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PEERS = Path(__file__).resolve().parent.parent / "bench" / "peers"


@pytest.fixture(scope="module")
def peers() -> Iterator[dict[str, ModuleType]]:
    """The harness and the two frameworks this venv has, imported from bench/peers."""
    sys.path.insert(0, str(PEERS))
    try:
        import fw_bare
        import fw_subagent
        import harness
        import run
        import scenarios

        yield {
            "harness": harness,
            "run": run,
            "scenarios": scenarios,
            "fw_bare": fw_bare,
            "fw_subagent": fw_subagent,
        }
    finally:
        sys.path.remove(str(PEERS))
        for name in ("fw_bare", "fw_subagent", "harness", "run", "scenarios"):
            sys.modules.pop(name, None)


def _frameworks(peers: dict[str, ModuleType]) -> dict[str, ModuleType]:
    return {"fw_subagent": peers["fw_subagent"], "fw_bare": peers["fw_bare"]}


@pytest.mark.anyio
@pytest.mark.parametrize("framework", ["fw_bare", "fw_subagent"])
@pytest.mark.parametrize("scenario_name", ["S1", "S2", "S3", "S4"])
async def test_scenario_runs_as_described(
    peers: dict[str, ModuleType], framework: str, scenario_name: str
) -> None:
    scenarios, harness = peers["scenarios"], peers["harness"]
    scenario = scenarios.BY_NAME[scenario_name]
    tracing = harness.Tracing()
    try:
        run = peers[framework].build(scenario, tracing.provider)
    except scenarios.Unsupported:
        assert framework == "fw_bare"
        assert scenario.traced
        return
    for _ in range(2):  # a second run must not lean on state left by the first
        outcome = await harness.checked_run(scenario, run, tracing)
        assert len(outcome.request_sizes) == scenario.model_calls


def test_scenarios_say_what_they_measure(peers: dict[str, ModuleType]) -> None:
    s = {name: peers["scenarios"].BY_NAME[name] for name in ("S1", "S2", "S3", "S4")}
    assert (s["S1"].model_calls, s["S1"].tool_calls, s["S1"].corrections) == (2, 0, 2)
    assert (s["S2"].model_calls, s["S2"].tool_calls) == (2, 1)
    assert s["S3"].traced
    assert s["S3"].script == s["S1"].script
    assert (s["S4"].model_calls, s["S4"].tool_calls, s["S4"].work_turns) == (10, 9, 10)


@pytest.mark.parametrize(
    ("outcome_kwargs", "tool_calls", "problem"),
    [
        ({"output": None, "request_sizes": [2, 4]}, 0, "output"),
        ({"request_sizes": [2]}, 0, "model calls"),
        ({"request_sizes": [2, 4]}, 1, "tool executions"),
        ({"request_sizes": [4, 4]}, 0, "did not grow"),
    ],
)
def test_a_shortcut_fails_the_check(
    peers: dict[str, ModuleType], outcome_kwargs: dict[str, Any], tool_calls: int, problem: str
) -> None:
    scenarios = peers["scenarios"]
    outcome_kwargs.setdefault("output", scenarios.EXPECTED)
    outcome = scenarios.Outcome(**outcome_kwargs)
    with pytest.raises(scenarios.ScenarioError, match=problem):
        scenarios.check(scenarios.S1, outcome, tool_calls)


@pytest.mark.anyio
async def test_round_robin_measurement_and_report(peers: dict[str, ModuleType]) -> None:
    harness, run, scenarios = peers["harness"], peers["run"], peers["scenarios"]
    frameworks = _frameworks(peers)
    tracing = harness.Tracing()
    measured = []
    for scenario in (scenarios.S1, scenarios.S3):
        measured.append(
            await harness.measure(
                scenario, frameworks, runs=2, batches=2, warmup=1, tracing=tracing
            )
        )
    s1, s3 = measured
    assert set(s1.results) == {"fw_subagent", "fw_bare"}
    assert all(len(r.batch_us) == 2 and len(r.block_us) == 2 for r in s1.results.values())
    assert all(r.us_per_run > 0 for r in s1.results.values())
    assert set(s3.results) == {"fw_subagent"}
    assert s3.unsupported == {"fw_bare": "no tracing in a bare loop"}
    assert s3.results["fw_subagent"].spans_per_run == 5  # invoke_agent, 2 turns, 2 chats

    args = run._parse(["--runs", "2", "--batches", "2"])
    footprint = {"import_ms": 1.0, "import_cpu_ms": 1.0, "rss_base_mib": 1.0,
                 "rss_after_import_mib": 2.0, "peak_rss_mib": 3.0}  # fmt: skip
    record = run._record(args, frameworks, measured, dict.fromkeys(frameworks, footprint), "t")
    report = run.render(record)
    assert "| subagent |" in report
    assert "| bare loop |" in report
    assert "n/a for bare loop: no tracing in a bare loop" in report
    assert record["versions"]["subagent-runtime"] != "not installed"


def test_fresh_interpreter_reports_import_time_and_memory(peers: dict[str, ModuleType]) -> None:
    report = peers["harness"].fresh("fw_bare", 1)
    assert report["import_ms"] >= 0
    assert report["peak_rss_mib"] >= report["rss_after_import_mib"] > 0
