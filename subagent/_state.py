"""A run's state between turns, as data: :class:`RunState`, and the :class:`Decision` records.

A run between two turns is its phase, its budgets, the conversation it sends, the turns it
took and, when it paused for approval, the calls waiting for a decision. :class:`RunState`
holds exactly that, versioned, and round-trips through JSON, so a run can be continued by
another process (``SubAgent.resume``). The loop (``_run.py``) takes the snapshot at a turn
boundary; this module only defines the records.

The records of turns (:class:`~subagent.Turn`) live in ``_records``, which builds on this
module: ``RunState`` names them by forward reference, resolved when ``_records`` is
imported (``subagent`` always imports it first).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from subagent._errors import InvalidStateError
from subagent.llm import LLMResponse, Message, ToolCall, Usage

if TYPE_CHECKING:
    from subagent._records import Turn

__all__ = [
    "STATE_VERSION",
    "Decision",
    "PendingCalls",
    "RunState",
    "call_digest",
    "digest",
]

STATE_VERSION: Literal[1] = 1
"""The version of :class:`RunState` this library writes and reads."""


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


class RunState(BaseModel):
    """Everything a run needs to go on from a turn boundary: what ``resume`` starts from.

    Taken after a turn (``run(on_state=...)``) or when a run pauses for approval (the
    paused :class:`~subagent.Step` carries it as ``state``). ``model_dump_json`` and
    ``model_validate_json`` round-trip it exactly. Not kept: objects a tool handed to the
    next tool turn (``ToolOutput.extras``), which are Python objects; their names are in
    ``dropped_extras``.

    Attributes:
        version: The record's version (``1``).
        id: A random id, new for each state taken: what single-use resumes record.
        agent: The agent's name.
        fingerprint: Digests of what must match in the resuming agent, by part: ``output``,
            ``tools`` (names, schemas, which need approval), ``prompts`` (the task prompt,
            template overrides, instructions), ``protocol``.
        phase: The phase the run is in (``normal``, ``must_return``, ``retry`` or
            ``paused``).
        work_remaining: Work turns left, the next one included.
        retries_remaining: Correction turns left.
        retry_total: The correction budget the run started with.
        max_turns: The run's work budget.
        return_retries: The run's correction budget.
        context_policy: How failed attempts are kept in the context.
        system_with_tools: The system message sent in turns that offer tools.
        system_without_tools: The system message sent in the others.
        history: The conversation kept so far (after the system message).
        latest_failure: The latest failed attempt and its feedback (``collapse``/``quote``).
        collapsed: Failed-attempt messages left out so far.
        turns: The turns taken; when paused, the last one is the paused turn.
        pending: The calls waiting for decisions, when paused.
        traceparent: The W3C ``traceparent`` of the run's first ``invoke_agent`` span, when
            it was traced: the resumed part's span is its child.
        elapsed_s: Seconds the run has run so far (pauses not counted).
        dropped_extras: Names of ``ToolOutput.extras`` that could not be kept.
    """

    version: Literal[1] = STATE_VERSION
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    agent: str
    fingerprint: dict[str, str]
    phase: Literal["normal", "must_return", "retry", "paused"]
    work_remaining: int
    retries_remaining: int
    retry_total: int
    max_turns: int
    return_retries: int
    context_policy: Literal["collapse", "accumulate", "quote"]
    system_with_tools: Message
    system_without_tools: Message
    history: list[Message]
    latest_failure: list[Message] = Field(default_factory=list)
    collapsed: int = 0
    turns: list[Turn] = Field(default_factory=list)
    pending: PendingCalls | None = None
    traceparent: str | None = None
    elapsed_s: float = 0.0
    dropped_extras: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def usage(self) -> Usage:
        """Tokens of the turns so far, nested agents included (computed when read)."""
        total = Usage()
        for turn in self.turns:
            total = total + turn.usage
            for result in turn.tool_results:
                if result.step is not None:
                    total = total + result.step.usage.total
        return total

    @property
    def paused(self) -> bool:
        """Whether the run is waiting for decisions about tool calls."""
        return self.phase == "paused"

    def signed(self, key: bytes) -> str:
        """The state as signed JSON: ``resume(text, key=key)`` checks it was not changed.

        For states kept outside the process (a file, a queue, a browser): an HMAC-SHA256
        of the state's JSON with ``key``, which the application keeps secret, as signed
        cookies are. The state itself is not encrypted: do not put secrets in a run's
        messages.
        """
        text = self.model_dump_json()
        return json.dumps({"subagent_state": STATE_VERSION, "state": text, "hmac": _mac(key, text)})

    @classmethod
    def from_signed(cls, signed: str | bytes, key: bytes) -> RunState:
        """The state of :meth:`signed` JSON, its signature checked with ``key``.

        Raises:
            InvalidStateError: The text is not a signed state, or its signature does not
                match ``key`` (the state was changed, or signed with another key).
        """
        try:
            envelope = json.loads(signed)
        except ValueError:
            envelope = None
        text = envelope.get("state") if isinstance(envelope, dict) else None
        mac = envelope.get("hmac") if isinstance(envelope, dict) else None
        if not isinstance(text, str) or not isinstance(mac, str):
            raise InvalidStateError("signature", "not a signed state (RunState.signed)")
        if not hmac.compare_digest(mac, _mac(key, text)):
            raise InvalidStateError(
                "signature", "does not match the key: the state was changed after it was "
                "signed, or signed with another key"
            )  # fmt: skip
        return cls.model_validate_json(text)


def _mac(key: bytes, text: str) -> str:
    if not isinstance(key, bytes | bytearray) or not key:
        raise TypeError("a state's signing key must be non-empty bytes")
    return hmac.new(bytes(key), text.encode("utf-8"), hashlib.sha256).hexdigest()


def digest(value: object) -> str:
    """A short, stable digest of a JSON-able value (the parts of a fingerprint)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def call_digest(call: ToolCall) -> str:
    """The digest of one tool call as a decision approves it: its name, id and arguments."""
    return digest({"name": call.name, "id": call.id, "arguments": call.arguments})
