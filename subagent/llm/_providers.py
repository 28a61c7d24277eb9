"""Model strings and the providers they name: the seam a provider registers on.

A model string is ``PROVIDER:MODEL``, ``PROVIDER:MODEL@BASE_URL`` or ``PROVIDER:@BASE_URL``
(the server's default model), the forms of ``SUBAGENT_LLM``. Wherever a model is expected
(``SubAgent(llm=...)``, ``run(llm=...)``, a :class:`~subagent.FallbackLLM`'s models, an
evaluation's variants) a string becomes an :class:`LLMSpec`, which opens its provider's
adapter for each call; :func:`open_llm` opens one adapter for many calls (the command
line's ``--llm``).

Each adapter module registers the providers it serves (:func:`register`) when it is
imported (``subagent.llm`` imports them all): a new provider is a module of its own that
registers its prefix, and nothing here changes. What a provider implies (a default URL,
a profile, which key it reads) is its adapter's business: the registry knows a provider's
name, whether its strings must name a model, how the error message shows its strings, and
how to open its adapter.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Protocol, Self

from subagent._errors import ConfigurationError
from subagent.llm._allow import check_model_request
from subagent.llm._protocol import LLMRequest, LLMResponse, StreamDelta
from subagent.llm._redact import redact_url_credentials

__all__ = [
    "SPEC_PROVIDERS",
    "SUBAGENT_LLM",
    "LLMSpec",
    "OpenedAdapter",
    "SpecProvider",
    "open_llm",
    "parse_subagent_llm",
    "register",
    "spec_forms",
]

SUBAGENT_LLM: Final = "SUBAGENT_LLM"
"""The variable that names a model by a string (read by ``OpenAIChat.from_env()``)."""


class OpenedAdapter(Protocol):
    """What a provider's opener returns: a streaming adapter that closes its connections."""

    model_name: str
    provider_name: str
    server_address: str
    server_port: int

    async def complete(self, request: LLMRequest) -> LLMResponse: ...

    def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


Opener = Callable[[str, Mapping[str, str], bool], OpenedAdapter]
"""Opens the adapter a model string names: ``(spec, environ, check_key)``. With
``check_key`` false, a missing key is not an error yet (it is checked at the first call)."""


@dataclass(frozen=True, slots=True)
class SpecProvider:
    """A provider a model string may name (the ``PROVIDER`` of ``PROVIDER:MODEL@URL``).

    Attributes:
        name: The prefix, in lower case (strings name it in any case).
        open: Opens its adapter for a string (see :data:`Opener`).
        forms: How a configuration error shows the strings it takes (quoted), for the
            list of the forms expected; providers that give the same text are listed once.
        needs_model: Whether its strings must name a model.
    """

    name: str
    open: Opener
    forms: str
    needs_model: bool = False


_providers: dict[str, SpecProvider] = {}

SPEC_PROVIDERS: Final[Mapping[str, SpecProvider]] = _providers
"""The providers a model string may name, by prefix, in the order they registered."""


def register(provider: SpecProvider) -> None:
    """Let model strings name ``provider`` (a provider of the same name is replaced)."""
    if not provider.name or provider.name != provider.name.lower() or ":" in provider.name:
        raise ConfigurationError(
            "provider.name", f"must be a non-empty lower-case prefix without ':', got "
            f"{provider.name!r}"
        )  # fmt: skip
    _providers[provider.name] = provider


def spec_forms() -> str:
    """What a configuration error says a model string looks like."""
    forms = dict.fromkeys(provider.forms for provider in _providers.values())
    return "expected " + ", or ".join(forms)


def parse_subagent_llm(
    spec: str, *, field: str = SUBAGENT_LLM
) -> tuple[str, str | None, str | None]:
    """Split a model string into ``(provider, model, base_url)``.

    Args:
        spec: ``PROVIDER:MODEL``, ``PROVIDER:MODEL@BASE_URL`` or ``PROVIDER:@BASE_URL``,
            where the provider is one registered (:data:`SPEC_PROVIDERS`). The base URL
            starts with ``http://`` or ``https://``; the model may contain ``:``, ``/`` and
            ``@`` (``ollama:qwen2.5:0.5b``).
        field: The name a configuration error gives (``SUBAGENT_LLM``, or ``llm`` for a
            string passed where a model is expected).

    Returns:
        The provider (lower case), the model (``None`` when empty) and the base URL
        (``None`` when absent: the provider's default, or the environment's).

    Raises:
        ConfigurationError: The value does not have that form, or names no model for a
            provider that needs one (``ollama``); the message names ``field`` and the
            value, with any URL credentials in it redacted.
    """
    if not isinstance(spec, str):
        raise ConfigurationError(field, f"must be a string, got {type(spec).__name__}")
    text = spec.strip()
    provider, colon, rest = text.partition(":")
    known = _providers.get(provider.lower())
    if not colon or known is None:
        raise ConfigurationError(field, f"{spec_forms()}, got {redact_url_credentials(spec)!r}")
    at = max(rest.rfind("@http://"), rest.rfind("@https://"))
    if at >= 0:
        model, base_url = rest[:at], rest[at + 1 :]
    else:
        if "@" in rest:
            raise ConfigurationError(
                field,
                f"the base URL after '@' must start with http:// or https://, "
                f"got {redact_url_credentials(spec)!r}",
            )
        model, base_url = rest, ""
    if known.needs_model and not model.strip():
        raise ConfigurationError(
            field,
            f"{known.name} needs a model ('{known.name}:MODEL'), "
            f"got {redact_url_credentials(spec)!r}",
        )
    return known.name, model.strip() or None, base_url.strip() or None


def open_llm(
    spec: str, *, field: str = "llm", environ: Mapping[str, str] | None = None
) -> OpenedAdapter:
    """The adapter a model string names, opened once: its connection pool serves every call.

    Close it with ``await llm.aclose()`` (or ``async with``). Its key is checked now, where
    its provider checks keys when an adapter is made.

    Raises:
        ConfigurationError: The string is not a model string (naming ``field``), or its
            adapter cannot be configured.
    """
    name, _, _ = parse_subagent_llm(spec, field=field)
    return _providers[name].open(spec.strip(), os.environ if environ is None else environ, True)


class LLMSpec:
    """The model a spec string names, as an :class:`~subagent.llm.LLM`.

    What ``SubAgent(llm="openai:gpt-4o-mini")`` (and ``llm=`` of ``run()`` and the batch
    functions) makes of a string. The forms are those of ``SUBAGENT_LLM``:
    ``PROVIDER:MODEL``, ``PROVIDER:MODEL@BASE_URL`` and ``PROVIDER:@BASE_URL``; the
    provider says which adapter, where its server listens unless the string says, and
    which key it reads (``openai``: ``OPENAI_API_KEY`` and a missing base URL from
    ``OPENAI_BASE_URL``; a local server's provider, ``ollama``, ``vllm``, ``llamacpp``,
    ``lmstudio``: its own default URL and profile, and no key). The ``SUBAGENT_LLM``
    variable itself is never read: the string says which model.

    Each call opens an adapter of its own and closes it when the call ends, so a spec works
    in any event loop, any number of times, and pickles. Connections are not reused between
    calls: for many calls to a remote server, pass an adapter (``OpenAIChat``), whose pool
    serves them all.

    Args:
        spec: The spec string.
        field: The name configuration errors give.
        environ: The environment to read; defaults to ``os.environ`` (read at each call).

    Raises:
        ConfigurationError: The string is not a spec (naming ``field`` and the value), or
            the model it names cannot be configured (OpenAI's own API without a model). A
            missing key is not checked here but at the first call, with the same error
            naming the key's variable (``OPENAI_API_KEY``): a module that defines agents
            imports without a key (its tests give the runs a test model).
    """

    def __init__(
        self, spec: str, *, field: str = "llm", environ: Mapping[str, str] | None = None
    ) -> None:
        self._provider, _, _ = parse_subagent_llm(spec, field=field)  # errors name the field
        self.spec: str = spec.strip()
        self._environ = environ
        probe = self._adapter(check_key=False)  # every value but the key checked now
        self.model_name: str = probe.model_name
        self.provider_name: str = probe.provider_name
        self.server_address: str = probe.server_address
        self.server_port: int = probe.server_port

    def __repr__(self) -> str:
        return f"LLMSpec({redact_url_credentials(self.spec)!r})"

    def _adapter(self, *, check_key: bool = True) -> OpenedAdapter:
        environ = os.environ if self._environ is None else self._environ
        return _providers[self._provider].open(self.spec, environ, check_key)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` through an adapter opened for this call."""
        check_model_request(self)
        async with self._adapter() as llm:
            return await llm.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream the reply to ``request`` through an adapter opened for this call."""
        check_model_request(self)
        async with self._adapter() as llm, aclosing(llm.stream(request)) as deltas:  # type: ignore[type-var]
            async for delta in deltas:
                yield delta
