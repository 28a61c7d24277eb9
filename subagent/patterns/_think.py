"""``think_with_retry``: one question, one parser, and correction turns until it parses.

A single-call micro-agent, as a thin layer over a single-shot
:class:`~subagent.SubAgent` (``max_turns=1``, ``return_retries=max_corrections``): the same
state machine, collapsed context on corrections, turn records and spans as any run.

Across the library a *retry* is a correction after a failed attempt (``return_retries``,
``retry_loop(max_corrections=)``); ``think_with_retry(max_retries=)`` once counted total
attempts, and is accepted, deprecated, with that meaning.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from subagent._agent import SubAgent
from subagent._checks import check_int
from subagent._errors import ConfigurationError, RunFailedError
from subagent.llm import LLM, Message
from subagent.records import FailReason, Step, Turn

__all__ = ["ThinkError", "think_with_retry"]


class ThinkError(RunFailedError):
    """``think_with_retry`` got no reply that parsed (or the run ended early).

    A :class:`~subagent.RunFailedError` (hence a :class:`~subagent.SubAgentError`).

    Attributes:
        step: The run's full record.
        attempts: Every attempt, in order: each :class:`~subagent.Turn` holds the ``reply``,
            the ``error`` found in it and the ``feedback`` the model was given about it.
        turns: The same turns, as a tuple (as on every error raised out of a run).
        reason: Why the run failed (``budget_exhausted`` when every attempt failed to parse,
            ``explicit_fail``, ``llm_error``, ``timeout``...).
    """

    def __init__(self, step: Step[Any]):
        super().__init__(step)
        failure = step.failure
        assert failure is not None
        count = len(step.turns)
        self.args = (
            f"think_with_retry failed after {count} attempt{'s' if count != 1 else ''} "
            f"({failure.reason.value}): {failure.message}",
        )
        self.attempts: list[Turn] = list(step.turns)
        self.turns = tuple(step.turns)
        self.reason: FailReason = failure.reason


_UNSET: Any = object()


async def think_with_retry(
    llm: LLM,
    messages: str | Sequence[Message | Mapping[str, Any]],
    parser: Callable[..., Any],
    max_retries: int = _UNSET,
    *,
    max_corrections: int | None = None,
    **parser_kwargs: Any,
) -> Any:
    """Ask ``llm``, parse the reply with ``parser``, and feed failures back until it parses.

    Example:
        ``sections = await think_with_retry(llm, "Plan the study under [Plan] and
        [Timeline]", multi_section_parser, section_headers=["[Plan]", "[Timeline]"])``

    Args:
        llm: The model.
        messages: The task: a user prompt, or a list of messages (dicts or
            :class:`~subagent.Message`).
        parser: ``(text, **parser_kwargs) -> ParseResult`` (or the dict form
            ``{"status": "success", "data": ...}``). Its ``instructions`` attribute, if
            any, goes into the system prompt.
        max_retries: Deprecated: total attempts, the first included (>= 1); use
            ``max_corrections=max_retries - 1``.
        max_corrections: Corrections after a reply that did not parse (>= 0; default 2,
            so at most 3 attempts): the run's ``return_retries``.
        **parser_kwargs: Passed to ``parser`` on every attempt.

    Returns:
        The parsed value: the result's ``sections`` when set, else its ``data``.

    Raises:
        ThinkError: No attempt parsed (or the LLM failed); carries every attempt. A reply
            ``{"fail": ...}`` is corrected like any reply that does not parse.
        ConfigurationError: ``max_corrections`` is not an integer >= 0 (``max_retries``
            not one >= 1), both are given, or another argument is invalid.
        ParserContractError: The parser raised or broke its contract.

    Warns:
        DeprecationWarning: ``max_retries`` was given.
    """
    if max_retries is not _UNSET:
        warnings.warn(
            "think_with_retry(max_retries=N) counts total attempts and is deprecated: pass "
            "max_corrections=N - 1 (corrections after a failed attempt, the meaning of "
            "'retries' everywhere else)",
            DeprecationWarning,
            stacklevel=2,
        )
        if max_corrections is not None:
            raise ConfigurationError(
                "max_corrections", "give max_corrections or the deprecated max_retries, not both"
            )
        if type(max_retries) is not int or max_retries < 1:
            raise ConfigurationError(
                "max_retries", f"must be an integer >= 1 (total attempts), got {max_retries!r}"
            )
        corrections = max_retries - 1
    else:
        corrections = check_int(
            "max_corrections", 2 if max_corrections is None else max_corrections, 0
        )
    agent: SubAgent[Any] = SubAgent(
        name="think_with_retry",
        output=functools.partial(parser, **parser_kwargs) if parser_kwargs else parser,
        max_turns=1,
        return_retries=corrections,
    )
    step = await agent.run(llm=llm, messages=messages)
    if step.failure is not None:
        raise ThinkError(step)
    return step.output
