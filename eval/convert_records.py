"""The records of the harnesses before ``subagent.evals``, converted once into its records.

    python eval/convert_records.py [FOLDER ...]     # default: every folder under eval/results

Until 2026-11-26 ``make eval`` wrote ``eval/results/<model>.jsonl`` (one line per run:
``model``, ``config``, ``task``, the task line's ``digest``, the whole ``step``) and
``make eval-bfcl`` wrote ``eval/results/bfcl*/<system>@<set-up>.jsonl`` (one line per case:
``system``, ``setup``, ``category``, ``id``, ``digest``, and a compact ``outcome``: the calls,
the first attempt's calls, each reply's text, calls and feedback, the totals). Both runners
now go through ``subagent.evals``, whose records this script writes from the old ones
through ``Dataset.import_runs``: each run is planned as the runner plans it (the same case
and variant digests, so the runner resumes from the converted records), judged by the
evals judges, and written in the old file's order.

- ``make eval``: ``<model>.jsonl`` becomes ``<model>/<group>.jsonl`` (one per group of
  configurations, ``configs.GROUPS``), each record holding the run's whole Step as before;
  ``<model>.meta.json`` becomes ``<model>/meta.json``.
- BFCL: each file keeps its name; each record holds a
  :class:`~subagent.evals.SystemRun` made from the compact outcome (those records never
  held a Step): the output is the calls (``None`` when the run failed), each reply its
  text, its calls and, when the run refused it, the feedback as its ``error``. Retry
  sampling's records (``results/retry-sampling/``) likewise.

Every old record is checked against the case it names as the data is now (the task line,
BFCL's case and answer): a record of a case that changed since is refused, naming it.
Converting is deterministic and done once: the old files are removed; a folder already
converted has nothing left to convert. Records copied in later from a run of the old
harness (``eval/results/bfcl-qwen1.5b/``) are converted by naming their folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bfcl_data import BfclChecker, load_cases
from bfcl_systems import Server, system_named
from configs import GROUPS
from run_bfcl import client_for, count_records
from run_eval import (
    PLANNING_URL,
    RECORDED_AGENTS,
    RESULTS_DIR,
    local_chat,
    records_path,
    run_options,
)
from tasks import category, load_tasks

from subagent import FailReason, Step
from subagent.evals import Case, Dataset, SystemReply, SystemRun, Variant

__all__ = [
    "convert_before_resuming",
    "convert_bfcl_file",
    "convert_eval_file",
    "convert_folder",
    "old_files",
    "old_lines",
    "old_task_digest",
    "refuse_old",
    "system_run",
]


def old_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The whole lines of an old records file (a last line cut short by a kill is left out)."""
    data = path.read_bytes()
    for line in data[: data.rfind(b"\n") + 1].decode("utf-8").split("\n"):
        if line.strip():
            yield json.loads(line)


def old_task_digest(case: Case[Any]) -> str:
    """The digest the old harness gave a task: of its line in the old ``tasks.jsonl`` form."""
    line = {
        "id": case.name,
        "category": category(case),
        "agent": case.agent,
        "context": case.context,
        "answer": case.expected,
        "judge": case.metadata["judge"],
        "length": "length" in case.tags,
    }
    canonical = json.dumps(line, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _group_of(config: str) -> str:
    for group in GROUPS:
        if any(variant.name == config for variant in group.variants):
            return group.name
    raise ValueError(f"no configuration {config!r}")


def _old_eval_runs(
    path: Path, tasks: Dataset[Any]
) -> tuple[str, dict[str, list[tuple[str, str, Step[Any]]]]]:
    """The model and, per group, the runs of an old ``make eval`` records file."""
    by_name = {case.name: case for case in tasks}
    runs: dict[str, list[tuple[str, str, Step[Any]]]] = {}
    model = ""
    for number, record in enumerate(old_lines(path), 1):
        case = by_name.get(record["task"])
        if case is None or old_task_digest(case) != record["digest"]:
            raise ValueError(f"{path}:{number}: task {record['task']!r} changed since it ran")
        model = record["model"]
        step = Step[Any].model_validate(record["step"])
        runs.setdefault(_group_of(record["config"]), []).append((case.name, record["config"], step))
    return model, runs


def _retire(path: Path, folder: Path) -> None:
    """Remove an old records file once converted; its provenance goes beside the new ones."""
    meta = path.with_suffix(".meta.json")
    if meta.exists():
        meta.replace(folder / "meta.json")
    path.unlink()


async def convert_eval_file(path: Path, results: Path) -> dict[str, int]:
    """Convert one model's old ``make eval`` records; return the runs written per group.

    Raises:
        ValueError: A record names a task that is gone or changed since it ran, or a
            configuration that is gone.
    """
    tasks = load_tasks()
    model, runs = _old_eval_runs(path, tasks)
    written = {}
    for group in GROUPS:
        if group.name not in runs:
            continue
        dataset = Dataset(group.cases(tasks.cases), tasks.judges, name=group.name)
        written[group.name] = await dataset.import_runs(
            RECORDED_AGENTS, group.variants, runs[group.name],
            out=records_path(results, model, group.name),
            **run_options(local_chat()),
        )  # fmt: skip
    _retire(path, results / model)
    return written


def _is_old_eval_file(path: Path) -> bool:
    first = next(old_lines(path), None)
    return first is not None and {"model", "config", "task", "digest", "step"} <= set(first)


def _is_old_bfcl_file(path: Path) -> bool:
    first = next(old_lines(path), None)
    return first is not None and {"system", "category", "id", "digest", "outcome"} <= set(first)


_REASONS = {reason.value for reason in FailReason}


def system_run(outcome: dict[str, Any], max_turns: int | None = None) -> SystemRun:
    """A BFCL record's compact outcome as a :class:`SystemRun`.

    The output is the calls (``None`` when the run failed: a failed run was graded as no
    call then, and is no answer now); the failure is a subagent run's reason
    (``budget_exhausted: ...``), else ``error`` (an exception the system raised); each
    reply keeps its text and calls, and the feedback it got when the run refused it. For a
    subagent run (``max_turns``: its work budget), each reply says whether it was a
    correction: a ``retry`` turn, its type the phase the turn before it left the run in.
    """
    error = outcome.get("error")
    failure = message = None
    if error:
        reason, _, rest = error.partition(": ")
        failure, message = (reason, rest) if reason in _REASONS else ("error", error)
    replies = []
    phase = None if max_turns is None else ("normal" if max_turns > 1 else "must_return")
    for turn in outcome.get("turns") or []:
        correction = None if phase is None else phase == "retry"
        text, calls = turn.get("text") or "", turn.get("calls") or []
        replies.append(SystemReply(text=text, tool_calls=calls, error=turn.get("feedback"),
                                   correction=correction))  # fmt: skip
        phase = None if phase is None else turn.get("phase_after")
    return SystemRun(
        output=None if error else outcome["calls"],
        failure=failure,
        message=message,
        replies=replies,
        calls=outcome["llm_calls"],
        input_tokens=outcome["prompt_tokens"],
        output_tokens=outcome["completion_tokens"],
        duration_s=outcome.get("seconds") or 0.0,
    )


def _bfcl_variant(record: dict[str, Any]) -> tuple[Any, Variant, dict[str, Any]]:
    """The evaluation a BFCL record belongs to: its target, variant and options."""
    system = system_named(record["system"])
    server = Server(base_url=PLANNING_URL, setup=record.get("setup", "template"))
    client = client_for(system, server) if system.kind == "subagent" else None
    options = {"llm": client} if client is not None else {}
    if "temperature" in record:  # retry sampling's records
        from retry_sampling import sampled_variant

        return system.target(server, client), sampled_variant(system, record["temperature"],
                                                               client), options  # fmt: skip
    return system.target(server, client), system.variant(record["setup"]), options


async def convert_bfcl_file(path: Path, cases: dict[tuple[str, str], Case[Any]]) -> int:
    """Convert one old BFCL records file in place; return the runs written.

    Raises:
        ValueError: A record names a case that is gone or changed since it ran.
    """
    lines = list(old_lines(path))
    runs, chosen = [], []
    for number, record in enumerate(lines, 1):
        case = cases.get((record["category"], record["id"]))
        if case is None or case.metadata["bfcl_digest"] != record["digest"]:
            raise ValueError(f"{path}:{number}: case {record['id']!r} changed since it ran")
        chosen.append(case)
    target, variant, options = _bfcl_variant(lines[0])
    system = system_named(lines[0]["system"])
    max_turns = system.options.get("max_turns") if system.kind == "subagent" else None
    for record, case in zip(lines, chosen, strict=True):
        runs.append((case.name, variant.name, system_run(record["outcome"], max_turns)))
    unique = list({case.name: case for case in chosen}.values())
    converting = path.with_suffix(".converting")
    written = await Dataset(unique, [BfclChecker()], name="bfcl").import_runs(
        target, [variant], runs, out=converting, **options
    )
    converting.replace(path)
    return written


def _categories(paths: Sequence[Path]) -> dict[tuple[str, str], Case[Any]]:
    names = {record["category"] for path in paths for record in old_lines(path)}
    return {(name, case.name): case for name in names for case in load_cases(name, None)}


def _recount(folder: Path) -> None:
    """A folder's provenance counts its records (it counted the runs made: issue 26)."""
    meta_path = folder / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if "cases" in meta:
            del meta["cases"]
            meta = {**meta, "records": count_records(folder)}
            meta_path.write_text(json.dumps(meta, indent=2) + "\n")


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jsonl"))


def old_files(folder: Path) -> list[Path]:
    """The records files of ``folder`` still in the format before ``subagent.evals``."""
    return [path for path in _files(folder) if _is_old_eval_file(path) or _is_old_bfcl_file(path)]


def refuse_old(folder: Path) -> None:
    """Stop a report on records in the old format, saying how to convert them.

    Raises:
        SystemExit: ``folder`` holds such records.
    """
    found = old_files(folder)
    if found:
        names = ", ".join(path.name for path in found)
        raise SystemExit(
            f"{folder}: records in the format before subagent.evals ({names}): convert them "
            f"once with: python eval/convert_records.py {folder}"
        )


def convert_before_resuming(folder: Path) -> None:
    """Convert what a runner is about to resume from, if it is in the old format."""
    if folder.exists() and old_files(folder):
        for name, count in anyio.run(convert_folder, folder).items():
            print(f"converted {folder / name}: {count} records", flush=True)


async def convert_folder(folder: Path) -> dict[str, int]:
    """Convert every old records file of ``folder``; return the runs written per file."""
    written: dict[str, int] = {}
    paths = _files(folder)
    for path in paths:
        if _is_old_eval_file(path):
            for group, count in (await convert_eval_file(path, folder)).items():
                written[f"{path.stem}/{group}"] = count
    bfcl = [path for path in paths if path.exists() and _is_old_bfcl_file(path)]
    if bfcl:
        cases = _categories(bfcl)
        for path in bfcl:
            written[path.name] = await convert_bfcl_file(path, cases)
    _recount(folder)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    args = parser.parse_args(argv)
    folders = args.folders or [RESULTS_DIR, *sorted(p for p in RESULTS_DIR.iterdir() if p.is_dir())]
    for folder in folders:
        for name, count in anyio.run(convert_folder, folder).items():
            print(f"{folder / name}: {count} records", flush=True)


if __name__ == "__main__":
    main()
