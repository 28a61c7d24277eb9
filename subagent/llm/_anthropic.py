"""An adapter for Anthropic's Messages API (``POST {base_url}/v1/messages``), over httpx.

:class:`AnthropicChat` speaks the API natively, where its OpenAI-compatible endpoint would
flatten it: the system prompt goes top-level, tool calls and their results are ``tool_use``
and ``tool_result`` content blocks (a turn's results in one user message, first, as the API
requires), every stop reason keeps its meaning (``refusal`` ends the run as a content
filter, ``max_tokens`` is a cut reply, ``pause_turn`` is continued), usage counts the
prompt cache's reads and writes, ``thinking`` becomes the reply's reasoning, and errors keep
Anthropic's types (``overloaded_error`` on 529 is retried, ``prompt is too long`` is
``context_length``). Like every adapter, it makes one exchange per call (one per
continued pause), returns an :class:`~subagent.llm.LLMResponse` or raises a classified
:class:`~subagent.LLMError`, and never retries: the runtime does.

Model strings ``anthropic:MODEL`` and ``anthropic:MODEL@BASE_URL`` name it (registered
here, on :mod:`subagent.llm._providers`); the key comes from ``ANTHROPIC_API_KEY`` when the
first call is made, a missing base URL from ``ANTHROPIC_BASE_URL``, else Anthropic's.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final

import anyio
import httpx

from subagent._checks import check_int, check_seconds
from subagent._errors import ConfigurationError, ErrorKind, LLMError
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
    decode_arguments,
    error_from_body,
    invalid_response,
    loads,
    malformed_reply,
    new_client,
    server_url,
    status_error,
    transport_error,
)
from subagent.llm._protocol import (
    LLMRequest,
    LLMResponse,
    Message,
    OutputRequest,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    UnsupportedOutputError,
    Usage,
)
from subagent.llm._providers import SpecProvider, parse_subagent_llm, register
from subagent.llm._redact import Redactor, redact_url_credentials
from subagent.llm._sse import SSEEvents, read_body
from subagent.llm._structured import answer_from_tool, as_text

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_URL",
    "DEFAULT_MAX_TOKENS",
    "MAX_CONTINUATIONS",
    "AnthropicChat",
]

DEFAULT_ANTHROPIC_URL: Final = "https://api.anthropic.com"
"""Where requests go when neither the arguments nor ``ANTHROPIC_BASE_URL`` name a server."""

ANTHROPIC_VERSION: Final = "2023-06-01"
"""The ``anthropic-version`` header every request carries."""

DEFAULT_MAX_TOKENS: Final = 4096
"""The ``max_tokens`` sent when neither the settings nor ``max_tokens=`` give one (the API
requires the field): room for any typed answer and a few tool calls, well under every
current model's output limit."""

MAX_CONTINUATIONS: Final = 3
"""How many times one call continues a turn the API paused (``pause_turn``, a long turn of
a server tool) before returning what it has."""

_STOP_REASONS: Final[Mapping[str, StopReason]] = {
    "end_turn": StopReason.STOP,
    "stop_sequence": StopReason.STOP,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "tool_use": StopReason.TOOL_CALLS,
    "refusal": StopReason.CONTENT_FILTER,
    "pause_turn": StopReason.UNKNOWN,  # still paused after MAX_CONTINUATIONS
}

# The error types of Anthropic's error objects, for errors without a status (in a stream).
_ERROR_TYPES: Final[Mapping[str, ErrorKind]] = {
    "invalid_request_error": ErrorKind.BAD_REQUEST,
    "authentication_error": ErrorKind.AUTHENTICATION,
    "permission_error": ErrorKind.PERMISSION,
    "not_found_error": ErrorKind.BAD_REQUEST,
    "request_too_large": ErrorKind.BAD_REQUEST,
    "rate_limit_error": ErrorKind.RATE_LIMIT,
    "api_error": ErrorKind.SERVER_ERROR,
    "overloaded_error": ErrorKind.SERVER_ERROR,
    "timeout_error": ErrorKind.TIMEOUT,
}

_TOOL_CHOICES: Final[Mapping[str, dict[str, str]]] = {
    "auto": {"type": "auto"},
    "none": {"type": "none"},
    "required": {"type": "any"},
}

_THINKING: Final = frozenset({"thinking", "redacted_thinking"})
_WRAPPED: Final = "answer"  # the one property of a forced tool whose answer is no object
_CACHED: Final = {"type": "ephemeral"}
_UNREPORTED: Final = Usage(unreported=1)
_FORMS: Final = "'anthropic:MODEL' or 'anthropic:MODEL@BASE_URL'"


class AnthropicChat:
    """An :class:`~subagent.llm.LLM` that calls Anthropic's Messages API.

    Arguments left as ``None`` are read from the environment: ``base_url`` from
    ``ANTHROPIC_BASE_URL``, else :data:`DEFAULT_ANTHROPIC_URL`; ``api_key`` from
    ``ANTHROPIC_API_KEY``, at the first call (so an adapter, or an agent naming
    ``"anthropic:..."``, is built where no key is set). The adapter owns its
    ``httpx.AsyncClient`` unless one is passed; close it with :meth:`aclose` or
    ``async with``, one adapter per event loop.

    Args:
        model: The model to request (``"claude-sonnet-4-5"``); required.
        base_url: The API root as Anthropic's SDK takes it (``https://api.anthropic.com``);
            requests go to ``{base_url}/v1/messages`` (a root that ends in ``/v1`` is
            taken as it is). Credentials in it travel as Basic auth, never shown.
        api_key: Sent as ``x-api-key``. Required for Anthropic's own API (a
            ``ConfigurationError`` naming ``api_key`` and ``ANTHROPIC_API_KEY`` at the
            first call); sent to any other server when set. It never reaches an error, a
            reply, a record or a span: every text the server sends back is redacted of it.
        timeout: Seconds for connecting, and for each read or write (between two events
            when streaming); ``None`` disables it.
        max_tokens: The ``max_tokens`` sent when the settings give none (default
            :data:`DEFAULT_MAX_TOKENS`; the API requires one).
        total_timeout: Seconds one whole call may take, streaming included (default 600).
        max_response_bytes: The largest reply read (default 32 MiB); for a stream, the
            largest event and the assembled text and tool inputs. Past it:
            ``response_too_large``.
        max_stream_bytes: The most bytes one stream may send (default 256 MiB).
        max_connections: Connections the owned client opens to the server at once.
        http_client: A client to use instead of an owned one; never closed here.
        default_settings: Body fields merged under each request's ``settings``, in the
            Messages API's names (``temperature``, ``top_p``, ``stop_sequences``,
            ``thinking``, ``metadata``...).
        headers: Extra headers sent with every request (``anthropic-beta``...).
        provider_name: The provider recorded in traces (``gen_ai.provider.name``).
        prompt_cache: Mark the system prompt, the tools and the conversation so far as
            prompt-cache breakpoints (``cache_control: {"type": "ephemeral"}``), so a
            run's next turn, and the next run of the same agent within minutes, read them
            from the cache. Off by default: a write costs more than a plain input token.

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
        max_tokens: int = DEFAULT_MAX_TOKENS,
        total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
        max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
        max_stream_bytes: int | None = DEFAULT_MAX_STREAM_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        http_client: httpx.AsyncClient | None = None,
        default_settings: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        provider_name: str = "anthropic",
        prompt_cache: bool = False,
        _environ: Mapping[str, str] | None = None,
    ) -> None:
        self._environ = _environ
        environ = os.environ if _environ is None else _environ
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(
                "model", "Anthropic's API needs a model: pass model= ('claude-sonnet-4-5') "
                "or name it in the string ('anthropic:claude-sonnet-4-5')"
            )  # fmt: skip
        resolved_url = (
            base_url or environ.get("ANTHROPIC_BASE_URL", "").strip() or DEFAULT_ANTHROPIC_URL
        )
        server = server_url(resolved_url)
        url = server.url
        self.total_timeout: float | None = check_seconds("total_timeout", total_timeout)
        self.timeout: float | None = check_seconds("timeout", timeout)
        self.max_tokens: int = check_int("max_tokens", max_tokens, 1)
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
        if not isinstance(prompt_cache, bool):
            raise ConfigurationError("prompt_cache", "must be True or False")
        check_int("max_connections", max_connections, 1)

        self.model: str = model.strip()
        self.model_name: str = self.model
        self.provider_name: str = provider_name
        self.base_url: str = str(url)
        self.server_address: str = url.host
        self.server_port: int = url.port or (443 if url.scheme == "https" else 80)
        self.default_settings: dict[str, Any] = dict(default_settings or {})
        self.prompt_cache: bool = prompt_cache
        versioned = url.path.rstrip("/").endswith("/v1")
        self._endpoint = f"{self.base_url}{'' if versioned else '/v1'}/messages"
        self._where = redact_url_credentials(self._endpoint)
        self._timeout = httpx.Timeout(self.timeout)
        self._is_anthropic = url.host == "api.anthropic.com"
        self._api_key = api_key
        self._url_secrets = server.secrets
        self._headers: dict[str, str] = {
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if server.basic is not None:
            self._headers["Authorization"] = server.basic
        self._headers.update(headers or {})
        self._owns_client = http_client is None
        self._client = (
            http_client if http_client is not None else new_client(url.host, max_connections)
        )
        self._keyed: tuple[dict[str, str], Redactor] | None = None  # set at the first call

    def __repr__(self) -> str:
        return f"AnthropicChat(model={self.model_name!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> AnthropicChat:
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

    def describe_server(self) -> str:
        """The server as errors name it: its base URL and model (never a key)."""
        return f"anthropic at {self.base_url} (model {self.model_name!r})"

    # -- the key, at the first call ----------------------------------------------------------

    def _with_key(self) -> tuple[dict[str, str], Redactor]:
        """The headers with the key, and the redactor of every secret sent; both made once.

        Raises:
            ConfigurationError: Anthropic's own API and no key given or in the environment.
        """
        if self._keyed is not None:
            return self._keyed
        environ = os.environ if self._environ is None else self._environ
        key = self._api_key if self._api_key is not None else environ.get("ANTHROPIC_API_KEY")
        if self._is_anthropic and not key:
            raise ConfigurationError(
                "api_key", "Anthropic's API needs a key: pass api_key= or set ANTHROPIC_API_KEY"
            )
        headers = dict(self._headers)
        if key:
            headers = {"x-api-key": key, **headers}
        redactor = Redactor.for_request(key, headers, self._client.headers,
                                        extra=self._url_secrets)  # fmt: skip
        self._keyed = (headers, redactor)
        return self._keyed

    # -- requests ------------------------------------------------------------------------------

    def build_body(self, request: LLMRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body sent for ``request`` (public for inspection and tests).

        Output modes ``tool`` and ``json_schema`` are both sent as a forced answer tool (the
        Messages API takes a schema as a tool's ``input_schema``; a schema whose root is
        not an object is wrapped in one property, ``answer``, and unwrapped from the reply).
        The settings' ``tools`` (Anthropic's server tools, such as web search) are sent
        after the tools offered, never in their place.

        Raises:
            ConfigurationError: The answer tool's name is also a tool's offered this turn.
        """
        settings = {**self.default_settings, **request.settings}
        server_tools = settings.pop("tools", None)  # Anthropic's own (web search...): kept
        system, messages = messages_json(request.messages, thinking=_thinking_on(settings))
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if system:
            body["system"] = (
                [{"type": "text", "text": system, "cache_control": _CACHED}]
                if self.prompt_cache
                else system
            )
        body["messages"] = messages
        tools = [tool_json(tool) for tool in request.tools]
        if isinstance(server_tools, list):
            tools.extend(server_tools)
        given = _TOOL_CHOICES.get(request.tool_choice or "")
        choice = None if given is None else dict(given)
        output = _forced(request)
        if output is not None:
            if any(tool.name == output.name for tool in request.tools):
                raise ConfigurationError(
                    "output.name", f"{output.name!r} is also the name of a tool offered this turn"
                )
            tools.append(answer_tool_json(output))
            choice = {"type": "tool", "name": output.name}
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = choice
        body.update(settings)
        if not tools:
            body.pop("tool_choice", None)  # it travels only with tools
        if output is not None:
            body["tool_choice"] = choice  # the output mode wins over the settings
        if self.prompt_cache:
            _mark_cached(body)
        if stream:
            body["stream"] = True
        else:
            body.pop("stream", None)
        return body

    def _served(self, request: LLMRequest) -> LLMRequest:
        """``request`` as the API can serve it.

        A forced tool is refused while extended thinking is on (the API's rule): a request
        that falls back to text (``OutputRequest.fallback``) goes without its mode; any
        other is refused before anything is sent.
        """
        output = getattr(request, "output", None)
        if output is None or output.mode == "text":
            return request
        if not _thinking_on({**self.default_settings, **request.settings}):
            return request
        if output.fallback == "text":
            return as_text(request)
        raise UnsupportedOutputError(
            output.mode, self.describe_server(),
            "the API forces no tool while extended thinking is on (settings' 'thinking'); "
            "use mode 'text', or turn thinking off for these turns",
        )  # fmt: skip

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send one Messages request and return the reply.

        A turn the API paused (``pause_turn``) is continued, at most
        :data:`MAX_CONTINUATIONS` times, its parts returned as one reply.

        Raises:
            LLMError: The call failed; ``kind`` says how.
            ConfigurationError: Anthropic's API and no key (at the first call).
            ModelRequestsBlockedError: Tests blocked real requests (``subagent.testing``).
            UnsupportedOutputError: The request forces a tool while thinking is on.
        """
        check_model_request(self)
        headers, redactor = self._with_key()
        request = self._served(request)
        body = self.build_body(request)
        ends = deadline(self.total_timeout)  # one deadline for the turn's every part
        parts: list[_Reply] = []
        try:
            while True:
                part = await self._exchange(headers, body, ends)
                parts.append(part)
                if part.stop_reason != "pause_turn" or len(parts) > MAX_CONTINUATIONS:
                    break
                body = _continued(body, part)
            return redactor.response(self._response(request, parts))
        except LLMError as error:
            redactor.error(error)
            raise

    async def _exchange(self, headers: dict[str, str], body: dict[str, Any], ends: float) -> _Reply:
        text = ""
        status = 0
        try:
            with anyio.CancelScope(deadline=ends) as scope:
                async with self._client.stream(
                    "POST", self._endpoint, json=body, headers=headers, timeout=self._timeout
                ) as response:
                    status = response.status_code
                    if status >= 300:
                        text = await read_body(response, MAX_ERROR_READ, truncate=True)
                        raise _classified(status_error(status, response.headers, text))
                    text = await read_body(response, self.max_response_bytes)
            check_deadline(scope, self.total_timeout)
        except httpx.HTTPError as error:
            raise transport_error(error, self._where) from error
        try:
            return _Reply.of(text, self.model, status)
        except MALFORMED as error:
            raise malformed_reply(error, text, status) from None

    def _response(self, request: LLMRequest, parts: Sequence[_Reply]) -> LLMResponse:
        """The reply the parts of one turn make, as the request asked for it."""
        try:
            reply = _Reply.joined(parts).response()
        except MALFORMED as error:
            raise malformed_reply(error, "", 200) from None
        output = _forced(request)
        if output is None:
            return reply
        if _wraps(output) and len(reply.tool_calls) == 1:
            call = reply.tool_calls[0]
            if call.name == output.name and isinstance(call.arguments, dict):
                inner = call.arguments.get(_WRAPPED)
                answer = call.model_copy(
                    update={"arguments": json.dumps(inner, ensure_ascii=False)}
                )
                reply = reply.model_copy(update={"tool_calls": [answer]})
        answered = answer_from_tool(reply, output)
        if reply.stop_reason is StopReason.LENGTH:  # a cut answer stays a cut reply
            return answered.model_copy(update={"stop_reason": StopReason.LENGTH})
        return answered

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Stream one reply over the API's server-sent events.

        Yields text and ``thinking`` deltas as they arrive; the last item carries the
        complete :class:`~subagent.llm.LLMResponse` (tool inputs assembled from their
        ``input_json_delta`` pieces, usage from ``message_start`` and ``message_delta``).
        Close the iterator early (``contextlib.aclosing``) to close the HTTP response.

        Raises:
            LLMError: The call failed, before or during the stream (an ``error`` event is
                classified by its type: ``overloaded_error`` is a ``server_error``).
            ConfigurationError: Anthropic's API and no key (at the first call).
            ModelRequestsBlockedError: Tests blocked real requests (``subagent.testing``).
            UnsupportedOutputError: The request forces a tool while thinking is on.
        """
        check_model_request(self)
        headers, redactor = self._with_key()
        request = self._served(request)
        body = self.build_body(request, stream=True)
        headers = {**headers, "Accept": "text/event-stream"}
        ends = deadline(self.total_timeout)
        parts: list[_Reply] = []
        try:
            try:
                while True:
                    async with AsyncExitStack() as stack:
                        # Every await runs under the call's deadline; no yield does.
                        with anyio.CancelScope(deadline=ends) as scope:
                            response = await stack.enter_async_context(
                                self._client.stream("POST", self._endpoint, json=body,
                                                    headers=headers, timeout=self._timeout)
                            )  # fmt: skip
                            status = response.status_code
                            if status >= 300:
                                text = await read_body(response, MAX_ERROR_READ, truncate=True)
                                raise _classified(status_error(status, response.headers, text))
                            streamed = "text/event-stream" in response.headers.get(
                                "content-type", ""
                            )
                            if not streamed:  # the server ignored stream: one piece
                                text = await read_body(response, self.max_response_bytes)
                        check_deadline(scope, self.total_timeout)
                        if streamed:
                            part = _Reply(self.model, self.max_response_bytes)
                            events = SSEEvents(response, max_event_bytes=self.max_response_bytes,
                                               max_total_bytes=self.max_stream_bytes)  # fmt: skip
                            stack.push_async_callback(events.aclose)
                            while True:
                                with anyio.CancelScope(deadline=ends) as scope:
                                    data = await anext(events, None)
                                check_deadline(scope, self.total_timeout)
                                if data is None:
                                    break
                                # A secret split across two events reaches on_text in two
                                # pieces; the assembled reply is redacted whole.
                                data = redactor.text(data) if redactor else data
                                try:
                                    added, thought = part.add(data)
                                except MALFORMED as error:
                                    raise malformed_reply(error, data, status) from None
                                if added or thought:
                                    yield StreamDelta(text=added, reasoning=thought)
                                if part.done:
                                    break
                            part.check_complete()
                        else:
                            try:
                                part = _Reply.of(text, self.model, status)
                            except MALFORMED as error:
                                raise malformed_reply(error, text, status) from None
                            whole = redactor.response(part.response())
                            if whole.reasoning or whole.text:
                                yield StreamDelta(text=whole.text, reasoning=whole.reasoning)
                    parts.append(part)
                    if part.stop_reason != "pause_turn" or len(parts) > MAX_CONTINUATIONS:
                        break
                    body = _continued(body, part)
            except httpx.HTTPError as error:
                raise transport_error(error, self._where) from error
            final = redactor.response(self._response(request, parts))
        except LLMError as error:
            redactor.error(error)
            raise
        yield StreamDelta(response=final)


# -- the request --------------------------------------------------------------------------------


def messages_json(
    messages: Sequence[Message], *, thinking: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """The ``system`` text and the ``messages`` of a Messages request.

    System messages become the top-level system prompt (joined by a blank line, wherever
    they stood). A tool result is a ``tool_result`` block of a user message; consecutive
    messages of one role are one message (a turn's results, and the feedback after them,
    in one user message, the results first); an assistant's calls are ``tool_use`` blocks
    after its text, preceded, while ``thinking`` is on, by the signed thinking blocks of
    the reply that made them when the adapter kept them (the API requires them back). A
    message with nothing to say (an empty reply) is left out: the API refuses empty
    content.
    """
    systems: list[str] = []
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        role: str = message.role
        blocks: list[dict[str, Any]] = []
        if role == "system":
            if message.content:
                systems.append(message.content)
            continue
        if role == "tool":
            role = "user"
            result: dict[str, Any] = {"type": "tool_result",
                                      "tool_use_id": message.tool_call_id or ""}  # fmt: skip
            if message.content:
                result["content"] = message.content
            blocks.append(result)
        else:
            if thinking and role == "assistant" and message.tool_calls:
                blocks.extend(_thoughts_before(message.tool_calls[0].id))
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            if role == "assistant":
                blocks.extend(_tool_use_json(call) for call in message.tool_calls)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    out: list[dict[str, Any]] = []
    for role, blocks in turns:
        if role == "user":  # tool results first, as the API requires (a stable sort)
            blocks.sort(key=lambda block: block["type"] != "tool_result")
        plain = len(blocks) == 1 and blocks[0]["type"] == "text"
        out.append({"role": role, "content": blocks[0]["text"] if plain else blocks})
    return "\n\n".join(systems), out


def _tool_use_json(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if isinstance(arguments, str):  # invalid arguments the model was told about
        decoded = decode_arguments(arguments)
        arguments = decoded if isinstance(decoded, dict) else {}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def tool_json(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as the Messages API offers it."""
    item: dict[str, Any] = {"name": tool.name}
    if tool.description:
        item["description"] = tool.description
    item["input_schema"] = tool.parameters
    return item


def _thinking_on(settings: Mapping[str, Any]) -> bool:
    """Whether the settings turn extended thinking on (``thinking: {"type": "enabled"...}``)."""
    thinking = settings.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") != "disabled"


def _forced(request: LLMRequest) -> OutputRequest | None:
    """The output request served by a forced answer tool (modes ``tool`` and ``json_schema``)."""
    output = getattr(request, "output", None)
    return output if output is not None and output.mode in ("tool", "json_schema") else None


def _wraps(output: OutputRequest) -> bool:
    return (output.json_schema or {}).get("type") != "object"


def answer_tool_json(output: OutputRequest) -> dict[str, Any]:
    """The forced answer tool: the answer's schema as its input (wrapped when no object)."""
    schema = dict(output.json_schema or {})
    if _wraps(output):
        definitions: dict[str, Any] = {
            key: schema.pop(key) for key in ("$defs", "definitions") if key in schema
        }
        schema = {"type": "object", "properties": {_WRAPPED: schema}, "required": [_WRAPPED],
                  **definitions}  # fmt: skip
    return {
        "name": output.name,
        "description": output.description or "Give your final answer.",
        "input_schema": schema,
    }


def _mark_cached(body: dict[str, Any]) -> None:
    """The last tool and the last block of the conversation marked as cache breakpoints."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        body["tools"] = [*tools[:-1], {**tools[-1], "cache_control": _CACHED}]
    messages = body.get("messages")
    if not (isinstance(messages, list) and messages and isinstance(messages[-1], dict)):
        return
    last = messages[-1]
    content = last.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        content = [*content[:-1], {**content[-1], "cache_control": _CACHED}]
        body["messages"] = [*messages[:-1], {**last, "content": content}]


def _continued(body: dict[str, Any], paused: _Reply) -> dict[str, Any]:
    """The body that continues a paused turn: its content sent back as the assistant's.

    A turn paused again grows the same assistant message (roles alternate).
    """
    messages = list(body["messages"])
    content = paused.blocks_sent_back()
    if messages and messages[-1].get("role") == "assistant":
        before = messages.pop()["content"]
        content = [*([{"type": "text", "text": before}] if isinstance(before, str) else before),
                   *content]  # fmt: skip
    messages.append({"role": "assistant", "content": content})
    return {**body, "messages": messages}


# -- signed thinking kept for the calls it led to -----------------------------------------------

_THOUGHTS_KEPT: Final = 1024
_thoughts: dict[str, list[dict[str, Any]]] = {}


def _keep_thoughts(blocks: Sequence[dict[str, Any]]) -> None:
    """Keep a reply's thinking blocks under its first call's id (bounded, oldest out)."""
    thoughts = [block for block in blocks if block.get("type") in _THINKING]
    first = next((block for block in blocks if block.get("type") == "tool_use"), None)
    if not thoughts or first is None or not isinstance(first.get("id"), str):
        return
    while len(_thoughts) >= _THOUGHTS_KEPT:
        del _thoughts[next(iter(_thoughts))]
    _thoughts[first["id"]] = thoughts


def _thoughts_before(call_id: str) -> list[dict[str, Any]]:
    return list(_thoughts.get(call_id, ()))


# -- the reply ----------------------------------------------------------------------------------


@dataclass
class _Reply:
    """One Messages API reply as it is read, whole or event by event."""

    model: str | None
    max_chars: int | None = None
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[int, list[str]] = field(default_factory=dict)  # tool input JSON pieces
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    events: int = 0
    started: bool = False
    done: bool = False
    size: int = 0

    @classmethod
    def of(cls, text: str, requested_model: str | None, status: int) -> _Reply:
        """A whole reply's body read."""
        try:
            data = loads(text)
        except ValueError as error:
            raise invalid_response(f"the reply is not JSON ({error})", text, status) from None
        if not isinstance(data, dict):
            raise invalid_response("the reply is not a JSON object", text, status)
        if data.get("type") == "error" or (data.get("error") and "content" not in data):
            raise _stream_error(data, text)
        content = data.get("content")
        if not isinstance(content, list):
            raise invalid_response("the reply has no content", text, status)
        reply = cls(requested_model)
        reply._message(data)
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                raise invalid_response("a content block of the reply is not an object", text,
                                       status)  # fmt: skip
            reply.blocks[index] = block
        reply.stop_reason = data.get("stop_reason")
        reply.done = True
        return reply

    def _message(self, message: Mapping[str, Any]) -> None:
        model = message.get("model")
        if isinstance(model, str) and model:
            self.model = model
        usage = message.get("usage")
        if isinstance(usage, dict):
            self.usage.update(usage)

    def add(self, data: str) -> tuple[str, str]:
        """Take one event's ``data``; return the text and the thinking it adds."""
        try:
            event = loads(data)
        except ValueError as error:
            raise invalid_response(f"a streamed event is not JSON ({error})", data, 200) from None
        if not isinstance(event, dict):
            raise invalid_response("a streamed event is not a JSON object", data, 200)
        kind = event.get("type")
        self.events += 1
        if kind == "error":
            raise _stream_error(event, data)
        if kind == "message_start":
            self.started = True
            message = event.get("message")
            if isinstance(message, dict):
                self._message(message)
        elif kind == "content_block_start":
            block = event["content_block"]
            if not isinstance(block, dict):
                raise invalid_response("a streamed content block is not an object", data, 200)
            self.blocks[int(event["index"])] = dict(block)
            if block.get("type") in ("tool_use", "server_tool_use"):
                self.inputs[int(event["index"])] = []
        elif kind == "content_block_delta":
            return self._delta(int(event["index"]), event["delta"], data)
        elif kind == "content_block_stop":
            index = int(event["index"])
            pieces = self.inputs.pop(index, None)
            if pieces is not None and index in self.blocks:
                self.blocks[index]["input"] = decode_arguments("".join(pieces))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self.stop_reason = delta["stop_reason"]
            if isinstance(event.get("usage"), dict):
                self.usage.update(event["usage"])
        elif kind == "message_stop":
            self.done = True
        # ping, and event types added after this adapter was written: nothing to read
        return "", ""

    def _delta(self, index: int, delta: object, data: str) -> tuple[str, str]:
        if not isinstance(delta, dict):
            raise invalid_response("a streamed delta is not an object", data, 200)
        block = self.blocks.get(index)
        if block is None:
            raise invalid_response(f"a delta of content block {index}, never started", data, 200)
        kind = delta.get("type")
        if kind == "text_delta":
            piece = str(delta["text"])
            self._grow(len(piece))
            block["text"] = str(block.get("text", "")) + piece
            return piece, ""
        if kind == "thinking_delta":
            piece = str(delta["thinking"])
            self._grow(len(piece))
            block["thinking"] = str(block.get("thinking", "")) + piece
            return "", piece
        if kind == "signature_delta":
            block["signature"] = str(block.get("signature", "")) + str(delta["signature"])
        elif kind == "input_json_delta":
            piece = str(delta["partial_json"])
            self._grow(len(piece))
            self.inputs.setdefault(index, []).append(piece)
        return "", ""

    def _grow(self, added: int) -> None:
        self.size += added
        if self.max_chars is not None and self.size > self.max_chars:
            raise LLMError(
                ErrorKind.RESPONSE_TOO_LARGE,
                f"the streamed reply is longer than max_response_bytes={self.max_chars:,} "
                f"(text, thinking and tool inputs)",
                status_code=200,
            )

    def check_complete(self) -> None:
        """Raise when the stream ended before ``message_stop``: cut short, not complete."""
        if not self.done:
            raise LLMError(
                ErrorKind.CONNECTION,
                f"the stream ended after {self.events} events without message_stop",
            )

    def content(self) -> list[dict[str, Any]]:
        return [self.blocks[index] for index in sorted(self.blocks)]

    def blocks_sent_back(self) -> list[dict[str, Any]]:
        """The content as the next request carries it (a tool input always an object)."""
        out = []
        for block in self.content():
            if "input" in block and not isinstance(block["input"], dict):
                block = {**block, "input": {}}
            out.append(block)
        return out

    @staticmethod
    def joined(parts: Sequence[_Reply]) -> _Reply:
        """The parts of one turn (a paused turn and its continuations) as one reply."""
        if len(parts) == 1:
            return parts[0]
        whole = _Reply(parts[-1].model)
        for part in parts:
            for block in part.content():
                whole.blocks[len(whole.blocks)] = block
            for name, value in part.usage.items():
                if _is_count(value):
                    whole.usage[name] = int(whole.usage.get(name, 0)) + value
        whole.stop_reason = parts[-1].stop_reason
        return whole

    def response(self) -> LLMResponse:
        text: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        content = self.content()
        for block in content:
            kind = block.get("type")
            if kind == "text":
                text.append(str(block.get("text", "")))
            elif kind == "thinking":
                thought = block.get("thinking")
                if isinstance(thought, str) and thought:
                    thinking.append(thought)
            elif kind == "tool_use":
                name = block.get("name")
                if not isinstance(name, str) or not name:
                    raise invalid_response("a tool_use block has no name", "", 200)
                calls.append(ToolCall(name=name, arguments=decode_arguments(block.get("input")),
                                      id=str(block.get("id") or "")))  # fmt: skip
        _keep_thoughts(content)
        raw = self.stop_reason
        return LLMResponse(
            text="".join(text),
            tool_calls=calls,
            stop_reason=_STOP_REASONS.get(str(raw), StopReason.UNKNOWN),
            raw_stop_reason=None if raw is None else str(raw),
            usage=_usage(self.usage),
            model=self.model,
            reasoning="\n\n".join(thinking),
        )


def _usage(raw: Mapping[str, Any]) -> Usage:
    """Anthropic's usage as the run counts it: the cache's reads and writes in the input."""
    fresh, output = raw.get("input_tokens"), raw.get("output_tokens")
    if not (_is_count(fresh) or _is_count(output)):
        return _UNREPORTED
    read = _count(raw.get("cache_read_input_tokens"))
    written = _count(raw.get("cache_creation_input_tokens"))
    return Usage(input_tokens=_count(fresh) + read + written, output_tokens=_count(output),
                 cache_read_tokens=read, cache_write_tokens=written)  # fmt: skip


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(value: object) -> int:
    return value if isinstance(value, int) and _is_count(value) else 0


# -- errors -------------------------------------------------------------------------------------


def _classified(error: LLMError) -> LLMError:
    """``error`` as Anthropic means it: a prompt too long for the window is ``context_length``."""
    if error.kind is ErrorKind.BAD_REQUEST and "prompt is too long" in error.message.lower():
        return LLMError(ErrorKind.CONTEXT_LENGTH, error.message, status_code=error.status_code,
                        retry_after=error.retry_after, body=error.body)  # fmt: skip
    return error


def _stream_error(data: Mapping[str, Any], text: str) -> LLMError:
    """An error object without a status (an ``error`` event), classified by its type."""
    error = error_from_body(None, data, text, {})
    inner = data.get("error")
    kind = _ERROR_TYPES.get(str(inner.get("type"))) if isinstance(inner, dict) else None
    if kind is None or error.kind is ErrorKind.CONTEXT_LENGTH:
        return _classified(error)
    return _classified(LLMError(kind, error.message, body=error.body))


# -- model strings ------------------------------------------------------------------------------


def _open_spec(spec: str, environ: Mapping[str, str], check_key: bool) -> AnthropicChat:
    """The adapter an ``anthropic:`` model string names (its key checked when asked)."""
    _, model, base_url = parse_subagent_llm(spec)
    adapter = AnthropicChat(model, base_url, _environ=environ)
    if check_key:
        adapter._with_key()
    return adapter


register(SpecProvider("anthropic", _open_spec, _FORMS, needs_model=True))
