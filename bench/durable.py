"""Durable turns on DBOS with SQLite versus plain turns: S1 and S2 (docs/performance.md).

S1 and S2 are bench/core.py's scenarios (two turns each; S2's tool runs inline). The plain
run is ``agent.run``; the durable run is ``DurableAgent.run``: a DBOS workflow whose LLM
calls and tool call are steps, checkpointed in a SQLite system database in a temporary
directory (DBOS's default settings; ``BENCH_DB_DIR=/dev/shm`` puts it in memory, to
see what is left without the disk's syncs). Prints the median wall-clock and CPU microseconds per
turn over repeated batches after a warm-up, their ratio to the plain turn, and the system
database's writes per turn (INSERT/UPDATE/DELETE statements, counted with a SQLAlchemy
event on every engine) with the time spent in them. Wall clock is the figure that matters
here: a durable turn waits on the database (SQLite's commits, DBOS's worker threads).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from core import CONTEXT, S1_AGENT, S1_SCRIPT, S2_AGENT, S2_SCRIPT
from dbos import DBOS
from sqlalchemy import event
from sqlalchemy.engine import Engine

from subagent import ScriptedLLM
from subagent.durable import DurableAgent

RUNS = 100
BATCHES = 5
TURNS = 2  # per run, in S1 and in S2


class Writes:
    """Counts the system database's writing statements and the time they take."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._started: dict[int, float] = {}
        event.listen(Engine, "before_cursor_execute", self._before)
        event.listen(Engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            self._started[id(cursor)] = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        started = self._started.pop(id(cursor), None)
        if started is not None:
            self.count += 1
            self.seconds += time.perf_counter() - started


async def measure(run: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Median (wall, CPU) microseconds per turn over BATCHES batches of RUNS runs."""
    for _ in range(20):  # warm-up
        await run()
    walls, cpus = [], []
    for _ in range(BATCHES):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(RUNS):
            await run()
        walls.append((time.perf_counter() - wall) / RUNS / TURNS * 1e6)
        cpus.append((time.process_time() - cpu) / RUNS / TURNS * 1e6)
    return statistics.median(walls), statistics.median(cpus)


async def main() -> dict[str, float]:
    scenarios = {
        "S1": (S1_AGENT, S1_SCRIPT, {"max_turns": 1, "return_retries": 2}),
        "S2": (S2_AGENT, S2_SCRIPT, {"max_turns": 2}),
    }
    durable = {name: DurableAgent(agent, llm=ScriptedLLM(), name=f"bench-{name.lower()}")
               for name, (agent, _, _) in scenarios.items()}  # fmt: skip
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DB_DIR")) as folder:
        DBOS(config={"name": "bench-durable", "log_level": "WARNING",
                     "system_database_url": f"sqlite:///{Path(folder)}/dbos.sqlite"})  # fmt: skip
        DBOS.launch()
        writes = Writes()
        try:
            print("durable turns (DBOS, SQLite system database, ScriptedLLM, asyncio)")
            for name, (agent, script, options) in scenarios.items():

                async def plain(agent: Any = agent, script: Any = script,
                                options: Any = options) -> object:  # fmt: skip
                    step = await agent.run(CONTEXT, llm=ScriptedLLM(script), **options)
                    assert step.ok and len(step.turns) == TURNS
                    return step

                wrapper = durable[name]

                async def durable_run(wrapper: Any = wrapper, script: Any = script,
                                      options: Any = options) -> object:  # fmt: skip
                    wrapper.llm.wrapped.extend(script)
                    step = await wrapper.run(CONTEXT, **options)
                    assert step.ok and len(step.turns) == TURNS
                    return step

                plain_wall, plain_cpu = await measure(plain)
                writes.count, writes.seconds = 0, 0.0
                durable_wall, durable_cpu = await measure(durable_run)
                turns = (20 + RUNS * BATCHES) * TURNS
                per_turn, write_us = writes.count / turns, writes.seconds / turns * 1e6
                print(f"  {name}: plain {plain_wall:7.1f} us/turn wall ({plain_cpu:6.1f} CPU); "
                      f"durable {durable_wall:7.1f} us/turn wall ({durable_cpu:6.1f} CPU): "
                      f"x{durable_wall / plain_wall:.0f} wall; {per_turn:.1f} DB writes/turn "
                      f"taking {write_us:.0f} us")  # fmt: skip
                results[f"{name} ratio"] = durable_wall / plain_wall
                results[f"{name} writes/turn"] = per_turn
        finally:
            DBOS.destroy(destroy_registry=True)
    return results


if __name__ == "__main__":
    anyio.run(main)
