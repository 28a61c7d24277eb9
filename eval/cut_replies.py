"""Replies cut off at the token limit: what reading their first complete JSON value would buy.

    python eval/cut_replies.py [RECORDS.jsonl ...]

A reply cut at ``max_tokens`` is not parsed today (``correct_cut_replies=True``): it gets
a "give a shorter answer" correction. Some are cut *after* a complete answer (the calls,
then more text). This reads every BFCL record file given (default: the committed ones of
both local models), finds the replies the runtime called cut off, and reads the first
complete JSON value of each (the value the first ``[`` or ``{`` opens, when it closes):

- ``no value``: the reply holds no complete value (cut inside the first one, or prose);
- ``complete value``: graded by BFCL's checker as that case's answer, right or wrong.

A first value that is complete is not thereby the whole answer: a list of calls may be
followed by another list the model meant as more calls. The checker tells right from
wrong here; a runtime cannot, which is why a cut reply is not taken as an answer unless
the count below says it would help.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bfcl_data

RESULTS = Path(__file__).resolve().parent / "results"
CUT = "was cut off at the token limit"
DEFAULT_FILES = (
    "bfcl/subagent-r1@template.jsonl",
    "bfcl/subagent-r2@template.jsonl",
    "bfcl/subagent-prompted-r1@template.jsonl",
    "bfcl-holdout/subagent-r1@template.jsonl",
    "bfcl-holdout/subagent-prompted-r1@template.jsonl",
    "bfcl-qwen1.5b/subagent-prompted-r1@template.jsonl",
)


def first_value(text: str) -> Any | None:
    """The JSON array or object that starts at the first ``[`` or ``{`` of ``text``, or ``None``.

    Only the first opening bracket is tried: when the value it opens is cut (or is not
    JSON), a value found further in is one of its parts (an argument's list), never an
    answer.
    """
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, min(starts))
    except json.JSONDecodeError:
        return None
    return value


def cut_replies(records: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], int, str]]:
    """(record, reply index, text) of every reply the runtime called cut off in ``records``."""
    for record in records:
        for index, reply in enumerate(record["run"]["replies"]):
            if CUT in (reply.get("error") or ""):
                yield record, index, reply["text"]


def main(argv: list[str]) -> None:
    """Count, per record file, what the first complete value of each cut reply would be."""
    files = [Path(a) for a in argv] or [RESULTS / name for name in DEFAULT_FILES]
    cases: dict[str, Any] = {}
    for path in files:
        if not path.exists():
            continue
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        replies = sum(len(record["run"]["replies"]) for record in records)
        counts: Counter[str] = Counter()
        for record, index, text in cut_replies(records):
            category = record["tags"][0]
            if category not in cases:
                cases[category] = {c.name: c for c in bfcl_data.load_cases(category, None)}
            value = first_value(text)
            if value is None:
                counts["no value"] += 1
                continue
            case = cases[category][record["case"]]
            right, _ = bfcl_data.grade(case, bfcl_data.calls_of(value))
            counts["complete value, right" if right else "complete value, wrong"] += 1
            print(f"  {path.parent.name}/{path.name} {case.name} reply {index}: "
                  f"{'right' if right else 'wrong'}", flush=True)  # fmt: skip
        cut = sum(counts.values())
        print(f"{path.parent.name}/{path.name}: {cut} of {replies} replies cut off; "
              f"{dict(counts)}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
