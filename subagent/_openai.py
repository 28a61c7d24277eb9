"""An adapter for OpenAI-compatible chat-completions servers, over httpx.

:class:`OpenAIChat` speaks ``POST {base_url}/chat/completions`` as served by OpenAI, vLLM,
llama.cpp (``llama-server`` and ``llama-cpp-python``), Ollama's ``/v1`` and most gateways.
It makes exactly one HTTP call per :meth:`OpenAIChat.complete` and either returns an
:class:`~subagent.llm.LLMResponse` or raises a classified :class:`~subagent.LLMError`. It
never retries by itself: the runtime owns retries (see :class:`~subagent.RetryPolicy`).

Configuration comes from the arguments, then from the environment:

``SUBAGENT_LLM``
    ``openai:MODEL``, ``openai:MODEL@BASE_URL`` or ``openai:@BASE_URL`` (the server's
    default model). The base URL starts with ``http://`` or ``https://``; the model may
    contain ``:`` and ``/`` (``openai:qwen2.5:0.5b@http://127.0.0.1:11434/v1``).
``OPENAI_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``
    The usual variables; ``SUBAGENT_LLM`` wins over the first two. The key is never taken
    from ``SUBAGENT_LLM`` so that it stays out of logs that print the model spec.
"""

from __future__ import annotations

import functools
import json
import os
import re
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Final

import httpx

from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent.llm import (
    LLMRequest,
    LLMResponse,
    Message,
    StopReason,
    StreamDelta,
    ToolCall,
    Usage,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "OpenAIChat",
    "parse_retry_after",
    "parse_subagent_llm",
    "tool_calls_in_text",
]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
"""Where requests go when neither the arguments nor the environment name a server."""

_ENV_SPEC: Final = "SUBAGENT_LLM"
_SPEC_PROVIDERS: Final = frozenset({"openai"})
_MAX_ERROR_BODY: Final = 4000
_MAX_MESSAGE: Final = 500

_FINISH_REASONS: Final[Mapping[str, StopReason]] = {
    "stop": StopReason.STOP,
    "end_turn": StopReason.STOP,
    "eos": StopReason.STOP,
    "length": StopReason.LENGTH,
    "max_tokens": StopReason.LENGTH,
    "tool_calls": StopReason.TOOL_CALLS,
    "function_call": StopReason.TOOL_CALLS,
    "tool_use": StopReason.TOOL_CALLS,
    "content_filter": StopReason.CONTENT_FILTER,
    "error": StopReason.ERROR,
}

_TOOL_ONLY_SETTINGS: Final = ("tool_choice", "parallel_tool_calls", "functions", "function_call")

# FastAPI-based servers (llama-cpp-python) answer a request they cannot validate with HTTP
# 500 and pydantic's message; repeating such a request cannot help.
_VALIDATION_RE: Final = re.compile(r"^\s*\d+ validation errors?\b", re.IGNORECASE)

_CONTENT_FILTER_RE: Final = re.compile(
    r"content[ _-]?(?:filter|policy|management[ _-]policy)|responsible ?ai", re.IGNORECASE
)


def parse_subagent_llm(spec: str) -> tuple[str, str | None, str | None]:
    """Split a ``SUBAGENT_LLM`` value into ``(provider, model, base_url)``.

    Args:
        spec: ``openai:MODEL``, ``openai:MODEL@BASE_URL`` or ``openai:@BASE_URL``.

    Returns:
        The provider (``"openai"``), the model (``None`` when empty) and the base URL
        (``None`` when absent).

    Raises:
        ConfigurationError: The value does not have that form (the field named is
            ``SUBAGENT_LLM``).
    """
    text = spec.strip()
    provider, colon, rest = text.partition(":")
    if not colon or provider.lower() not in _SPEC_PROVIDERS:
        raise ConfigurationError(
            _ENV_SPEC,
            f"expected 'openai:MODEL', 'openai:MODEL@BASE_URL' or 'openai:@BASE_URL', got {spec!r}",
        )
    at = max(rest.rfind("@http://"), rest.rfind("@https://"))
    if at >= 0:
        model, base_url = rest[:at], rest[at + 1 :]
    else:
        if "@" in rest:
            raise ConfigurationError(
                _ENV_SPEC,
                f"the base URL after '@' must start with http:// or https://, got {spec!r}",
            )
        model, base_url = rest, ""
    return provider.lower(), model.strip() or None, base_url.strip() or None


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Read how long a server asked us to wait, in seconds.

    Understands ``retry-after-ms`` (sent by OpenAI) and ``Retry-After`` as delta-seconds or
    as an HTTP-date. A date in the past means ``0``.

    Args:
        headers: The response headers (a case-insensitive mapping such as ``httpx.Headers``
            or a plain dict with lower-case keys).
        now: The current time as a POSIX timestamp (for tests); defaults to the clock.

    Returns:
        The delay in seconds, or ``None`` when no usable header is present.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = _non_negative_float(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _non_negative_float(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; be lenient with ones that omit it
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _non_negative_float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        return None
    return value


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
        api_key: Sent as ``Authorization: Bearer ...`` when set.
        timeout: Seconds for connecting, and for each read or write of the HTTP exchange
            (between two streamed chunks when streaming). ``None`` disables it. The runtime
            also bounds each whole call with its own ``timeout``.
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
            Anything else stays text. Off by default.

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
        http_client: httpx.AsyncClient | None = None,
        default_settings: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        provider_name: str = "openai",
        text_tool_calls: bool = False,
        _environ: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if _environ is None else _environ
        spec_model: str | None = None
        spec_url: str | None = None
        spec = environ.get(_ENV_SPEC, "").strip()
        if spec:
            _, spec_model, spec_url = parse_subagent_llm(spec)
        resolved_url = (
            base_url or spec_url or environ.get("OPENAI_BASE_URL", "").strip() or DEFAULT_BASE_URL
        )
        resolved_model = model or spec_model or environ.get("OPENAI_MODEL", "").strip() or None
        resolved_key = api_key if api_key is not None else environ.get("OPENAI_API_KEY") or None

        try:
            url = httpx.URL(resolved_url.rstrip("/"))
        except (httpx.InvalidURL, TypeError) as error:
            raise ConfigurationError(
                "base_url", f"{resolved_url!r} is not a URL: {error}"
            ) from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigurationError(
                "base_url", f"must be an http:// or https:// URL, got {resolved_url!r}"
            )
        is_openai = url.host == "api.openai.com"
        if is_openai and not resolved_model:
            raise ConfigurationError(
                "model", "OpenAI's API needs a model: pass model= or set OPENAI_MODEL"
            )
        if is_openai and not resolved_key:
            raise ConfigurationError(
                "api_key", "OpenAI's API needs a key: pass api_key= or set OPENAI_API_KEY"
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ConfigurationError("timeout", f"must be a number > 0 or None, got {timeout!r}")
        if not provider_name:
            raise ConfigurationError("provider_name", "must not be empty")

        self.model: str | None = resolved_model
        self.model_name: str = resolved_model or "default"
        self.provider_name: str = provider_name
        self.base_url: str = str(url)
        self.server_address: str = url.host
        self.server_port: int = url.port or (443 if url.scheme == "https" else 80)
        self.timeout: float | None = None if timeout is None else float(timeout)
        self.default_settings: dict[str, Any] = dict(default_settings or {})
        self._endpoint = f"{self.base_url}/chat/completions"
        self._timeout = httpx.Timeout(self.timeout)
        self._headers: dict[str, str] = {"Accept": "application/json"}
        if resolved_key:
            self._headers["Authorization"] = f"Bearer {resolved_key}"
        self._headers.update(headers or {})
        self.text_tool_calls = text_tool_calls
        self._owns_client = http_client is None
        self._client = http_client if http_client is not None else _new_client(url.host)

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
                _ENV_SPEC,
                "no LLM configured: set SUBAGENT_LLM (e.g. 'openai:gpt-4o-mini' or "
                "'openai:local@http://127.0.0.1:8080/v1') or OPENAI_BASE_URL/OPENAI_MODEL",
            )
        return cls(_environ=env, **overrides)

    @staticmethod
    def env_configured(environ: Mapping[str, str] | None = None) -> bool:
        """Whether ``SUBAGENT_LLM``, ``OPENAI_BASE_URL`` or ``OPENAI_MODEL`` is set."""
        env = os.environ if environ is None else environ
        return any(
            env.get(name, "").strip() for name in (_ENV_SPEC, "OPENAI_BASE_URL", "OPENAI_MODEL")
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

    # -- requests ---------------------------------------------------------------------------

    def build_body(self, request: LLMRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body sent for ``request`` (public for inspection and tests).

        Args:
            request: The request to serialise.
            stream: Whether to ask for server-sent events.

        Returns:
            A JSON-serialisable dict.
        """
        body: dict[str, Any] = {}
        if self.model:
            body["model"] = self.model
        body["messages"] = [_message_json(message) for message in request.messages]
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        body.update(self.default_settings)
        body.update(request.settings)  # may name a tool: {"tool_choice": {"type": ...}}
        if not request.tools:
            # OpenAI rejects tool_choice without tools: it only travels with them, also when
            # it comes from the settings (a turn that offers no tools keeps its settings).
            for key in _TOOL_ONLY_SETTINGS:
                body.pop(key, None)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        else:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return body

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send one chat-completions request and return the reply.

        Args:
            request: The messages, tools and settings of this turn.

        Returns:
            The reply, with its stop reason normalised and the raw one kept.

        Raises:
            LLMError: The call failed; ``kind`` says how (see the docs' table).
        """
        body = self.build_body(request)
        try:
            response = await self._client.post(
                self._endpoint, json=body, headers=self._headers, timeout=self._timeout
            )
        except httpx.HTTPError as error:
            raise _transport_error(error) from error
        if response.status_code >= 300:
            raise _status_error(response.status_code, response.headers, response.text)
        reply = _parse_completion(response.text, self.model, response.status_code)
        return self._with_text_tool_calls(request, reply)

    def _with_text_tool_calls(self, request: LLMRequest, reply: LLMResponse) -> LLMResponse:
        if not (self.text_tool_calls and request.tools) or reply.tool_calls:
            return reply
        calls = tool_calls_in_text(reply.text, {tool.name for tool in request.tools})
        if not calls:
            return reply
        return reply.model_copy(
            update={"text": "", "tool_calls": calls, "stop_reason": StopReason.TOOL_CALLS}
        )

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
        """
        body = self.build_body(request, stream=True)
        headers = {**self._headers, "Accept": "text/event-stream"}
        try:
            async with self._client.stream(
                "POST", self._endpoint, json=body, headers=headers, timeout=self._timeout
            ) as response:
                if response.status_code >= 300:
                    await response.aread()
                    raise _status_error(response.status_code, response.headers, response.text)
                content_type = response.headers.get("content-type", "")
                if "text/event-stream" not in content_type:
                    # The server ignored stream=true and answered in one piece.
                    await response.aread()
                    whole = _parse_completion(response.text, self.model, response.status_code)
                    whole = self._with_text_tool_calls(request, whole)
                    if whole.text:
                        yield StreamDelta(text=whole.text)
                    yield StreamDelta(response=whole)
                    return
                accumulator = _StreamAccumulator(self.model)
                events = _SSEEvents(response)
                try:
                    async for data in events:
                        if data == "[DONE]":
                            accumulator.done = True
                            break
                        text = accumulator.add(data)
                        if text:
                            yield StreamDelta(text=text)
                finally:
                    await events.aclose()
                final = accumulator.build()
        except httpx.HTTPError as error:
            raise _transport_error(error) from error
        yield StreamDelta(response=self._with_text_tool_calls(request, final))


def _new_client(host: str) -> httpx.AsyncClient:
    # Proxy variables are for reaching the outside world: a loopback server is reached
    # directly (httpx would otherwise send 127.0.0.1 through HTTP_PROXY).
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    return httpx.AsyncClient(verify=_ssl_context(), trust_env=not loopback)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~25 ms); every adapter can share one.
    return httpx.create_ssl_context()


_TOOL_CALL_TAG_RE: Final = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE_RE: Final = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def tool_calls_in_text(text: str, tool_names: set[str]) -> list[ToolCall]:
    """Tool calls written as text by a model whose server did not parse them.

    Recognises, when they make up the whole reply: one JSON object
    ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for ``arguments``),
    a JSON list of them, optionally inside a code fence, and one or more Hermes/Qwen
    ``<tool_call>{...}</tool_call>`` blocks. Every name must be one of ``tool_names``;
    otherwise nothing is recognised and the reply stays text.

    Args:
        text: The reply's text.
        tool_names: The names of the tools offered in this turn.

    Returns:
        The calls (ids left empty for the runtime to assign), or ``[]``.
    """
    stripped = text.strip()
    if not stripped:
        return []
    candidates: list[object] = []
    if "<tool_call>" in stripped:
        blocks = _TOOL_CALL_TAG_RE.findall(stripped)
        if _TOOL_CALL_TAG_RE.sub("", stripped).strip():
            return []  # text besides the calls: leave it to the output contract
        for block in blocks:
            try:
                candidates.append(json.loads(block))
            except ValueError:
                return []
    else:
        fenced = _FENCE_RE.match(stripped)
        body = fenced.group(1).strip() if fenced else stripped
        if not body.startswith(("{", "[")):
            return []
        try:
            decoded = json.loads(body)
        except ValueError:
            return []
        candidates = decoded if isinstance(decoded, list) else [decoded]
    calls: list[ToolCall] = []
    for candidate in candidates:
        if not isinstance(candidate, dict) or set(candidate) - {"name", "arguments", "parameters"}:
            return []
        name = candidate.get("name")
        arguments = candidate.get("arguments", candidate.get("parameters", {}))
        if name not in tool_names or not isinstance(arguments, dict | str):
            return []
        calls.append(ToolCall(name=str(name), arguments=_decode_arguments(arguments)))
    return calls


# -- serialisation ---------------------------------------------------------------------------


def _message_json(message: Message) -> dict[str, Any]:
    item: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.role == "tool":
        item["tool_call_id"] = message.tool_call_id or ""
    elif message.name:
        item["name"] = message.name
    if message.role == "assistant" and message.tool_calls:
        item["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_json(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return item


def _arguments_json(arguments: dict[str, Any] | str) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


# -- responses -------------------------------------------------------------------------------


def _stop_reason(raw: object) -> StopReason:
    if raw is None:
        return StopReason.UNKNOWN
    return _FINISH_REASONS.get(str(raw).lower(), StopReason.UNKNOWN)


def _decode_arguments(raw: object) -> dict[str, Any] | str:
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    text = raw if isinstance(raw, str) else json.dumps(raw)
    if not text.strip():
        return {}
    try:
        decoded = json.loads(text)
    except ValueError:
        return text
    return decoded if isinstance(decoded, dict) else text


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def _usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        input_tokens=_int(raw.get("prompt_tokens", raw.get("input_tokens"))),
        output_tokens=_int(raw.get("completion_tokens", raw.get("output_tokens"))),
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _invalid(message: str, body: str, status: int | None) -> LLMError:
    return LLMError(
        ErrorKind.INVALID_RESPONSE, message, status_code=status, body=body[:_MAX_ERROR_BODY]
    )


def _parse_completion(text: str, requested_model: str | None, status: int) -> LLMResponse:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise _invalid(f"the reply is not JSON ({error})", text, status) from None
    if not isinstance(data, dict):
        raise _invalid("the reply is not a JSON object", text, status)
    choices = data.get("choices")
    if not choices and data.get("error") is not None:
        raise _error_from_body(None, data, text, {})
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _invalid("the reply has no choices", text, status)
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _invalid("the reply's first choice has no message", text, status)

    tool_calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _invalid("the reply's tool_calls is not a list", text, status)
    for raw_call in raw_calls:
        function = raw_call.get("function") if isinstance(raw_call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _invalid("a tool call in the reply has no function name", text, status)
        tool_calls.append(
            ToolCall(
                name=function["name"],
                arguments=_decode_arguments(function.get("arguments")),
                id=str(raw_call.get("id") or ""),
            )
        )
    legacy = message.get("function_call")
    if not tool_calls and isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
        tool_calls.append(
            ToolCall(name=legacy["name"], arguments=_decode_arguments(legacy.get("arguments")))
        )

    content = _content_text(message.get("content"))
    if not content and isinstance(message.get("refusal"), str):
        content = message["refusal"]
    raw_finish = choice.get("finish_reason")
    model = data.get("model")
    return LLMResponse(
        text=content,
        tool_calls=tool_calls,
        stop_reason=_stop_reason(raw_finish),
        raw_stop_reason=None if raw_finish is None else str(raw_finish),
        usage=_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else requested_model,
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _StreamAccumulator:
    """Assembles chat-completion chunks into one reply."""

    def __init__(self, requested_model: str | None) -> None:
        self.model = requested_model
        self.text: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: object = None
        self.usage = Usage()
        self.done = False
        self.chunks = 0

    def add(self, data: str) -> str:
        """Take one ``data:`` payload; return the text it adds."""
        try:
            chunk = json.loads(data)
        except ValueError as error:
            raise _invalid(f"a streamed chunk is not JSON ({error})", data, 200) from None
        if not isinstance(chunk, dict):
            raise _invalid("a streamed chunk is not a JSON object", data, 200)
        if chunk.get("error") is not None:
            raise _error_from_body(None, chunk, data, {})
        self.chunks += 1
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _invalid("a streamed chunk's choices is not a list", data, 200)
        added = ""
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                continue
            piece = _content_text(delta.get("content"))
            if piece:
                self.text.append(piece)
                added += piece
            for position, raw in enumerate(delta.get("tool_calls") or []):
                if isinstance(raw, dict):
                    self._add_call(position, raw)
            legacy = delta.get("function_call")
            if isinstance(legacy, dict):
                self._add_call(0, {"index": 0, "function": legacy})
        return added

    def _add_call(self, position: int, raw: dict[str, Any]) -> None:
        index = raw.get("index")
        key = index if isinstance(index, int) else position
        call = self.calls.setdefault(key, _PartialCall())
        if raw.get("id") and not call.id:
            call.id = str(raw["id"])
        function = raw.get("function") or {}
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"] and not call.name:
                call.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif isinstance(arguments, dict):
                call.arguments.append(json.dumps(arguments))

    def build(self) -> LLMResponse:
        """The complete reply; raise when the stream ended before it was complete."""
        if not self.done and self.finish_reason is None:
            raise LLMError(
                ErrorKind.CONNECTION,
                f"the stream ended after {self.chunks} chunks without a finish reason or [DONE]",
            )
        calls: list[ToolCall] = []
        for _, partial in sorted(self.calls.items()):
            if not partial.name:
                raise _invalid("a streamed tool call has no function name", "", 200)
            calls.append(
                ToolCall(
                    name=partial.name,
                    arguments=_decode_arguments("".join(partial.arguments)),
                    id=partial.id,
                )
            )
        raw = self.finish_reason
        return LLMResponse(
            text="".join(self.text),
            tool_calls=calls,
            stop_reason=_stop_reason(raw),
            raw_stop_reason=None if raw is None else str(raw),
            usage=self.usage,
            model=self.model,
        )


class _SSEEvents:
    """The ``data`` payloads of a server-sent-event response, one event at a time.

    A plain iterator rather than an async generator, and :meth:`aclose` finishes httpx's own
    byte iterators: an abandoned async generator is finalised by the garbage collector,
    which trio reports as a ResourceWarning (httpx's ``aiter_*`` are generators all the way
    down, see encode/httpx#3686).
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] = response.aiter_bytes()
        self._buffer = b""
        self._data: list[str] = []
        self._body_done = False

    def __aiter__(self) -> _SSEEvents:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                if self._body_done:
                    if self._data:
                        data, self._data = "\n".join(self._data), []
                        return data
                    raise StopAsyncIteration
                await self._read()
                continue
            raw, self._buffer = self._buffer[:newline], self._buffer[newline + 1 :]
            line = raw.removesuffix(b"\r").decode("utf-8", "replace")
            if not line:
                if self._data:
                    data, self._data = "\n".join(self._data), []
                    return data
                continue
            if line.startswith(":"):
                continue  # a comment, used as keep-alive
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value.removeprefix(" "))

    async def _read(self) -> None:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._body_done = True
            if self._buffer:
                self._buffer += b"\n"  # a last line without its newline
        except BaseException:
            self._body_done = True  # the error finished httpx's iterators
            raise
        else:
            self._buffer += chunk

    async def aclose(self) -> None:
        """Close the response; if it was not read to the end, finish httpx's iterators."""
        await self._response.aclose()
        if self._body_done:
            return
        self._body_done = True
        # The response is closed, so resuming its iterator fails at once (or returns what
        # was already buffered): either way every generator in httpx's chain finishes.
        for _ in range(10_000):
            try:
                await self._chunks.__anext__()
            except StopAsyncIteration:
                return
            except Exception:  # a read from the closed stream: expected
                return


# -- errors ----------------------------------------------------------------------------------


def _transport_error(error: httpx.HTTPError) -> LLMError:
    detail = str(error) or type(error).__name__
    if isinstance(error, httpx.TimeoutException):
        return LLMError(ErrorKind.TIMEOUT, f"{type(error).__name__}: {detail}")
    if isinstance(error, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        return LLMError(ErrorKind.CONNECTION, f"{type(error).__name__}: {detail}")
    if isinstance(error, httpx.DecodingError):
        return LLMError(ErrorKind.INVALID_RESPONSE, f"{type(error).__name__}: {detail}")
    return LLMError(ErrorKind.OTHER, f"{type(error).__name__}: {detail}")


def _status_error(status: int, headers: Mapping[str, str], text: str) -> LLMError:
    try:
        data: object = json.loads(text) if text.strip() else None
    except ValueError:
        data = None
    return _error_from_body(status, data, text, headers)


def _error_fields(data: object) -> tuple[str, str]:
    """The provider's error message and code/type, from the usual error shapes."""
    if not isinstance(data, dict):
        return "", ""
    error = data.get("error", data)
    if isinstance(error, str):
        return error, ""
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or data.get("message") or ""
        code = error.get("code") or error.get("type") or ""
        if isinstance(message, list):  # FastAPI validation errors
            message = json.dumps(message)
        return str(message), str(code)
    return "", ""


def _error_from_body(
    status: int | None, data: object, text: str, headers: Mapping[str, str]
) -> LLMError:
    message, code = _error_fields(data)
    if not message:
        message = " ".join(text.split())[:_MAX_MESSAGE] or (
            f"HTTP {status}" if status is not None else "the server reported an error"
        )
    retry_after = parse_retry_after(headers)
    says_filter = bool(_CONTENT_FILTER_RE.search(f"{code} {message}"))
    kind: ErrorKind
    if status is None:  # an error object in a 200 reply or inside a stream
        kind = ErrorKind.CONTENT_FILTER if says_filter else ErrorKind.SERVER_ERROR
    elif status == 429:
        quota = "insufficient_quota" in code or "quota" in message.lower()
        kind = ErrorKind.OTHER if quota else ErrorKind.RATE_LIMIT
    elif status >= 500:
        invalid = status == 500 and _VALIDATION_RE.match(message) is not None
        kind = ErrorKind.BAD_REQUEST if invalid else ErrorKind.SERVER_ERROR
    elif status == 401:
        kind = ErrorKind.AUTHENTICATION
    elif status == 408:
        kind = ErrorKind.TIMEOUT
    elif status == 409:
        kind = ErrorKind.SERVER_ERROR  # a transient conflict (as OpenAI's own SDK retries it)
    elif says_filter and 400 <= status < 500:
        kind = ErrorKind.CONTENT_FILTER
    elif status == 403:
        kind = ErrorKind.PERMISSION
    elif 400 <= status < 500:
        kind = ErrorKind.BAD_REQUEST
    else:
        kind = ErrorKind.OTHER  # 3xx: redirects are not followed
    return LLMError(
        kind,
        message[:_MAX_MESSAGE],
        status_code=status,
        retry_after=retry_after,
        body=text[:_MAX_ERROR_BODY] or None,
    )
