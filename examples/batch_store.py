"""A batch, stored in SQLite, and a second pass that reruns only the retryable failures.

Run it with `python examples/batch_store.py [DATABASE]` (default: a temporary file). Twenty
cities go through an extraction agent with `run_many`; the model behind it is flaky (a
scripted stand-in that answers some calls with HTTP 503s, past the transport's retries).
Every Step is stored as JSON, keyed by its input. The second pass loads the failures,
keeps those whose Step says `retryable`, runs only those again, and stores the new Steps:
nothing that succeeded, and nothing that would fail the same way, is run twice.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import anyio
from pydantic import BaseModel

from subagent import (
    ErrorKind,
    LLMError,
    LLMRequest,
    LLMResponse,
    ReplyPolicy,
    RetryPolicy,
    RunArguments,
    Step,
    SubAgent,
    run_many,
    summarize,
)


class City(BaseModel):
    name: str
    country: str


# The model may say it cannot answer ({"fail": ...}): a failure no rerun changes.
agent = SubAgent(
    name="city",
    prompt="Which country is {{city}} in?",
    output=City,
    max_turns=1,
    reply_policy=ReplyPolicy(allow_fail=True),
)
CITIES = {
    "Lisbon": "Portugal", "Porto": "Portugal", "Madrid": "Spain", "Seville": "Spain",
    "Paris": "France", "Lyon": "France", "Rome": "Italy", "Milan": "Italy",
    "Berlin": "Germany", "Munich": "Germany", "Vienna": "Austria", "Graz": "Austria",
    "Bern": "Switzerland", "Zurich": "Switzerland", "Oslo": "Norway", "Bergen": "Norway",
    "Dublin": "Ireland", "Cork": "Ireland", "Prague": "Czechia", "Brno": "Czechia",
}  # fmt: skip


class FlakyModel:
    """Answers from a table, but the first call for some cities gets an HTTP 503."""

    model_name = "flaky"

    def __init__(self, flaky: set[str]):
        self.flaky = set(flaky)
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        city = (
            request.messages[1]
            .content.split("\n\n")[0]
            .removeprefix("Which country is ")
            .removesuffix(" in?")
        )
        if city in self.flaky:
            self.flaky.discard(city)  # busy once, fine afterwards
            raise LLMError(ErrorKind.SERVER_ERROR, "the server is overloaded", status_code=503)
        if city == "Bern":
            return LLMResponse(text='{"fail": "I am not sure"}')  # not retryable
        return LLMResponse(text=json.dumps({"name": city, "country": CITIES[city]}))


SCHEMA = """
CREATE TABLE IF NOT EXISTS steps (
    key TEXT PRIMARY KEY,       -- the input, as canonical JSON
    ok INTEGER NOT NULL,
    retryable INTEGER NOT NULL,
    step TEXT NOT NULL          -- Step.model_dump_json()
)
"""


def store(
    db: sqlite3.Connection, contexts: Iterable[dict[str, str]], steps: list[Step[City]]
) -> None:
    rows = [(json.dumps(context, sort_keys=True), step.ok, step.retryable, step.model_dump_json())
            for context, step in zip(contexts, steps, strict=True)]  # fmt: skip
    with db:
        db.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?)", rows)


def retryable_inputs(db: sqlite3.Connection) -> list[dict[str, str]]:
    rows = db.execute("SELECT key FROM steps WHERE retryable = 1 ORDER BY key")
    return [json.loads(key) for (key,) in rows]


def load_all(db: sqlite3.Connection) -> list[Step[City]]:
    return [
        Step[City].model_validate_json(text) for (text,) in db.execute("SELECT step FROM steps")
    ]


async def main(path: Path) -> list[Step[City]]:
    db = sqlite3.connect(path)
    db.execute(SCHEMA)
    llm = FlakyModel(flaky={"Porto", "Lyon", "Graz"})
    options: RunArguments = {"llm": llm, "retry_policy": RetryPolicy.none()}  # no transport retries

    contexts = [{"city": city} for city in CITIES]
    steps = await run_many(agent, contexts, concurrency=4, **options)
    store(db, contexts, steps)
    print(f"first pass: {sum(s.ok for s in steps)} done, {sum(not s.ok for s in steps)} failed, "
          f"{llm.calls} calls")  # fmt: skip

    again = retryable_inputs(db)
    print(f"retryable: {', '.join(c['city'] for c in again)}")
    steps = await run_many(agent, again, concurrency=4, **options)
    store(db, again, steps)
    print(f"second pass: {sum(s.ok for s in steps)} done, {llm.calls} calls in all")

    stored = load_all(db)
    print(summarize(stored))
    db.close()
    return stored


if __name__ == "__main__":
    if len(sys.argv) > 1:
        anyio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            anyio.run(main, Path(directory) / "steps.sqlite")
