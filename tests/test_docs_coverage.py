"""The pages that list what the code defines list all of it: reasons, outcomes, bench suites.

A failure reason, a turn outcome or a benchmark suite added without its line on the pages
that enumerate them fails here (docs/architecture.md's map is pinned by test_packaging.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from subagent import FailReason, TurnOutcome

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONCEPTS = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")


def _table_row(page: str, section: str, first_cell: str) -> str:
    """The row of the first table under ``section`` whose first cell is ``first_cell``."""
    text = page.split(section, 1)[1]
    rows = [line for line in text.splitlines() if line.startswith(f"| {first_cell} |")]
    assert rows, f"no row {first_cell!r} under {section!r}"
    return rows[0]


def _named(values: list[str], text: str) -> list[str]:
    """The values not quoted as code (`value`) in ``text``."""
    return [value for value in values if f"`{value}`" not in text]


def test_the_readme_names_every_failure_reason_in_what_a_run_returns() -> None:
    row = _table_row(README, "## What a run returns", "`failure`")
    assert _named([reason.value for reason in FailReason], row) == []


def test_the_readme_names_every_turn_outcome_and_the_paused_step() -> None:
    turns = _table_row(README, "## What a run returns", "`turns`")
    outcomes = re.search(r"`outcome` \(([^)]*)\)", turns)
    assert outcomes is not None, turns
    assert sorted(outcomes[1].replace("`", "").split("/")) == sorted(o.value for o in TurnOutcome)
    paused = _table_row(README, "## What a run returns", "`paused`, `state`")
    assert "RunState" in paused


def test_the_concepts_failure_table_has_a_row_per_failure_reason() -> None:
    failures = CONCEPTS.split("## Failures", 1)[1].split("\n\n", 2)[1]
    reasons = re.findall(r"^\| `(\w+)` \|", failures, re.M)
    assert sorted(reasons) == sorted(reason.value for reason in FailReason)


def test_the_concepts_vocabulary_names_every_turn_outcome_and_the_paused_step() -> None:
    vocabulary = CONCEPTS.split("## Vocabulary", 1)[1].split("\n## ", 1)[0]
    turn = vocabulary.split("- **Turn**", 1)[1].split("\n- **", 1)[0]
    assert _named([outcome.value for outcome in TurnOutcome], turn) == []
    step = vocabulary.split("- **Step**", 1)[1].split("\n- **", 1)[0]
    assert _named(["paused", "state"], step) == []


def test_the_performance_page_has_the_figures_of_every_make_bench_suite() -> None:
    tree = ast.parse((ROOT / "bench" / "run.py").read_text(encoding="utf-8"))
    (suites,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SUITES"
    ]
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    make_bench = next(line for line in page.splitlines() if line.startswith("make bench "))
    assert [suite for suite in suites if f"`bench/{suite}.py`" not in page] == []
    assert [suite for suite in suites if not re.search(rf"\b{suite}\b", make_bench)] == []
