"""The records room: what a run is made of and what it makes, as data, in one place.

- ``_messages``: what a model call sends and gets back (:class:`Message`,
  :class:`ToolCall`, :class:`LLMRequest`, :class:`LLMResponse`, :class:`Usage`...), a
  failed call repeated inside a turn (:class:`TransportRetry`), and :func:`trusted`, the
  validation-free constructor the loop uses for records it built itself.
- ``_kinds``: the kinds these records name (:class:`ErrorKind`, :class:`FailReason`,
  :class:`TurnType`, :class:`TurnOutcome`).
- ``_decisions``: an approver's :class:`Decision` and the :class:`PendingCalls` it answers.
- ``_runs``: one recursive family (a :class:`Step` holds :class:`Turn` records, whose
  :class:`ToolResult` may hold a nested agent's Step; a paused Step holds its
  :class:`RunState`, which holds turns), and the exceptions that carry them
  (:class:`SubAgentError` and its ``turns``, :class:`RunFailedError`,
  :class:`RunPausedError`, :class:`InvalidStateError`).

What it may import: the base text helpers (``subagent._text``) and pydantic. Every other
room imports its records from here, so no import circle runs through them.
"""

from subagent.records._decisions import Decision, PendingCalls, call_digest, digest
from subagent.records._kinds import (
    ErrorKind,
    FailReason,
    TurnOutcome,
    TurnType,
)
from subagent.records._messages import (
    LLMRequest,
    LLMResponse,
    Message,
    OutputMode,
    OutputRequest,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    TransportRetry,
    TurnInfo,
    Usage,
)
from subagent.records._runs import (
    Failure,
    InvalidStateError,
    RunFailedError,
    RunPausedError,
    RunState,
    Step,
    SubAgentError,
    ToolResult,
    Turn,
    UsageSummary,
)

__all__ = [
    "Decision",
    "ErrorKind",
    "FailReason",
    "Failure",
    "InvalidStateError",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OutputMode",
    "OutputRequest",
    "PendingCalls",
    "RunFailedError",
    "RunPausedError",
    "RunState",
    "Step",
    "StopReason",
    "StreamDelta",
    "SubAgentError",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "TransportRetry",
    "Turn",
    "TurnInfo",
    "TurnOutcome",
    "TurnType",
    "Usage",
    "UsageSummary",
    "call_digest",
    "digest",
]
