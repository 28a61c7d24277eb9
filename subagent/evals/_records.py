"""An evaluation's records: one JSON line per finished run, appended as it finishes.

A record names its case (and the digest of the case's inputs and expected output), its
repetition, its variant (and the digest of its options, agent and model), the agent (or
system) that ran it, the model, the cost of its tokens, the judges' verdicts, and the run's
whole Step (``"step"``), or, for a system that is not a subagent agent, its
:class:`~subagent.evals.SystemRun` (``"run"``). Everything a report
shows is computed from these lines, and a record is what makes a run count as done when
an evaluation resumes: a killed evaluation loses only the runs in flight.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final

from pydantic_core import from_json

from subagent._errors import ConfigurationError
from subagent.evals._systems import SystemRun
from subagent.records import Step

__all__ = [
    "MAX_LINE_BYTES",
    "RecordWriter",
    "read_records",
    "record_line",
    "run_line",
    "slot_key",
]

MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""The longest line of a records file (or a dataset file) read, in bytes (64 MiB)."""


# A Step's usage and stop-reason counts follow from its turns: left out of records (counting
# them is most of what dumping a Step costs), computed again when a Step is read back.
_DERIVED = {"usage", "stop_reasons"}


def record_line(head: dict[str, Any], step: Step[Any]) -> str:
    """One record as a JSON line (no newline): ``head``'s fields, then ``"step"``.

    The Step's own JSON is embedded (without the ``usage`` and ``stop_reasons`` its turns
    give): it reads back with ``Step.model_validate(record["step"])``.
    """
    step_json = step.model_dump_json(exclude=_DERIVED)
    return json.dumps(head, ensure_ascii=False)[:-1] + ', "step": ' + step_json + "}"


def run_line(head: dict[str, Any], run: SystemRun) -> str:
    """A system's record as a JSON line (no newline): ``head``'s fields, then ``"run"``."""
    return json.dumps(head, ensure_ascii=False)[:-1] + ', "run": ' + run.model_dump_json() + "}"


def slot_key(record: dict[str, Any]) -> tuple[str, str, str, str, int]:
    """What makes a record the result of a planned run.

    Its case and variant, their digests, and the repetition.
    """
    return (record["case"], record["case_digest"], record["variant"], record["variant_digest"],
            record.get("repeat", 0))  # fmt: skip


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of ``path`` as JSON objects, in file order; a missing file has none.

    Read one line at a time (memory stays flat however long the file). A last line cut
    short by a killed evaluation (no newline at its end) is left out: that run runs again.

    Raises:
        ConfigurationError: A complete line is not a record, or is longer than
            :data:`MAX_LINE_BYTES` (naming the file and line).
    """
    path = Path(path)
    if not path.exists():
        return
    with path.open("rb") as file:
        number = 0
        while True:
            raw = file.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise ConfigurationError(
                    "records", f"{path}:{number}: a line longer than {MAX_LINE_BYTES} bytes"
                )
            if not raw.endswith(b"\n"):
                return  # cut short by a kill: not finished
            if not raw.strip():
                continue
            try:
                record = _record(_strict_json(raw))
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigurationError(
                    "records", f"{path}:{number}: not an evaluation record: {exc!r:.200}"
                ) from None
            yield record


def _strict_json(raw: bytes) -> Any:
    """A line's JSON, NaN and infinities refused: ``ValueError`` naming the constant.

    A record holds none, and a report would rank variants by them.
    """
    try:
        return from_json(raw, allow_inf_nan=False)
    except ValueError:

        def refuse(constant: str) -> Any:
            raise ValueError(f"{constant} is not JSON (a record holds finite numbers only)")

        return json.loads(raw, parse_constant=refuse)  # the precise message, or the value


def _record(data: Any) -> dict[str, Any]:
    """``data`` if it has a record's shape: its keys, and a Step's JSON form or a run's."""
    if not isinstance(data, dict):
        raise TypeError(f"a JSON {type(data).__name__}, not an object")
    slot_key(data)
    if "step" not in data and isinstance(data.get("run"), dict):
        if not isinstance(data["run"].get("replies", []), list):
            raise TypeError("its run's replies are not a list")
        return data
    step = data["step"]
    if not isinstance(step["turns"], list):
        raise TypeError("its step has no turns")
    _check_counts(data.get("cost"), "cost")
    _check_counts(step.get("duration_s"), "step.duration_s")
    for number, turn in enumerate(step["turns"], start=1):
        usage = turn.get("usage") if isinstance(turn, dict) else None
        for name, count in (usage or {}).items():
            _check_counts(count, f"step.turns[{number}].usage.{name}")
    return data


def _check_counts(value: Any, where: str) -> None:
    """A cost, a duration or a token count: absent, or a number not below zero.

    NaN and infinities are refused as the line is read (strict JSON); a negative or
    non-numeric count here, so a report never ranks a variant by a value no run made.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{where} must be a number >= 0, got {value!r:.40}")


_CHUNK = 64 * 1024


def _drop_cut_line(file: IO[bytes]) -> None:
    """Truncate a file after its last newline, reading back from its end 64 KiB at a time."""
    end = file.seek(0, 2)
    position = end
    while position > 0:
        start = max(0, position - _CHUNK)
        file.seek(start)
        chunk = file.read(position - start)
        if position == end and chunk.endswith(b"\n"):
            return  # the last line is whole
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            file.truncate(start + newline + 1)
            return
        position = start
    file.truncate(0)


class RecordWriter:
    """Appends records to a file, one flushed line each.

    A last line left cut short by a killed evaluation is removed before the first append,
    so every record starts a line. Use as a context manager.
    """

    def __init__(self, path: Path):
        self.path = path
        self._file: IO[str] | None = None

    def __enter__(self) -> RecordWriter:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size:
            with path.open("rb+") as file:
                _drop_cut_line(file)
        self._file = path.open("a", encoding="utf-8")
        return self

    def write(self, line: str) -> None:
        """Append one record line, flushed: a kill after this loses nothing of it."""
        assert self._file is not None
        self._file.write(line + "\n")
        self._file.flush()

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
