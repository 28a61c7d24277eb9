"""What an approver decides about a paused run's tool calls, and the calls waiting.

A :class:`Decision` is plain data (it round-trips through JSON); one made for a call the
approver saw is bound to it by :func:`call_digest`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from subagent.records._messages import LLMResponse, ToolCall

__all__ = ["Decision", "PendingCalls", "call_digest", "digest"]


class Decision(BaseModel):
    """What was decided about one tool call that needed approval.

    Build one with :meth:`approve`, :meth:`deny` or :meth:`edit`. A decision is plain data
    (it round-trips through JSON), so it can come from another process.

    A decision made for a call the approver saw (``Decision.approve(call)``, or
    ``pending.approve(call_id)``) is *bound* to it: it holds the digest of the call's name,
    id and arguments, and ``resume`` refuses it if the state's call is no longer that call
    (a state changed after the decision was made). An unbound decision
    (``Decision.approve()``, ``True``) answers whatever call has that id in the state
    resumed: use it only for states that never left your process, or that you sign.

    Attributes:
        action: ``approve`` (the call runs as the model asked), ``deny`` (it does not run;
            the model is told ``reason`` as the tool's result) or ``edit`` (it runs with
            ``arguments`` instead of the model's).
        reason: Why a call was denied, as the model is told it.
        arguments: The corrected arguments of an edited call (checked strictly: every
            name must be one the tool takes).
        call_digest: The digest of the call decided about (:func:`call_digest`), for a
            bound decision.
    """

    model_config = ConfigDict(frozen=True)

    action: Literal["approve", "deny", "edit"]
    reason: str = ""
    arguments: dict[str, Any] | None = None
    call_digest: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.action == "edit" and self.arguments is None:
            raise ValueError("an 'edit' decision needs the corrected arguments")
        if self.action != "edit" and self.arguments is not None:
            raise ValueError(f"a {self.action!r} decision takes no arguments (use 'edit')")
        return self

    @classmethod
    def approve(cls, call: ToolCall | None = None) -> Decision:
        """Run the call as the model asked (bound to ``call`` when given)."""
        if call is None:
            return _APPROVED
        return cls(action="approve", call_digest=call_digest(call))

    @classmethod
    def deny(cls, reason: str = "", call: ToolCall | None = None) -> Decision:
        """Do not run the call; the model is told ``reason`` as the tool's result."""
        bound = None if call is None else call_digest(call)
        return cls(action="deny", reason=reason, call_digest=bound)

    @classmethod
    def edit(cls, arguments: dict[str, Any], call: ToolCall | None = None) -> Decision:
        """Run the call with ``arguments`` instead of the model's.

        The arguments are checked strictly when the run resumes: a name the tool does not
        take, or a value that does not fit, is refused then, naming the call.
        """
        bound = None if call is None else call_digest(call)
        return cls(action="edit", arguments=dict(arguments), call_digest=bound)

    def decides(self, call: ToolCall) -> bool:
        """Whether this decision may answer ``call``: unbound, or bound to exactly it."""
        return self.call_digest is None or self.call_digest == call_digest(call)


_APPROVED = Decision(action="approve")


class PendingCalls(BaseModel):
    """The tool calls of a paused turn, waiting for decisions.

    Attributes:
        response: The reply that asked for them (it is not sent to the model again).
        calls: Every call of the reply, in order, with its id.
        needs_approval: The ids of the calls that need a decision (the others run when the
            run resumes, as they would have).
    """

    model_config = ConfigDict(frozen=True)

    response: LLMResponse
    calls: list[ToolCall]
    needs_approval: list[str]

    @property
    def waiting(self) -> list[ToolCall]:
        """The calls that need a decision, in the reply's order."""
        ids = set(self.needs_approval)
        return [call for call in self.calls if call.id in ids]

    def approve(self, call_id: str) -> Decision:
        """A decision approving the waiting call ``call_id``, bound to it as it is now."""
        return Decision.approve(self._waiting(call_id))

    def deny(self, call_id: str, reason: str = "") -> Decision:
        """A decision denying the waiting call ``call_id`` (the model reads ``reason``)."""
        return Decision.deny(reason, self._waiting(call_id))

    def edit(self, call_id: str, arguments: dict[str, Any]) -> Decision:
        """A decision running the waiting call ``call_id`` with ``arguments`` instead."""
        return Decision.edit(arguments, self._waiting(call_id))

    def _waiting(self, call_id: str) -> ToolCall:
        for call in self.waiting:
            if call.id == call_id:
                return call
        waiting = [call.id for call in self.waiting]
        raise KeyError(f"no call waiting for approval has the id {call_id!r}; waiting: {waiting}")


def digest(value: object) -> str:
    """A short, stable digest of a JSON-able value (the parts of a fingerprint)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def call_digest(call: ToolCall) -> str:
    """The digest of one tool call as a decision approves it: its name, id and arguments.

    128 bits of SHA-256 (32 hex digits): whoever writes both calls of an unsigned state
    would need about 2**64 hashes to make another call that a decision bound to the first
    also answers.
    """
    text = json.dumps({"name": call.name, "id": call.id, "arguments": call.arguments},
                      sort_keys=True, ensure_ascii=False, default=repr)  # fmt: skip
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
