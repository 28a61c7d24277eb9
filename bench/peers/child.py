"""One fresh interpreter: import one framework, run its untraced scenarios, print JSON.

Only pydantic, anyio and the scenarios module are imported before the framework, and they
are not counted: the import time is what the framework adds (its own packages and all
they pull in). Memory is the kernel's high-water mark of this process's resident set
(``VmHWM``; ``ru_maxrss`` would report the parent's when it was larger, as it survives
``fork`` and ``exec``).

Run: ``python bench/peers/child.py FRAMEWORK_MODULE RUNS``.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

import anyio
import pydantic  # noqa: F401  (imported before the clock starts: not the framework's cost)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scenarios


def high_water_mib() -> float:
    """Peak resident set of this process so far, in MiB (Linux ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(framework: str, runs: int) -> dict[str, float]:
    base = high_water_mib()
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    module = importlib.import_module(framework)
    import_wall = time.perf_counter() - start_wall
    import_cpu = time.process_time() - start_cpu
    after_import = high_water_mib()

    async def workload() -> None:
        for scenario in scenarios.SCENARIOS:
            if scenario.traced:
                continue
            try:
                run = module.build(scenario, None)
            except scenarios.Unsupported:
                continue
            for _ in range(runs):
                scenarios.Tally.reset()
                outcome = await run()
                scenarios.check(scenario, outcome, scenarios.Tally.tool_calls)

    if runs:
        anyio.run(workload, backend="asyncio")
    return {
        "import_ms": import_wall * 1e3,
        "import_cpu_ms": import_cpu * 1e3,
        "rss_base_mib": base,
        "rss_after_import_mib": after_import,
        "peak_rss_mib": high_water_mib(),
        "runs_per_scenario": runs,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
