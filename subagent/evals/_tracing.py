"""Each case run of an evaluation as a trace of its own.

Read in the same viewer as production runs. One root span ``eval_case {dataset}`` per
case, repetition and variant, with the agent's ``invoke_agent`` span (and its turns)
inside it. Its attributes name the dataset, the case, the variant and whether the run was
correct; each judge's verdict is a ``gen_ai.evaluation.result`` event on it, after the
OpenTelemetry GenAI conventions
(``gen_ai.evaluation.name``, ``.score.value``, ``.score.label`` ``pass`` / ``fail``,
``error.type`` when the judge raised). A verdict's reason may quote the output: it is
recorded (``gen_ai.evaluation.explanation``) only when message content is captured.
With no tracer provider configured, nothing is made.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, SpanKind, Status, StatusCode

from subagent.__about__ import __version__
from subagent._text import shorten
from subagent.evals._judges import VerdictRecord
from subagent.observe._otel import ERROR_TEXT_LIMIT, capture_enabled

__all__ = ["EVALUATION_EVENT", "CaseTracer", "configured_provider"]

EVALUATION_EVENT: Final = "gen_ai.evaluation.result"


def configured_provider(provider: Any) -> Any:
    """``provider``, else the global one when one is configured, else ``None``."""
    if provider is None:
        unset = getattr(trace, "_TRACER_PROVIDER", False) is None
        if unset and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ:
            return None  # nothing configured: the spans cost nothing
        provider = trace.get_tracer_provider()
        if isinstance(provider, ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
    return provider


def _tracer(provider: Any) -> trace.Tracer | None:
    """The evaluation's tracer from ``provider`` (default: the global one), if any is set."""
    provider = configured_provider(provider)
    if provider is None:
        return None
    tracer: trace.Tracer = provider.get_tracer("subagent.evals", __version__)
    return tracer


class CaseTracer:
    """Opens the trace of each case run of one evaluation.

    Args:
        provider: The tracer provider (the evaluation's ``tracer_provider``); default: the
            global one. Without either, :meth:`case` opens nothing.
        dataset: The dataset's name.
    """

    def __init__(self, provider: Any, dataset: str):
        self._tracer = _tracer(provider)
        self._dataset = dataset
        self._capture = capture_enabled()

    def case(
        self, case: str, variant: str, repeat: int, tags: Sequence[str]
    ) -> contextlib.AbstractContextManager[CaseSpan | None]:
        """The span of one case run, current while the block runs (a new trace)."""
        if self._tracer is None:
            return _NO_SPAN
        return self._span(case, variant, repeat, tags)

    @contextlib.contextmanager
    def _span(
        self, case: str, variant: str, repeat: int, tags: Sequence[str]
    ) -> Iterator[CaseSpan | None]:
        assert self._tracer is not None
        attributes: dict[str, Any] = {
            "subagent.eval.dataset": self._dataset,
            "subagent.eval.case": case,
            "subagent.eval.variant": variant,
            "subagent.eval.repeat": repeat,
        }
        if tags:
            attributes["subagent.eval.tags"] = tuple(tags)
        with self._tracer.start_as_current_span(
            f"eval_case {self._dataset}",
            context=otel_context.Context(),  # a root: each case run is a trace of its own
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,  # an exception's message may quote content: raised()
            set_status_on_exception=False,
        ) as span:
            opened = CaseSpan(span, self._capture)
            try:
                yield opened
            except Exception as exc:
                opened.raised(exc)
                raise


_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


class CaseSpan:
    """The span of one case run, told its verdicts once the judges have spoken."""

    __slots__ = ("_capture", "_span")

    def __init__(self, span: trace.Span, capture: bool):
        self._span = span
        self._capture = capture

    def judged(self, correct: bool, verdicts: Sequence[VerdictRecord]) -> None:
        """Record whether the run was correct, and each verdict as an evaluation event."""
        self._span.set_attribute("subagent.eval.correct", correct)
        for verdict in verdicts:
            attributes: dict[str, Any] = {
                "gen_ai.evaluation.name": verdict.judge,
                "gen_ai.evaluation.score.value": verdict.score
                if verdict.score is not None
                else float(verdict.passed),
                "gen_ai.evaluation.score.label": "pass" if verdict.passed else "fail",
            }
            if verdict.error is not None:
                attributes["error.type"] = verdict.error.split(":", 1)[0]
                if self._capture:
                    attributes["gen_ai.evaluation.explanation"] = verdict.error
            elif verdict.reason is not None and self._capture:
                attributes["gen_ai.evaluation.explanation"] = verdict.reason
            self._span.add_event(EVALUATION_EVENT, attributes)

    def raised(self, exc: BaseException) -> None:
        """The run raised (a bug in the agent's code): an error span, the type only."""
        self._span.set_attribute("error.type", type(exc).__name__)
        text = f"{type(exc).__name__}: {exc}" if self._capture else type(exc).__name__
        self._span.set_status(Status(StatusCode.ERROR, shorten(text, ERROR_TEXT_LIMIT)))
