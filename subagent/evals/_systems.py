"""Systems that are not subagent agents, evaluated beside them: a raw model call, a peer.

A :class:`System` wraps an async function that runs one case its own way and returns a
:class:`SystemRun`: its answer (or why it failed), the model's replies, and what it cost.
The evaluation judges, records and reports it as it does an agent's run, so a baseline of
your own code, or another framework, is compared with subagent on the same cases, with the
same judges, in the same report. Its records hold the :class:`SystemRun` (``"run"``)
where an agent's hold its Step (``"step"``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from subagent._errors import ConfigurationError

__all__ = ["System", "SystemReply", "SystemRun", "system_run_from_data"]


class SystemReply(BaseModel):
    """One reply of the model inside a system's run.

    Attributes:
        text: The reply's text.
        tool_calls: The calls it made, ``{"name": ..., "arguments": {...}}`` each.
        error: Why the system refused the reply, when it did and asked the model again.
        stop_reason: The reply's stop reason (``stop``, ``length``, ``tool_calls``...).
        correction: Whether the reply is a correction (counted as the report counts an
            agent's ``retry`` turns, repeats included); ``None``: when the reply before it
            was refused.
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    stop_reason: str | None = None
    correction: bool | None = None


class SystemRun(BaseModel):
    """What one run of a :class:`System` came to.

    Attributes:
        output: The answer, as JSON data (what the judges see as ``ctx.output``); ignored
            when the run failed.
        failure: Why the run failed, as a short reason (``error``, ``timeout``,
            ``budget_exhausted``...); ``None``: the run answered. A failed run is never
            judged, so never correct: no answer is not the answer "none".
        message: What went wrong, in words.
        replies: The model's replies, in order.
        calls: Model calls (default: one per reply).
        input_tokens: Prompt tokens of every call.
        output_tokens: Completion tokens of every call.
        duration_s: The run's wall time (default: as the evaluation measured it).
    """

    model_config = ConfigDict(frozen=True)

    output: Any = None
    failure: str | None = None
    message: str | None = None
    replies: list[SystemReply] = Field(default_factory=list)
    calls: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the run answered (it did not fail)."""
        return self.failure is None

    @property
    def llm_calls(self) -> int:
        """Model calls: ``calls``, else one per reply."""
        return len(self.replies) if self.calls is None else self.calls


def system_run_from_data(data: object) -> SystemRun:
    """A :class:`SystemRun` from its JSON form (a record's ``"run"``).

    Raises:
        ValueError: The data is not a system's run.
    """
    try:
        return SystemRun.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"not a system's run: {exc.errors(include_url=False)!r:.200}") from None


SystemFunction = Callable[..., Awaitable[SystemRun]]


@dataclass(frozen=True, slots=True)
class System:
    """A system evaluated beside subagent's agents: any async function of a case.

    ``Dataset.evaluate(System(raw_call), {"raw": {}, "prompted": {"system": PROMPT}})``
    runs ``await raw_call(case, **options)`` once per case and variant: a variant's
    options are the function's keyword arguments (checked against its signature before
    any run). What the function needs besides (a client, a server's address) it takes
    from a closure or ``functools.partial``.

    Args:
        function: ``async def run(case, **options) -> SystemRun``. An exception it raises
            is a failed run (``failure="error"``), recorded; the evaluation goes on.
        name: The system's identity in the records: a record made under another name is
            not this system's, and its run is made again (default: the function's
            qualified name, through ``functools.partial``).

    Raises:
        ConfigurationError: The function is not callable or the name is empty.
    """

    function: SystemFunction
    name: str = ""

    def __post_init__(self) -> None:
        if not callable(self.function):
            raise ConfigurationError(
                "system", f"must be an async function, got {self.function!r:.80}"
            )
        if not self.name:
            inner = self.function
            while isinstance(inner, functools.partial):
                inner = inner.func
            given = getattr(inner, "__qualname__", None) or type(inner).__qualname__
            object.__setattr__(self, "name", f"{getattr(inner, '__module__', '')}.{given}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError("system", f"a system needs a name, got {self.name!r}")

    def check_options(self, variant: str, options: Mapping[str, Any]) -> None:
        """Refuse options the function does not take, naming the variant.

        Raises:
            ConfigurationError: An option is not one of the function's keyword arguments.
        """
        try:
            signature = inspect.signature(self.function)
        except (TypeError, ValueError):  # a callable without a signature: nothing to check
            return
        try:
            signature.bind(None, **options)
        except TypeError as exc:
            raise ConfigurationError(
                "variants", f"variant {variant!r}: system {self.name!r} does not take it: {exc}"
            ) from None
