"""The chat-completions wire format: request bodies, decoded replies and classified errors.

What :class:`~subagent.llm._openai.OpenAIChat` sends, how it reads a complete reply, and which
:class:`~subagent.ErrorKind` a failed exchange becomes (from an httpx exception, or from a
status, headers and body). No I/O happens here: the adapter owns the HTTP exchange and
:mod:`subagent.llm._sse` reads streamed replies.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Collection, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx

from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent._text import MAX_ARGUMENT_DEPTH, nested_deeper_than, objects_in_a_row
from subagent.llm._profile import StructuredOutput
from subagent.llm._protocol import (
    LLMRequest,
    LLMResponse,
    Message,
    StopReason,
    ToolCall,
    ToolDefinition,
    Usage,
)
from subagent.llm._structured import STRUCTURED_FIELDS, answer_tool, output_fields

__all__ = [
    "UNREPORTED",
    "content_text",
    "decode_arguments",
    "decode_usage",
    "error_from_body",
    "invalid_response",
    "loads",
    "malformed_reply",
    "message_json",
    "parse_completion",
    "parse_retry_after",
    "reasoning_text",
    "rejects_output_mode",
    "rejects_stream_options",
    "request_body",
    "status_error",
    "stop_reason",
    "tool_calls_in_text",
    "tool_json",
    "transport_error",
]

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

# The request does not fit the context window: OpenAI, vLLM and llama-cpp-python send the
# code context_length_exceeded ("This model's maximum context length is N tokens..."),
# llama.cpp's llama-server the type exceed_context_size_error ("the request exceeds the
# available context size").
_CONTEXT_LENGTH_RE: Final = re.compile(
    r"context_length_exceeded|exceed_context_size|maximum context length"
    r"|exceeds? (?:the )?(?:available )?context (?:size|window|length)",
    re.IGNORECASE,
)

_OPEN_TAG: Final = "<tool_call>"
_CLOSE_TAG: Final = "</tool_call>"
_FENCE: Final = "```"
_FUNCTIONS_PREFIX: Final = "functions."
_DECODER: Final = json.JSONDecoder()


def loads(text: str) -> Any:
    """``json.loads``, where JSON nested too deep for the parser is a ``ValueError``.

    ``json`` raises ``RecursionError`` past about 1,000 levels; here that is invalid JSON
    like any other.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None


# -- serialisation ---------------------------------------------------------------------------


def request_body(
    request: LLMRequest,
    *,
    model: str | None,
    default_settings: Mapping[str, Any],
    stream: bool,
    stream_usage: bool = True,
    dialect: StructuredOutput = "json_schema",
) -> dict[str, Any]:
    """The JSON body of a chat-completions request.

    Args:
        request: The request to serialise.
        model: The model to name; ``None`` lets the server use its default.
        default_settings: Settings merged under the request's own ``settings``.
        stream: Whether to ask for server-sent events.
        stream_usage: When streaming, ask for usage in the stream
            (``stream_options: {"include_usage": true}``), unless the settings say otherwise.
        dialect: How the server takes output mode ``json_schema`` (the caller has checked
            that it has one).

    Returns:
        A JSON-serialisable dict. The request's output mode wins over the settings: mode
        ``json_schema`` replaces their structured-output fields, mode ``tool`` their
        ``tool_choice``.
    """
    body: dict[str, Any] = {}
    if model:
        body["model"] = model
    body["messages"] = [message_json(message) for message in request.messages]
    # Requests the run loop built before output modes existed have no output field at all.
    output = getattr(request, "output", None)
    tools = [tool_json(tool) for tool in request.tools]
    choice: object = request.tool_choice
    if output is not None and output.mode == "tool":
        if any(tool.name == output.name for tool in request.tools):
            raise ConfigurationError(
                "output.name", f"{output.name!r} is also the name of a tool offered this turn"
            )
        answer, choice = answer_tool(output)
        tools.append(answer)
    if tools:
        body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
    body.update(default_settings)
    body.update(request.settings)  # may name a tool: {"tool_choice": {"type": ...}}
    if not tools:
        # OpenAI rejects tool_choice without tools: it only travels with them, also when
        # it comes from the settings (a turn that offers no tools keeps its settings).
        for key in _TOOL_ONLY_SETTINGS:
            body.pop(key, None)
    if output is not None:
        if output.mode == "json_schema":
            for key in STRUCTURED_FIELDS:
                body.pop(key, None)
            body.update(output_fields(output, dialect))
        elif output.mode == "tool":
            body["tool_choice"] = choice
    if stream:
        body["stream"] = True
        if stream_usage:
            body.setdefault("stream_options", {"include_usage": True})
    else:
        body.pop("stream", None)
        body.pop("stream_options", None)
    return body


def tool_json(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as the wire format offers it."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def message_json(message: Message) -> dict[str, Any]:
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


def stop_reason(raw: object) -> StopReason:
    if raw is None:
        return StopReason.UNKNOWN
    return _FINISH_REASONS.get(str(raw).lower(), StopReason.UNKNOWN)


def decode_arguments(raw: object) -> dict[str, Any] | str:
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


def content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


UNREPORTED: Final = Usage(unreported=1)
"""The usage of a call whose server reported none."""


def decode_usage(raw: object) -> Usage:
    """The usage a server reported; :data:`UNREPORTED` when it reported no token count."""
    if not isinstance(raw, dict):
        return UNREPORTED
    prompt = raw.get("prompt_tokens", raw.get("input_tokens"))
    completion = raw.get("completion_tokens", raw.get("output_tokens"))
    if not (_is_count(prompt) or _is_count(completion)):
        return UNREPORTED
    return Usage(input_tokens=_int(prompt), output_tokens=_int(completion))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _int(value: object) -> int:
    return value if isinstance(value, int) and _is_count(value) else 0


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


def parse_completion(text: str, requested_model: str | None, status: int) -> LLMResponse:
    try:
        data = loads(text)
    except ValueError as error:
        raise invalid_response(f"the reply is not JSON ({error})", text, status) from None
    if not isinstance(data, dict):
        raise invalid_response("the reply is not a JSON object", text, status)
    # A reply this broken is retried; the tokens it used are still counted when it says.
    used = decode_usage(data.get("usage"))
    reported = (used.input_tokens, used.output_tokens) if "usage" in data else None
    choices = data.get("choices")
    if not choices and data.get("error") is not None:
        raise error_from_body(None, data, text, {})
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise invalid_response("the reply has no choices", text, status, reported)
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise invalid_response("the reply's first choice has no message", text, status, reported)

    tool_calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise invalid_response("the reply's tool_calls is not a list", text, status)
    for raw_call in raw_calls:
        function = raw_call.get("function") if isinstance(raw_call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid_response("a tool call in the reply has no function name", text, status)
        tool_calls.append(
            ToolCall(
                name=function["name"],
                arguments=decode_arguments(function.get("arguments")),
                id=str(raw_call.get("id") or ""),
            )
        )
    legacy = message.get("function_call")
    if not tool_calls and isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
        tool_calls.append(
            ToolCall(name=legacy["name"], arguments=decode_arguments(legacy.get("arguments")))
        )

    content = content_text(message.get("content"))
    if not content and isinstance(message.get("refusal"), str):
        content = message["refusal"]
    raw_finish = choice.get("finish_reason")
    model = data.get("model")
    return LLMResponse(
        text=content,
        tool_calls=tool_calls,
        stop_reason=stop_reason(raw_finish),
        raw_stop_reason=None if raw_finish is None else str(raw_finish),
        usage=decode_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else requested_model,
        reasoning=reasoning_text(message),
    )


def reasoning_text(message: Mapping[str, Any]) -> str:
    """The reasoning a message carries apart from its content, if any.

    vLLM, DeepSeek, llama.cpp and most gateways send ``reasoning_content``; OpenRouter and
    some others ``reasoning``.
    """
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def tool_calls_in_text(text: str, tool_names: Collection[str]) -> list[ToolCall]:
    """Tool calls written as text by a model whose server did not parse them.

    Recognises, when they make up the whole reply: one JSON object
    ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for ``arguments``),
    a JSON list of them, or several such objects one after another (one per line, as small
    models write several calls), optionally inside a code fence, one or more Hermes/Qwen
    ``<tool_call>{...}</tool_call>`` blocks, and one or more ``functions.NAME:`` lines each
    followed by its arguments as a JSON object (the syntax of llama-cpp-python's
    ``chatml-function-calling`` format, which small models also write as plain text). Every
    name must be one of ``tool_names``; otherwise nothing is recognised and the reply stays
    text.

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
    if stripped.startswith(_FUNCTIONS_PREFIX):
        prefixed = _prefixed_calls(stripped, tool_names)
        if prefixed is None:
            return []
        candidates = [{"name": name, "arguments": arguments} for name, arguments in prefixed]
    elif _OPEN_TAG in stripped:
        blocks = _tagged_blocks(stripped)
        if blocks is None:
            return []  # text besides the calls: leave it to the output contract
        for block in blocks:
            try:
                candidates.append(loads(block))
            except (ValueError, RecursionError):
                return []
    else:
        body = _unfenced(stripped)
        if not body.startswith(("{", "[")):
            return []
        try:
            decoded = loads(body)
        except (ValueError, RecursionError):
            decoded = objects_in_a_row(body)
            if decoded is None:
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
        calls.append(ToolCall(name=str(name), arguments=decode_arguments(arguments)))
    return calls


def _prefixed_calls(text: str, tool_names: Collection[str]) -> list[tuple[str, object]] | None:
    """The ``functions.NAME:`` calls making up ``text``: each name and its decoded arguments.

    ``None`` when anything else is in the text, or a name is not one of ``tool_names`` (read
    no further). One pass: each step decodes one JSON value where the last one ended.
    """
    calls: list[tuple[str, object]] = []
    position, length = 0, len(text)
    while True:
        position = _after_space(text, position)
        if position == length:
            return calls or None
        if not text.startswith(_FUNCTIONS_PREFIX, position):
            return None
        colon = text.find(":", position)
        if colon < 0:
            return None
        name = text[position + len(_FUNCTIONS_PREFIX) : colon].strip()
        if name not in tool_names:
            return None
        position = _after_space(text, colon + 1)
        try:
            arguments, position = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            return None
        calls.append((name, arguments))


def _after_space(text: str, position: int) -> int:
    """The first position at or after ``position`` that is not whitespace (or the end)."""
    length = len(text)
    while position < length and text[position].isspace():
        position += 1
    return position


def _tagged_blocks(text: str) -> list[str] | None:
    """The bodies of ``<tool_call>...</tool_call>`` blocks making up ``text``, stripped.

    The last block may lack its closing tag (it runs to the end). ``None`` when anything but
    whitespace lies outside the blocks. One pass of ``str.find``: linear in the text, where
    a regular expression with lazy and greedy whitespace backtracked quadratically.
    """
    blocks: list[str] = []
    position = 0
    while (start := text.find(_OPEN_TAG, position)) >= 0:
        if text[position:start].strip():
            return None
        body = start + len(_OPEN_TAG)
        end = text.find(_CLOSE_TAG, body)
        if end < 0:
            blocks.append(text[body:].strip())
            return blocks
        blocks.append(text[body:end].strip())
        position = end + len(_CLOSE_TAG)
    if text[position:].strip():
        return None
    return blocks


def _unfenced(text: str) -> str:
    """``text`` out of its code fence (```` ```json ... ``` ````), stripped; else ``text``.

    Linear: the fence is the text's first and last three backticks, the language tag the
    letters after the first.
    """
    if len(text) < 2 * len(_FENCE) or not (text.startswith(_FENCE) and text.endswith(_FENCE)):
        return text
    inner = text[len(_FENCE) : -len(_FENCE)]
    letters = len(inner) - len(inner.lstrip(_LETTERS))
    return inner[letters:].strip()


_LETTERS: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


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


def rejects_stream_options(error: LLMError) -> bool:
    """Whether ``error`` is a server refusing the ``stream_options`` field it does not know.

    Azure OpenAI before its 2024 API versions answers ``400 Unrecognized request argument
    supplied: stream_options``; strict gateways answer 400 or 422 naming the field.
    """
    if error.kind is not ErrorKind.BAD_REQUEST:
        return False
    said = f"{error.message} {error.body or ''}"
    return "stream_options" in said or "include_usage" in said


_OUTPUT_FIELDS = ("response_format", "json_schema", "json_object", "guided_json",
                  "structured_outputs", "schema", "grammar")  # fmt: skip


def rejects_output_mode(error: LLMError) -> bool:
    """Whether ``error`` is a server refusing the structured-output field a request sent.

    Servers that do not take ``response_format`` (or a dialect of it) answer 400 or 422
    naming the field (``Unrecognized request argument supplied: response_format``); a 400
    for anything else (a context too long) names none of them.
    """
    if error.kind is not ErrorKind.BAD_REQUEST:
        return False
    said = f"{error.message} {error.body or ''}".lower()
    return any(field in said for field in _OUTPUT_FIELDS)


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
