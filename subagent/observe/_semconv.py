"""Which GenAI semantic conventions a run's telemetry follows, and where content goes.

Two versions are emitted, chosen once from ``OTEL_SEMCONV_STABILITY_OPT_IN`` when this
module is imported (or when :func:`refresh_semconv` is called):

- :data:`PREVIOUS` (the default): what subagent has always emitted, the GenAI conventions
  as last published in ``open-telemetry/semantic-conventions`` (v1.41.0).
- :data:`LATEST` (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``): the
  conventions of ``open-telemetry/semantic-conventions-genai`` at :data:`CONVENTIONS_COMMIT`.

This is the transition the conventions prescribe: an instrumentation keeps emitting the
version it emitted by default, and ``gen_ai_latest_experimental`` in the comma-separated
``OTEL_SEMCONV_STABILITY_OPT_IN`` list switches it to the latest one, without the old.

Message content is captured only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
opts in (:func:`capture_mode`): on spans, on ``gen_ai.client.inference.operation.details``
events, or both. The variable is read when a run starts, so a test or an application can
turn it on and off between runs.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "CONVENTIONS_COMMIT",
    "CONVENTIONS_REPOSITORY",
    "DETAILS_EVENT",
    "LATEST",
    "LATEST_EXPERIMENTAL",
    "PREVIOUS",
    "STABILITY_OPT_IN_ENV",
    "Capture",
    "SemConv",
    "active_semconv",
    "capture_mode",
    "refresh_semconv",
    "semconv_from",
]

STABILITY_OPT_IN_ENV: Final = "OTEL_SEMCONV_STABILITY_OPT_IN"
"""The standard variable: a comma-separated list of the conventions to opt in to."""
LATEST_EXPERIMENTAL: Final = "gen_ai_latest_experimental"
"""The value of :data:`STABILITY_OPT_IN_ENV` that selects :data:`LATEST`."""
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Where message content goes: see :class:`Capture`."""
DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"
"""The event that carries an LLM call's messages (only with content capture on events)."""
CONVENTIONS_REPOSITORY: Final = "open-telemetry/semantic-conventions-genai"
CONVENTIONS_COMMIT: Final = "e9de14bafd9725937c6b0c219897260074a2896c"
"""The commit of :data:`CONVENTIONS_REPOSITORY` whose conventions :data:`LATEST` follows."""


class Capture(enum.Enum):
    """Where message content is recorded: the modes of :data:`CAPTURE_CONTENT_ENV`.

    The values are OpenTelemetry Python's GenAI utilities' (``NO_CONTENT``, ``SPAN_ONLY``,
    ``EVENT_ONLY``, ``SPAN_AND_EVENT``, in any case); ``true`` (also ``1``, ``yes``), the
    switch subagent has always read, means ``SPAN_ONLY``. Unset, empty, ``false`` or any
    other value: ``NO_CONTENT``.
    """

    NO_CONTENT = "no_content"
    SPAN_ONLY = "span_only"
    EVENT_ONLY = "event_only"
    SPAN_AND_EVENT = "span_and_event"

    @property
    def on_spans(self) -> bool:
        """Whether spans carry content (messages, tool arguments and results, error texts)."""
        return self in (Capture.SPAN_ONLY, Capture.SPAN_AND_EVENT)

    @property
    def on_events(self) -> bool:
        """Whether each LLM call emits a :data:`DETAILS_EVENT` with its messages."""
        return self in (Capture.EVENT_ONLY, Capture.SPAN_AND_EVENT)


_CAPTURE_VALUES: Final[Mapping[str, Capture]] = {
    "true": Capture.SPAN_ONLY,
    "1": Capture.SPAN_ONLY,
    "yes": Capture.SPAN_ONLY,
    **{mode.value: mode for mode in Capture},
}


def capture_mode(environ: Mapping[str, str] = os.environ) -> Capture:
    """Where message content goes, from :data:`CAPTURE_CONTENT_ENV` (default: nowhere)."""
    value = environ.get(CAPTURE_CONTENT_ENV, "").strip().lower()
    return _CAPTURE_VALUES.get(value, Capture.NO_CONTENT)


@dataclass(frozen=True, slots=True)
class SemConv:
    """The names and shapes of one version of the conventions, as subagent emits them.

    Attributes:
        latest: Whether this is :data:`LATEST`.
        cache_write_tokens: The attribute of input tokens written to a prompt cache.
        run_provider: Whether the ``invoke_agent`` span carries ``gen_ai.provider.name``.
        run_cache_tokens: Whether the ``invoke_agent`` span carries prompt-cache token sums.
        message_finish_reason: Whether each captured output message has a ``finish_reason``.
        inference_duration: The histogram of an LLM call's duration.
        invocation_duration: The histogram of a run's duration.
        token_usage: The histogram of token usage by ``gen_ai.token.type`` (previous), or
            ``None`` when usage is counted by the ``gen_ai.client.inference.usage.*``
            counters (latest).
    """

    latest: bool
    cache_write_tokens: str
    run_provider: bool
    run_cache_tokens: bool
    message_finish_reason: bool
    inference_duration: str
    invocation_duration: str
    token_usage: str | None


PREVIOUS: Final = SemConv(
    latest=False,
    cache_write_tokens="gen_ai.usage.cache_creation.input_tokens",
    run_provider=True,
    run_cache_tokens=True,
    message_finish_reason=True,
    inference_duration="gen_ai.client.operation.duration",
    invocation_duration="gen_ai.invoke_agent.duration",
    token_usage="gen_ai.client.token.usage",
)
"""The conventions subagent emits by default (``semantic-conventions`` v1.41.0)."""

LATEST: Final = SemConv(
    latest=True,
    cache_write_tokens="gen_ai.usage.cache_write.input_tokens",
    run_provider=False,
    run_cache_tokens=False,
    message_finish_reason=False,
    inference_duration="gen_ai.client.inference.duration",
    invocation_duration="gen_ai.invocation.duration",
    token_usage=None,
)
"""The conventions of :data:`CONVENTIONS_REPOSITORY` at :data:`CONVENTIONS_COMMIT`."""


def semconv_from(environ: Mapping[str, str] = os.environ) -> SemConv:
    """The conventions :data:`STABILITY_OPT_IN_ENV` in ``environ`` selects."""
    values = {part.strip().lower() for part in environ.get(STABILITY_OPT_IN_ENV, "").split(",")}
    return LATEST if LATEST_EXPERIMENTAL in values else PREVIOUS


_ACTIVE: SemConv = semconv_from()


def active_semconv() -> SemConv:
    """The conventions runs follow now: read from the environment once, at import."""
    return _ACTIVE


def refresh_semconv(environ: Mapping[str, str] = os.environ) -> SemConv:
    """Read :data:`STABILITY_OPT_IN_ENV` again, for runs started from now on.

    For an application that sets the variable after importing subagent, and for tests.
    """
    global _ACTIVE
    _ACTIVE = semconv_from(environ)
    return _ACTIVE
