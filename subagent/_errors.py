"""Exceptions raised by subagent.

A model's misbehaviour never raises out of a run: it becomes feedback, or a failed
:class:`~subagent.Step`. Exceptions are for programming errors (bad configuration, a parser
that breaks its contract, a script that ran out) and for :meth:`Step.raise_for_failure`.
Exceptions raised out of a run carry the turns made so far in ``.turns``, the turn in
progress included (a failed turn whose ``error_type`` names the exception, with the reply
when one came).

A bug in the user's own code called by a run (an ``on_event`` or ``on_text`` callback) is
not the model's failure: the callback's own exception is raised out of the run unchanged,
marked by :func:`blame_callback` on its way out so that nothing on the way (the transport's
error classification, a task group) takes it for something else.
"""

from __future__ import annotations

from typing import Any

from subagent._text import scrub_surrogates
from subagent.records import (
    ErrorKind,
    InvalidStateError,
    RunFailedError,
    RunPausedError,
    SubAgentError,
)

__all__ = [
    "ConfigurationError",
    "ErrorKind",
    "InvalidStateError",
    "LLMContractError",
    "LLMError",
    "MissingVariableError",
    "ParserContractError",
    "RunFailedError",
    "RunPausedError",
    "ScriptExhaustedError",
    "StateMismatchError",
    "SubAgentError",
    "TemplateError",
    "blame_callback",
    "callback_error",
]


class ConfigurationError(SubAgentError, ValueError):
    """A definition or run option is invalid. The message names the field and the value.

    Attributes:
        field: The offending field's name.
        message: What is wrong with it.
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class TemplateError(SubAgentError, ValueError):
    """A prompt template is invalid or cannot be rendered.

    Attributes:
        template: The template's name (``prompt``, ``system``...), when one is at fault.
    """

    def __init__(self, message: str, template: str | None = None):
        super().__init__(message)
        self.template = template


class MissingVariableError(TemplateError, KeyError):
    """A template refers to a variable that the render context does not define.

    Attributes:
        variable: The missing variable's name (dotted, as written in the template).
        template: The template's name.
    """

    def __init__(self, variable: str, template: str):
        super().__init__(
            f"template {template!r} needs variable {variable!r}, which was not provided",
            template,
        )
        self.variable = variable

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class LLMError(SubAgentError):
    """A failed LLM call, classified so the runtime can decide whether to retry.

    Args:
        kind: What went wrong.
        message: A human-readable description (the provider's message when there is one).
        status_code: The HTTP status, when the call reached a server.
        retry_after: Seconds the provider asked us to wait (``Retry-After``).
        body: The provider's raw error body, for diagnosis.
        usage: ``(input_tokens, output_tokens)`` the failed call used, when the server
            reported them.

    Lone surrogates in ``message`` and ``body`` are replaced by U+FFFD, so the error can be
    stored in a :class:`~subagent.Step` that dumps as JSON.
    """

    def __init__(
        self,
        kind: ErrorKind | str,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
        body: str | None = None,
        usage: tuple[int, int] | None = None,
    ):
        self.kind = ErrorKind(kind)
        self.status_code = status_code
        self.retry_after = retry_after
        self.usage = usage
        self._replace_text(message, body)

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable (a batch shard's errors cross process boundaries); args holds the text.
        return (
            _rebuild_llm_error,
            (self.kind, self.message, self.status_code, self.retry_after, self.body,
             self.usage),
        )  # fmt: skip

    def _replace_text(self, message: str, body: str | None) -> None:
        """Set the message and body, and the text ``str()`` shows (used to redact secrets)."""
        self.message = scrub_surrogates(message)
        self.body = None if body is None else scrub_surrogates(body)
        status = f" (HTTP {self.status_code})" if self.status_code is not None else ""
        self.args = (f"{self.kind.value}{status}: {self.message}",)


def _rebuild_llm_error(
    kind: ErrorKind,
    message: str,
    status_code: int | None,
    retry_after: float | None,
    body: str | None,
    usage: tuple[int, int] | None,
) -> LLMError:
    return LLMError(kind, message, status_code=status_code, retry_after=retry_after, body=body,
                    usage=usage)  # fmt: skip


class StateMismatchError(InvalidStateError):
    """A saved :class:`~subagent.RunState` does not fit the agent asked to resume it.

    Attributes:
        part: What differs: ``version``, ``agent``, ``output``, ``tools``, ``prompts``,
            ``protocol``.
    """

    def __init__(self, part: str, message: str):
        SubAgentError.__init__(self, f"cannot resume this state: {part} differs: {message}")
        self.part = part
        self.field = part
        self.reason = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.part, self.reason))


def blame_user_code(exc: BaseException, what: str) -> BaseException:
    """Mark ``exc`` as a bug in user code that ran inside a turn (a model, a policy).

    It is raised out of the run as it is, never classified as a model error, with the turns
    taken so far (the one it broke included) in ``.turns``. Returns ``exc``.
    """
    if getattr(exc, _USER_CODE, None) is None:
        setattr(exc, _USER_CODE, what)
        setattr(exc, _CALLBACK, what)  # raised alone, as a callback's error is
        exc.add_note(f"raised by {what} inside a subagent run (its turns are in .turns)")
    return exc


def user_code_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a bug in user code that ran inside a turn (:func:`blame_user_code`)."""
    return getattr(exc, _USER_CODE, None) is not None


_USER_CODE = "_subagent_user_code"


class ScriptExhaustedError(SubAgentError):
    """A :class:`~subagent.ScriptedLLM` was called more often than its script allows."""


class ParserContractError(SubAgentError):
    """An output parser or validator raised, or returned something outside its contract.

    This is a bug in the parser, not a model error: it is raised out of the run (with the
    turns made so far in ``.turns``) instead of being fed back to the model.
    """


class LLMContractError(SubAgentError, TypeError):
    """A model broke the LLM protocol: ``complete()`` returned no ``LLMResponse``.

    It returned something else (a ``str``, say): a bug in the model's adapter, not a model
    error. It is raised out of the run, with the turns made so far in ``.turns`` (the last
    one names the error), instead of ending it as a failed step. The message names what
    ``complete()`` returned.
    """


_CALLBACK = "_subagent_callback"


def blame_callback(exc: BaseException, callback: str) -> BaseException:
    """Mark ``exc`` as raised by the user's ``callback`` (``on_event``, ``on_text``).

    A marked exception is raised out of the run as it is (never classified as a model
    error, never left inside an ``ExceptionGroup``), with a note naming the callback.
    Returns ``exc``.
    """
    if getattr(exc, _CALLBACK, None) is None:
        setattr(exc, _CALLBACK, callback)
        exc.add_note(f"raised by the {callback} callback of a subagent run")
    return exc


def callback_error(exc: BaseException) -> BaseException | None:
    """The user callback's exception behind ``exc`` (itself, or inside a group), if any."""
    if getattr(exc, _CALLBACK, None) is not None:
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = callback_error(inner)
            if found is not None:
                return found
    return None
