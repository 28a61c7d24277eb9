"""`make bench-peers`: framework overhead side by side, on instant fake models.

Runs S1-S4 on this library, a bare hand-written loop, the OpenAI Agents SDK, pydantic-ai
and instructor, alternating the frameworks run by run, and measures each one's import time
and peak RSS in fresh interpreters. Prints a markdown report and writes it to
``bench/peers/results.md``, with the raw figures in ``bench/peers/results.json``.

Run: ``.venv-peers/bin/python bench/peers/run.py [--runs N] [--batches B] [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
import scenarios
from harness import REFERENCE, Measured, Tracing


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="rounds per batch (default 40)")
    parser.add_argument("--batches", type=int, default=15, help="batches (default 15)")
    parser.add_argument("--warmup", type=int, default=20, help="checked warm-up runs")
    parser.add_argument("--scenarios", default="S1,S2,S3,S4", help="comma-separated")
    parser.add_argument("--frameworks", default=",".join(harness.FRAMEWORKS),
                        help="comma-separated module names")  # fmt: skip
    parser.add_argument("--import-repeats", type=int, default=5,
                        help="fresh interpreters per framework for the import time")  # fmt: skip
    parser.add_argument("--rss-runs", type=int, default=50,
                        help="runs of each untraced scenario before reading peak RSS")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 3 batches of 5, 2 imports; writes nothing")  # fmt: skip
    parser.add_argument("--out", type=Path, default=harness.HERE,
                        help="where results.md and results.json go")  # fmt: skip
    parser.add_argument("--command", help=argparse.SUPPRESS)  # how the report names the run
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.batches, args.warmup = 5, 3, 3
        args.import_repeats, args.rss_runs = 2, 5
    return args


def _ratio(value: float, reference: float | None) -> str:
    return f"{value / reference:.2f}x" if reference else "-"


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _cell(result: dict[str, Any] | None, reference: dict[str, Any] | None, key: str) -> str:
    if result is None:
        return "n/a"
    if reference is None or result is reference:
        return _number(result[key])
    return f"{_number(result[key])} ({_ratio(result[key], reference[key])})"


def _tracing_cost(
    lines: list[str], measured: dict[str, Any], order: list[str], names: dict[str, str]
) -> None:
    """What turning OpenTelemetry on costs each framework: S3 minus S1 (same script)."""
    if "S1" not in measured or "S3" not in measured:
        return
    s1, s3 = measured["S1"]["results"], measured["S3"]["results"]
    lines += [
        "",
        "**Tracing cost** (S3 minus S1, the same runs with OpenTelemetry on):",
        "",
        "| framework | spans/run | + µs/run | + µs/span | in blocks + µs/run | + µs/span |",
        "|---|---|---|---|---|---|",
    ]
    for fw in order:
        if fw not in s1 or fw not in s3:
            continue
        spans = s3[fw]["spans_per_run"]
        plus = s3[fw]["us_per_run"] - s1[fw]["us_per_run"]
        plus_blocks = s3[fw]["block_us_per_run"] - s1[fw]["block_us_per_run"]
        lines.append(
            f"| {names[fw]} | {spans} | {_number(plus)} | {_number(plus / spans)} "
            f"| {_number(plus_blocks)} | {_number(plus_blocks / spans)} |"
        )


def render(record: dict[str, Any]) -> str:
    """The markdown report of one run's record (the JSON written beside it)."""
    meta, settings, names = record["meta"], record["settings"], record["names"]
    measured: dict[str, Any] = record["scenarios"]
    footprint: dict[str, Any] = record["footprint"]
    order: list[str] = record["frameworks"]
    machine = meta["machine"]
    dirty = " (with uncommitted changes)" if meta["dirty"] else ""
    load = ", ".join(f"{x:.1f}" for x in machine["load_average"])
    lines = [
        "# Framework overhead, side by side",
        "",
        f"`{meta['command']}` on {meta['date']}, commit {meta['commit']}{dirty}; "
        f"{machine['cpu']}, {machine['cpus']} CPUs, {machine['platform']}, "
        f"Python {machine['python']}; load average at the end {load}.",
        "",
        f"CPU time per run in µs (`time.process_time`), median of {settings['batches']} "
        f"batch means; each batch runs every framework {settings['runs']} times, first "
        "alternating run by run, then in blocks (each framework back to back), the starting "
        f"framework rotating from batch to batch; {settings['warmup']} checked warm-up runs "
        "each before. (x) is the ratio to subagent (above 1: slower than subagent). Every "
        "timed run is checked: model calls, tool executions, growing requests, a valid "
        "`Answer`, and spans for S3.",
        "",
    ]

    def scenario_table(title: str, key: str) -> None:
        nonlocal lines
        lines += [title, "", "| framework | " + " | ".join(measured) + " |"]
        lines.append("|---" * (len(measured) + 1) + "|")
        for fw in order:
            cells = [
                _cell(s["results"].get(fw), s["results"].get(REFERENCE), key)
                for s in measured.values()
            ]
            lines.append(f"| {names[fw]} | " + " | ".join(cells) + " |")
        lines.append("")

    scenario_table("**Alternating run by run** (µs per run):", "us_per_run")
    scenario_table("**In blocks**, each framework back to back (µs per run):", "block_us_per_run")
    lines += [
        f"**Footprint**, fresh interpreters: import time is the median of "
        f"{settings['import_repeats']}, and counts what the framework adds to pydantic and "
        f"anyio; peak RSS (`VmHWM`) after {settings['rss_runs']} runs of each untraced "
        "scenario the framework supports.",
        "",
        "| framework | import ms | import CPU ms | RSS after import MiB | peak RSS MiB |",
        "|---|---|---|---|---|",
    ]
    for fw in order:
        fp, ref = footprint.get(fw), footprint.get(REFERENCE)
        if fp is None:
            continue
        lines.append(
            f"| {names[fw]} | {_cell(fp, ref, 'import_ms')} | {_number(fp['import_cpu_ms'])} "
            f"| {fp['rss_after_import_mib']:.0f} | {fp['peak_rss_mib']:.0f} |"
        )
    lines += [
        "",
        "**Per model call**, and the spread of the run-by-run batch means:",
        "",
        "| scenario | framework | model calls | µs/run | µs/model call | x subagent "
        "| in blocks µs/model call | x subagent | batch min-max µs | spans/run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario_name, scenario in measured.items():
        reference = scenario["results"].get(REFERENCE)
        for fw in order:
            r = scenario["results"].get(fw)
            if r is None:
                continue
            calls = r["model_calls"]
            ratio = _ratio(r["us_per_run"], reference and reference["us_per_run"])
            block_ratio = _ratio(r["block_us_per_run"], reference and reference["block_us_per_run"])
            spread = f"{_number(min(r['batch_us']))}-{_number(max(r['batch_us']))}"
            spans = r["spans_per_run"] if r["spans_per_run"] is not None else "-"
            lines.append(
                f"| {scenario_name} | {names[fw]} | {calls} | {_number(r['us_per_run'])} "
                f"| {_number(r['us_per_run'] / calls)} | {ratio} "
                f"| {_number(r['block_us_per_run'] / calls)} | {block_ratio} | {spread} "
                f"| {spans} |"
            )
    _tracing_cost(lines, measured, order, names)
    lines += ["", "Scenarios:", ""]
    for scenario_name, scenario in measured.items():
        threads = scenario["threads"]
        extra = f" Threads besides the main one: {', '.join(threads)}." if threads else ""
        lines.append(f"- **{scenario_name}**: {scenario['title']}.{extra}")
        lines += [f"  - n/a for {names[fw]}: {why}." for fw, why in scenario["unsupported"].items()]
    lines += ["", "How each framework runs them:", ""]
    lines += [f"- **{names[fw]}**: {record['notes'][fw]}." for fw in order]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in record["versions"].items())]
    lines.append("")
    return "\n".join(lines)


def _record(
    args: argparse.Namespace,
    modules: dict[str, Any],
    measured: list[Measured],
    footprints: dict[str, dict[str, float]],
    command: str,
) -> dict[str, Any]:
    return {
        "meta": harness.provenance(command),
        "settings": {
            "runs": args.runs,
            "batches": args.batches,
            "warmup": args.warmup,
            "import_repeats": args.import_repeats,
            "rss_runs": args.rss_runs,
            "clock": "time.process_time",
            "loop": "asyncio (anyio.run)",
        },
        "versions": harness.versions(modules),
        "frameworks": list(modules),
        "names": {fw: module.NAME for fw, module in modules.items()},
        "notes": {fw: module.NOTES for fw, module in modules.items()},
        "scenarios": {
            m.scenario.name: {
                "title": m.scenario.title,
                "model_calls": m.scenario.model_calls,
                "tool_calls": m.scenario.tool_calls,
                "threads": m.threads,
                "unsupported": m.unsupported,
                "results": {
                    fw: {
                        "model_calls": r.model_calls,
                        "us_per_run": r.us_per_run,
                        "us_per_call": r.us_per_call,
                        "block_us_per_run": r.block_us_per_run,
                        "batch_us": r.batch_us,
                        "block_us": r.block_us,
                        "spans_per_run": r.spans_per_run,
                    }
                    for fw, r in m.results.items()
                },
            }
            for m in measured
        },
        "footprint": footprints,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse(argv)
    given = sys.argv[1:] if argv is None else argv
    command = args.command or shlex.join(["python", "bench/peers/run.py", *given])
    modules = harness.load(tuple(args.frameworks.split(",")))
    wanted = [scenarios.BY_NAME[name] for name in args.scenarios.split(",")]
    tracing = Tracing()
    measured: list[Measured] = []
    for scenario in wanted:
        print(f"{scenario.name}: {scenario.title}", flush=True)
        measure = functools.partial(
            harness.measure, scenario, modules, runs=args.runs, batches=args.batches,
            warmup=args.warmup, tracing=tracing, progress=True,
        )  # fmt: skip
        measured.append(anyio.run(measure, backend="asyncio"))
    footprints: dict[str, dict[str, float]] = {}
    for fw in modules:
        print(f"import time and peak RSS: {fw}", flush=True)
        footprints[fw] = harness.footprint(fw, args.import_repeats, args.rss_runs)
    record = _record(args, modules, measured, footprints, command)
    report = render(record)
    print()
    print(report)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.md").write_text(report)
        (args.out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.out / 'results.md'} and {args.out / 'results.json'}")
    return record


if __name__ == "__main__":
    main()
