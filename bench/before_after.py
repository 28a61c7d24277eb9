"""S1 and S2 of ``bench/core.py`` on two checkouts of the library, interleaved, in one run.

``python bench/before_after.py --before /work/main`` measures the core suite with the
``subagent`` package of ``--before`` and of ``--after`` (default: this checkout), each in its
own process (``PYTHONPATH`` picks the package), alternating A B A B for ``--rounds`` rounds
so that both see the same machine load; it prints the median of each figure and the change.
Figures are CPU microseconds per run, as ``bench/core.py`` measures them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBE = """
import json, sys, anyio
sys.path.insert(0, {bench!r})
import core
import subagent
assert subagent.__file__.startswith({root!r}), subagent.__file__
async def main():
    return {{"S1": await core.measure(core.s1(), runs={runs}, batches=5),
             "S2": await core.measure(core.s2(), runs={runs}, batches=5)}}
print(json.dumps(anyio.run(main)))
"""


def measure(root: Path, runs: int) -> dict[str, float]:
    code = PROBE.format(bench=str(HERE), root=str(root), runs=runs)
    env = {**os.environ, "PYTHONPATH": str(root)}
    # Run from bench/: the current directory comes first on sys.path, before PYTHONPATH.
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, cwd=HERE,
                         text=True, check=True, timeout=900)  # fmt: skip
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=HERE.parent)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    seen: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for _ in range(args.rounds):
        for side, root in sides.items():
            for name, value in measure(root, args.runs).items():
                seen[side].setdefault(name, []).append(value)
    print(f"S1/S2 before ({sides['before']}) and after ({sides['after']}), "
          f"{args.rounds} interleaved rounds, CPU us/run (median)")  # fmt: skip
    for name in seen["before"]:
        before = statistics.median(seen["before"][name])
        after = statistics.median(seen["after"][name])
        print(f"  {name}: before {before:7.1f}   after {after:7.1f}   "
              f"change {100 * (after - before) / before:+5.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
