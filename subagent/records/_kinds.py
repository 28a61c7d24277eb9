"""The kinds a run's records name: error kinds, failure reasons, turn types and outcomes."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["RETRYABLE_KINDS", "ErrorKind", "FailReason", "TurnOutcome", "TurnType"]


class ErrorKind(StrEnum):
    """The classified kind of a failed LLM call.

    ``response_too_large``: the reply went past one of the adapter's size limits
    (``OpenAIChat(max_response_bytes=..., max_stream_bytes=...)``); it was not read further
    and is not retried by default (the same request would get the same reply).
    ``context_length``: the request does not fit the model's context window
    (``context_length_exceeded``, llama.cpp's ``exceed_context_size_error``); never retried,
    by the transport or by an orchestrator: the same request cannot fit the next time.
    """

    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    AUTHENTICATION = "authentication"
    PERMISSION = "permission"
    BAD_REQUEST = "bad_request"
    CONTENT_FILTER = "content_filter"
    INVALID_RESPONSE = "invalid_response"
    CONTEXT_LENGTH = "context_length"
    RESPONSE_TOO_LARGE = "response_too_large"
    OTHER = "other"


class FailReason(StrEnum):
    """Why a run failed.

    The state table decides all of them but ``error`` and ``worker_lost``: a batch
    (``run_many``) records a run that raised an exception (a parser that broke its
    contract, a script that ran out) as a failed Step with ``error`` and its turns, so its
    other runs go on; a single ``run()`` raises instead. ``worker_lost``: a run of a batch
    on Ray (``subagent.ray``) that never finished because the worker process running it
    died (killed, out of memory, its node lost) and was not resubmitted; running it again
    may succeed, so its Step is ``retryable``. ``usage_limit``: the run (or its batch,
    or an agent that ran it as a tool) reached one of its :class:`~subagent.UsageLimits`;
    not ``retryable``: the same run would spend the same. ``tool_server_lost``: a tool's
    source (an MCP server) went away during one of the run's tool calls; the turn keeps
    the calls' results as the model would have read them, and the run ends there.
    ``retryable``: a restarted server may serve the same run. ``input_refused``: a hook's
    ``before_run`` (an :class:`~subagent.InputGuardrail`) refused the task before the first
    model call; the message is its reason, the run has no turns; not ``retryable``: the same
    task would be refused again.
    """

    BUDGET_EXHAUSTED = "budget_exhausted"
    EXPLICIT_FAIL = "explicit_fail"
    LLM_ERROR = "llm_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    ERROR = "error"
    WORKER_LOST = "worker_lost"
    USAGE_LIMIT = "usage_limit"
    TOOL_SERVER_LOST = "tool_server_lost"
    INPUT_REFUSED = "input_refused"


class TurnType(StrEnum):
    """The phase a turn started in."""

    NORMAL = "normal"
    MUST_RETURN = "must_return"
    RETRY = "retry"


class TurnOutcome(StrEnum):
    """What a turn came to.

    ``continue``: a tool turn that went through; ``success``: a valid return; ``error``: an
    invalid return, a refused or failed tool call, or a cut-off reply (fed back as feedback);
    ``fail``: the run ended here (explicit fail or an LLM error); ``paused``: the reply
    called a tool that needs approval, and the run paused before running any call (the
    turn is completed, with its own outcome, when the run resumes).
    """

    CONTINUE = "continue"
    SUCCESS = "success"
    ERROR = "error"
    FAIL = "fail"
    PAUSED = "paused"


RETRYABLE_KINDS: frozenset[ErrorKind] = frozenset(
    {ErrorKind.RATE_LIMIT, ErrorKind.SERVER_ERROR, ErrorKind.CONNECTION,
     ErrorKind.INVALID_RESPONSE}
)  # fmt: skip
"""The LLM error kinds after which running a whole run again may succeed: the server was
busy, failing or unreachable, or sent a broken reply, past the transport retries."""
