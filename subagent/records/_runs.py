"""The records a run makes: one recursive family, and the exceptions that carry them.

A :class:`Step` holds its :class:`Turn` list, the :class:`ToolResult` of each call (a nested
agent's Step inside), and, when paused, the :class:`RunState` the run is between two turns
(which holds turns again).

All are pydantic models (the exceptions aside) and round-trip through JSON, so a run can be
stored, shipped to another process, and read back typed
(``Step[Answer].model_validate_json(text)``).
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import types
import typing
import uuid
from collections.abc import Iterable
from functools import cached_property
from typing import Annotated, Any, Generic, Literal, Self, TypeVar, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, computed_field
from pydantic_core import PydanticSerializationError

from subagent._text import scrub_surrogates
from subagent.records._decisions import Decision, PendingCalls
from subagent.records._kinds import RETRYABLE_KINDS, ErrorKind, FailReason, TurnOutcome, TurnType
from subagent.records._messages import (
    Message,
    StopReason,
    ToolCall,
    TransportRetry,
    Usage,
    trusted,
)

__all__ = [
    "STATE_VERSION",
    "Failure",
    "InvalidStateError",
    "RunFailedError",
    "RunPausedError",
    "RunState",
    "Step",
    "SubAgentError",
    "ToolResult",
    "Turn",
    "UsageSummary",
    "build_step",
    "count_stop_reasons",
    "step_model",
]

OutputT = TypeVar("OutputT")

# Text that may quote a model, a server or a tool: a lone surrogate becomes U+FFFD, so every
# record can be dumped as JSON (UTF-8 has no encoding for a lone surrogate).
_Text = Annotated[str, AfterValidator(scrub_surrogates)]

STATE_VERSION: Literal[1] = 1
"""The version of :class:`RunState` this library writes and reads."""


# --- the exceptions that carry a run's records ------------------------------------------


class SubAgentError(Exception):
    """Base class of every exception raised by subagent.

    Attributes:
        turns: The turns a run made until this error ended it, the turn in progress
            included (empty when it was raised outside a run).
    """

    turns: tuple[Turn, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries with a batch's results (multiprocessing, Ray).
        # Their constructors take other arguments than the message ``args`` holds, so
        # they are rebuilt without calling ``__init__``: the message, then the attributes.
        return (_rebuild_error, (type(self), self.args), self.__dict__)


def _rebuild_error(cls: type[SubAgentError], args: tuple[Any, ...]) -> SubAgentError:
    error = cls.__new__(cls)
    error.args = args
    return error


class RunFailedError(SubAgentError):
    """Raised by :meth:`Step.raise_for_failure` for a failed run.

    Attributes:
        reason: The :class:`~subagent.FailReason`.
    """

    def __init__(self, step: Step[Any]):
        failure = step.failure
        assert failure is not None
        super().__init__(f"run failed ({failure.reason.value}): {failure.message}")
        self.step = step
        self.reason = failure.reason


class RunPausedError(SubAgentError):
    """Raised by :meth:`Step.raise_for_failure` for a run that paused for approval.

    Attributes:
        step: The paused Step; ``step.state`` is what to resume from.
    """

    def __init__(self, step: Step[Any]):
        state = step.state
        waiting = len(state.pending.needs_approval) if state and state.pending else 0
        super().__init__(
            f"run paused: {waiting} tool call(s) await approval; resume it with "
            f"agent.resume(step.state, decisions)"
        )
        self.step = step


class InvalidStateError(SubAgentError, ValueError):
    """A :class:`~subagent.RunState` that ``resume`` refuses: it is untrusted input.

    Raised before anything runs, naming the field and why: a state whose fields do not fit
    together (its phase, its pending calls and its turns; budgets beyond what it ran with),
    a signed state whose signature does not match the key, a state resumed a second time
    where single use was asked for, or a decision bound to a call the state no longer
    holds as it was decided.

    Attributes:
        field: The state's field at fault (``work_remaining``, ``pending.calls``,
            ``signature``, ``id``...).
        reason: Why, in words.
    """

    def __init__(self, field: str, reason: str):
        super().__init__(f"cannot resume this state: {field}: {reason}")
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.reason))


# --- the records ------------------------------------------------------------------------


class ToolResult(BaseModel):
    """One executed (or refused) tool call.

    Attributes:
        call_id: The call's id.
        name: The tool's name.
        ok: Whether the tool ran and returned.
        content: What the model was shown (the result, or the error).
        error_type: Why the call failed: ``unknown_tool``, ``invalid_arguments``,
            ``timeout``, ``unserializable_result``, ``tools_unavailable``,
            ``too_many_calls`` (past ``max_tool_calls_per_turn``, not run), ``cancelled``,
            ``tool_server_lost`` (the tool's source went away: the run ends there), or the
            exception's type name.
        duration_s: Wall-clock seconds spent in the tool.
        pruned_arguments: Arguments the model sent that the tool does not take, dropped
            before the call.
        cut_chars: Characters of the result the model was not shown (it was too long).
        full_output: The whole result as text, when it was cut for the model but is short
            enough to keep (see ``TOOL_RECORD_LIMIT``).
        completed: ``False`` when the run was cut short (a timeout, a stop) before the call
            returned.
        step: The :class:`Step` of an agent this call ran (``as_tool()``), successful or
            not; its usage counts as the caller's ``nested`` usage.
    """

    model_config = ConfigDict(frozen=True)

    call_id: _Text
    name: _Text
    ok: bool
    content: _Text
    error_type: _Text | None = None
    duration_s: float = 0.0
    pruned_arguments: list[_Text] = Field(default_factory=list)
    cut_chars: int = 0
    full_output: _Text | None = None
    completed: bool = True
    step: Step[Any] | None = None


class Turn(BaseModel):
    """One LLM call and what the runtime did with the reply.

    Attributes:
        index: 1-based position in the run.
        type: The phase the turn started in.
        outcome: What the turn came to.
        phase_after: The phase the run moved to.
        reply: The reply text (without its reasoning).
        reasoning: The model's reasoning (``reasoning_content``, ``<think>`` blocks): kept
            here, never parsed as the answer, never fed back in a correction.
        tool_calls: Tool calls the model requested.
        tool_results: What each call produced (refused calls included).
        error: What was wrong with this turn, when anything was.
        error_summary: The error without any text from the model or a tool (field names,
            error types, tool names): what traces show when message content is not
            captured.
        error_type: A short class of the error (``invalid_output``, ``tool_error``,
            ``tools_unavailable``, ``truncated``, ``validation_failed``, ``explicit_fail``,
            the LLM error kind, ``cancelled``, or, on the last turn of an error raised out
            of a run, the exception's name such as ``ParserContractError``).
        feedback: The message sent to the model about this turn, if any.
        stop_reason: The reply's normalised stop reason.
        raw_stop_reason: The provider's own stop reason.
        usage: Tokens of this turn's call.
        messages_sent: Messages in the request.
        messages_collapsed: Earlier failed-attempt messages left out of the request.
        work_remaining: Work turns left after this turn.
        retries_remaining: Correction turns left after this turn.
        transport_retries: Failed calls repeated within this turn.
        duration_s: Wall-clock seconds of the whole turn.
        decisions: What was decided about the calls that needed approval, by call id
            (``tool_calls`` keep the model's own arguments; an edited call ran with the
            decision's).
        model: The model that produced the reply, by its configured ``model_name`` (not the
            server's name for it): the model the turn called, or the one of a
            :class:`~subagent.FallbackLLM` that answered; with no reply, the model called.
            ``None`` for a model that names none.
        corrected: Whether the turn was sent with the run's :class:`~subagent.Correction`
            (its output mode, settings and model).
        output_mode: How the answer was asked for, when not in the prompt alone
            (``json_schema``: the provider's structured output; ``tool``: a forced answer
            tool).
        repeated: A correction turn whose reply repeated a reply the run refused before
            (any of them, not only the one before), word for word (whitespace aside).
    """

    index: int
    type: TurnType
    outcome: TurnOutcome
    phase_after: str
    reply: _Text = ""
    reasoning: _Text = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)
    error: _Text | None = None
    error_type: _Text | None = None
    error_summary: _Text | None = None
    feedback: _Text | None = None
    stop_reason: StopReason | None = None
    raw_stop_reason: _Text | None = None
    usage: Usage = Field(default_factory=Usage)
    messages_sent: int = 0
    messages_collapsed: int = 0
    work_remaining: int = 0
    retries_remaining: int = 0
    transport_retries: list[TransportRetry] = Field(default_factory=list)
    duration_s: float = 0.0
    decisions: dict[str, Decision] = Field(default_factory=dict)
    model: _Text | None = None
    corrected: bool = Field(default=False, exclude_if=lambda value: value is False)
    output_mode: _Text | None = Field(default=None, exclude_if=lambda value: value is None)
    repeated: bool = Field(default=False, exclude_if=lambda value: value is False)


_RETRYABLE_REASONS = frozenset({FailReason.WORKER_LOST, FailReason.TOOL_SERVER_LOST})
"""The failure reasons after which running the same run again may succeed whatever the
error: a worker or a tool server that went away may be back."""


class Failure(BaseModel):
    """Why a run failed.

    Attributes:
        reason: The machine-readable reason.
        message: A human-readable explanation (the model's own reason for explicit fails,
            the last error for exhausted budgets, the classified error for LLM errors).
        error_kind: The classified LLM error for ``llm_error`` and call timeouts.
    """

    model_config = ConfigDict(frozen=True)

    reason: FailReason
    message: _Text
    error_kind: ErrorKind | None = None

    @property
    def retryable(self) -> bool:
        """Whether running the same run again could help (see :attr:`Step.retryable`)."""
        if self.reason in _RETRYABLE_REASONS:
            return True
        return self.reason is FailReason.LLM_ERROR and self.error_kind in RETRYABLE_KINDS


class UsageSummary(BaseModel):
    """Token usage of a run, split by what it bought.

    Attributes:
        total: Everything: the run's own calls and the agents it ran as tools.
        work: The run's work turns (``normal`` and ``must_return``).
        correction: The run's correction turns (``retry``).
        nested: The agents this run called as tools (their totals, their own nesting
            included).
        by_type: The run's own turns, by turn type.
        by_model: The run's own turns, by the model that answered them (``Turn.model``;
            ``unknown`` for a model that names none): a run whose corrections escalate, or
            whose ``FallbackLLM`` moved on, splits here.
        transport_retries: Failed calls repeated inside turns (they spend no turn).
        transport_retry_usage: Tokens of those failed calls, where the server reported any.
    """

    total: Usage = Field(default_factory=Usage)
    work: Usage = Field(default_factory=Usage)
    correction: Usage = Field(default_factory=Usage)
    nested: Usage = Field(default_factory=Usage)
    by_type: dict[TurnType, Usage] = Field(default_factory=dict)
    by_model: dict[str, Usage] = Field(default_factory=dict)
    transport_retries: int = 0
    transport_retry_usage: Usage = Field(default_factory=Usage)

    @property
    def own(self) -> Usage:
        """The run's own calls: work and correction turns."""
        return self.work + self.correction

    @classmethod
    def of(cls, turns: Iterable[Turn]) -> UsageSummary:
        """Sum the usage of ``turns`` and of the agents they ran."""
        # Counts as [input, output, unreported calls, cache read, cache written].
        sums: dict[TurnType, list[int]] = {}
        models: dict[str, list[int]] = {}
        nested = [0, 0, 0, 0, 0]
        retries = 0
        retried = [0, 0]
        for turn in turns:
            _count(sums.setdefault(turn.type, [0, 0, 0, 0, 0]), turn.usage)
            _count(models.setdefault(turn.model or "unknown", [0, 0, 0, 0, 0]), turn.usage)
            for result in turn.tool_results:
                if result.step is not None:
                    _count(nested, result.step.usage.total)
            for retry in turn.transport_retries:
                retries += 1
                retried[0] += retry.usage.input_tokens
                retried[1] += retry.usage.output_tokens
        by_type = {kind: _usage(counts) for kind, counts in sums.items()}
        correction = by_type.get(TurnType.RETRY, _NONE)
        worked = [counts for kind, counts in sums.items() if kind is not TurnType.RETRY]
        work = _usage([sum(counts[n] for counts in worked) for n in range(5)])
        nested_usage = _usage(nested)
        return cls(
            total=work + correction + nested_usage,
            work=work,
            correction=correction,
            nested=nested_usage,
            by_type=by_type,
            by_model={model: _usage(counts) for model, counts in models.items()},
            transport_retries=retries,
            transport_retry_usage=Usage(input_tokens=retried[0], output_tokens=retried[1]),
        )


_NONE = Usage()


def _count(counts: list[int], usage: Usage) -> None:
    counts[0] += usage.input_tokens
    counts[1] += usage.output_tokens
    counts[2] += usage.unreported
    counts[3] += usage.cache_read_tokens
    counts[4] += usage.cache_write_tokens


def _usage(counts: list[int]) -> Usage:
    return Usage(input_tokens=counts[0], output_tokens=counts[1], unreported=counts[2],
                 cache_read_tokens=counts[3], cache_write_tokens=counts[4])  # fmt: skip


class Step(BaseModel, Generic[OutputT]):
    """The result of a run.

    Attributes:
        agent: The agent's name.
        output: The validated output (``None`` when the run failed).
        failure: Why the run failed (``None`` when it succeeded).
        turns: Every turn the run made, failed ones included.
        usage: Token usage, total and by turn type.
        stop_reasons: How many replies ended for each stop reason.
        max_turns: The work budget the run had.
        return_retries: The correction budget the run had.
        duration_s: Wall-clock seconds of the run.
        state: Set only when the run paused for approval of tool calls: the state to
            resume from (``SubAgent.resume(step.state, decisions)``), its pending calls in
            ``state.pending``. A paused run is neither ``ok`` nor failed.
        messages: The conversation as the model saw it at the end, without the system
            message: the task, the tool exchanges, the failed attempts the run's context
            policy kept (``collapse`` keeps only a streak's latest), then the final reply.
            Pass it on to go on with the conversation: ``run(message_history=
            step.messages)`` (or ``run(messages=[*step.messages, next_message])``).
    """

    agent: str
    output: OutputT | None = None
    failure: Failure | None = None
    turns: list[Turn] = Field(default_factory=list)
    max_turns: int
    return_retries: int
    duration_s: float = 0.0
    state: RunState | None = None
    messages: list[Message] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """Whether the run produced a valid output (not when it failed or paused)."""
        return self.failure is None and self.state is None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def paused(self) -> bool:
        """Whether the run paused, waiting for decisions about tool calls (see ``state``)."""
        return self.state is not None

    @property
    def pending(self) -> PendingCalls | None:
        """The calls a paused run waits on (``None`` unless paused)."""
        return None if self.state is None else self.state.pending

    # Derived from the turns: computed on first use (and serialized), never stored twice.
    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def usage(self) -> UsageSummary:
        """Token usage, total and by turn type."""
        return UsageSummary.of(self.turns)

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def stop_reasons(self) -> dict[str, int]:
        """How many replies ended for each stop reason."""
        return count_stop_reasons(self.turns)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def retryable(self) -> bool:
        """Whether running the same run again could help: for an orchestrator's reruns.

        Only a run that failed on a transient transport failure is (``llm_error`` of kind
        ``rate_limit``, ``server_error``, ``connection`` or ``invalid_response``, the
        transport's own retries spent), one whose Ray worker died before it finished
        (``worker_lost``), or one whose tool server went away mid-run
        (``tool_server_lost``). Not a run that succeeded, exhausted its budgets,
        failed explicitly, timed out, was cancelled, did not fit the context window, or
        was refused (authentication, permission, bad request, content filter, a reply too
        large): the same run would fail the same way. The table is in ``docs/scale.md``.
        """
        return self.failure is not None and self.failure.retryable

    def __eq__(self, other: object) -> bool:
        """Whether two Steps record the same run: whether their JSON forms are equal.

        A Step's JSON does not name the types of the outputs in it: read back, an output is
        typed only as the reader asks (``Step[Answer].model_validate_json``), and the Steps
        of agents run as tools (``ToolResult.step``) hold their outputs as plain JSON data.
        Comparing the JSON forms makes a Step equal to itself read back, nested Steps
        included, wherever it was stored or shipped (a Ray worker, a file).
        """
        if not isinstance(other, Step):
            return NotImplemented
        if super().__eq__(other) is True:
            return True
        try:
            return self.model_dump(mode="json") == other.model_dump(mode="json")
        except PydanticSerializationError:  # an output with no JSON form: only itself
            return False

    # A Step is mutable: unhashable, as pydantic makes it (defining __eq__ would drop it).
    __hash__ = None  # type: ignore[assignment]

    @property
    def llm_calls(self) -> int:
        """Number of turns, i.e. LLM calls that got a reply or ended the run."""
        return len(self.turns)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle finds a class by module and name, and a parametrized Step (Step[Answer],
        # the Step[Any] of a run) has no such name: rebuild it from its output type, so
        # Steps cross process boundaries (multiprocessing, Ray tasks) as they are.
        args = self.__pydantic_generic_metadata__["args"]
        return (_unpickle_step, (args[0] if args else None, self.__getstate__()))

    def raise_for_failure(self) -> Self:
        """Return the step if it succeeded.

        Raises:
            RunFailedError: The run failed; the error carries this step.
            RunPausedError: The run paused for approval; the error carries this step.
        """
        if self.failure is not None:
            raise RunFailedError(self)
        if self.state is not None:
            raise RunPausedError(self)
        return self

    def output_or_raise(self) -> OutputT:
        """The output of a run that succeeded, typed as the agent's output (not ``| None``).

        ``step.output`` is ``OutputT | None`` (a failed run has none); this narrows it:
        ``answer: Answer = step.output_or_raise()``.

        Raises:
            RunFailedError: The run failed; the error carries this step.
            RunPausedError: The run paused for approval; the error carries this step.
        """
        if self.failure is not None:
            raise RunFailedError(self)
        if self.state is not None:
            raise RunPausedError(self)
        return cast(OutputT, self.output)

    def summary(self) -> str:
        """A one-line description, e.g. ``done in 3 turns (normal, must_return, retry)``."""
        types = ", ".join(turn.type.value for turn in self.turns)
        if self.failure is not None:
            head = f"failed ({self.failure.reason.value}: {self.failure.message})"
        elif self.state is not None:
            waiting = len(self.state.pending.needs_approval) if self.state.pending else 0
            head = f"paused ({waiting} call(s) awaiting approval)"
        else:
            head = "done"
        extra = ""
        cut = self.stop_reasons.get(StopReason.LENGTH.value, 0)
        if cut:
            extra = f"; {cut} repl{'y' if cut == 1 else 'ies'} hit max_tokens"
        count = len(self.turns)
        return f"{head} in {count} turn{'' if count == 1 else 's'} ({types}){extra}"


def _unpickle_step(output_type: Any, state: dict[Any, Any]) -> Step[Any]:
    """A pickled :class:`Step`, back as the class it was (``Step[output_type]``)."""
    cls: type[Step[Any]] = Step if output_type is None else Step[output_type]
    step = cls.__new__(cls)
    step.__setstate__(state)
    return step


def count_stop_reasons(turns: Iterable[Turn]) -> dict[str, int]:
    """Count the stop reasons of ``turns`` (turns without a reply are not counted)."""
    counts: dict[str, int] = {}
    for turn in turns:
        if turn.stop_reason is not None:
            counts[turn.stop_reason.value] = counts.get(turn.stop_reason.value, 0) + 1
    return counts


class RunState(BaseModel):
    """Everything a run needs to go on from a turn boundary: what ``resume`` starts from.

    Taken after a turn (``run(on_state=...)``) or when a run pauses for approval (the
    paused :class:`~subagent.Step` carries it as ``state``). ``model_dump_json`` and
    ``model_validate_json`` round-trip it exactly. Not kept: objects a tool handed to the
    next tool turn (``ToolOutput.extras``), which are Python objects; their names are in
    ``dropped_extras``.

    Attributes:
        version: The record's version (``1``).
        id: The point of the run the state was taken at: a random part made for the run
            (kept when it resumes) and the number of turns taken, ``<hex>.<turns>``
            (``<hex>.<turns>.paused`` for a pause). Every
            state taken at one point has the same id (a paused Step's state, the copy
            ``on_state`` got): what single-use resumes record, so one pause resumes once.
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
        task: The task as the caller gave it, when the runtime joined its final-turn
            notice to it (``Step.messages`` shows the task as given); empty otherwise.
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
    task: list[Message] = Field(default_factory=list)

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
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deeply
            envelope = None
        text = envelope.get("state") if isinstance(envelope, dict) else None
        mac = envelope.get("hmac") if isinstance(envelope, dict) else None
        if not isinstance(text, str) or not isinstance(mac, str) or not mac.isascii():
            raise InvalidStateError("signature", "not a signed state (RunState.signed)")
        try:
            expected = _mac(key, text)
        except UnicodeEncodeError:  # a lone surrogate: no state was signed as this text
            raise InvalidStateError("signature", "not a signed state (RunState.signed)") from None
        if not hmac.compare_digest(mac, expected):
            raise InvalidStateError(
                "signature", "does not match the key: the state was changed after it was "
                "signed, or signed with another key"
            )  # fmt: skip
        return cls.model_validate_json(text)


def _mac(key: bytes, text: str) -> str:
    if not isinstance(key, bytes | bytearray) or not key:
        raise TypeError("a state's signing key must be non-empty bytes")
    return hmac.new(bytes(key), text.encode("utf-8"), hashlib.sha256).hexdigest()


def build_step(
    *,
    agent: str,
    output: Any,
    failure: Failure | None,
    turns: list[Turn],
    max_turns: int,
    return_retries: int,
    duration_s: float,
    state: RunState | None = None,
    messages: list[Message] | None = None,
) -> Step[Any]:
    """Assemble a :class:`Step` from the parts of a finished (or paused) run."""
    return trusted(_ANY_STEP, _STEP_FIELDS, {
        "agent": agent, "output": output, "failure": failure, "turns": turns,
        "max_turns": max_turns, "return_retries": return_retries, "duration_s": duration_s,
        "state": state, "messages": [] if messages is None else messages,
    })  # fmt: skip


# ToolResult refers to Step (an agent run as a tool), which is defined after it.
ToolResult.model_rebuild()
Turn.model_rebuild()
RunState.model_rebuild()
Step.model_rebuild(force=True)
_ANY_STEP = Step[Any]
_STEP_FIELDS = set(Step.model_fields)


def step_model(output: object) -> type[Step[Any]]:
    """The Step model that reads back, from JSON, a Step of an agent with this ``output``.

    For the processes that hand Steps over as JSON (Ray workers, DBOS checkpoints): no
    output or ``str`` gives ``Step[str]``; a type, a generic alias or a union gives
    ``Step[output]``; a parser gives ``Step[Any]`` (its value comes back as plain JSON data).
    """
    if output is None or output is str:
        return Step[str]
    if (
        inspect.isclass(output)
        or typing.get_origin(output) is not None
        or isinstance(output, types.UnionType)
    ):
        return Step[output]  # type: ignore[valid-type]
    return _ANY_STEP
