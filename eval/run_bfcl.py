"""`make eval-bfcl`: BFCL's single-turn categories through each system, on subagent.evals.

    python eval/run_bfcl.py [--systems raw,subagent-r1,...] [--categories simple_python,...]
                            [--cases N] [--offset K] [--setup template|tools|parsed]
                            [--base-url URL] [--only CASE,...] [--model qwen|qwen1.5b]

Each category is a ``subagent.evals`` dataset (``bfcl_data.dataset``: BFCL's questions,
graded by BFCL's checker as a judge); each system is a variant (``bfcl_systems.SYSTEMS``)
of an agent made per case, or of a raw call or a peer as an evals system. Each (system,
server set-up) has its records file, ``eval/results/bfcl/<system>@<setup>.jsonl``
(``eval/results/bfcl-<model>/`` for a local model other than the default), one line per
case appended as soon as the case is done; ``Dataset.evaluate`` skips the cases already
recorded, so a killed run resumes where it stopped. Without ``--base-url`` the local model
server of ``make demo`` (``scripts/local_llm.py``) is started for the run and stopped after;
``--setup tools`` starts it with the tools chat format instead of the model's own template;
``--setup parsed`` puts ``eval/calls_proxy.py`` in front of the model's own template, so a
client that reads native calls only gets the calls the model writes as text as native ones.

Systems marked ``peers`` (pydantic-ai, the Agents SDK) need the peers' venv
(``make bench-peers`` builds it); the Makefile runs them there. One case at a time: the
server computes one completion at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import DEFAULT_CATEGORIES, SAMPLE_SIZE, bfcl_version, dataset, load_cases  # noqa: E402
from bfcl_systems import SYSTEMS, BfclSystem, Server, system_named  # noqa: E402

from subagent.evals import Dataset  # noqa: E402

__all__ = [
    "CHUNK",
    "RESULTS",
    "client_for",
    "count_records",
    "record_path",
    "results_for",
    "run_cases",
]

RESULTS = Path(__file__).resolve().parent / "results" / "bfcl"
SETUPS = ("template", "tools", "parsed")
CHUNK = 5


def results_for(model: str | None) -> Path:
    """The records' folder for a local model: the default model's is :data:`RESULTS`."""
    import local_llm

    if model is None or model == local_llm.DEFAULT_MODEL:
        return RESULTS
    return RESULTS.with_name(f"bfcl-{model}")


def record_path(results: Path, system: str, setup: str) -> Path:
    """Where a system's records under one server set-up live."""
    return results / f"{system}@{setup}.jsonl"


def client_for(system: BfclSystem, server: Server) -> Any:
    """What ``system`` talks to ``server`` through: an async context manager, or ``None``."""
    if system.kind == "raw":
        return httpx.AsyncClient(timeout=300)
    if system.kind == "subagent":
        from subagent import OpenAIChat

        return OpenAIChat(model=server.model, base_url=server.base_url, timeout=300,
                          text_tool_calls=True, _environ={})  # fmt: skip
    return None


def _options(system: BfclSystem, client: Any) -> dict[str, Any]:
    """The evaluation's own options: the model adapter of a subagent system."""
    return {"llm": client} if system.kind == "subagent" else {}


def pending(
    system: BfclSystem, cases: Dataset[Any], server: Server, client: Any, path: Path, setup: str
) -> int:
    """How many of ``cases`` the system's records lack."""
    return cases.pending(system.target(server, client), [system.variant(setup)], out=path,
                         **_options(system, client))  # fmt: skip


async def run_cases(
    system: BfclSystem, cases: Dataset[Any], server: Server, client: Any, path: Path, setup: str
) -> None:
    """Run the ``cases`` that ``path`` lacks through ``system``, recording each as it ends.

    A case whose system raises is recorded as a failed run (never graded as an answer): a
    harness that stopped at the first surprise would measure nothing.
    """
    await cases.evaluate(system.target(server, client), [system.variant(setup)], out=path,
                         concurrency=1, progress=False, **_options(system, client))  # fmt: skip


def count_records(results: Path) -> int:
    """The records in ``results`` (lines of its records files)."""
    return sum(
        sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        for path in results.glob("*.jsonl")
    )


async def _run_all(
    systems: Sequence[BfclSystem],
    categories: Sequence[str],
    cases_per: int | None,
    base_url: str,
    setup: str,
    results: Path,
    offset: int = 0,
    model: str | None = None,
    only: frozenset[str] | None = None,
) -> None:
    """Every system on every category, :data:`CHUNK` cases at a time, system after system.

    ``offset`` skips that many cases of each category's fixed order first (a held-out
    sample: the cases after the ones the default sample takes). ``only``, when given, keeps
    the sample's cases of those names (a rerun of chosen cases, in the sample's order).

    Interleaved (the first cases of every category for every system, then the next ones)
    so that a run stopped part-way leaves every system measured on the same cases of every
    category (the report compares like with like), and a resumed run fills the gaps in order.
    """
    server = Server(base_url=base_url, setup=setup)
    samples = {category: dataset(category, cases_per, offset) for category in categories}
    if only is not None:
        samples = {category: Dataset([case for case in sample.cases if case.name in only],
                                     sample.judges, name=sample.name)
                   for category, sample in samples.items()}  # fmt: skip
        missing = only - {case.name for sample in samples.values() for case in sample.cases}
        if missing:
            raise SystemExit(f"--only: not in the sample: {', '.join(sorted(missing))}")
    longest = max((len(sample) for sample in samples.values()), default=0)
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, Any] = {}
        for system in systems:
            if system.kind not in clients:
                client = client_for(system, server)
                clients[system.kind] = client and await stack.enter_async_context(client)
        for start in range(0, longest, CHUNK):
            for category, sample in samples.items():
                chunk = Dataset(sample.cases[start : start + CHUNK], sample.judges, name="bfcl")
                for system in systems:
                    path = record_path(results, system.name, setup)
                    client = clients[system.kind]
                    todo = pending(system, chunk, server, client, path, setup)
                    if not todo:
                        continue
                    print(f"{system.name}@{setup} {category} {start}+: {todo} cases", flush=True)
                    started = time.perf_counter()
                    await run_cases(system, chunk, server, client, path, setup)
                    _add_provenance(results, time.perf_counter() - started, model)


def _add_provenance(results: Path, seconds: float, model: str | None = None) -> None:
    """Record what produced the records: the model, versions, date, time spent.

    And how many records the folder holds: counted, not the runs made (a rerun or a moved
    file would make those two differ).
    """
    import local_llm

    from subagent import __version__

    path = results / "meta.json"
    before = json.loads(path.read_text()) if path.exists() else {}
    spec = local_llm.MODELS[model or local_llm.DEFAULT_MODEL]
    meta = {
        "model": spec.name,
        "file": spec.filename,
        "sha256": spec.sha256,
        "llama_cpp_python": local_llm.LLAMA_CPP_VERSION,
        "bfcl_eval": bfcl_version(),
        "subagent": __version__,
        "date": time.strftime("%Y-%m-%d"),
        "records": count_records(results),
        "seconds": round(before.get("seconds", 0.0) + seconds, 1),
    }
    path.write_text(json.dumps(meta, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(s.name for s in SYSTEMS if s.venv == "main"))
    parser.add_argument("--categories", default=",".join(DEFAULT_CATEGORIES))
    parser.add_argument("--cases", type=int, default=SAMPLE_SIZE, help="cases per category")
    parser.add_argument(
        "--offset", type=int, default=0, help="skip this many cases of each category first"
    )
    parser.add_argument(
        "--only", default=None, help="run only these cases of the sample (names, comma-separated)"
    )
    parser.add_argument("--setup", choices=SETUPS, default="template")
    parser.add_argument("--base-url", default=None, help="a running server (else one is started)")
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument(
        "--model", default=None, help="the local model to start (scripts/local_llm.py's names)"
    )
    args = parser.parse_args(argv)
    if args.results is None:
        args.results = results_for(args.model)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        systems = [system_named(name) for name in args.systems.split(",") if name]
    except KeyError as exc:
        parser.error(f"--systems: {exc.args[0]}")
    from convert_records import convert_before_resuming

    convert_before_resuming(args.results)  # records a run of the old harness left
    categories = [c for c in args.categories.split(",") if c]
    only = None if args.only is None else frozenset(n for n in args.only.split(",") if n)
    for category in categories:
        try:
            load_cases(category, 1)
        except ValueError as exc:
            parser.error(f"--categories: {exc}")

    def run_all(base_url: str) -> None:
        with contextlib.ExitStack() as stack:
            if args.setup == "parsed":
                import calls_proxy

                base_url = stack.enter_context(calls_proxy.running(base_url))
            anyio.run(_run_all, systems, categories, args.cases, base_url, args.setup,
                      args.results, args.offset, args.model, only)  # fmt: skip

    if args.base_url:
        run_all(args.base_url)
        return
    import local_llm

    with local_llm.running(
        args.model or local_llm.DEFAULT_MODEL, tools=args.setup == "tools"
    ) as server:
        run_all(server.base_url)


if __name__ == "__main__":
    main()
