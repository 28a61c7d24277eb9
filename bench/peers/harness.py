"""Measuring: frameworks round-robin inside each batch, CPU time, checked runs.

Each scenario is measured on its own. After a checked warm-up, every batch times ``runs``
rounds; a round runs each framework once, the starting framework rotating from batch to
batch, so drift on the shared machine (other processes, frequency changes) lands on every
framework alike. Run by run, each framework also starts with CPU caches the others have
just filled, which costs a small framework relatively more; so each batch then times the
same runs in blocks (each framework ``runs`` times back to back, in the same rotating
order), the way a single-framework benchmark loop sees it.

A run's time is this process's CPU time (``time.process_time``: all its threads, immune to
other processes taking the cores). A framework's figure for a batch is its mean per run;
the reported figures are the medians of those batch means. Every timed run is checked
against its scenario (model calls, tool executions, growing requests, a valid ``Answer``;
spans for S3) after its clock stops.

Import time and peak RSS come from fresh interpreters, one framework each (``child.py``).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import scenarios
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from scenarios import RunFn, Scenario, ScenarioError, Tally, Unsupported, check

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# This library first: the ratios are to it.
FRAMEWORKS = ("fw_subagent", "fw_bare", "fw_agents", "fw_pydantic_ai", "fw_instructor")
REFERENCE = "fw_subagent"
COMMON_DISTRIBUTIONS = (
    "pydantic", "pydantic-core", "anyio", "httpx", "opentelemetry-api", "opentelemetry-sdk",
)  # fmt: skip


@dataclass
class Tracing:
    """The SDK provider every traced scenario gets, exporting into memory."""

    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    provider: TracerProvider = field(default_factory=TracerProvider)

    def __post_init__(self) -> None:
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def take(self) -> int:
        """How many spans were exported since the last call."""
        count = len(self.exporter.get_finished_spans())
        self.exporter.clear()
        return count


@dataclass
class Measured:
    """One scenario: each framework's result, and why the others sat it out."""

    scenario: Scenario
    results: dict[str, Result]
    unsupported: dict[str, str]
    threads: list[str]
    """Threads other than the main one seen alive after any batch (their CPU time counts)."""


@dataclass
class Result:
    """One framework on one scenario."""

    framework: str
    scenario: str
    model_calls: int
    batch_us: list[float] = field(default_factory=list)
    """Mean µs per run in each batch, frameworks alternating run by run."""
    block_us: list[float] = field(default_factory=list)
    """The same, each framework running ``runs`` times back to back (blocks alternating)."""
    spans_per_run: int | None = None

    @property
    def us_per_run(self) -> float:
        return statistics.median(self.batch_us)

    @property
    def us_per_call(self) -> float:
        return self.us_per_run / self.model_calls

    @property
    def block_us_per_run(self) -> float:
        return statistics.median(self.block_us)


def load(names: tuple[str, ...] = FRAMEWORKS) -> dict[str, ModuleType]:
    """Import the framework modules; a peer that is not installed raises ImportError."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return {name: importlib.import_module(name) for name in names}


async def checked_run(
    scenario: Scenario, run: RunFn, tracing: Tracing | None = None
) -> scenarios.Outcome:
    """One run, checked against the scenario (the way the timed runs are)."""
    Tally.reset()
    outcome = await run()
    check(scenario, outcome, Tally.tool_calls)
    if tracing is not None and scenario.traced and tracing.take() == 0:
        raise ScenarioError(f"{scenario.name}: tracing on, but no span was exported")
    return outcome


async def _timed(scenario: Scenario, run: RunFn, tracing: Tracing, spans: int | None) -> float:
    """CPU seconds of one run; the run is checked after the clock stops."""
    Tally.reset()
    start = time.process_time()
    outcome = await run()
    elapsed = time.process_time() - start
    check(scenario, outcome, Tally.tool_calls)
    if scenario.traced and tracing.take() != spans:
        raise ScenarioError(f"{scenario.name}: the span count changed from {spans}")
    return elapsed


def build_all(
    scenario: Scenario, modules: dict[str, ModuleType], tracing: Tracing
) -> tuple[dict[str, RunFn], dict[str, str]]:
    """Each framework's run for the scenario, and the reasons of those that have none."""
    runs: dict[str, RunFn] = {}
    unsupported: dict[str, str] = {}
    for name, module in modules.items():
        try:
            runs[name] = module.build(scenario, tracing.provider)
        except Unsupported as reason:
            unsupported[name] = str(reason)
    return runs, unsupported


def release(modules: dict[str, ModuleType]) -> None:
    for module in modules.values():
        getattr(module, "release", lambda: None)()


async def measure(
    scenario: Scenario,
    modules: dict[str, ModuleType],
    *,
    runs: int,
    batches: int,
    warmup: int,
    tracing: Tracing,
    progress: bool = False,
) -> Measured:
    """Median CPU µs per run of every framework that supports the scenario, round-robin."""
    built, unsupported = build_all(scenario, modules, tracing)
    try:
        names = list(built)
        spans: dict[str, int] = {}
        for name in names:  # warm-up: imports, schemas, caches; every run checked
            for _ in range(warmup):
                await checked_run(scenario, built[name])
                if scenario.traced:
                    spans[name] = tracing.take()
            if scenario.traced and not spans[name]:
                raise ScenarioError(f"{scenario.name}/{name}: tracing on, no span exported")
        results = {
            name: Result(name, scenario.name, scenario.model_calls, spans_per_run=spans.get(name))
            for name in names
        }
        gc.collect()
        gc.freeze()  # modules and caches stay out of the collections the timed runs trigger
        threads = {t.name for t in threading.enumerate()}
        for batch in range(batches):
            shift = batch % len(names)
            order = names[shift:] + names[:shift]
            interleaved = dict.fromkeys(names, 0.0)
            for _ in range(runs):  # run by run: drift and cold caches land on everyone
                for name in order:
                    interleaved[name] += await _timed(
                        scenario, built[name], tracing, spans.get(name)
                    )
            blocks = dict.fromkeys(names, 0.0)
            for name in order:  # back to back: each framework with its caches warm
                run = built[name]
                for _ in range(runs):
                    blocks[name] += await _timed(scenario, run, tracing, spans.get(name))
            threads |= {t.name for t in threading.enumerate()}
            for name in names:
                results[name].batch_us.append(interleaved[name] / runs * 1e6)
                results[name].block_us.append(blocks[name] / runs * 1e6)
            if progress:
                done = ", ".join(
                    f"{n[3:]} {results[n].batch_us[-1]:.0f}/{results[n].block_us[-1]:.0f}"
                    for n in names
                )
                print(f"  {scenario.name} batch {batch + 1}/{batches} (µs run by run/in blocks): "
                      f"{done}", flush=True)  # fmt: skip
        threads.discard(threading.main_thread().name)
        return Measured(scenario, results, unsupported, sorted(threads))
    finally:
        gc.unfreeze()
        release(modules)


# --- fresh interpreters: import time and peak RSS -------------------------------------------


def fresh(framework: str, runs: int) -> dict[str, float]:
    """Run ``child.py`` in a new interpreter and return its report."""
    command = [sys.executable, str(HERE / "child.py"), framework, str(runs)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} child failed:\n{done.stderr}")
    report: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def footprint(framework: str, repeats: int, runs: int) -> dict[str, float]:
    """Median import time over ``repeats`` fresh interpreters, and peak RSS after ``runs``.

    One more interpreter runs first, untimed, so that byte-code caches exist.
    """
    fresh(framework, 0)
    imports = [fresh(framework, 0) for _ in range(repeats)]
    loaded = fresh(framework, runs)
    return {
        "import_ms": statistics.median(r["import_ms"] for r in imports),
        "import_cpu_ms": statistics.median(r["import_cpu_ms"] for r in imports),
        "rss_base_mib": loaded["rss_base_mib"],
        "rss_after_import_mib": loaded["rss_after_import_mib"],
        "peak_rss_mib": loaded["peak_rss_mib"],
        "runs_per_scenario": runs,
    }


# --- what was measured, on what --------------------------------------------------------------


def versions(modules: dict[str, ModuleType]) -> dict[str, str]:
    names = [*COMMON_DISTRIBUTIONS]
    for module in modules.values():
        names += [n for n in module.DISTRIBUTIONS if n not in names]
    found = {"python": platform.python_version()}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=ROOT)
    return done.stdout.strip()


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
    }


def provenance(command: str) -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "machine": machine(),
        "threads_at_end": [t.name for t in threading.enumerate()],
    }
