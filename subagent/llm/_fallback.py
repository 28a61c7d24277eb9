"""FallbackLLM: the next model when a call fails in a way retries did not cure.

A turn's call goes to the first model; each model gets the run's transport retries
(:class:`~subagent.RetryPolicy`) first, and when its call still fails with an error that
another model may not have (rate limit, server error, timeout, connection), the same
request goes to the next model. Every failed attempt is a
:class:`~subagent.TransportRetry` of the turn, naming its ``model`` (and ``fallback_to``
on the attempt that moved the call on), and an event of the turn's chat span. An answer
that does not validate is not a failed call: the correction budget deals with it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Sequence
from contextlib import aclosing
from typing import Final

from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent.llm._protocol import (
    LLM,
    LLMRequest,
    LLMResponse,
    StreamDelta,
    StreamingLLM,
    Usage,
)
from subagent.llm._providers import LLMSpec
from subagent.llm._retry_policy import RetryPolicy, _kinds
from subagent.llm._transport import (
    DeltaHandler,
    RetriesItsCalls,
    TransportRetry,
    call_with_retries,
)

__all__ = ["DEFAULT_FALLBACK_ON", "FallbackLLM", "answering_names"]

DEFAULT_FALLBACK_ON: Final[frozenset[ErrorKind]] = frozenset(
    {ErrorKind.RATE_LIMIT, ErrorKind.SERVER_ERROR, ErrorKind.TIMEOUT, ErrorKind.CONNECTION}
)
"""The failures that move a call to the next model by default: those of one provider's
service (its quota, its servers, the way to it). A bad request or a rejected key would
fail the same way on a model behind the same gateway... or hide a bug: not by default."""

_NO_RETRIES: Final = RetryPolicy.none()


class FallbackLLM(RetriesItsCalls):
    """Several models as one: the next answers when a call to one fails for good.

    Each call goes to the first model. When it fails with an error in ``fallback_on``
    after the transport retries (the run's :class:`~subagent.RetryPolicy`, or
    ``retry_policy``), the same request goes to the next model, and so on; the last
    model's error ends the turn (``failed(llm_error)``, as for a single model). Other
    errors (a bad request, a rejected key) are raised at once. An invalid answer is no
    failed call: it goes through the correction budget like any other.

    Each failed attempt is recorded on the turn (``Turn.transport_retries``, with
    ``model`` set and ``fallback_to`` on the attempt that moved on) and as a
    ``transport_retry`` event of its chat span. The reply's ``model_name`` is the
    ``model_name`` of the model that answered, whatever name its server gives it (a
    nested ``FallbackLLM``'s reply keeps the name its own member set): the turn's
    ``model``, ``usage.by_model`` and the price of the reply (``UsageLimits(prices=...)``)
    go by it. Its ``model`` (the server's name) is filled in from the same name when the
    server leaves it empty. The chat span and metrics name the first model as the one
    requested (``gen_ai.request.model``) and the one that answered as
    ``gen_ai.response.model``.

    Streams where the models stream: a model that fails half-way through its reply is
    followed by the next one streaming from the start (the run's observers are told, as
    for a retry).

    Args:
        models: The models in order of preference: LLMs or spec strings
            (``"openai:gpt-4o-mini"``).
        fallback_on: The error kinds that move a call on (default
            :data:`DEFAULT_FALLBACK_ON`: rate limit, server error, timeout, connection).
        retry_policy: The transport retries each model gets before the next is tried;
            ``None`` (default): the run's. ``RetryPolicy.none()`` moves on at the first
            failure. Called directly (``complete()`` outside a run), each model is called
            once unless this is set.

    Raises:
        ConfigurationError: ``models`` is empty or holds something that is not a model,
            or ``fallback_on`` names an unknown error kind; the message names the field.
    """

    def __init__(
        self,
        models: Sequence[LLM | str],
        *,
        fallback_on: Collection[ErrorKind | str] = DEFAULT_FALLBACK_ON,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        if isinstance(models, str) or not isinstance(models, Sequence) or not models:
            raise ConfigurationError(
                "models", f"must be a non-empty list of models, got {models!r:.80}"
            )
        self.models: tuple[LLM, ...] = tuple(
            _checked_model(model, position) for position, model in enumerate(models)
        )
        try:
            self.fallback_on: frozenset[ErrorKind] = _kinds(fallback_on)
        except ConfigurationError as exc:
            raise ConfigurationError("fallback_on", exc.message) from None
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise ConfigurationError("retry_policy", f"must be a RetryPolicy, got {retry_policy!r}")
        self.retry_policy = retry_policy
        self._names = tuple(_name_of(model) for model in self.models)
        # Every name a reply may carry as its model_name: a nested FallbackLLM's own.
        self.model_names: tuple[str, ...] = tuple(
            name for model in self.models for name in _answering(model)
        )
        first = self.models[0]
        # What traces and metrics record as the model requested: the first one.
        self.model_name: str = self._names[0]
        self.provider_name: str | None = getattr(first, "provider_name", None)
        self.server_address: str | None = getattr(first, "server_address", None)
        self.server_port: int | None = getattr(first, "server_port", None)

    def __repr__(self) -> str:
        return f"FallbackLLM([{', '.join(repr(model) for model in self.models)}])"

    async def answer_with_retries(
        self,
        request: LLMRequest,
        policy: RetryPolicy,
        call_timeout: float | None,
        on_retry: Callable[[TransportRetry], None],
        on_delta: DeltaHandler | None,
    ) -> LLMResponse:
        """Each model in turn, with its transport retries, until one answers.

        Raises:
            LLMError: The last model's error, or the first error not in ``fallback_on``.
        """
        policy = self.retry_policy or policy
        last = len(self.models) - 1
        for position, model in enumerate(self.models):
            name = self._names[position]
            attempts = _Attempts(on_retry, name)
            try:
                response = await call_with_retries(
                    model, request, policy, call_timeout, attempts, on_delta
                )
            except LLMError as error:
                if position == last or error.kind not in self.fallback_on:
                    raise
                input_tokens, output_tokens = error.usage or (0, 0)
                on_retry(TransportRetry(
                    attempt=attempts.count + 1, kind=error.kind, message=error.message,
                    delay_s=0.0, usage=Usage(input_tokens=input_tokens,
                                             output_tokens=output_tokens),
                    model=name, fallback_to=self._names[position + 1],
                ))  # fmt: skip
                continue
            return _answered_by(response, name)
        raise AssertionError("unreachable: the last model's error is raised")  # pragma: no cover

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` with the first model that does (no retries unless configured).

        Raises:
            LLMError: The last model's error, or the first error not in ``fallback_on``.
        """
        return await self.answer_with_retries(
            request, self.retry_policy or _NO_RETRIES, None, _ignore, None
        )

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream the reply of the first model that answers.

        A model that cannot stream gives its whole reply as one piece; a model that fails
        half-way is followed by the next one streaming from the start.

        Raises:
            LLMError: The last model's error, or the first error not in ``fallback_on``.
        """
        last = len(self.models) - 1
        for position in range(len(self.models)):
            try:
                async with aclosing(self._reply_of(position, request)) as deltas:
                    async for delta in deltas:
                        yield delta
                return
            except LLMError as error:
                if position == last or error.kind not in self.fallback_on:
                    raise

    async def _reply_of(
        self, position: int, request: LLMRequest
    ) -> AsyncGenerator[StreamDelta, None]:
        model, name = self.models[position], self._names[position]
        if not isinstance(model, StreamingLLM):
            response = _answered_by(await model.complete(request), name)
            if response.text or response.reasoning:
                yield StreamDelta(text=response.text, reasoning=response.reasoning)
            yield StreamDelta(response=response)
            return
        async with aclosing(model.stream(request)) as deltas:  # type: ignore[type-var]
            async for delta in deltas:
                if delta.response is not None:
                    yield StreamDelta(response=_answered_by(delta.response, name))
                    return
                yield delta
        raise LLMError(ErrorKind.INVALID_RESPONSE, "the stream ended without a final response")


class _Attempts:
    """Reports one model's retries with its name, and counts them."""

    __slots__ = ("_name", "_report", "count")

    def __init__(self, report: Callable[[TransportRetry], None], name: str):
        self._report = report
        self._name = name
        self.count = 0

    def __call__(self, retry: TransportRetry) -> None:
        self.count += 1
        self._report(retry.model_copy(update={"model": self._name}))


def _ignore(retry: TransportRetry) -> None:
    return None


def _answered_by(response: LLMResponse, name: str) -> LLMResponse:
    """``response`` naming ``name`` as the model that produced it (unless a member did)."""
    if response.model_name is not None and response.model:
        return response
    update = {"model_name": response.model_name or name, "model": response.model or name}
    return response.model_copy(update=update)


def answering_names(llm: object) -> tuple[str | None, ...]:
    """The names the replies of ``llm`` are counted under (their ``model_name``).

    A :class:`FallbackLLM`'s: each of its models' (a nested one's members in its place); a
    model wrapping another (``wrapped``: a :class:`~subagent.durable.DurableLLM`) is
    looked through. Any other model's: its own ``model_name`` (``None`` when it names none).
    """
    inner = _unwrapped(llm)
    if isinstance(inner, FallbackLLM):
        return inner.model_names
    name = getattr(llm, "model_name", None)
    return (name if isinstance(name, str) else None,)


def _answering(model: LLM) -> tuple[str, ...]:
    """The names a reply of ``model`` (a member) may carry: its own, or a nested fallback's."""
    inner = _unwrapped(model)
    if isinstance(inner, FallbackLLM):
        return inner.model_names
    return (_name_of(model),)


def _unwrapped(model: object) -> object:
    """The model ``model`` wraps (through its ``wrapped``, a few levels deep), or itself."""
    for _ in range(8):
        inner = getattr(model, "wrapped", None)
        if inner is None or not isinstance(inner, LLM):
            break
        model = inner
    return model


def _name_of(model: LLM) -> str:
    return str(getattr(model, "model_name", None) or type(model).__name__)


def _checked_model(model: object, position: int) -> LLM:
    field = f"models[{position}]"
    if isinstance(model, str):
        return LLMSpec(model, field=field)
    if not callable(getattr(model, "complete", None)):
        raise ConfigurationError(
            field, f"{model!r:.80} is not an LLM: it needs an `async def complete(request)` method"
        )
    return model  # type: ignore[return-value]
