"""`make eval`: every task in every configuration on the local models; resumable.

    python eval/run_eval.py [--models smollm2,qwen] [--configs retries-0,...] [--tasks N]

For each model, the runs not yet in ``eval/results/<model>.jsonl`` run on the local model
server of ``make demo`` (``scripts/local_llm.py``, started here and stopped after), one
configuration and agent at a time through the library's batch API (``stream_many``), each
Step appended to the file as soon as it completes. A killed run loses only the run in
flight: running the command again skips every recorded run. ``make eval-report`` then turns
the records into the table and plot of ``docs/evaluation.md``.

The server computes one completion at a time, so the runs go one by one (concurrency 1):
more in flight would only queue at the server.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from configs import CONFIGS, Config, config_named  # noqa: E402
from results_file import RESULTS_DIR, Record, append_record, finished_keys, read_records  # noqa: E402
from tasks import Task, agent_for, load_tasks  # noqa: E402

from subagent import LLM, OpenAIChat, RetryPolicy, __version__, stream_many  # noqa: E402

__all__ = ["MODELS", "pending_runs", "run_pending"]

MODELS = ("smollm2", "qwen", "qwen1.5b")
"""Every local model the runner knows; ``--models`` defaults to :data:`DEFAULT_MODELS`."""
DEFAULT_MODELS = ("smollm2", "qwen")


def pending_runs(
    tasks: Sequence[Task], configs: Sequence[Config], path: Path
) -> list[tuple[Config, Task]]:
    """The (configuration, task) runs that ``path`` holds no record of, in a stable order."""
    done = finished_keys(read_records(path))
    return [
        (config, task)
        for config in configs
        for task in tasks
        if config.selects(task) and (config.name, task.id, task.digest) not in done
    ]


async def run_pending(
    model: str,
    llm: LLM,
    runs: Sequence[tuple[Config, Task]],
    path: Path,
    *,
    progress: bool = True,
) -> int:
    """Run ``runs`` on ``llm``, appending each Step to ``path`` as it completes.

    Runs that share a configuration and an agent go through one ``stream_many`` batch.

    Returns:
        The number of runs recorded.
    """
    groups: dict[tuple[str, str], list[tuple[Config, Task]]] = {}
    for config, task in runs:
        groups.setdefault((config.name, task.agent), []).append((config, task))
    recorded = 0
    with tqdm(total=len(runs), desc=model, unit="run", disable=not progress) as bar:
        for members in groups.values():
            config = members[0][0]
            agent = agent_for(members[0][1], **config.agent_changes())
            contexts = [task.context for _, task in members]
            options: dict[str, Any] = config.run_options()
            async with stream_many(agent, contexts, concurrency=1, progress=False, llm=llm,
                                   retry_policy=RetryPolicy(max_attempts=3, initial_delay=0.5),
                                   **options) as batch:  # fmt: skip
                async for item in batch:
                    task = members[item.index][1]
                    append_record(path, Record(model, config.name, task.id, task.digest,
                                               item.step))  # fmt: skip
                    recorded += 1
                    bar.update()
    return recorded


async def _run_model(model: str, runs: list[tuple[Config, Task]], path: Path) -> None:
    import local_llm

    local_llm.setup([model])
    with local_llm.running(model) as server:
        async with OpenAIChat(model=local_llm.MODEL_ALIAS, base_url=server.base_url,
                              timeout=180, text_tool_calls=True, _environ={}) as llm:  # fmt: skip
            await run_pending(model, llm, runs, path, progress=True)


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
    tasks = load_tasks()[: args.tasks]
    for model in models:
        path = args.results / f"{model}.jsonl"
        runs = pending_runs(tasks, configs, path)
        print(f"{model}: {len(runs)} runs to go ({path})", flush=True)
        if not runs:
            continue
        started = time.perf_counter()
        anyio.run(_run_model, model, runs, path)
        seconds = time.perf_counter() - started
        print(f"{model}: {len(runs)} runs in {seconds:.0f} s", flush=True)
        write_provenance(args.results / f"{model}.meta.json", model, len(runs), seconds)


def write_provenance(path: Path, model: str, runs: int, seconds: float) -> None:
    """Record what produced a model's results: the model file, versions, date, time spent.

    Seconds and runs add up over the invocations that resumed one another.
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
    path.write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
