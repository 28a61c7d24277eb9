"""The evaluation's records: one JSON line per run, in ``eval/results/<model>.jsonl``.

A record holds the model, the configuration, the task (its id and the digest of its line in
``tasks.jsonl``, so an edited task runs again) and the run's whole Step as JSON. Everything
the report shows is computed from these records, so the report regenerates without the
models, and a record is what makes a run count as finished when the runner resumes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from subagent import Step

__all__ = ["RESULTS_DIR", "Record", "append_record", "finished_keys", "read_records"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Record:
    """One run of one task in one configuration on one model."""

    model: str
    config: str
    task: str
    digest: str
    step: Step[Any]

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the run: configuration, task and the task's digest."""
        return (self.config, self.task, self.digest)

    def to_line(self) -> str:
        """The record as one JSON line (no newline)."""
        head = {"model": self.model, "config": self.config, "task": self.task,
                "digest": self.digest}  # fmt: skip
        # The Step's own JSON, embedded as is: it round-trips through Step.model_validate_json.
        return json.dumps(head)[:-1] + ', "step": ' + self.step.model_dump_json() + "}"


def read_records(path: Path) -> Iterator[Record]:
    """The records of ``path``, in file order; a missing file has none.

    A line cut short by a killed run (the last one, without its newline) is ignored: that
    run is not finished, and runs again.

    Raises:
        ValueError: A complete line is not a record (the message names the line).
    """
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    complete = lines[:-1]  # the part after the last newline is empty or an unfinished write
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            data: dict[str, Any] = json.loads(line)
            step = Step[Any].model_validate(data["step"])
            yield Record(data["model"], data["config"], data["task"], data["digest"], step)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path.name}:{number}: not a record: {exc}") from exc


def finished_keys(records: Iterable[Record]) -> set[tuple[str, str, str]]:
    """The keys of the runs already recorded."""
    return {record.key for record in records}


def append_record(path: Path, record: Record) -> None:
    """Append ``record`` as one line, flushed, so a killed runner loses only runs in flight.

    A last line cut short by a kill is removed first, so that the record starts a line.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size:
        with path.open("rb") as file:
            file.seek(-1, 2)
            whole = file.read(1) == b"\n"
        if not whole:
            text = path.read_bytes()
            path.write_bytes(text[: text.rfind(b"\n") + 1])
    with path.open("a", encoding="utf-8") as file:
        file.write(record.to_line() + "\n")
        file.flush()
