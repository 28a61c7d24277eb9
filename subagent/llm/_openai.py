"""An adapter for OpenAI-compatible chat-completions servers, over httpx.

:class:`OpenAIChat` speaks ``POST {base_url}/chat/completions`` as served by OpenAI, vLLM,
llama.cpp (``llama-server`` and ``llama-cpp-python``), Ollama's ``/v1`` and most gateways.
It makes exactly one HTTP call per :meth:`OpenAIChat.complete` and either returns an
:class:`~subagent.llm.LLMResponse` or raises a classified :class:`~subagent.LLMError`. It
never retries by itself: the runtime owns retries (see :class:`~subagent.RetryPolicy`).

Configuration comes from the arguments, then from the environment:

``SUBAGENT_LLM``
    ``PROVIDER:MODEL``, ``PROVIDER:MODEL@BASE_URL`` or ``PROVIDER:@BASE_URL`` (the server's
    default model), where the provider is ``openai`` or a local server: ``ollama``
    (``http://127.0.0.1:11434/v1`` unless a URL is given), ``vllm`` (``:8000``),
    ``llamacpp`` (llama.cpp's ``llama-server``, ``:8080``) or ``lmstudio`` (``:1234``), each
    with its :class:`~subagent.llm.ModelProfile` and no API key. The base URL starts with
    ``http://`` or ``https://``; the model may contain ``:`` and ``/``
    (``ollama:qwen2.5:0.5b``).
``OPENAI_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``
    The usual variables; ``SUBAGENT_LLM`` wins over the first two. The key is never taken
    from ``SUBAGENT_LLM`` so that it stays out of logs that print the model spec, and is
    sent only to ``openai:`` servers.

The module registers those providers on the model strings' seam
(:mod:`subagent.llm._providers`). The JSON sent and read lives in :mod:`subagent.llm._wire`;
what every HTTP adapter shares (the client, limits, the classification of errors) in
:mod:`subagent.llm._http`; streamed events are read by :mod:`subagent.llm._sse`, calls
written as text by :mod:`subagent.llm._text_calls`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

import anyio
import httpx

from subagent._checks import check_int, check_seconds
from subagent._errors import ConfigurationError, LLMError
from subagent.llm._allow import check_model_request
from subagent.llm._decode import ACCEPT_ENCODING
from subagent.llm._http import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_STREAM_BYTES,
    DEFAULT_TOTAL_TIMEOUT,
    MALFORMED,
    MAX_ERROR_READ,
    check_deadline,
    deadline,
    malformed_reply,
    new_client,
    server_url,
    status_error,
    transport_error,
)
from subagent.llm._profile import (
    LLAMA_CPP,
    LMSTUDIO,
    OLLAMA,
    OPENAI,
    OPENAI_COMPATIBLE,
    VLLM,
    ModelProfile,
    check_output,
    identify,
    profile_named,
    remember,
    remembered,
)
from subagent.llm._protocol import (
    LLMRequest,
    LLMResponse,
    StopReason,
    StreamDelta,
    UnsupportedOutputError,
)
from subagent.llm._providers import SUBAGENT_LLM, SpecProvider, parse_subagent_llm, register
from subagent.llm._redact import Redactor, redact_url_credentials
from subagent.llm._sse import SSEEvents, read_body
from subagent.llm._structured import answer_from_tool, as_text
from subagent.llm._text_calls import tool_calls_in_text
from subagent.llm._wire import (
    StreamAccumulator,
    parse_completion,
    rejects_output_mode,
    rejects_stream_options,
    request_body,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_STREAM_BYTES",
    "DEFAULT_TOTAL_TIMEOUT",
    "PROBE_TIMEOUT",
    "OpenAIChat",
]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
"""Where requests go when neither the arguments nor the environment name a server."""

PROBE_TIMEOUT: Final = 5.0
"""Seconds the one ``GET /models`` that identifies an unknown server may take in all; past
it, or on any failure, the server is taken to follow OpenAI's API."""

_MAX_MODELS_READ: Final = 64 * 1024  # a model list is read to here (its first entries tell)


# -- the model strings it serves ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Server:
    """What a model string's provider implies for this adapter (``vllm:MODEL@URL``).

    Attributes:
        name: The prefix.
        base_url: The base URL when the string names none (``None``: from the environment).
        profile: The server's profile (``None``: found from the host, else asked).
        reads_openai_key: Whether ``OPENAI_API_KEY`` is sent (only to OpenAI-like servers;
            a local server needs no key, and gets none it was not given).
        needs_model: Whether the string must name a model.
    """

    name: str
    base_url: str | None
    profile: ModelProfile | None
    reads_openai_key: bool = False
    needs_model: bool = False


_SERVERS: Final[Mapping[str, _Server]] = {
    "openai": _Server("openai", None, None, reads_openai_key=True),
    "ollama": _Server("ollama", "http://127.0.0.1:11434/v1", OLLAMA, needs_model=True),
    "vllm": _Server("vllm", "http://127.0.0.1:8000/v1", VLLM),
    "llamacpp": _Server("llamacpp", "http://127.0.0.1:8080/v1", LLAMA_CPP),
    "lmstudio": _Server("lmstudio", "http://127.0.0.1:1234/v1", LMSTUDIO),
}
"""The providers of model strings this adapter serves, by prefix."""

_FORMS: Final = (
    "'openai:MODEL', 'openai:MODEL@BASE_URL' or 'openai:@BASE_URL', or a local "
    "server's 'ollama:', 'vllm:', 'llamacpp:' or 'lmstudio:' in place of 'openai:'"
)


class OpenAIChat:
    """An :class:`~subagent.llm.LLM` that calls an OpenAI-compatible chat-completions API.

    Arguments left as ``None`` are read from the environment (see the module docs):
    ``model`` from ``SUBAGENT_LLM`` then ``OPENAI_MODEL``; ``base_url`` from
    ``SUBAGENT_LLM`` then ``OPENAI_BASE_URL``, else :data:`DEFAULT_BASE_URL`; ``api_key``
    from ``OPENAI_API_KEY``. A model is required only for OpenAI's own endpoint: local
    servers answer with the model they serve when the request names none.

    The adapter owns its ``httpx.AsyncClient`` unless one is passed in; close an owned one
    with :meth:`aclose` or ``async with OpenAIChat(...) as llm:``. A client is bound to the
    event loop that first uses it: use one adapter per ``anyio.run``.

    Args:
        model: The model to request.
        base_url: The API root including the version, e.g. ``http://127.0.0.1:8080/v1``.
        api_key: Sent as ``Authorization: Bearer ...`` when set. A server that echoes it
            never gets it stored: every text it sends back (error messages and bodies,
            replies, tool calls) has the key, and the values of secret ``headers``
            (``Authorization``, ``Proxy-Authorization``, ``api-key``, ``x-api-key``), replaced
            by ``[REDACTED]`` before it leaves the adapter. Values shorter than 8 characters
            are not redacted.
        timeout: Seconds for connecting, and for each read or write of the HTTP exchange
            (between two streamed chunks when streaming). ``None`` disables it. The runtime
            also bounds each whole call with its own ``timeout``.
        total_timeout: Seconds one whole call may take, streaming included (default 600);
            past it the call fails as a ``timeout`` error (retried by the default policy).
            ``None`` disables it.
        max_response_bytes: The largest reply read, in bytes after decompression (default
            32 MiB): a larger body is refused before it is read when its
            ``Content-Length`` says so, else reading stops at the limit. For a stream, the
            limit applies to each event and to the assembled text and tool-call arguments
            (in characters). Either way the call fails as ``response_too_large``, which is
            not retried. ``None`` disables it.
        max_stream_bytes: The most bytes one streamed reply may send in all (default
            256 MiB); past it the call fails as ``response_too_large``. ``None`` disables it.
        max_connections: Connections the owned client's pool opens to the server at once
            (default 100; at most 20 are kept alive between calls). One adapter is safe to
            share across concurrent runs (a whole batch): calls beyond this wait for a free
            connection, within ``timeout``. Not used with ``http_client``.
        http_client: A client to use instead of an owned one; it is never closed here.
            Its own base URL and timeout are not used: every request carries both.
        default_settings: Settings merged under each request's ``settings``
            (``temperature``, ``max_tokens``, ``seed``, ``response_format``...).
        headers: Extra headers sent with every request.
        provider_name: The provider recorded in traces (``gen_ai.provider.name``).
        text_tool_calls: Also recognise tool calls written as text, for servers that do
            not parse them (llama-cpp-python with a model's own chat template): when tools
            were offered, no native call came back, and the whole reply is a JSON object
            ``{"name": <an offered tool>, "arguments": {...}}`` (or a list of them, or
            Hermes/Qwen ``<tool_call>...</tool_call>`` blocks), it becomes tool calls.
            Anything else stays text. ``None`` (the default) takes the profile's: on for
            every server but OpenAI's own API.
        profile: What the server can do (:class:`~subagent.llm.ModelProfile`, or the name
            of a known one: ``"llama-cpp-python"``, ``"vllm"``...). ``None`` (the default)
            takes the model string's provider's (``SUBAGENT_LLM=vllm:...``), OpenAI's for
            ``api.openai.com``, and for any other server finds it out when a request first
            asks for an output mode other than ``text``: one ``GET {base_url}/models``
            (its ``owned_by`` names llama-cpp-python, llama.cpp, vLLM, Ollama or LM
            Studio), remembered for the process per base URL and model. Until then, and
            when the answer names none of them, the server is taken to follow OpenAI's API.

    Raises:
        ConfigurationError: A value is invalid; the message names the field.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = 60.0,
        *,
        total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
        max_stream_bytes: int | None = DEFAULT_MAX_STREAM_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        http_client: httpx.AsyncClient | None = None,
        default_settings: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        provider_name: str = "openai",
        text_tool_calls: bool | None = None,
        profile: ModelProfile | str | None = None,
        _environ: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if _environ is None else _environ
        spec_model: str | None = None
        spec_url: str | None = None
        provider = _SERVERS["openai"]
        spec = environ.get(SUBAGENT_LLM, "").strip()
        if spec:
            named, spec_model, spec_url = parse_subagent_llm(spec)
            if named not in _SERVERS:
                raise ConfigurationError(
                    SUBAGENT_LLM,
                    f"{redact_url_credentials(spec)!r} names a model of {named}, which "
                    f"OpenAIChat does not serve: give the string itself as the model "
                    f"(llm=...), or use {named}'s own adapter",
                )
            if not base_url:  # the spec's provider says which server, unless base_url does
                provider = _SERVERS[named]
                spec_url = spec_url or provider.base_url
        resolved_url = (
            base_url or spec_url or environ.get("OPENAI_BASE_URL", "").strip() or DEFAULT_BASE_URL
        )
        resolved_model = model or spec_model or environ.get("OPENAI_MODEL", "").strip() or None
        env_key = environ.get("OPENAI_API_KEY") if provider.reads_openai_key else None
        resolved_key = api_key if api_key is not None else env_key or None

        server = server_url(resolved_url)
        url, basic, url_secrets = server.url, server.basic, server.secrets
        is_openai = url.host == "api.openai.com"
        if is_openai and not resolved_model:
            raise ConfigurationError(
                "model", "OpenAI's API needs a model: pass model= or set OPENAI_MODEL"
            )
        if is_openai and not resolved_key:
            raise ConfigurationError(
                "api_key", "OpenAI's API needs a key: pass api_key= or set OPENAI_API_KEY"
            )
        checked_timeout = check_seconds("timeout", timeout)
        self.total_timeout: float | None = check_seconds("total_timeout", total_timeout)
        self.max_response_bytes: int | None = (
            None
            if max_response_bytes is None
            else check_int("max_response_bytes", max_response_bytes, 1)
        )
        self.max_stream_bytes: int | None = (
            None if max_stream_bytes is None else check_int("max_stream_bytes", max_stream_bytes, 1)
        )
        if not provider_name:
            raise ConfigurationError("provider_name", "must not be empty")

        self.model: str | None = resolved_model
        self.model_name: str = resolved_model or "default"
        self.provider_name: str = provider_name
        self.base_url: str = str(url)
        self.server_address: str = url.host
        self.server_port: int = url.port or (443 if url.scheme == "https" else 80)
        self.timeout: float | None = checked_timeout
        self.default_settings: dict[str, Any] = dict(default_settings or {})
        self._endpoint = f"{self.base_url}/chat/completions"
        # The address a failed connection names (credentials in the URL removed).
        self._where = redact_url_credentials(self._endpoint)
        self._timeout = httpx.Timeout(self.timeout)
        # Only encodings decoded in bounded pieces (see _decode): a gzip bomb is counted
        # as it inflates, never inflated whole first.
        self._headers: dict[str, str] = {
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        if resolved_key:
            self._headers["Authorization"] = f"Bearer {resolved_key}"
        if basic is not None:  # URL credentials win over a key, as httpx's own auth did
            self._headers["Authorization"] = basic
        self._headers.update(headers or {})
        given = provider.profile if profile is None else profile_named(profile)
        if given is None and is_openai:
            given = OPENAI
        # None: found out when a request first needs it (see find_profile).
        self._given_profile: ModelProfile | None = given
        self._found_profile: ModelProfile | None = None
        self._probe_lock: anyio.Lock | None = None
        if text_tool_calls is not None and not isinstance(text_tool_calls, bool):
            raise ConfigurationError("text_tool_calls", "must be True, False or None")
        self.text_tool_calls: bool = (
            (given or OPENAI_COMPATIBLE).text_tool_calls
            if text_tool_calls is None
            else text_tool_calls
        )
        # Streams ask for their usage until a server refuses stream_options (see stream()).
        self._stream_usage = True
        self._owns_client = http_client is None
        check_int("max_connections", max_connections, 1)
        self._client = (
            http_client if http_client is not None else new_client(url.host, max_connections)
        )
        # Every text a server sends back is redacted of these before it is stored.
        self._redactor = Redactor.for_request(
            resolved_key, self._headers, self._client.headers, extra=url_secrets
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIChat:
        """Build an adapter from ``SUBAGENT_LLM`` or the ``OPENAI_*`` variables.

        Args:
            environ: The variables to read; defaults to ``os.environ``.
            **overrides: Constructor arguments that win over the environment.

        Returns:
            The configured adapter.

        Raises:
            ConfigurationError: None of ``SUBAGENT_LLM``, ``OPENAI_BASE_URL`` and
                ``OPENAI_MODEL`` is set (and no override names a server or model), or a
                value is invalid.
        """
        env = os.environ if environ is None else environ
        if not (cls.env_configured(env) or overrides.get("base_url") or overrides.get("model")):
            raise ConfigurationError(
                SUBAGENT_LLM,
                "no LLM configured: set SUBAGENT_LLM (e.g. 'openai:gpt-4o-mini', "
                "'ollama:qwen2.5:0.5b' or 'openai:local@http://127.0.0.1:8080/v1') or "
                "OPENAI_BASE_URL/OPENAI_MODEL",
            )
        return cls(_environ=env, **overrides)

    @staticmethod
    def env_configured(environ: Mapping[str, str] | None = None) -> bool:
        """Whether ``SUBAGENT_LLM``, ``OPENAI_BASE_URL`` or ``OPENAI_MODEL`` is set."""
        env = os.environ if environ is None else environ
        return any(
            env.get(name, "").strip() for name in (SUBAGENT_LLM, "OPENAI_BASE_URL", "OPENAI_MODEL")
        )

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model_name!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> OpenAIChat:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this adapter created it."""
        if self._owns_client:
            await self._client.aclose()

    # -- what the server can do -------------------------------------------------------------

    @property
    def profile(self) -> ModelProfile:
        """The server's profile as known now: given, found out, or OpenAI's API assumed.

        For a server whose profile was neither given nor found out yet, this is
        ``OPENAI_COMPATIBLE`` until :meth:`find_profile` (or a request asking for an output
        mode) asks the server.
        """
        known = self._given_profile or self._found_profile
        return known or remembered(self.base_url, self.model) or OPENAI_COMPATIBLE

    async def find_profile(self) -> ModelProfile:
        """The server's profile, asking the server once if it is not known.

        The one question is ``GET {base_url}/models`` (with this adapter's headers, at most
        :data:`PROBE_TIMEOUT` seconds, its first 64 KiB read): the ``owned_by`` of the
        model's entry names the server. The answer is remembered for the process, per base
        URL and model; a server that does not answer, or names none the adapter knows, is
        taken to follow OpenAI's API (``OPENAI_COMPATIBLE``), remembered the same way.
        """
        known = self._given_profile or self._found_profile
        if known is not None:
            return known
        if self._probe_lock is None:
            self._probe_lock = anyio.Lock()
        async with self._probe_lock:  # concurrent runs of one adapter ask once
            found = self._found_profile or remembered(self.base_url, self.model)
            if found is None:
                found = await self._ask_server()
                remember(self.base_url, self.model, found)
            self._found_profile = found  # kept here too, whatever the process forgets
        return found

    async def _ask_server(self) -> ModelProfile:
        text = ""
        with anyio.move_on_after(PROBE_TIMEOUT):
            try:
                async with self._client.stream(
                    "GET", f"{self.base_url}/models", headers=self._headers,
                    timeout=self._timeout,
                ) as response:  # fmt: skip
                    if response.status_code == 200:
                        text = await read_body(response, _MAX_MODELS_READ, truncate=True)
            except (httpx.HTTPError, LLMError):
                text = ""  # no answer: nothing identified
        return identify(text, self.model)

    def describe_server(self) -> str:
        """The server as errors name it: its profile, base URL and model (never a key)."""
        return f"{self.profile.name} at {self.base_url} (model {self.model_name!r})"

    async def _served(self, request: LLMRequest) -> tuple[LLMRequest, ModelProfile]:
        """``request`` as the server can serve it, and the profile to serve it with.

        An output mode the server cannot serve is refused, unless the request falls back
        to text (``OutputRequest.fallback``): then it goes without the mode.
        """
        output = getattr(request, "output", None)  # absent from requests built before it
        if output is None or output.mode == "text":
            return request, self.profile
        profile = await self.find_profile()
        try:
            check_output(output, profile, self.describe_server())
        except UnsupportedOutputError:
            if output.fallback != "text":
                raise
            return as_text(request), profile
        return request, profile

    def _refused_output(self, request: LLMRequest, error: LLMError) -> LLMRequest | None:
        """The request to send again as text when the server refused its output mode.

        A server taken to have structured output (one not identified is taken to follow
        OpenAI's API) may refuse it, naming the field: a request that falls back to text is
        sent again without the mode, once. A refusal for anything else is the error.
        """
        output = getattr(request, "output", None)
        if output is None or output.fallback != "text" or not rejects_output_mode(error):
            return None
        return as_text(request)

    def _without_structured_output(self) -> None:
        """Remember that this server refused a structured output its profile promised."""
        profile = dataclasses.replace(self.profile, structured_output=None)
        if self._given_profile is not None:
            self._given_profile = profile
        else:
            self._found_profile = profile
            remember(self.base_url, self.model, profile)

    # -- requests ---------------------------------------------------------------------------

    def build_body(self, request: LLMRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body sent for ``request`` (public for inspection and tests).

        A streamed request asks for usage in the stream
        (``stream_options: {"include_usage": true}``) until the server refuses the field.
        An output mode is written in the dialect of :attr:`profile` as known now (a request
        sent through :meth:`complete` or :meth:`stream` finds the profile out first).

        Args:
            request: The request to serialise.
            stream: Whether to ask for server-sent events.

        Returns:
            A JSON-serialisable dict.
        """
        return self._body(request, stream, self.profile)

    def _body(self, request: LLMRequest, stream: bool, profile: ModelProfile) -> dict[str, Any]:
        return request_body(
            request, model=self.model, default_settings=self.default_settings, stream=stream,
            stream_usage=self._stream_usage,
            dialect=profile.structured_output or "json_schema",
        )  # fmt: skip

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send one chat-completions request and return the reply.

        Args:
            request: The messages, tools and settings of this turn.

        Returns:
            The reply, with its stop reason normalised and the raw one kept.

        Raises:
            LLMError: The call failed; ``kind`` says how (see the docs' table).
            ModelRequestsBlockedError: Tests blocked real requests (``subagent.testing``).
            UnsupportedOutputError: The request asks for an output mode the server cannot
                serve; nothing was sent.
        """
        check_model_request(self)
        request, profile = await self._served(request)
        try:
            return await self._complete(request, profile)
        except LLMError as error:
            again = self._refused_output(request, error)
            if again is None:
                raise
        reply = await self._complete(again, profile)
        self._without_structured_output()
        return reply

    async def _complete(self, request: LLMRequest, profile: ModelProfile) -> LLMResponse:
        body = self._body(request, False, profile)
        text = ""
        status = 0
        try:
            try:
                with anyio.CancelScope(deadline=deadline(self.total_timeout)) as scope:
                    async with self._client.stream(
                        "POST", self._endpoint, json=body, headers=self._headers,
                        timeout=self._timeout,
                    ) as response:  # fmt: skip
                        status = response.status_code
                        if status >= 300:
                            text = await read_body(response, MAX_ERROR_READ, truncate=True)
                            raise status_error(status, response.headers, text)
                        text = await read_body(response, self.max_response_bytes)
                check_deadline(scope, self.total_timeout)
            except httpx.HTTPError as error:
                raise transport_error(error, self._where) from error
            try:
                reply = parse_completion(text, self.model, status)
                return self._redactor.response(self._read_reply(request, reply))
            except MALFORMED as error:
                raise malformed_reply(error, text, status) from None
        except LLMError as error:
            self._redactor.error(error)
            raise

    def _read_reply(self, request: LLMRequest, reply: LLMResponse) -> LLMResponse:
        """The reply as the request asked for it.

        Calls written as text become calls (when enabled), then a forced answer tool's call
        becomes the reply's text.
        """
        output = getattr(request, "output", None)  # absent from requests built before it
        answer_tool = output.name if output is not None and output.mode == "tool" else None
        if self.text_tool_calls and not reply.tool_calls and (request.tools or answer_tool):
            names = {tool.name for tool in request.tools}
            if answer_tool is not None:
                names.add(answer_tool)
            calls = tool_calls_in_text(reply.text, names)
            if calls:
                reply = reply.model_copy(
                    update={"text": "", "tool_calls": calls, "stop_reason": StopReason.TOOL_CALLS}
                )
        if output is not None and answer_tool is not None:
            return answer_from_tool(reply, output)
        return reply

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream one reply as server-sent events.

        Yields text deltas as they arrive; the last item carries the complete
        :class:`~subagent.llm.LLMResponse` (tool calls assembled from their deltas, usage
        from the final chunk via ``stream_options.include_usage``). Closing the iterator
        early (``aclose()``, or leaving ``async with contextlib.aclosing(...)``) closes the
        HTTP response.

        Args:
            request: The messages, tools and settings of this turn.

        Yields:
            :class:`~subagent.llm.StreamDelta` items.

        Raises:
            LLMError: The call failed, before or during the stream.
            ModelRequestsBlockedError: Tests blocked real requests (``subagent.testing``).
            UnsupportedOutputError: The request asks for an output mode the server cannot
                serve; nothing was sent.
        """
        check_model_request(self)
        request, profile = await self._served(request)
        fell_back = False
        headers = {**self._headers, "Accept": "text/event-stream"}
        redactor = self._redactor
        ends = deadline(self.total_timeout)
        try:
            try:
                async with AsyncExitStack() as stack:
                    # Every await runs under the call's deadline; no yield does (a cancel
                    # scope must not span a yield of an async generator).
                    with anyio.CancelScope(deadline=ends) as scope:
                        while True:
                            asked_usage = self._stream_usage
                            response = await stack.enter_async_context(
                                self._client.stream(
                                    "POST", self._endpoint, headers=headers,
                                    json=self._body(request, True, profile),
                                    timeout=self._timeout,
                                )
                            )  # fmt: skip
                            status = response.status_code
                            if status < 300:
                                break
                            text = await read_body(response, MAX_ERROR_READ, truncate=True)
                            error = status_error(status, response.headers, text)
                            again = None if fell_back else self._refused_output(request, error)
                            if again is not None:  # its output mode refused: once as text
                                request, fell_back = again, True
                                continue
                            if not (asked_usage and rejects_stream_options(error)):
                                raise error
                            # A server that does not know stream_options: asked again
                            # without it, now and for the rest of this adapter's calls.
                            self._stream_usage = False
                        if fell_back:
                            self._without_structured_output()
                        streamed = "text/event-stream" in response.headers.get("content-type", "")
                        if not streamed:  # the server ignored stream=true: one piece
                            text = await read_body(response, self.max_response_bytes)
                    check_deadline(scope, self.total_timeout)
                    if not streamed:
                        try:
                            whole = parse_completion(text, self.model, status)
                            whole = redactor.response(self._read_reply(request, whole))
                        except MALFORMED as error:
                            raise malformed_reply(error, text, status) from None
                        if whole.text:
                            yield StreamDelta(text=whole.text)
                        yield StreamDelta(response=whole)
                        return
                    accumulator = StreamAccumulator(self.model, self.max_response_bytes)
                    events = SSEEvents(
                        response,
                        max_event_bytes=self.max_response_bytes,
                        max_total_bytes=self.max_stream_bytes,
                    )
                    stack.push_async_callback(events.aclose)
                    while True:
                        with anyio.CancelScope(deadline=ends) as scope:
                            data = await anext(events, None)
                        check_deadline(scope, self.total_timeout)
                        if data is None:
                            break
                        if data == "[DONE]":
                            accumulator.done = True
                            break
                        # A secret split across two events reaches on_text in two pieces;
                        # the assembled reply below is redacted whole.
                        data = redactor.text(data) if redactor else data
                        try:
                            text = accumulator.add(data)
                        except MALFORMED as error:
                            raise malformed_reply(error, data, status) from None
                        if text or accumulator.reasoning_added:
                            yield StreamDelta(text=text, reasoning=accumulator.reasoning_added)
                    try:
                        final = accumulator.build()
                        final = redactor.response(self._read_reply(request, final))
                    except MALFORMED as error:
                        raise malformed_reply(error, "", status) from None
            except httpx.HTTPError as error:
                raise transport_error(error, self._where) from error
        except LLMError as error:
            redactor.error(error)
            raise
        yield StreamDelta(response=final)


def _open_spec(spec: str, environ: Mapping[str, str], check_key: bool) -> OpenAIChat:
    """The adapter an ``openai:`` or local server's model string names."""
    own = {name: value for name, value in environ.items() if name != SUBAGENT_LLM}
    if not check_key and not own.get("OPENAI_API_KEY"):
        own["OPENAI_API_KEY"] = "unchecked"  # the probe never sends it
    # The adapter reads this spec as its SUBAGENT_LLM: its model, URL and provider.
    return OpenAIChat(_environ={**own, SUBAGENT_LLM: spec})


for _server in _SERVERS.values():
    register(SpecProvider(_server.name, _open_spec, _FORMS, needs_model=_server.needs_model))
