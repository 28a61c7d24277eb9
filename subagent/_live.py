"""A run's live state: the record the turn loop advances, :class:`RunState`'s live twin.

Everything a run knows between two turns is here, in one place: its books (the phase and
the budgets), the conversation it sends, its system messages, the turns it took, the calls
waiting for approval, its output or failure, the objects a tool handed to the next tool
turn, the time it has run and the trace it continues. :meth:`LiveRun.thaw` makes it from a
saved :class:`~subagent.RunState` and :meth:`LiveRun.freeze` saves it as one, field by
field in one place each.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subagent._context import RunContext
from subagent._conversation import ContextPolicy, Conversation, with_notice
from subagent._parts import Systems
from subagent._phases import Budget
from subagent.llm import Message
from subagent.records import Failure, PendingCalls, RunState, Turn, Usage
from subagent.records._messages import trusted, with_content
from subagent.records._runs import STATE_VERSION

__all__ = ["LiveRun"]

_STATE_FIELDS = set(RunState.model_fields)
# Tool results of calls that were refused, never run (they count as no tool call).
_ANY_NOTICE = Message(role="user")
"""Stands for the notice joined to a saved task: only how many messages it made counts."""

_NOT_RUN = frozenset({"tools_unavailable", "too_many_calls"})


@dataclass(slots=True)
class LiveRun:
    """The state of one run in progress.

    Attributes:
        budget: The phase and what is left of each budget.
        conversation: The messages the run sends (failed attempts collapsed or kept).
        systems: The run's system messages (the agent's, extended by the run's own text).
        turns: The turns taken so far.
        pending: The calls of a paused turn, waiting for decisions.
        output: The output, once the run is done.
        failure: Why the run failed, once it has.
        extras: Objects a tool returned for the next tool turn's calls.
        elapsed: Seconds the run ran before this part of it (a resumed run's first parts).
        traceparent: The trace of the run's first part, continued by a resumed part.
        resumed: Whether this part goes on from a saved state.
        final_reply: The reply that ended the run (done or failed), as the model said it.
        lineage: The random part of the run's state ids, made when a state is first taken
            and kept by a resumed part (see :meth:`freeze`).
    """

    budget: Budget
    conversation: Conversation
    systems: Systems
    turns: list[Turn]
    pending: PendingCalls | None = None
    output: Any = None
    failure: Failure | None = None
    extras: Mapping[str, Any] | None = None
    elapsed: float = 0.0
    traceparent: str | None = None
    resumed: bool = False
    final_reply: Message | None = None
    lineage: str = ""
    # How the final-turn notice was joined to the task: the messages the task became
    # (0: no notice), and the characters it added to the last one (0: a message of its own).
    # Numbers, not the task's messages: a run in flight keeps no second copy of its task.
    task_sent: int = 0
    notice_chars: int = 0

    def joined_notice(self, task: Sequence[Message], sent: Sequence[Message]) -> None:
        """Remember that ``task`` was sent as ``sent``, the final-turn notice joined to it."""
        self.task_sent = len(sent)
        if len(sent) == len(task) and sent[-1].content.startswith(task[-1].content):
            self.notice_chars = len(sent[-1].content) - len(task[-1].content)

    def messages(self) -> list[Message]:
        """The conversation as the model saw it, then the final reply (``Step.messages``).

        The task is as it was given: without the final-turn notice the runtime joins to it.
        """
        transcript = self.conversation.transcript()
        end = self.task_sent
        if 0 < end <= len(transcript):
            if self.notice_chars:
                last = transcript[end - 1]
                content = last.content[: len(last.content) - self.notice_chars]
                transcript[end - 1] = with_content(last, content)
            else:
                del transcript[end - 1]
        if self.final_reply is not None:
            transcript.append(self.final_reply)
        return transcript

    def task(self) -> list[Message]:
        """The task as given, when the final-turn notice was joined to it (else empty)."""
        if not self.task_sent:
            return []
        return self.messages()[: self.task_sent - (0 if self.notice_chars else 1)]

    @classmethod
    def fresh(
        cls, budget: Budget, policy: ContextPolicy, systems: Systems, opening: list[Message]
    ) -> LiveRun:
        """A run about to take its first turn."""
        return cls(budget, Conversation(policy, opening), systems, [])

    @classmethod
    def thaw(cls, state: RunState) -> LiveRun:
        """A run going on from ``state`` (checked by the caller)."""
        budget = Budget(state.phase, state.work_remaining, state.retries_remaining,
                        state.retry_total)  # fmt: skip
        conversation = Conversation.restore(
            state.context_policy, state.history, state.latest_failure, state.collapsed
        )
        systems = Systems(state.system_with_tools, state.system_without_tools)
        live = cls(budget, conversation, systems, list(state.turns), pending=state.pending,
                   elapsed=state.elapsed_s, traceparent=state.traceparent,
                   resumed=True, lineage=state.id.partition(".")[0])  # fmt: skip
        if state.task:
            sent = len(with_notice(state.task, _ANY_NOTICE))
            live.joined_notice(state.task, state.history[:sent])
        return live

    def run_context(self, deps: Any, agent: str, depth: int, reply_usage: Usage) -> RunContext[Any]:
        """The :class:`~subagent.RunContext` of the turn under way (tools, validators)."""
        usage = reply_usage
        calls = 0
        for turn in self.turns:
            usage = usage + turn.usage
            for result in turn.tool_results:
                if result.error_type not in _NOT_RUN:
                    calls += 1
                if result.step is not None:
                    usage = usage + result.step.usage.total
        return RunContext(
            deps=deps, agent=agent, turn=len(self.turns) + 1, phase=self.budget.state,
            usage=usage, tool_calls=calls, depth=depth,
        )  # fmt: skip

    def _point_id(self) -> str:
        """The id of the point the run is at: ``<lineage>.<turns taken>[.paused]``.

        ``.paused`` because the turn a pause holds is taken again when the run resumes: the
        state after it has the pause's number of turns and another id.
        """
        point = f"{self.lineage}.{len(self.turns)}"
        return f"{point}.paused" if self.pending is not None else point

    def freeze(
        self,
        agent: str,
        fingerprint: dict[str, str],
        max_turns: int,
        return_retries: int,
        policy: ContextPolicy,
        elapsed: float,
        traceparent: str | None,
    ) -> RunState:
        """The run's state now, between two turns (or paused).

        Its id names the point, not the snapshot (:meth:`_point_id`): the same for every
        state taken at one point of one run (a paused Step's state and the copy
        ``on_state`` was given), so a claims store lets one of them resume, once.
        """
        if not self.lineage:
            self.lineage = uuid.uuid4().hex
        history, latest, collapsed = self.conversation.snapshot()
        budget = self.budget
        systems = self.systems
        # Built from values of the right types already: no validation (measured in bench).
        return trusted(RunState, _STATE_FIELDS, {
            "version": STATE_VERSION, "id": self._point_id(), "agent": agent,
            "fingerprint": fingerprint,
            "phase": budget.state, "work_remaining": budget.work_remaining,
            "retries_remaining": budget.retries_remaining, "retry_total": budget.retry_total,
            "max_turns": max_turns, "return_retries": return_retries,
            "context_policy": policy, "system_with_tools": systems.with_tools,
            "system_without_tools": systems.without_tools,
            "history": history, "latest_failure": latest, "collapsed": collapsed,
            "turns": list(self.turns), "pending": self.pending,
            "traceparent": self.traceparent or traceparent, "elapsed_s": elapsed,
            "dropped_extras": sorted(self.extras) if self.extras else [],
            "task": self.task(),
        })  # fmt: skip
