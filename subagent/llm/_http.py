"""What every HTTP adapter shares, whatever its provider's wire format.

The client (pooled, loopback servers reached without proxies, one SSL context for all), a
base URL checked and its credentials taken out of it, the size and time limits of one call,
JSON read within the parser's depth, tool-call arguments decoded, and the classification of
a failed exchange into an :class:`~subagent.ErrorKind`: from an httpx exception
(:func:`transport_error`) or from a status, headers and body (:func:`status_error`, with
``Retry-After`` read by :func:`parse_retry_after`). No provider's format is read here: the
error shapes understood are the common ones (``{"error": {"message", "type"|"code"}}``,
FastAPI's ``detail``), which OpenAI-compatible servers and Anthropic's API both send.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Final

import anyio
import httpx

from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent._text import MAX_ARGUMENT_DEPTH, nested_deeper_than
from subagent.llm._redact import redact_url_credentials

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_STREAM_BYTES",
    "DEFAULT_TOTAL_TIMEOUT",
    "MALFORMED",
    "MAX_ERROR_READ",
    "ServerURL",
    "check_deadline",
    "deadline",
    "decode_arguments",
    "error_from_body",
    "invalid_response",
    "loads",
    "malformed_reply",
    "new_client",
    "parse_retry_after",
    "server_url",
    "status_error",
    "transport_error",
]

DEFAULT_MAX_CONNECTIONS: Final = 100
"""Connections an adapter's own client opens to the server at once."""

DEFAULT_MAX_RESPONSE_BYTES: Final = 32 * 1024 * 1024
"""The largest reply read by default (32 MiB): far above any chat completion (a 128k-token
reply with log-probabilities is about 13 MB), and a 60 MB reply is refused unread."""

DEFAULT_MAX_STREAM_BYTES: Final = 256 * 1024 * 1024
"""The most bytes one streamed reply may send by default (256 MiB). Each streamed token
comes in its own ~250-byte event, so a legitimate 128k-token stream is ~35 MB."""

DEFAULT_TOTAL_TIMEOUT: Final = 600.0
"""Seconds one call may take in all by default, streaming included (10 minutes)."""

MAX_ERROR_READ: Final = 64 * 1024
"""The most bytes of an error body read (its first 4,000 characters are kept)."""

_MAX_ERROR_BODY: Final = 4000
_MAX_MESSAGE: Final = 500

# FastAPI-based servers (llama-cpp-python) answer a request they cannot validate with HTTP
# 500 and pydantic's message; repeating such a request cannot help.
_VALIDATION_RE: Final = re.compile(r"^\s*\d+ validation errors?\b", re.IGNORECASE)

_CONTENT_FILTER_RE: Final = re.compile(
    r"content[ _-]?(?:filter|policy|management[ _-]policy)|responsible ?ai", re.IGNORECASE
)

# The request does not fit the context window: OpenAI, vLLM and llama-cpp-python send the
# code context_length_exceeded ("This model's maximum context length is N tokens..."),
# llama.cpp's llama-server the type exceed_context_size_error ("the request exceeds the
# available context size").
_CONTEXT_LENGTH_RE: Final = re.compile(
    r"context_length_exceeded|exceed_context_size|maximum context length"
    r"|exceeds? (?:the )?(?:available )?context (?:size|window|length)",
    re.IGNORECASE,
)


# -- the client and the server's URL ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerURL:
    """A base URL as an adapter uses it.

    Attributes:
        url: The URL without its trailing ``/`` and without credentials.
        basic: ``Basic ...`` for the credentials the URL held (``None``: it held none).
        secrets: The credentials, decoded and as written, for the adapter's redactor.
    """

    url: httpx.URL
    basic: str | None
    secrets: tuple[str, ...]


def server_url(value: str) -> ServerURL:
    """``value`` checked as an ``http://`` or ``https://`` URL, its credentials taken out.

    Credentials in the URL (``http://user:password@gateway/v1``) travel as Basic auth, as
    httpx would send them, and are kept out of the URL the adapter stores and shows.

    Raises:
        ConfigurationError: Naming ``base_url``, with any credentials in the value redacted.
    """
    shown_url = redact_url_credentials(value)
    try:
        url = httpx.URL(value.rstrip("/"))
    except (httpx.InvalidURL, TypeError) as error:
        detail = redact_url_credentials(str(error))
        raise ConfigurationError("base_url", f"{shown_url!r} is not a URL: {detail}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(
            "base_url", f"must be an http:// or https:// URL, got {shown_url!r}"
        )
    secrets = (url.username, url.password, *url.userinfo.decode("ascii").split(":", 1))
    if not url.userinfo:
        return ServerURL(url, None, secrets)
    token = base64.b64encode(f"{url.username}:{url.password}".encode()).decode("ascii")
    return ServerURL(url.copy_with(username=None, password=None), f"Basic {token}", secrets)


def new_client(host: str, max_connections: int) -> httpx.AsyncClient:
    """An adapter's own client for ``host``: pooled, proxies bypassed for a loopback host."""
    # Proxy variables are for reaching the outside world: a loopback server is reached
    # directly (httpx would otherwise send 127.0.0.1 through HTTP_PROXY).
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=min(20, max_connections)
    )
    return httpx.AsyncClient(verify=_ssl_context(), trust_env=not loopback, limits=limits)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~25 ms); every adapter can share one.
    return httpx.create_ssl_context()


def deadline(total_timeout: float | None) -> float:
    """When a call started now must be over, on anyio's clock (``inf`` without a limit)."""
    if total_timeout is None:
        return math.inf
    return anyio.current_time() + total_timeout


def check_deadline(scope: anyio.CancelScope, total_timeout: float | None) -> None:
    """Raise the ``timeout`` error of a call whose deadline ``scope`` cancelled it."""
    if scope.cancelled_caught:
        raise LLMError(
            ErrorKind.TIMEOUT,
            f"no complete reply within total_timeout={total_timeout:g} s",
        )


# -- replies ----------------------------------------------------------------------------------


def loads(text: str) -> Any:
    """``json.loads``, where JSON nested too deep for the parser is a ``ValueError``.

    ``json`` raises ``RecursionError`` past about 1,000 levels; here that is invalid JSON
    like any other.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None


def decode_arguments(raw: object) -> dict[str, Any] | str:
    """A tool call's arguments: the object they decode to, else the raw text.

    Raw text is invalid arguments the model is told about; ``None`` and blank text are no
    arguments (``{}``).
    """
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    text = raw if isinstance(raw, str) else json.dumps(raw)
    if not text.strip():
        return {}
    try:
        decoded = loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(decoded, dict) or nested_deeper_than(decoded, MAX_ARGUMENT_DEPTH):
        return text  # the raw text: invalid arguments the model is told about
    return decoded


def invalid_response(
    message: str, body: str, status: int | None, usage: tuple[int, int] | None = None
) -> LLMError:
    return LLMError(
        ErrorKind.INVALID_RESPONSE,
        message,
        status_code=status,
        body=body[:_MAX_ERROR_BODY],
        usage=usage,
    )


MALFORMED: Final = (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError)
"""What reading a reply of an unexpected shape can raise (a number where a list belongs, JSON
nested past the parser's depth): such a reply is ``invalid_response``, never an adapter bug."""


def malformed_reply(error: BaseException, body: str, status: int | None) -> LLMError:
    """A reply whose shape could not be read (one of :data:`MALFORMED`): ``invalid_response``."""
    detail = str(error)[:200] or type(error).__name__
    return invalid_response(
        f"the reply has an unexpected shape ({type(error).__name__}: {detail})", body, status
    )


# -- errors ----------------------------------------------------------------------------------


def transport_error(error: httpx.HTTPError, where: str | None = None) -> LLMError:
    """The :class:`LLMError` of a failed exchange.

    ``where``: the address tried, named in the message of a timeout or a failed connection
    (its credentials removed by the caller).
    """
    detail = str(error) or type(error).__name__
    at = f" (at {where})" if where else ""
    if isinstance(error, httpx.TimeoutException):
        return LLMError(ErrorKind.TIMEOUT, f"{type(error).__name__}: {detail}{at}")
    if isinstance(error, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        return LLMError(ErrorKind.CONNECTION, f"{type(error).__name__}: {detail}{at}")
    if isinstance(error, httpx.DecodingError):
        return LLMError(ErrorKind.INVALID_RESPONSE, f"{type(error).__name__}: {detail}")
    return LLMError(ErrorKind.OTHER, f"{type(error).__name__}: {detail}")


def status_error(status: int, headers: Mapping[str, str], text: str) -> LLMError:
    try:
        data: object = loads(text) if text.strip() else None
    except ValueError:
        data = None
    try:
        return error_from_body(status, data, text, headers)
    except MALFORMED:  # an error object of an unexpected shape: classified by its status
        return error_from_body(status, None, text, headers)


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


def _error_type(data: object) -> str:
    error = data.get("error") if isinstance(data, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else ""


def error_from_body(
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
    if _CONTEXT_LENGTH_RE.search(f"{code} {_error_type(data)} {message}"):
        kind = ErrorKind.CONTEXT_LENGTH
    elif status is None:  # an error object in a 200 reply or inside a stream
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
