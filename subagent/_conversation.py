"""The conversation a run sends, and how failed attempts are collapsed out of it.

``collapse`` (default): while the model keeps failing to return, a request carries the
history up to the first failed attempt of the streak, then only the latest failed reply and
its feedback. Tool exchanges end a streak and are never dropped. The message count stays
constant across corrections. ``accumulate`` keeps every attempt. ``quote`` is ``collapse``
with the latest failed reply quoted inside the feedback message instead of sent as the
model's own turn: small models copy their own last assistant message word for word, and
read a quotation as something to correct.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Literal

from subagent._errors import ConfigurationError
from subagent._text import fence
from subagent.llm import Message
from subagent.records._messages import with_content

__all__ = [
    "CONTEXT_POLICIES",
    "ContextPolicy",
    "Conversation",
    "check_policy",
    "quoted_attempt",
    "with_notice",
]

ContextPolicy = Literal["collapse", "accumulate", "quote"]
CONTEXT_POLICIES: tuple[ContextPolicy, ...] = ("collapse", "accumulate", "quote")


def check_policy(value: object) -> ContextPolicy:
    """A context policy, checked.

    Raises:
        ConfigurationError: It is not one of :data:`CONTEXT_POLICIES`.
    """
    for policy in CONTEXT_POLICIES:
        if value == policy:
            return policy
    raise ConfigurationError("context_policy", f"must be one of {CONTEXT_POLICIES}, got {value!r}")


def with_notice(messages: list[Message], notice: Message) -> list[Message]:
    """``messages`` followed by ``notice``, merged into the last message if it is a user's.

    Two user messages in a row are what some chat templates refuse, and what a small model
    reads as two instructions to weigh against each other: a notice (the final-turn
    warning) joins the task or the observation it follows as one message.
    """
    if messages and messages[-1].role == "user" and not messages[-1].tool_calls:
        last = messages[-1]
        return [
            *messages[:-1],
            with_content(last, f"{last.content}\n\n{notice.content}"),
        ]
    return [*messages, notice]


def quoted_attempt(reply: Message, feedback: Message) -> Message:
    """One user message: the failed reply, quoted in a fence, then the feedback about it."""
    said = reply.content
    if reply.tool_calls:
        calls = [{"name": call.name, "arguments": call.arguments} for call in reply.tool_calls]
        said = "\n".join(filter(None, [said, json.dumps(calls, ensure_ascii=False)]))
    marker = fence(said)
    return Message(
        role="user",
        content=f"Your previous reply was:\n{marker}\n{said}\n{marker}\n\n{feedback.content}",
    )


class Conversation:
    """Messages of one run.

    Args:
        policy: ``collapse`` or ``accumulate``.
        opening: The task's messages.
    """

    __slots__ = ("_collapsed", "_history", "_latest_failure", "_policy")

    def __init__(self, policy: ContextPolicy, opening: Iterable[Message]):
        self._policy = policy
        self._history: list[Message] = list(opening)
        self._latest_failure: tuple[Message, ...] = ()
        self._collapsed = 0

    @property
    def collapsed(self) -> int:
        """Messages of earlier failed attempts left out (so far in the run)."""
        return self._collapsed

    def messages(self, system: Message | None = None) -> tuple[Message, ...]:
        """The messages to send now, after ``system`` when given."""
        if system is None:
            return (*self._history, *self._latest_failure)
        return (system, *self._history, *self._latest_failure)

    def add_failed_attempt(self, reply: Message, feedback: Message) -> None:
        """Record a failed return attempt and the feedback about it."""
        if self._policy == "accumulate":
            self._history += (reply, feedback)
            return
        self._collapsed += len(self._latest_failure)
        if self._policy == "quote":
            self._latest_failure = (quoted_attempt(reply, feedback),)
        else:
            self._latest_failure = (reply, feedback)

    def add_exchange(self, messages: Iterable[Message]) -> None:
        """Record messages that are never dropped (tool calls and results, notices).

        This ends a failure streak: its latest attempt joins the kept history.
        """
        self._end_streak()
        self._history.extend(messages)

    def transcript(self) -> list[Message]:
        """The messages sent after the system message, the latest failed attempt included."""
        return [*self._history, *self._latest_failure]

    def snapshot(self) -> tuple[list[Message], list[Message], int]:
        """(the kept history, the latest failed attempt, messages collapsed so far): copies."""
        return list(self._history), list(self._latest_failure), self._collapsed

    @classmethod
    def restore(
        cls,
        policy: ContextPolicy,
        history: Iterable[Message],
        latest_failure: Iterable[Message],
        collapsed: int,
    ) -> Conversation:
        """The conversation a :meth:`snapshot` was taken of."""
        conversation = cls(policy, history)
        conversation._latest_failure = tuple(latest_failure)
        conversation._collapsed = collapsed
        return conversation

    def _end_streak(self) -> None:
        self._history.extend(self._latest_failure)
        self._latest_failure = ()
