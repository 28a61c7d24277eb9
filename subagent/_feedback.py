"""What the model is told after a turn: feedback about a failed attempt, and notices.

Worded once the next phase is known (may the model call tools again? is this its last work
turn? which correction is it?), from the agent's templates.
"""

from __future__ import annotations

from subagent._phases import Budget, Phase
from subagent._templates import TemplateSet

__all__ = ["after_tools", "feedback", "must_return_warning"]


def must_return_warning(templates: TemplateSet, budget: Budget, has_tools: bool) -> str:
    """The notice that the next turn must return (and how many corrections are left)."""
    retries = budget.retries_remaining
    return templates.render(
        "must_return_warning", has_tools=has_tools, has_retries=retries > 0,
        retry_count=retries,
    )  # fmt: skip


def feedback(
    templates: TemplateSet, error: str, next_phase: Phase, budget: Budget, has_tools: bool
) -> str:
    """The feedback about a failed attempt, for the turn in ``next_phase``."""
    if next_phase is Phase.RETRY:
        attempt = budget.retry_attempt
        return templates.render(
            "retry_feedback", error_message=error, current_retry=attempt,
            total_retries=budget.retry_total, repeated=attempt > 1,
        )  # fmt: skip
    final = next_phase is Phase.MUST_RETURN
    text = templates.render("error_feedback", error_message=error, final_turn=final,
                            turns_left=budget.work_remaining, has_tools=has_tools)  # fmt: skip
    if final:
        text = f"{text}\n\n{must_return_warning(templates, budget, has_tools)}"
    return text


def after_tools(
    templates: TemplateSet,
    final_invalid: tuple[str, str] | None,
    next_phase: Phase,
    budget: Budget,
    has_tools: bool,
) -> str | None:
    """The notice joined to a tool exchange: an invalid final value, the last work turn."""
    notes = []
    if final_invalid is not None:
        name, error = final_invalid
        notes.append(templates.render("tool_final_invalid", name=name, error=error,
                                      tools_left=next_phase is Phase.NORMAL))  # fmt: skip
    if next_phase is Phase.MUST_RETURN:
        notes.append(must_return_warning(templates, budget, has_tools))
    return "\n\n".join(notes) or None
