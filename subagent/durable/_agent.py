"""An agent's runs and batches as DBOS workflows."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypedDict, cast

from dbos import DBOS, SetWorkflowID, WorkflowHandleAsync, WorkflowStatusString
from dbos import error as dbos_error
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel
from typing_extensions import TypeVar, Unpack

from subagent._agent import SubAgent
from subagent._approval import ApprovalRule, checked_decision, checked_decisions
from subagent._build import current_approval
from subagent._checks import check_int, check_seconds
from subagent._conversation import ContextPolicy
from subagent._correction import Correction
from subagent._errors import ConfigurationError, InvalidStateError
from subagent._limits import UsageLimits
from subagent._options import refuse_untaken, taken_by
from subagent.durable._approval import (
    APPROVAL_TOPIC,
    PENDING_EVENT,
    AlreadyDecidedError,
    DecisionRefused,
    PendingApproval,
    decisions_message,
    log_refused,
    read_decisions,
    read_pending,
)
from subagent.durable._llm import DurableLLM
from subagent.durable._sources import DurableSource, pin_sources, pinned
from subagent.durable._tools import durable_tool
from subagent.llm import LLM, Message, RetryPolicy
from subagent.records import Decision, FailReason, Failure, RunState, Step, Turn
from subagent.records._runs import build_step, step_model
from subagent.tools._source import split_sources

__all__ = ["DEFAULT_APPROVAL_TIMEOUT", "DurableAgent", "DurableRunArguments"]

OutputT = TypeVar("OutputT", default=Any)

DEFAULT_APPROVAL_TIMEOUT = 7 * 24 * 3600.0
"""Seconds a durable run paused for approval waits for its decisions by default (a week)."""
Context = Mapping[str, Any] | BaseModel | None


class DurableRunArguments(TypedDict, total=False):
    """The run options a durable run takes: those DBOS can record as the workflow's input.

    The model, its call timeout, the tracer provider and the deps belong to the
    :class:`DurableAgent` (they are the process's, not the run's); ``on_event``, ``on_text``
    and ``on_state`` are not taken (a resumed run's listener is in another process).
    """

    max_turns: int | None
    return_retries: int | None
    messages: Sequence[Message | Mapping[str, Any]] | str | None
    message_history: Sequence[Message | Mapping[str, Any]] | None
    context_policy: ContextPolicy | None
    settings: Mapping[str, Any] | None
    retry_policy: RetryPolicy | None
    mission_timeout: float | None
    correction: Correction | None
    usage_limits: UsageLimits | None


# What a durable run takes, and what goes on to its resumed parts: from the one table of
# run options (RUN_OPTION_RULES), which a test checks DurableRunArguments against.
_DURABLE_OPTIONS = taken_by("durable")
_RESUME_OPTIONS = tuple(sorted(_DURABLE_OPTIONS & taken_by("resume")))


class DurableAgent(Generic[OutputT]):
    """An agent whose runs are DBOS workflows: they survive the death of their process.

    Build it at import time, before ``DBOS.launch()``: it registers two workflows with DBOS
    (``subagent.run:<name>`` and ``subagent.batch:<name>``), which DBOS finds by name when
    it recovers a workflow left pending by a process that died. Every process that may
    resume a run must build the same durable agent (same name, prompts, tools, output type)
    before it launches DBOS, and connect its tool sources (MCP servers) before it launches
    DBOS, in the event loop that then calls ``DBOS.launch()``.

    In a workflow, each LLM call is a step (:class:`DurableLLM`) and each tool call is a
    step (:func:`durable_tool`), a tool source's included; everything between them (the
    phase machine, parsing, validators, the conversation) is deterministic and replays
    from the checkpoints. The Step a resumed run returns equals the uncrashed run's but for
    the measured fields (:func:`~subagent.durable.comparable`). A run of an agent with tool
    sources first records the tools it starts with, and reads only those: a replay whose
    sources lost or changed one of them is refused (``docs/durable.md``).

    Args:
        agent: The agent definition.
        llm: The model (default: the agent's); a spec string is resolved as
            :class:`~subagent.SubAgent` does. A :class:`DurableLLM` is used as it is.
        timeout: Seconds one LLM call may take, enforced inside the call's step (default:
            the agent's ``timeout``).
        name: The workflows' name (default: the agent's name); unique per application.
        tracer_provider: Where the runs' spans go (default: the global provider).
        approval_timeout: Seconds a run paused for approval waits for the decisions
            (default: a week); past it the run ends paused, its Step holding the state to
            resume from with :meth:`SubAgent.resume`.
        deps: The dependencies every run of this process gives its tools, validators and
            instructions (``RunContext.deps``): a database handle, a client. They are the
            process's, never recorded: a run resumed in another process gets that
            process's ``DurableAgent(deps=...)``.

    Raises:
        ConfigurationError: No model, or an option is invalid (the message names it).
    """

    def __init__(
        self,
        agent: SubAgent[OutputT],
        *,
        llm: LLM | str | None = None,
        timeout: float | None = None,
        name: str | None = None,
        tracer_provider: TracerProvider | None = None,
        approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
        deps: Any = None,
    ) -> None:
        if not isinstance(agent, SubAgent):
            raise ConfigurationError("agent", f"must be a SubAgent, got {agent!r}")
        name = agent.name if name is None else name
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("name", f"must be a non-empty string, got {name!r}")
        plain, sources = split_sources(agent.tools)
        # A source's tools are known once it is connected: each listing's tools are
        # wrapped as they come, and a run's listing is recorded (see _sources).
        self._sources = tuple(DurableSource(source) for source in sources)
        durable = dataclasses.replace(
            agent,
            tools=[*(durable_tool(tool) for tool in plain), *self._sources],
            llm=agent.llm if llm is None else llm,
            # the call timeout moves inside the LLM step
            timeouts=dataclasses.replace(agent.timeouts, call=None),
        )
        model = cast(LLM | None, durable.llm)
        if model is None:
            raise ConfigurationError(
                "llm", f"agent {agent.name!r} has no model: pass llm= to DurableAgent"
            )
        self.name = name
        self.agent: SubAgent[OutputT] = durable
        if isinstance(model, DurableLLM):  # wrapped already: its own timeout and step name
            if timeout is not None:
                raise ConfigurationError(
                    "timeout", "give the timeout to the DurableLLM passed as llm="
                )
            self.llm = model
        else:
            self.llm = DurableLLM(
                model, timeout=agent.timeouts.call if timeout is None else timeout,
                step_name=f"subagent.llm:{name}",
            )  # fmt: skip
        self._tracer_provider = tracer_provider
        waits = check_seconds("approval_timeout", approval_timeout)
        if waits is None:
            raise ConfigurationError(
                "approval_timeout", "must be a number of seconds > 0 (a wait is bounded)"
            )
        self.approval_timeout: float = waits
        durable.check_options(deps=deps)  # the agent's deps_type, as a run would check it
        self._deps = deps
        self._step_type = step_model(agent.output)

        async def run_body(
            context: Context, options: dict[str, Any], carrier: dict[str, str]
        ) -> str:
            with _trace_joined(carrier):
                return await self._run_body(context, options)

        async def batch_body(
            contexts: list[Context],
            options: dict[str, Any],
            concurrency: int,
            carrier: dict[str, str],
        ) -> list[str]:
            with _trace_joined(carrier):
                return await self._batch_body(contexts, options, concurrency)

        async def decide_body(workflow_id: str, message: str) -> None:
            await DBOS.send_async(workflow_id, message, APPROVAL_TOPIC)

        # Plain functions (DBOS keeps its own attributes on a workflow's function).
        self._run_workflow = DBOS.workflow(name=f"subagent.run:{name}")(run_body)
        self._batch_workflow = DBOS.workflow(name=f"subagent.batch:{name}")(batch_body)
        self._decide_workflow = DBOS.workflow(name=f"subagent.decide:{name}")(decide_body)

    # --- the public calls ---

    async def run(
        self,
        context: Context = None,
        *,
        workflow_id: str | None = None,
        **options: Unpack[DurableRunArguments],
    ) -> Step[OutputT]:
        """Run the agent as a workflow, or wait for the workflow ``workflow_id`` to end.

        With a ``workflow_id`` the run is idempotent: calling again with the same id (in
        this process or after a restart) starts nothing new; it returns the Step of that
        workflow once it ends (DBOS resumes a workflow a dead process left pending when it
        is launched again).

        Args:
            context: Values for the prompt template (recorded as the workflow's input).
            workflow_id: The workflow's id (default: one DBOS makes up).
            **options: Run options DBOS can record (:class:`DurableRunArguments`).

        Raises:
            ConfigurationError: An option is invalid.
            SourceNotReadyError: A tool source is not connected (nothing is started).
            TypeError: An option a durable run does not take (the message says why).
        """
        self._check(options)
        handle = await self._existing(workflow_id, f"subagent.run:{self.name}")
        if handle is None:
            self._check_sources()
            with _workflow_id(workflow_id):
                handle = await DBOS.start_workflow_async(
                    self._run_workflow, context, dict(options), _trace_carrier()
                )
        return self._step(await handle.get_result())

    async def run_many(
        self,
        contexts: Iterable[Context],
        *,
        batch_id: str | None = None,
        concurrency: int = 8,
        **options: Unpack[DurableRunArguments],
    ) -> list[Step[OutputT]]:
        """Run the agent once per context, as one batch workflow of child workflows.

        Each run is a child workflow with the id ``<batch_id>/<index>``; at most
        ``concurrency`` are under way at once, started in input order. A batch resumed
        after a crash reads the finished runs' Steps back and resumes the unfinished ones
        from their last completed step: no finished run or step is repeated.

        Args:
            contexts: One prompt context per run; read at once (the list is the
                workflow's recorded input).
            batch_id: The batch workflow's id (default: one DBOS makes up); calling again
                with it is idempotent, as for :meth:`run`.
            concurrency: Runs under way at once (>= 1).
            **options: Run options for every run (:class:`DurableRunArguments`).

        Returns:
            One Step per context, in input order.
        """
        check_int("concurrency", concurrency, 1)
        self._check(options)
        inputs = list(contexts)
        handle = await self._existing(batch_id, f"subagent.batch:{self.name}")
        if handle is None:
            self._check_sources()
            with _workflow_id(batch_id):
                handle = await DBOS.start_workflow_async(
                    self._batch_workflow, inputs, dict(options), concurrency, _trace_carrier()
                )
        return [self._step(text) for text in await handle.get_result()]

    async def pending(
        self, workflow_id: str, *, pause: int | None = None, timeout: float = 0.0
    ) -> PendingApproval | None:
        """What the run ``workflow_id`` waits on for approval now (``None``: nothing).

        Args:
            workflow_id: The run's workflow id.
            pause: Wait for this pause of the run (1 for its first) rather than the first
                pause seen: after deciding pause 1, ``pause=2`` waits for the next one.
            timeout: Seconds to wait for the run to pause (for that pause) when it has not
                (yet).

        Returns:
            The pause, to decide with :meth:`decide`; ``None`` when the run is not waiting
            (it never paused within ``timeout``, or the pause was decided).
        """
        check_seconds("timeout", timeout, allow_zero=True)
        if pause is not None:
            check_int("pause", pause, 1)
            # Each pause is also published under a key of its own: waiting for that key is
            # waiting for the run to reach that pause (DBOS waits on a notification).
            if await DBOS.get_event_async(workflow_id, _pause_key(pause), timeout) is None:
                return None
            timeout = 0.0
        current = read_pending(await DBOS.get_event_async(workflow_id, PENDING_EVENT, timeout))
        if current is None or (pause is not None and current.pause != pause):
            return None
        return current

    async def decide(
        self, pending: PendingApproval, decisions: Mapping[str, Decision | bool]
    ) -> None:
        """Send the decisions about the calls a paused run waits on, bound to that pause.

        ``pending`` is what :meth:`pending` returned: the decisions answer that pause and
        no other. Of two ``decide()`` calls for one pause, from any processes, one sends its
        decisions and the other raises :class:`AlreadyDecidedError` (a claim recorded in
        DBOS's system database, atomically). The run goes on in whichever process runs its
        workflow. Where this agent is not built, a process can send the message of
        :func:`decisions_message` itself (``DBOSClient.send`` on :data:`APPROVAL_TOPIC`);
        the run takes the first message that answers the pause it is in and ignores any
        other, saying so in the log.

        Args:
            pending: The pause the decisions answer (from :meth:`pending`).
            decisions: One per waiting call, by call id: ``Decision.approve()`` (or
                ``True``), ``Decision.deny(reason)`` (or ``False``), ``Decision.edit(...)``.

        Raises:
            AlreadyDecidedError: That pause was decided already (by another ``decide()``,
                or the run went on past it); nothing was sent.
            ConfigurationError: The decisions do not match the waiting calls one for one
                (the message names the ids), or the run is not waiting for approval (it
                never paused, or it ended: past its ``approval_timeout`` it ends paused).
        """
        message = decisions_message(pending, decisions)
        self._check_decisions(pending, decisions)
        workflow_id = pending.workflow_id
        status = await DBOS.get_workflow_status_async(workflow_id)
        if status is None or status.status not in _UNDER_WAY:
            ended = "no such run" if status is None else f"it ended ({status.status})"
            raise ConfigurationError(
                "decisions", f"the run {workflow_id!r} is not waiting for approval: {ended}"
            )
        value = await DBOS.get_event_async(workflow_id, PENDING_EVENT, 0.0)
        if value is None:
            raise ConfigurationError(
                "decisions", f"the run {workflow_id!r} is not waiting for approval"
            )
        current = read_pending(value)
        if current is not None and current.pause < pending.pause:
            raise ConfigurationError(
                "pending", f"the run {workflow_id!r} has not reached pause {pending.pause} "
                f"(it waits on pause {current.pause})",
            )  # fmt: skip
        if current is None or current.pause != pending.pause:
            now = "it went on" if current is None else f"it now waits on pause {current.pause}"
            raise AlreadyDecidedError(workflow_id, pending.pause, now)
        if current.digest != pending.digest:
            raise ConfigurationError(
                "pending", f"pause {pending.pause} of the run {workflow_id!r} waits on other "
                "calls than these: read it again with pending()",
            )  # fmt: skip
        try:
            with SetWorkflowID(_claim_id(workflow_id, pending.pause),
                               workflow_id_reuse_policy="reject"):  # fmt: skip
                handle = await DBOS.start_workflow_async(
                    self._decide_workflow, workflow_id, message
                )
        except dbos_error.DBOSWorkflowIDInUseError:
            raise AlreadyDecidedError(workflow_id, pending.pause, "by another decide()") from None
        await handle.get_result()

    def _check_decisions(
        self, pending: PendingApproval, decisions: Mapping[str, Decision | bool]
    ) -> None:
        """Refuse, before sending, what ``resume()`` would refuse.

        A decision bound to another call, or an edit the tool does not take.

        Raises:
            ConfigurationError: An edit does not fit its tool (naming the call).
            InvalidStateError: A bound decision was made for another call.
        """
        rule = _approval_rule(self.agent)
        for call in pending.waiting:
            checked_decision(call, decisions.get(call.id), rule)

    async def result(self, workflow_id: str) -> Step[OutputT]:
        """The Step of the run ``workflow_id`` (started by any process), once it ends."""
        handle: WorkflowHandleAsync[Any] = await DBOS.retrieve_workflow_async(workflow_id)
        return self._step(await handle.get_result())

    # --- the workflows' bodies (replayed on resume: deterministic but for the steps) ---

    async def _run_body(self, context: Context, options: dict[str, Any]) -> str:
        workflow_id = cast(str, DBOS.workflow_id)
        pins = None
        if self._sources:  # the tools it starts with, recorded (checked on a replay)
            pins = await pin_sources(self._sources, f"subagent.tools:{self.name}", workflow_id)
        with pinned(pins):
            return await self._run_pinned(context, options, workflow_id)

    async def _run_pinned(self, context: Context, options: dict[str, Any], workflow_id: str) -> str:
        step = await self.agent.run(
            context, llm=self.llm, tracer_provider=self._tracer_provider, deps=self._deps,
            **options,
        )  # fmt: skip
        pauses = 0
        while step.paused and step.state is not None and step.pending is not None:
            pauses += 1
            pending = PendingApproval(
                workflow_id=workflow_id, pause=pauses, waiting=step.pending.waiting
            )
            published = pending.model_dump_json()
            await DBOS.set_event_async(PENDING_EVENT, published)
            await DBOS.set_event_async(_pause_key(pauses), published)
            decisions = await self._decisions_for(pending, step.state)
            if decisions is None:
                break  # timed out: the run ends paused, its state in its Step
            await DBOS.set_event_async(PENDING_EVENT, pending.decided().model_dump_json())
            step = await self.agent.resume(
                step.state, decisions, llm=self.llm,
                tracer_provider=self._tracer_provider, deps=self._deps,
                **{key: options[key] for key in _RESUME_OPTIONS if key in options},
            )  # fmt: skip
        # Recorded as JSON, read back against the output type: no pickled classes in the
        # database, so an output model need not be importable by name to be stored.
        return step.model_dump_json()

    async def _decisions_for(
        self, pending: PendingApproval, state: RunState
    ) -> dict[str, Decision] | None:
        """The decisions that answer ``pending``, or ``None`` once ``approval_timeout`` passed.

        Waiting in the body, not in a step: no thread is held, and a process killed here
        waits again on restart (a message sent meanwhile is kept for it). A message that
        does not answer this pause (one for another pause, a second decision, one that does
        not parse, one ``resume()`` would refuse: an edit the tool does not take, a
        decision bound to another call) is logged and ignored, and the wait goes on to the
        same deadline: the paused run is never lost to a bad message. Every message read
        is recorded, so a replay takes and ignores the same ones.
        """
        rule = _approval_rule(self.agent)
        # When the wait opened, recorded: the deadline is the same on every replay.
        opened: float = await DBOS.run_step_async({"name": "subagent.approval"}, time.time)
        while True:
            left = max(opened + self.approval_timeout - time.time(), 0.0)
            message = await DBOS.recv_async(APPROVAL_TOPIC, left)
            if message is None:
                return None
            try:
                decisions = read_decisions(message, pending)
                checked_decisions(state.pending, rule, decisions)
            except DecisionRefused as refused:
                log_refused(pending, refused)
            except (ConfigurationError, InvalidStateError) as refused:
                log_refused(pending, DecisionRefused(f"resume() refuses it: {refused}"))
            else:
                return decisions

    async def _existing(
        self, workflow_id: str | None, name: str
    ) -> WorkflowHandleAsync[Any] | None:
        """The workflow ``workflow_id`` when it exists already (``None``: start it).

        Waiting for an existing workflow rather than starting it again keeps DBOS quiet: a
        workflow DBOS recovered after a crash sits in its internal queue, and a second start
        (whose queue is none) logs a warning that the queue is not updated.

        Raises:
            ConfigurationError: The id belongs to another workflow (another agent's, or a
                run's where a batch's is asked for).
        """
        if workflow_id is None:
            return None
        status = await DBOS.get_workflow_status_async(workflow_id)
        if status is None:
            return None
        if status.name != name:
            raise ConfigurationError(
                "workflow_id", f"{workflow_id!r} is the id of another workflow ({status.name})"
            )
        return await DBOS.retrieve_workflow_async(workflow_id)

    def _step(self, text: str) -> Step[OutputT]:
        return cast("Step[OutputT]", self._step_type.model_validate_json(text))

    async def _batch_body(
        self, contexts: list[Context], options: dict[str, Any], concurrency: int
    ) -> list[str]:
        batch_id = DBOS.workflow_id
        steps: list[str] = []
        window: deque[WorkflowHandleAsync[str] | Exception] = deque()
        # Started in input order and awaited in input order: the batch's own operations
        # (child starts, result reads) come in the same order on every replay.
        for index, context in enumerate(contexts):
            if len(window) == concurrency:
                steps.append(await self._child_step(window.popleft(), options))
            with SetWorkflowID(f"{batch_id}/{index}"):
                # The batch's recorded trace context is the current one: the same carrier
                # on every replay.
                try:
                    window.append(
                        await DBOS.start_workflow_async(
                            self._run_workflow, context, options, _trace_carrier()
                        )
                    )
                except Exception as exc:  # isolated, as a run that raised
                    window.append(exc)
        while window:
            steps.append(await self._child_step(window.popleft(), options))
        return steps

    async def _child_step(
        self, child: WorkflowHandleAsync[str] | Exception, options: Mapping[str, Any]
    ) -> str:
        """A batch run's Step as JSON; a run that raised is a failed Step (``error``).

        As in :func:`~subagent.run_many`, one raising run does not fail its batch: the
        batch's workflow always ends with a Step per input. The error comes back from the
        child's recorded outcome, so a replay isolates it the same way.
        """
        if not isinstance(child, Exception):
            try:
                return await child.get_result()
            except Exception as exc:
                child = exc
        return _errored_step(self.agent, options, child).model_dump_json()

    def _check_sources(self) -> None:
        """Refuse to start a run whose tool sources are not ready (nothing is recorded).

        Raises:
            SourceNotReadyError: A source cannot supply tools now (a server not connected).
        """
        for source in self._sources:
            source.live()

    def _check(self, options: Mapping[str, Any]) -> None:
        refuse_untaken("durable", "a durable run", options)
        correction = options.get("correction")
        if isinstance(correction, Correction) and correction.llm is not None:
            raise TypeError(
                "a durable run does not take correction= with its own llm: the models of a "
                "durable run are the DurableAgent's (give it the correction instead)"
            )
        for key in options:
            if key not in _DURABLE_OPTIONS:
                raise TypeError(
                    f"DurableAgent.run() got an unexpected keyword argument {key!r} "
                    f"(the durable run options: {', '.join(sorted(_DURABLE_OPTIONS))})"
                )
        self.agent.check_options(deps=self._deps, **options)

    def __repr__(self) -> str:
        return f"DurableAgent({self.name!r})"


DurableAgent.__module__ = "subagent.durable"


# A workflow's statuses before it ends.
_UNDER_WAY = frozenset({WorkflowStatusString.PENDING.value, WorkflowStatusString.ENQUEUED.value})


def _pause_key(pause: int) -> str:
    """The DBOS event a run publishes its pause ``pause`` under (as well as the latest)."""
    return f"{PENDING_EVENT}.{pause}"


def _claim_id(workflow_id: str, pause: int) -> str:
    """The id of the workflow that sends the decisions of a pause: at most one per pause."""
    return f"{workflow_id}/decision/{pause}"


def _errored_step(agent: SubAgent[Any], options: Mapping[str, Any], exc: Exception) -> Step[Any]:
    """The failed Step of a run that raised ``exc`` (its turns, when the error holds them)."""
    turns = getattr(exc, "turns", ())
    max_turns, return_retries = options.get("max_turns"), options.get("return_retries")
    return build_step(
        agent=agent.name, output=None,
        failure=Failure(reason=FailReason.ERROR, message=f"{type(exc).__name__}: {exc}"),
        turns=[turn for turn in turns if isinstance(turn, Turn)],
        max_turns=agent.max_turns if max_turns is None else max_turns,
        return_retries=agent.return_retries if return_retries is None else return_retries,
        duration_s=0.0,
    )  # fmt: skip


def _workflow_id(workflow_id: str | None) -> contextlib.AbstractContextManager[Any]:
    if workflow_id is None:
        return contextlib.nullcontext()
    if not isinstance(workflow_id, str) or not workflow_id:
        raise ConfigurationError("workflow_id", f"must be a non-empty str, got {workflow_id!r}")
    return SetWorkflowID(workflow_id)


_W3C = TraceContextTextMapPropagator()


def _trace_carrier() -> dict[str, str]:
    """The W3C trace context every attempt of a workflow joins, recorded as its input.

    The caller's span when there is one; otherwise a made-up remote parent, so that the
    first attempt and every resumed one still share one trace id.
    """
    current = otel_context.get_current()
    if not trace.get_current_span(current).get_span_context().is_valid:
        made_up = SpanContext(
            trace_id=random.getrandbits(128) or 1, span_id=random.getrandbits(64) or 1,
            is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )  # fmt: skip
        current = trace.set_span_in_context(NonRecordingSpan(made_up), current)
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=current)
    return carrier


@contextlib.contextmanager
def _trace_joined(carrier: dict[str, str]) -> Iterator[None]:
    """The workflow's body in the trace its input names (on every attempt, resumed or not)."""
    token = otel_context.attach(_W3C.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def _approval_rule(agent: SubAgent[Any]) -> ApprovalRule | None:
    """The approval rule a check of decisions reads (:func:`current_approval`)."""
    rule = current_approval(agent)
    return rule if isinstance(rule, ApprovalRule) else None
