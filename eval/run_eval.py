"""`make eval`: every task in every configuration on the local models, through subagent.evals.

    python eval/run_eval.py [--models smollm2,qwen] [--configs retries-0,...] [--tasks N]
                            [--results eval/results]

The tasks are a ``subagent.evals`` dataset (``eval/tasks.jsonl``, their agents and judge in
``tasks.py``); the configurations are variants, in groups by the tasks they run
(``configs.py``). For each model and group, ``Dataset.evaluate`` runs what
``eval/results/<model>/<group>.jsonl`` does not record yet on the local model server of
``make demo`` (``scripts/local_llm.py``, started here only when a run is missing, and
stopped after), judges each run and appends it to the file as soon as it completes. A
killed run loses only the run in flight: running the command again makes only what is
missing. ``make eval-report`` then turns the records into the table and plot of
``docs/evaluation.md``.

The server computes one completion at a time, so the runs go one by one (concurrency 1):
more in flight would only queue at the server.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from configs import CONFIGS, GROUPS, Group, config_named  # noqa: E402
from tasks import AGENTS, load_tasks  # noqa: E402

from subagent import (  # noqa: E402
    LLM,
    OpenAIChat,
    ReplyPolicy,
    RetryPolicy,
    __version__,
)
from subagent.evals import Dataset, Variant  # noqa: E402

__all__ = [
    "MODELS",
    "RESULTS_DIR",
    "Planned",
    "local_chat",
    "pending",
    "plan",
    "records_path",
    "run_model",
    "run_options",
]

MODELS = ("smollm2", "qwen", "qwen1.5b")
"""Every local model the runner knows; ``--models`` defaults to :data:`DEFAULT_MODELS`."""
DEFAULT_MODELS = ("smollm2", "qwen")
RESULTS_DIR = Path(__file__).resolve().parent / "results"

RECORDED_AGENTS = {
    name: dataclasses.replace(agent, reply_policy=ReplyPolicy(allow_fail=True))
    for name, agent in AGENTS.items()
}
"""The tasks' agents as every record of ``make eval`` was made: offered the explicit fail
(the default until the records showed it costs; docs/evaluation.md). The configurations
measure budgets and corrections, beside one another; ``eval/typed_defaults.py`` measures
the library's defaults."""
RETRY_POLICY = RetryPolicy(max_attempts=3, initial_delay=0.5)
"""Transport retries of every call (a busy server), the same for every configuration."""
PLANNING_URL = "http://127.0.0.1:1/v1"
"""A server address for planning only (no request is sent): a variant's digest names the
model, not where it is served."""


def local_chat(base_url: str = PLANNING_URL) -> OpenAIChat:
    """The adapter every run talks to the local server through (the model's text calls read)."""
    import local_llm

    return OpenAIChat(model=local_llm.MODEL_ALIAS, base_url=base_url, timeout=180,
                      text_tool_calls=True, _environ={})  # fmt: skip


def run_options(llm: LLM) -> dict[str, Any]:
    """The options of every run, under each configuration's own (a part of their digests)."""
    return {"llm": llm, "retry_policy": RETRY_POLICY}


def records_path(results: Path, model: str, group: str) -> Path:
    """Where a model's records of one group live."""
    return results / model / f"{group}.jsonl"


@dataclass(frozen=True)
class Planned:
    """One group to evaluate: its tasks (as a dataset) and the configurations chosen."""

    group: Group
    dataset: Dataset[Any]
    variants: tuple[Variant, ...]


def plan(tasks: Dataset[Any], configs: Sequence[Variant] = CONFIGS) -> list[Planned]:
    """The groups with a chosen configuration, each with the tasks it runs."""
    chosen = {config.name for config in configs}
    planned = []
    for group in GROUPS:
        variants = tuple(v for v in group.variants if v.name in chosen)
        cases = group.cases(tasks.cases)
        if variants and cases:
            planned.append(Planned(group, Dataset(cases, tasks.judges, name=group.name), variants))
    return planned


def pending(model: str, planned: Sequence[Planned], results: Path, llm: LLM) -> int:
    """The runs of ``planned`` that the model's records lack."""
    total = 0
    for item in planned:
        out = records_path(results, model, item.group.name)
        total += item.dataset.pending(RECORDED_AGENTS, item.variants, out=out, **run_options(llm))
    return total


async def run_model(
    model: str, llm: LLM, planned: Sequence[Planned], results: Path, *, progress: bool = True
) -> None:
    """Run what the model's records lack, group after group, one run at a time."""
    for item in planned:
        await item.dataset.evaluate(
            RECORDED_AGENTS,
            item.variants,
            out=records_path(results, model, item.group.name),
            concurrency=1,
            progress=progress,
            **run_options(llm),  # type: ignore[arg-type]
        )


async def _run_local(model: str, planned: Sequence[Planned], results: Path) -> None:
    import local_llm

    local_llm.setup([model])
    with local_llm.running(model) as server:
        async with local_chat(server.base_url) as llm:
            await run_model(model, llm, planned, results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--configs", default=",".join(config.name for config in CONFIGS))
    parser.add_argument("--tasks", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    # A kill (SIGTERM) unwinds like Ctrl-C, so the model server is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    models = args.models.split(",")
    for model in models:
        if model not in MODELS:
            parser.error(f"--models: no model {model!r}; there are: {', '.join(MODELS)}")
    try:
        configs = [config_named(name) for name in args.configs.split(",")]
    except KeyError as exc:
        parser.error(f"--configs: {exc.args[0]}")
    from convert_records import convert_before_resuming

    convert_before_resuming(args.results)  # records a run of the old harness left
    tasks = load_tasks()
    tasks = Dataset(tasks.cases[: args.tasks], tasks.judges, name=tasks.name)
    planned = plan(tasks, configs)
    for model in models:
        runs = pending(model, planned, args.results, local_chat())
        print(f"{model}: {runs} runs to go ({args.results / model})", flush=True)
        if not runs:
            continue
        started = time.perf_counter()
        anyio.run(_run_local, model, planned, args.results)
        seconds = time.perf_counter() - started
        print(f"{model}: {runs} runs in {seconds:.0f} s", flush=True)
        write_provenance(args.results / model / "meta.json", model, runs, seconds)


def write_provenance(path: Path, model: str, runs: int, seconds: float) -> None:
    """Record what produced a model's results: the model file, versions, date, time spent.

    Seconds and runs add up over the invocations that completed (an interrupted one's runs
    are in the records, not here).
    """
    import local_llm

    spec = local_llm.MODELS[model]
    before = json.loads(path.read_text()) if path.exists() else {}
    meta = {
        "model": model,
        "file": spec.filename,
        "sha256": spec.sha256,
        "llama_cpp_python": local_llm.LLAMA_CPP_VERSION,
        "subagent": __version__,
        "date": time.strftime("%Y-%m-%d"),
        "runs": before.get("runs", 0) + runs,
        "seconds": round(before.get("seconds", 0.0) + seconds, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
