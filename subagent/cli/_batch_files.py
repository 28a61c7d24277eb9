"""A batch's files: the inputs, the output's results, and what a re-run reuses of them.

``--input`` holds one JSON object (a prompt context) per line; ``--output`` one line per
finished run (:func:`output_line`). :func:`plan_batch` matches the output's results to the
inputs by the inputs themselves, so a batch resumes after a kill, an edit or a reorder.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from subagent.cli._reading import MAX_INPUT_BYTES, decoded, mib, strict_json
from subagent.cli._status import UsageError
from subagent.records import Step

__all__ = [
    "Input",
    "Plan",
    "Result",
    "check_writable",
    "input_key",
    "listed",
    "output_line",
    "plan_batch",
    "read_inputs",
    "read_outputs",
]

_LISTED = 10  # line numbers listed in one message, at most


@dataclass(frozen=True, slots=True)
class Input:
    """One input of a batch.

    Attributes:
        line: Its line number in the file, from 1.
        context: The prompt context.
        key: A digest of the context: what its result in the output is found by.
    """

    line: int
    context: dict[str, Any]
    key: str


def input_key(context: Any) -> str:
    """The digest a batch finds an input's result by: SHA-256 of its canonical JSON."""
    canonical = json.dumps(context, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_inputs(path: Path) -> list[Input]:
    r"""``--input``: one JSON object per line (blank lines are skipped).

    Lines end at ``\n`` only (a ``\r`` before it is dropped), so a raw U+2028, U+2029 or
    U+0085 inside a string is just a character; the file is UTF-8 (a byte-order mark
    allowed) and a line holds at most :data:`MAX_INPUT_BYTES`.

    Raises:
        UsageError: The file cannot be read, or a line is too long, not UTF-8 or not a
            strict JSON object (the line is named).
    """
    inputs: list[Input] = []
    try:
        with path.open("rb") as file:
            for number, raw in enumerate(_lines(file), 1):
                source = f"--input: line {number}"
                if len(raw) > MAX_INPUT_BYTES:
                    raise UsageError(f"{source} is longer than the limit of "
                                     f"{mib(MAX_INPUT_BYTES)}")  # fmt: skip
                text = decoded(raw, source, first=number == 1)
                if not text.strip():
                    continue
                try:
                    context = strict_json(text)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{source} is not JSON: {exc}") from None
                except ValueError as exc:
                    raise UsageError(f"{source}: {exc}") from None
                except RecursionError:
                    raise UsageError(f"{source}: nested too deeply") from None
                if not isinstance(context, dict):
                    raise UsageError(
                        f"{source} must be a JSON object, got {type(context).__name__}"
                    )
                inputs.append(Input(number, context, input_key(context)))
    except OSError as exc:
        raise UsageError(f"--input: cannot read {str(path)!r}: {exc.strerror}") from None
    return inputs


def _lines(file: BinaryIO) -> Iterator[bytes]:
    r"""A file's lines split at ``\n`` only, without it or a ``\r`` before it.

    A line longer than :data:`MAX_INPUT_BYTES` comes back with one byte more than the limit
    (and ends the reading): it is never held whole.
    """
    while raw := file.readline(MAX_INPUT_BYTES + 2):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        elif len(raw) > MAX_INPUT_BYTES:
            yield raw[: MAX_INPUT_BYTES + 1]
            return
        yield raw.removesuffix(b"\r")


def output_line(index: int, context: dict[str, Any], step: Step[Any]) -> str:
    """One line of a batch's output: the input's index and context, and the run's Step."""
    head = json.dumps({"index": index, "context": context}, allow_nan=False)
    return f'{head[:-1]}, "step": {step.model_dump_json()}}}'


@dataclass(frozen=True, slots=True)
class Result:
    """One line of a batch's output: the input's index then, its key, and the run's Step."""

    index: int
    key: str
    step: Step[Any]


def read_outputs(path: Path) -> list[Result]:
    """The results a batch's output already holds, in file order; none if it does not exist.

    Bytes after the last newline (a batch killed while writing, perhaps inside a character)
    are cut off the file before anything is decoded: that input runs again.

    Raises:
        UsageError: The file cannot be read or cut, or a complete line is not an output
            line (named).
    """
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--output: cannot read {str(path)!r}: {exc.strerror}") from None
    end = data.rfind(b"\n") + 1
    if end < len(data):  # a batch killed while writing: drop the part line
        try:
            os.truncate(path, end)
        except OSError as exc:
            raise UsageError(f"--output: cannot write {str(path)!r}: {exc.strerror}") from None
    results: list[Result] = []
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw.decode("utf-8"))
            context = line["context"]
            step = Step[Any].model_validate(line["step"])
            result = Result(int(line["index"]), input_key(context), step)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise UsageError(
                f"--output: line {number} is not a batch result: {type(exc).__name__}"
            ) from None
        if not isinstance(context, dict):
            raise UsageError(f"--output: line {number} is not a batch result: its context")
        results.append(result)
    return results


@dataclass
class Plan:
    """What a batch reuses from its output and what it runs.

    Attributes:
        done: The reused results' Steps, by input index.
        pending: The input indices to run, in order.
        changed: Line numbers of inputs whose line's earlier result was for another input.
        stale: Results matching no input (edited, removed, or superseded by a rerun).
        rerun: Line numbers run again by ``--rerun-failed`` / ``--rerun-retryable``.
        rerun_flags: Those of the two flags that were given.
    """

    done: dict[int, Step[Any]]
    pending: list[int]
    changed: list[int]
    stale: int
    rerun: list[int]
    rerun_flags: str = ""

    def notes(self, input_path: Path, output_path: Path) -> list[str]:
        """What the batch tells on stderr before it runs."""
        notes = []
        if self.changed:
            one = len(self.changed) == 1
            notes.append(
                f"{'line' if one else 'lines'} {listed(self.changed)} of {input_path} changed "
                f"since {'its result was' if one else 'their results were'} written: "
                f"{'it runs' if one else 'they run'} again"
            )
        if self.stale:
            notes.append(
                f"{self.stale} result(s) in {output_path} match no input of {input_path} "
                "(edited or removed since): kept in the file, not reused or counted"
            )
        if self.rerun:
            notes.append(
                f"{'line' if len(self.rerun) == 1 else 'lines'} {listed(self.rerun)} of "
                f"{input_path} run again ({self.rerun_flags})"
            )
        return notes


def listed(numbers: list[int]) -> str:
    """Line numbers for a message: the first ten, then how many more."""
    shown = ", ".join(str(number) for number in numbers[:_LISTED])
    return shown + (f" and {len(numbers) - _LISTED} more" if len(numbers) > _LISTED else "")


def plan_batch(
    inputs: Sequence[Input],
    results: Sequence[Result],
    *,
    rerun_failed: bool = False,
    rerun_retryable: bool = False,
) -> Plan:
    """Match the output's results to the inputs by the inputs themselves.

    A result serves an input when it was written for the same context (the same
    :func:`input_key`), at the same index if there is one, else at any index (the file was
    reordered); a later line for the same context and index supersedes an earlier one.
    Each result serves one input at most, so duplicated inputs each run once. Inputs
    without a result, and with ``rerun_failed`` / ``rerun_retryable`` those whose result
    failed (retryably), are to run.
    """
    latest: dict[tuple[str, int], Result] = {}
    for result in results:
        latest[(result.key, result.index)] = result
    matched: dict[int, Result] = {}
    used: set[tuple[str, int]] = set()
    for index, item in enumerate(inputs):
        if (item.key, index) in latest:
            matched[index] = latest[(item.key, index)]
            used.add((item.key, index))
    free: dict[str, list[tuple[str, int]]] = {}  # the results left, by key, last first
    for slot in reversed(latest):
        if slot not in used:
            free.setdefault(slot[0], []).append(slot)
    for index, item in enumerate(inputs):
        if index not in matched and free.get(item.key):
            slot = free[item.key].pop()
            matched[index] = latest[slot]
            used.add(slot)
    unused = [slot for slot in latest if slot not in used]
    written_at = {index for _, index in unused}
    changed = [item.line for index, item in enumerate(inputs)
               if index not in matched and index in written_at]  # fmt: skip
    flags = [flag for flag, given in (("--rerun-failed", rerun_failed),
                                      ("--rerun-retryable", rerun_retryable)) if given]  # fmt: skip
    rerun = []
    for index in sorted(matched):
        step = matched[index].step
        if (rerun_failed and step.failure is not None) or (rerun_retryable and step.retryable):
            rerun.append(inputs[index].line)
            del matched[index]
    return Plan(
        done={index: result.step for index, result in matched.items()},
        pending=[index for index in range(len(inputs)) if index not in matched],
        changed=changed,
        stale=len(unused),
        rerun=rerun,
        rerun_flags=" ".join(flags),
    )


def check_writable(path: Path) -> None:
    """Create ``--output`` (and its folder) if needed, before anything runs.

    Raises:
        UsageError: It cannot be created or written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--output: cannot write {str(path)!r}: {exc.strerror}") from None
