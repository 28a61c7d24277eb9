"""What the command line prints of a run: the turn table, and the span tree of ``--trace``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from subagent.llm import ToolCall
from subagent.records import Step

__all__ = ["call_line", "span_tree", "turn_table"]


def turn_table(step: Step[Any]) -> str:
    """The per-turn table of a Step.

    One row per turn (type, outcome, tokens, seconds, error or tool calls), then the Step's
    summary, each call awaiting approval when it paused (:func:`call_line`), and its output
    when it is done.
    """
    rows = [
        f"{'turn':>4}  {'type':<11} {'outcome':<8} {'tok in':>6} {'tok out':>7} "
        f"{'s':>6}  error / tool calls"
    ]
    for turn in step.turns:
        note = _first_error(turn.error or "")
        if turn.tool_calls and not note:
            note = "called " + ", ".join(
                f"{call.name} (edited)" if _edited(turn, call) else call.name
                for call in turn.tool_calls
            )
        rows.append(
            f"{turn.index:>4}  {turn.type.value:<11} {turn.outcome.value:<8} "
            f"{turn.usage.input_tokens:>6} {turn.usage.output_tokens:>7} "
            f"{turn.duration_s:>6.2f}  {note}"
        )
    rows.append(step.summary())
    pending = step.pending
    if pending is not None:
        rows += [f"awaiting approval: {call_line(call)}" for call in pending.waiting]
    if step.ok:
        rows.append(f"output: {step.output!r}")
    return "\n".join(rows)


def _first_error(error: str) -> str:
    """What a row shows of a turn's error: its first field error, not the heading above it.

    Feedback lists its findings as ``- field: problem`` lines under a heading (``Your
    answer does not match the required output:``): the first of them, and how many more.
    """
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    items = [line[2:] for line in lines if line.startswith("- ")]
    if not items:
        return lines[0][:70]
    more = f" (+{len(items) - 1} more)" if len(items) > 1 else ""
    return f"{items[0][: 70 - len(more)]}{more}"


def _edited(turn: Any, call: ToolCall) -> bool:
    decision = turn.decisions.get(call.id)
    return decision is not None and decision.action == "edit"


def call_line(call: ToolCall) -> str:
    """A call as an approver decides on it: ``deploy {"env": "prod"} (call d1)``.

    The arguments are whole, as JSON escaped to ASCII (as are a name or id that is not
    plain printable ASCII): control characters, look-alike letters and bidirectional marks
    show as escapes, so what the approver reads is what would run.
    """
    arguments = json.dumps(call.arguments, ensure_ascii=True)
    return f"{_plain(call.name)} {arguments} (call {_plain(call.id)})"


def _plain(text: str) -> str:
    plain = text.isascii() and text.isprintable() and text and text.strip() == text
    return text if plain else json.dumps(text)


def span_tree(spans: Sequence[Any]) -> str:
    """Finished spans as an indented tree: name, status, duration, the telling attributes.

    The run's budgets (``budget 3+1``: work turns + correction turns) and what each turn
    left of them (``left 2+1``) are among those.
    """
    ids = {span.context.span_id for span in spans}
    children: dict[int | None, list[Any]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(span)
    for siblings in children.values():
        siblings.sort(key=lambda span: span.start_time or 0)
    lines: list[str] = []

    def walk(span: Any, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        lines.append(f"{prefix}{branch}{_span_label(span)}")
        below = children.get(span.context.span_id, [])
        inner = prefix + ("" if root else ("   " if last else "│  "))
        for index, child in enumerate(below):
            walk(child, inner, index == len(below) - 1, False)

    for span in children.get(None, []):
        walk(span, "", True, True)
    return "\n".join(lines)


def _span_label(span: Any) -> str:
    attributes = span.attributes or {}
    parts = [span.name]
    for key in (
        "subagent.outcome",
        "subagent.turn.outcome",
        "error.type",
        "gen_ai.response.finish_reasons",
    ):
        if key in attributes:
            value = attributes[key]
            parts.append(",".join(value) if isinstance(value, tuple) else str(value))
    if "subagent.max_turns" in attributes:  # the run: its budgets, work + corrections
        parts.append(
            f"budget {attributes['subagent.max_turns']}+"
            f"{attributes.get('subagent.return_retries', 0)}"
        )
    if "subagent.budget.work_remaining" in attributes:  # a turn: what it left
        parts.append(
            f"left {attributes['subagent.budget.work_remaining']}+"
            f"{attributes.get('subagent.budget.retries_remaining', 0)}"
        )
    if "gen_ai.usage.input_tokens" in attributes:
        parts.append(
            f"tokens {attributes['gen_ai.usage.input_tokens']}/"
            f"{attributes.get('gen_ai.usage.output_tokens', 0)}"
        )
    if span.start_time is not None and span.end_time is not None:
        parts.append(f"{(span.end_time - span.start_time) / 1e6:.1f} ms")
    return "  ".join(parts)
