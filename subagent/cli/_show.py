"""What the command line prints of a run: the turn table, and the span tree of ``--trace``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from subagent._records import Step

__all__ = ["span_tree", "turn_table"]


def turn_table(step: Step[Any]) -> str:
    """The per-turn table of a Step.

    One row per turn (type, outcome, tokens, seconds, error or tool calls), then the Step's
    summary and, when it is done, its output.
    """
    rows = [
        f"{'turn':>4}  {'type':<11} {'outcome':<8} {'tok in':>6} {'tok out':>7} "
        f"{'s':>6}  error / tool calls"
    ]
    for turn in step.turns:
        error = (turn.error or "").strip().splitlines()
        note = error[0][:70] if error else ""
        if turn.tool_calls and not note:
            note = "called " + ", ".join(call.name for call in turn.tool_calls)
        rows.append(
            f"{turn.index:>4}  {turn.type.value:<11} {turn.outcome.value:<8} "
            f"{turn.usage.input_tokens:>6} {turn.usage.output_tokens:>7} "
            f"{turn.duration_s:>6.2f}  {note}"
        )
    rows.append(step.summary())
    pending = step.pending
    if pending is not None:
        rows += [f"awaiting approval: {call.name} (call {call.id})" for call in pending.waiting]
    if step.ok:
        rows.append(f"output: {step.output!r}")
    return "\n".join(rows)


def span_tree(spans: Sequence[Any]) -> str:
    """Finished spans as an indented tree: name, status, duration, the telling attributes."""
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
    if "gen_ai.usage.input_tokens" in attributes:
        parts.append(
            f"tokens {attributes['gen_ai.usage.input_tokens']}/"
            f"{attributes.get('gen_ai.usage.output_tokens', 0)}"
        )
    if span.start_time is not None and span.end_time is not None:
        parts.append(f"{(span.end_time - span.start_time) / 1e6:.1f} ms")
    return "  ".join(parts)
