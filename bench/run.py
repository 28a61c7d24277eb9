"""`make bench`: the core, tracing, parser, concurrency and MCP suites, in one process, in turn.

Figures are medians over repeated batches after a warm-up. They are for comparison on the
same machine, not for pass/fail: timing targets live here, never in unit tests.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

SUITES = ("core", "tracing", "parsers", "concurrency", "mcp_calls")


def main() -> None:
    for name in SUITES:
        module = importlib.import_module(name)
        if inspect.iscoroutinefunction(module.main):
            anyio.run(module.main)
        else:
            module.main()
        print()


if __name__ == "__main__":
    main()
