"""Approval of tool calls, as a hook of the loop: a run pauses before calls that need it.

Which calls need approval is the agent's rule (tools marked ``requires_approval``, and the
agent's ``approval`` policy). Before a turn's calls run, :class:`ApprovalHook` pauses the
run when any does; when the run resumes with decisions, the same turn goes on through the
same tool stage, the decisions applied to its batch (an edited call runs with the
approver's arguments, a denied one does not run and the model reads why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from subagent._errors import ConfigurationError
from subagent._hooks import Pause, RunHook, ToolBatch
from subagent._records import ToolResult
from subagent._state import Decision, RunState
from subagent._templates import TemplateSet
from subagent._text import fence, scrub_surrogates
from subagent.llm import ToolCall
from subagent.tools import Tool

__all__ = ["ApprovalHook", "approval_rule", "checked_decisions"]


def approval_rule(
    tools: Mapping[str, Tool], policy: Callable[[str, Mapping[str, Any]], bool] | None
) -> Callable[[ToolCall], bool] | None:
    """Whether a call needs approval: ``None`` when no call of the agent ever does."""
    needing = frozenset(name for name, tool in tools.items() if tool.requires_approval)
    if not needing and policy is None:
        return None

    def needs_approval(call: ToolCall) -> bool:
        if call.name in needing:
            return True
        if policy is None or call.name not in tools:  # an unknown tool never runs
            return False
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        return bool(policy(call.name, arguments))

    return needs_approval


class ApprovalHook(RunHook):
    """Pauses a run before calls that need approval; applies the decisions on resume."""

    __slots__ = ("_needs", "_templates")

    def __init__(self, needs: Callable[[ToolCall], bool], templates: TemplateSet):
        self._needs = needs
        self._templates = templates

    def before_tools(self, batch: ToolBatch) -> Pause | str | None:
        if not batch.resumed:
            waiting = [call.id for call in batch.calls if self._needs(call)]
            return Pause(waiting) if waiting else None
        for position, call in enumerate(batch.calls):
            decision = batch.decisions.get(call.id)
            if decision is None or decision.action == "approve":
                continue
            if decision.action == "edit":
                arguments = dict(decision.arguments or {})
                batch.running[position] = call.model_copy(update={"arguments": arguments})
            else:
                batch.preset[position] = self._denied(call, decision)
        return None

    def _denied(self, call: ToolCall, decision: Decision) -> ToolResult:
        reason = scrub_surrogates(decision.reason)
        content = self._templates.render("tool_denied", name=call.name, reason=reason,
                                         fence=fence(reason))  # fmt: skip
        return ToolResult(call_id=call.id, name=call.name, ok=False, content=content,
                          error_type="denied")  # fmt: skip


def checked_decisions(
    state: RunState, decisions: Mapping[str, Decision | bool] | None
) -> dict[str, Decision]:
    """The decisions for a paused state's waiting calls, each one checked.

    Raises:
        ConfigurationError: One is missing, names no waiting call, is not a decision, or
            decisions were given for a state that is not paused.
    """
    given = dict(decisions or {})
    pending = state.pending
    if pending is None:
        if given:
            raise ConfigurationError(
                "decisions", f"the state is not paused (phase {state.phase!r}): it takes none"
            )
        return {}
    waiting = {call.id: call for call in pending.waiting}
    unknown = sorted(set(given) - set(waiting))
    if unknown:
        raise ConfigurationError(
            "decisions", f"no call waiting for approval has the id(s) {unknown}; the waiting "
            f"calls: {sorted(waiting)}"
        )  # fmt: skip
    checked: dict[str, Decision] = {}
    for call_id, call in waiting.items():
        if call_id not in given:
            raise ConfigurationError(
                "decisions", f"call {call_id!r} ({call.name}) needs a decision: "
                f"Decision.approve(), Decision.deny(reason) or Decision.edit(arguments)"
            )  # fmt: skip
        decision = given[call_id]
        if decision is True:
            decision = Decision.approve()
        elif decision is False:
            decision = Decision.deny()
        if not isinstance(decision, Decision):
            raise ConfigurationError(
                "decisions", f"the decision for call {call_id!r} must be a Decision or a "
                f"bool, got {decision!r}"
            )  # fmt: skip
        checked[call_id] = decision
    return checked
