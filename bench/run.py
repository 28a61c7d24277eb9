"""`make bench`: the core, tracing, metrics, parser, concurrency, state, deps-and-limits,
durable, MCP and evaluation suites.

Figures are medians over repeated batches after a warm-up. They are for comparison on the
same machine, not for pass/fail: timing targets live here, never in unit tests.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

SUITES = (
    "core", "tracing", "metrics", "parsers", "concurrency", "state", "deps_limits", "durable",
    "mcp_calls", "evals",
)  # fmt: skip


def main() -> None:
    for name in SUITES:
        if name == "durable" and importlib.util.find_spec("dbos") is None:
            print("durable: skipped (the dbos extra is not installed)\n")
            continue
        module = importlib.import_module(name)
        if inspect.iscoroutinefunction(module.main):
            anyio.run(module.main)
        else:
            module.main()
        print()


if __name__ == "__main__":
    main()
