"""Durable runs on a real PostgreSQL server (DBOS's production system database).

The test starts its own server from Debian's packages on 127.0.0.1 (tests/postgres_server.py)
and is skipped, saying why, where PostgreSQL is not installed; `.ci/run` installs it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed")

from durable_harness import crash_and_resume, decide_while_dead
from openai_server import ScriptedServer
from postgres_server import running_postgres, why_unavailable

_REASON = why_unavailable()
pytestmark = pytest.mark.skipif(
    _REASON is not None, reason=f"no PostgreSQL server to start: {_REASON}"
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with running_postgres() as url:
        yield url


def _database(url: str, name: str) -> str:
    """A database of its own per test: DBOS creates it on launch."""
    return url.rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.parametrize(("point", "repeated"), [("tool:solo-c", []), ("llm:10", [10])])
def test_a_run_killed_on_postgres_resumes_without_repeating_completed_calls(
    server: ScriptedServer, postgres: str, tmp_path: Path, point: str, repeated: list[int]
) -> None:
    side_effects = tmp_path / "ledger.txt"
    name = "ledger_" + point.replace(":", "_").replace("-", "_")
    (step,), ledger = crash_and_resume(server, _database(postgres, name), side_effects, point)
    assert step["ok"] is True
    assert step["output"] == {"count": 3}
    assert [turn["index"] for turn in step["turns"]] == [1, 2, 3, 4]
    assert side_effects.read_text().splitlines() == ["solo-a", "solo-b", "solo-c"]
    assert Counter(ledger.sizes) == Counter({2: 1, 4: 1, 8: 1, 10: 1}) + Counter(repeated)
    assert ledger.resumed_log == ""  # nothing to warn about (DBOS included)


def test_a_run_killed_on_postgres_while_it_waits_takes_only_the_decision_of_its_pause(
    server: ScriptedServer, postgres: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_APPROVAL", "1")
    side_effects = tmp_path / "ledger.txt"
    step, ledger, before = decide_while_dead(
        server, _database(postgres, "ledger_approval"), side_effects
    )
    assert before == ["solo-a"]
    assert step["ok"] is True and step["output"] == {"count": 3}
    assert step["turns"][1]["decisions"] == {
        "call_solo-b": {"action": "approve", "arguments": None, "reason": ""}
    }
    assert side_effects.read_text().splitlines() == ["solo-a", "solo-b", "solo-c"]
    assert Counter(ledger.sizes) == Counter({2: 1, 4: 1, 8: 1, 10: 1})
    ignored = [line for line in ledger.resumed_log.splitlines() if "ignored a decision" in line]
    assert len(ignored) == 2 and ledger.resumed_log.count("\n") == 2
