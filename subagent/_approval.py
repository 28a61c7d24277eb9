"""Approval of tool calls, as a hook of the loop: a run pauses before calls that need it.

Which calls need approval is the agent's rule (:class:`ApprovalRule`: tools marked
``requires_approval``, and the agent's ``approval`` policy), applied to the arguments as
the tool would run them (validated and coerced: a call whose arguments do not fit never
runs, so it needs no approval). Before a turn's calls run, :class:`ApprovalHook` pauses the
run when any does; when the run resumes with decisions, the same turn goes on through the
same tool stage, the decisions applied to its batch (an edited call runs with the
approver's arguments, and the model is told so; a denied one does not run and the model
reads why). :func:`checked_decisions` checks the decisions ``resume`` is given against the
calls the rule says need one, never against what a saved state claims.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from subagent._errors import ConfigurationError, InvalidStateError, blame_user_code
from subagent._hooks import Pause, RunHook, ToolBatch
from subagent._templates import TemplateSet
from subagent._text import fence, scrub_surrogates
from subagent.llm import ToolCall
from subagent.parsers import format_validation_errors
from subagent.records import Decision, PendingCalls, ToolResult
from subagent.tools import Tool, ToolArgumentsError

__all__ = [
    "ApprovalHook",
    "ApprovalRule",
    "approval_rule",
    "checked_decision",
    "checked_decisions",
]

Policy = Callable[[str, Mapping[str, Any]], bool]


class ApprovalRule:
    """Whether a call needs approval, judged on the arguments the tool would run with."""

    __slots__ = ("_needing", "_policy", "_prune", "_tools")

    def __init__(self, tools: Mapping[str, Tool], policy: Policy | None, prune: bool):
        self._tools = tools
        self._policy = policy
        self._prune = prune
        self._needing = frozenset(name for name, tool in tools.items() if tool.requires_approval)

    def __call__(self, call: ToolCall) -> bool:
        """Whether ``call`` needs approval before it runs.

        Raises:
            Exception: Whatever the policy raises, marked as a bug in user code.
        """
        if call.name not in self._needing and self._policy is None:
            return False
        arguments = self.coerced(call)
        if arguments is None:  # an unknown tool, or arguments that do not fit: never runs
            return False
        if call.name in self._needing:
            return True
        assert self._policy is not None
        try:
            return bool(self._policy(call.name, arguments))
        except Exception as exc:
            raise blame_user_code(exc, "the approval policy") from None

    def coerced(self, call: ToolCall) -> dict[str, Any] | None:
        """The arguments ``call`` would run with, or ``None`` when it would not run."""
        tool = self._tools.get(call.name)
        if tool is None:
            return None
        arguments = call.arguments
        prune = self._prune if tool.prune_unknown_args is None else tool.prune_unknown_args
        if prune and isinstance(arguments, Mapping):
            arguments, _ = tool.prune(arguments)
        try:
            return tool.validate_arguments(arguments)
        except ToolArgumentsError:
            return None

    def check_edit(self, call: ToolCall, arguments: Mapping[str, Any]) -> None:
        """Refuse an approver's edit that does not fit the tool, strictly (no pruning).

        Raises:
            ConfigurationError: A name the tool does not take (the valid ones listed), or
                a value that does not fit.
        """
        tool = self._tools[call.name]
        _, unknown = tool.prune(arguments)
        if unknown:
            valid = sorted(tool.definition.parameters.get("properties", {}))
            raise ConfigurationError(
                "decisions", f"the edit of call {call.id!r} ({call.name}) names what the tool "
                f"does not take: {sorted(unknown)}; it takes {valid}"
            )  # fmt: skip
        try:
            tool.validate_arguments(arguments)
        except ToolArgumentsError as exc:
            raise ConfigurationError(
                "decisions", f"the edit of call {call.id!r} ({call.name}) does not fit the "
                f"tool: {_described(exc)}"
            ) from None  # fmt: skip


def approval_rule(
    tools: Mapping[str, Tool], policy: Policy | None, prune: bool
) -> ApprovalRule | None:
    """The agent's approval rule: ``None`` when no call of the agent ever needs approval."""
    if policy is None and not any(tool.requires_approval for tool in tools.values()):
        return None
    return ApprovalRule(tools, policy, prune)


class ApprovalHook(RunHook):
    """Pauses a run before calls that need approval; applies the decisions on resume."""

    __slots__ = ("_rule", "_templates")

    def __init__(self, rule: Callable[[ToolCall], bool], templates: TemplateSet):
        self._rule = rule
        self._templates = templates

    def before_tools(self, *, batch: ToolBatch) -> Pause | str | None:  # type: ignore[override]
        if not batch.resumed:
            waiting = [call.id for call in batch.calls if self._rule(call)]
            return Pause(waiting) if waiting else None
        for position, call in enumerate(batch.calls):
            decision = batch.decisions.get(call.id)
            if decision is None or decision.action == "approve":
                continue
            if decision.action == "edit":
                arguments = dict(decision.arguments or {})
                batch.running[position] = call.model_copy(update={"arguments": arguments})
                batch.notes[position] = self._templates.render(
                    "tool_edited", name=call.name,
                    arguments=json.dumps(arguments, ensure_ascii=False, default=str),
                )  # fmt: skip
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
    pending: PendingCalls | None,
    rule: ApprovalRule | None,
    decisions: Mapping[str, Decision | bool] | None,
) -> dict[str, Decision]:
    """The decisions for the calls of a paused state that need one, each one checked.

    Which calls need a decision is the agent's ``rule`` applied to the state's calls, never
    the state's own list. A bound decision must answer exactly the call it was made for.

    Raises:
        ConfigurationError: A decision is missing, names a call that needs none, is not a
            decision, or is an edit that does not fit the tool; or decisions were given
            for a state that is not paused.
        InvalidStateError: A bound decision's call is not in the state as it was decided.
    """
    given = dict(decisions or {})
    if pending is None:
        if given:
            raise ConfigurationError("decisions", "the state is not paused: it takes none")
        return {}
    waiting = {call.id: call for call in pending.calls if rule is not None and rule(call)}
    unknown = sorted(set(given) - set(waiting))
    if unknown:
        raise ConfigurationError(
            "decisions", f"no call waiting for approval has the id(s) {unknown}; the waiting "
            f"calls: {sorted(waiting)}"
        )  # fmt: skip
    return {
        call_id: checked_decision(call, given.get(call_id), rule)
        for call_id, call in waiting.items()
    }


def checked_decision(
    call: ToolCall, decision: Decision | bool | None, rule: ApprovalRule | None
) -> Decision:
    """The decision about ``call``, checked: given, bound to this call, an edit that fits.

    Raises:
        ConfigurationError: It is missing, not a decision, or an edit the tool refuses.
        InvalidStateError: A bound decision made for another call.
    """
    if decision is None:
        raise ConfigurationError(
            "decisions", f"call {call.id!r} ({call.name}) needs a decision: "
            f"Decision.approve(), Decision.deny(reason) or Decision.edit(arguments)"
        )  # fmt: skip
    if decision is True:
        return Decision.approve()
    if decision is False:
        return Decision.deny()
    if not isinstance(decision, Decision):
        raise ConfigurationError(
            "decisions", f"the decision for call {call.id!r} must be a Decision or a bool, "
            f"got {decision!r}"
        )  # fmt: skip
    if not decision.decides(call):
        raise InvalidStateError(
            f"pending.calls[{call.id}]", f"call {call.id!r} ({call.name}) is not the call "
            f"the decision was made for: its name, id or arguments changed since"
        )  # fmt: skip
    if decision.action == "edit" and rule is not None:
        rule.check_edit(call, decision.arguments or {})
    return decision


def _described(exc: ToolArgumentsError) -> str:
    """``env: Input should be a valid string (got 5)``, for each argument that does not fit."""
    if exc.items:
        items = exc.items
    elif exc.validation is not None:
        items = format_validation_errors(exc.validation)
    else:
        return str(exc)
    return "; ".join(
        f"{item['location']}: {item['message']}" + (f" (got {item['received']})"
                                                   if item["received"] else "")
        for item in items
    )  # fmt: skip
