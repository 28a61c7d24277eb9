"""`make eval-bfcl`: BFCL's single-turn categories through each system; resumable.

    python eval/run_bfcl.py [--systems raw,subagent-r1,...] [--categories simple_python,...]
                            [--cases N] [--offset K] [--setup template|tools] [--base-url URL]
                            [--model qwen|qwen1.5b]

Each (system, server set-up) appends one JSON line per case to
``eval/results/bfcl/<system>@<setup>.jsonl`` (``eval/results/bfcl-<model>/`` for a local
model other than the default) as soon as the case is done, and skips the
cases already recorded (keyed by category, id and the case's digest), so a killed run
resumes where it stopped. Without ``--base-url`` the local model server of ``make demo``
(``scripts/local_llm.py``) is started for the run and stopped after; ``--setup tools``
starts it with the tools chat format instead of the model's own template.

Systems marked ``peers`` (pydantic-ai, the Agents SDK) need the peers' venv
(``make bench-peers`` builds it); the Makefile runs them there. One case at a time: the
server computes one completion at a time.
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
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import DEFAULT_CATEGORIES, SAMPLE_SIZE, Case, bfcl_version, load_cases  # noqa: E402
from bfcl_systems import SYSTEMS, Outcome, Server, System, elapsed, system_named  # noqa: E402

__all__ = [
    "RESULTS",
    "append_line",
    "client_for",
    "finished",
    "pending",
    "read_lines",
    "record_path",
    "results_for",
    "run_cases",
]

RESULTS = Path(__file__).resolve().parent / "results" / "bfcl"
SETUPS = ("template", "tools")
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


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of ``path`` (a last line cut short by a kill is left out)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1].decode("utf-8")
    return [json.loads(line) for line in complete.split("\n") if line.strip()]


def finished(path: Path) -> set[tuple[str, str, str]]:
    """The (category, id, digest) of every case recorded in ``path``."""
    return {(r["category"], r["id"], r["digest"]) for r in read_lines(path)}


def pending(cases: Sequence[Case], path: Path) -> list[Case]:
    """The cases ``path`` holds no record of, in sample order."""
    done = finished(path)
    return [case for case in cases if (case.category, case.id, case.digest) not in done]


def append_line(path: Path, line: dict[str, Any]) -> None:
    """Append ``line`` to ``path`` as JSON (dropping a last line a kill cut short first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size:
        data = path.read_bytes()
        if not data.endswith(b"\n"):  # a line cut short by a kill: drop it
            path.write_bytes(data[: data.rfind(b"\n") + 1])
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(line, ensure_ascii=False) + "\n")
        file.flush()


async def client_for(system: System, server: Server) -> Any:
    """What ``system`` talks to ``server`` through (an async context manager, or a peer's name)."""
    if system.kind == "raw":
        return httpx.AsyncClient(timeout=300)
    if system.kind == "subagent":
        from subagent import OpenAIChat

        return OpenAIChat(
            model=server.model,
            base_url=server.base_url,
            timeout=300,
            text_tool_calls=True,
            _environ={},
        )
    return system.name


async def run_cases(
    system: System, cases: Sequence[Case], server: Server, path: Path, setup: str
) -> int:
    """Run ``cases`` through ``system``, appending each outcome to ``path``.

    A case whose system raises is recorded with the error (and graded as no call): a
    harness that stopped at the first surprise would measure nothing.
    """
    client = await client_for(system, server)
    done = 0
    try:
        for case in cases:
            started = time.perf_counter()
            try:
                outcome = await system.run(case, server, client)
            except Exception as exc:
                outcome = Outcome(error=f"{type(exc).__name__}: {str(exc)[:300]}")
            outcome.seconds = elapsed(started)
            append_line(
                path,
                {
                    "system": system.name,
                    "setup": setup,
                    "category": case.category,
                    "id": case.id,
                    "digest": case.digest,
                    "outcome": outcome.to_json(),
                },
            )
            done += 1
            print(
                f"  {system.name} {case.id}: {len(outcome.calls)} call(s) "
                f"{outcome.seconds:.1f}s{' ERROR ' + outcome.error if outcome.error else ''}",
                flush=True,
            )
    finally:
        if hasattr(client, "aclose"):
            await client.aclose()
    return done


async def _run_all(
    systems: Sequence[System],
    categories: Sequence[str],
    cases_per: int | None,
    base_url: str,
    setup: str,
    results: Path,
    offset: int = 0,
    model: str | None = None,
) -> None:
    """Every system on every category, :data:`CHUNK` cases at a time, system after system.

    ``offset`` skips that many cases of each category's fixed order first (a held-out
    sample: the cases after the ones the default sample takes).

    Interleaved (the first cases of every category for every system, then the next ones)
    so that a run stopped part-way leaves every system measured on the same cases of every
    category (the report compares like with like), and a resumed run fills the gaps in order.
    """
    server = Server(base_url=base_url, setup=setup)
    samples = {
        category: load_cases(category, None if cases_per is None else offset + cases_per)[offset:]
        for category in categories
    }
    longest = max((len(sample) for sample in samples.values()), default=0)
    for start in range(0, longest, CHUNK):
        for category, sample in samples.items():
            chunk = sample[start : start + CHUNK]
            for system in systems:
                path = record_path(results, system.name, setup)
                todo = pending(chunk, path)
                if not todo:
                    continue
                print(f"{system.name}@{setup} {category} {start}+: {len(todo)} cases", flush=True)
                started = time.perf_counter()
                await run_cases(system, todo, server, path, setup)
                _add_provenance(results, len(todo), time.perf_counter() - started, model)


def _add_provenance(results: Path, cases: int, seconds: float, model: str | None = None) -> None:
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
        "cases": before.get("cases", 0) + cases,
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
    categories = [c for c in args.categories.split(",") if c]
    for category in categories:
        try:
            load_cases(category, 1)
        except ValueError as exc:
            parser.error(f"--categories: {exc}")

    def run_all(base_url: str) -> None:
        anyio.run(_run_all, systems, categories, args.cases, base_url, args.setup, args.results,
                  args.offset, args.model)  # fmt: skip

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
