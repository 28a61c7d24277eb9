"""The golden corpus: every scripted run of ``tests/golden.py`` shows what it showed.

Each record (``tests/golden/<scenario>.json``) holds a run's Steps, events, states and spans
as taken at a known-good commit; a run that shows anything else fails here, naming the
first place it differs. Rewrite a record (``python tests/golden.py NAME``) only for an
intended change of behaviour, and say so in the commit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from golden import GOLDEN, SCENARIOS, path_of, record

pytestmark = pytest.mark.anyio


def first_difference(expected: Any, actual: Any, path: str = "$") -> str | None:
    """Where two JSON values first differ, and how (``None``: they are equal)."""
    if type(expected) is not type(actual):
        return f"{path}: expected {expected!r}, got {actual!r}"
    if isinstance(expected, dict):
        for key in sorted(set(expected) | set(actual)):
            if key not in actual:
                return f"{path}.{key}: missing (expected {expected[key]!r})"
            if key not in expected:
                return f"{path}.{key}: unexpected {actual[key]!r}"
            found = first_difference(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        for index, (left, right) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(left, right, f"{path}[{index}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}: expected {len(expected)} items, got {len(actual)}"
        return None
    return None if expected == actual else f"{path}: expected {expected!r}, got {actual!r}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_scenario_shows_what_its_golden_record_holds(name: str) -> None:
    expected = json.loads(path_of(name).read_text(encoding="utf-8"))
    actual = json.loads(json.dumps(await record(name)))
    difference = first_difference(expected, actual)
    assert difference is None, f"{name} differs from tests/golden/{name}.json at {difference}"


def test_every_record_has_its_scenario_and_every_scenario_its_record() -> None:
    stored = {path.stem for path in GOLDEN.glob("*.json")}
    assert stored == set(SCENARIOS)


def test_the_corpus_covers_every_move_and_every_failure_of_the_state_table() -> None:
    from subagent._phases import TABLE

    moves: set[tuple[str, str]] = set()
    reasons: set[str] = set()
    for name in SCENARIOS:
        data = json.loads(path_of(name).read_text(encoding="utf-8"))
        for number, part in enumerate(data["parts"]):
            if number and "step" in part:  # a resume: the paused turn went on in normal
                moves.add(("paused", "normal"))
            for event in part["events"]:
                if event["event"] == "TurnEnded":
                    turn = event["turn"]
                    moves.add((turn["type"], turn["phase_after"]))
            failure = part.get("step", {}).get("failure")
            if failure is not None:
                reasons.add(failure["reason"])
    assert {(row.source.value, row.dest.value) for row in TABLE} - moves == set()
    assert {row.reason.value for row in TABLE if row.reason is not None} - reasons == set()
