"""What the user hands the command line as JSON: strict, UTF-8 and bounded.

``--context`` (a JSON object, ``@file`` or ``@-``), and the helpers the batch files, state
files and decisions are read with: strict JSON (no NaN or Infinity), UTF-8 with a leading
byte-order mark allowed, at most :data:`MAX_INPUT_BYTES`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final, NoReturn

from subagent.cli._status import UsageError

__all__ = [
    "MAX_INPUT_BYTES",
    "decoded",
    "json_object",
    "mib",
    "parse_context",
    "read_limited",
    "strict_json",
]

MAX_INPUT_BYTES: Final = 16 * 1024 * 1024
"""The largest ``--context``, state or decisions file and the longest ``--input`` line, in
bytes (16 MiB)."""


def strict_json(text: str | bytes) -> Any:
    """``json.loads`` refusing NaN and Infinity, and a key given twice in one object.

    Strict JSON (and the output) has no NaN or Infinity. JSON leaves a repeated key to
    the reader, and ``json.loads`` keeps the last: a decisions file that denies a call and
    then approves it under the same id would run the call. What the command line reads is
    instructions, so a repeated key is refused instead.

    Raises:
        json.JSONDecodeError: Not JSON.
        ValueError: NaN or Infinity, or a key given twice (the message names it).
    """

    def refuse(constant: str) -> NoReturn:
        raise ValueError(f"{constant} is not JSON (write it as a string or null)")

    return json.loads(text, parse_constant=refuse, object_pairs_hook=_once_each)


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members, each key once; else ``ValueError`` naming the repeated key."""
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key[:80]!r} is given twice in one object")
            seen.add(key)
    return members


def json_object(text: str, source: str) -> dict[str, Any]:
    """``text`` as a strict JSON object; else bad usage naming ``source``."""
    try:
        value = strict_json(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None
    except ValueError as exc:  # NaN, Infinity
        raise UsageError(f"{source}: {exc}") from None
    except RecursionError:
        raise UsageError(f"{source}: nested too deeply") from None
    if not isinstance(value, dict):
        raise UsageError(f"{source}: must be a JSON object, got {type(value).__name__}")
    return value


def decoded(raw: bytes, source: str, *, first: bool = True) -> str:
    """UTF-8 (a leading byte-order mark allowed at the start of a file), else bad usage."""
    try:
        return raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def mib(size: int) -> str:
    """A size in whole MiB, for messages."""
    return f"{size // (1024 * 1024)} MiB"


def read_limited(name: str, source: str) -> str:
    """A file's text (``-``: standard input), UTF-8, at most :data:`MAX_INPUT_BYTES`.

    Raises:
        UsageError: The file cannot be read, is too large or is not UTF-8.
    """
    try:
        if name == "-":
            raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with Path(name).open("rb") as file:
                raw = file.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{source}: cannot read {name!r}: {exc.strerror}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise UsageError(f"{source}: larger than the limit of {mib(MAX_INPUT_BYTES)}")
    return decoded(raw, source)


def parse_context(value: str) -> dict[str, Any]:
    """``--context``: a JSON object, ``@file`` holding one, or ``@-`` (standard input).

    A file (or standard input) is UTF-8, a byte-order mark allowed, of at most
    :data:`MAX_INPUT_BYTES`.

    Raises:
        UsageError: The file cannot be read, is too large or not UTF-8, or the text is not
            a strict JSON object (no NaN or Infinity).
    """
    if not value.startswith("@"):
        return json_object(value.removeprefix("\ufeff"), "--context")
    source = f"--context {value}"
    return json_object(read_limited(value[1:], source), source)
