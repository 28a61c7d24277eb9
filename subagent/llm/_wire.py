"""The chat-completions wire format: request bodies, replies and streamed chunks read.

What :class:`~subagent.llm.OpenAIChat` sends, how it reads a complete reply
(:func:`parse_completion`) and a streamed one (:class:`StreamAccumulator`, fed the ``data``
payloads :class:`~subagent.llm._sse.SSEEvents` reads), and which refusals of a field are
the server not knowing it. No I/O happens here: the adapter owns the HTTP exchange;
failed exchanges are classified by :mod:`subagent.llm._http`, calls written as text read by
:mod:`subagent.llm._text_calls`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent.llm._http import decode_arguments, error_from_body, invalid_response, loads
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
    "StreamAccumulator",
    "content_text",
    "decode_usage",
    "message_json",
    "parse_completion",
    "reasoning_text",
    "rejects_output_mode",
    "rejects_stream_options",
    "request_body",
    "stop_reason",
    "tool_json",
]

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


# -- refusals of a field the server does not know ---------------------------------------------


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


# -- streamed replies --------------------------------------------------------------------------


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Assembles ``chat.completion.chunk`` payloads into one reply."""

    def __init__(self, requested_model: str | None, max_chars: int | None = None) -> None:
        self.model = requested_model
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_added = ""  # the reasoning the last chunk added
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: object = None
        self.usage = UNREPORTED  # until a chunk reports it (stream_options.include_usage)
        self.done = False
        self.chunks = 0
        self.size = 0  # characters of text and tool-call arguments held
        self.max_chars = max_chars

    def add(self, data: str) -> str:
        """Take one ``data:`` payload; return the text it adds."""
        try:
            chunk = loads(data)
        except ValueError as error:
            raise invalid_response(f"a streamed chunk is not JSON ({error})", data, 200) from None
        if not isinstance(chunk, dict):
            raise invalid_response("a streamed chunk is not a JSON object", data, 200)
        if chunk.get("error") is not None:
            raise error_from_body(None, chunk, data, {})
        self.chunks += 1
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = decode_usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise invalid_response("a streamed chunk's choices is not a list", data, 200)
        added = ""
        self.reasoning_added = ""
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                continue
            piece = content_text(delta.get("content"))
            if piece:
                self._grow(len(piece))
                self.text.append(piece)
                added += piece
            thought = reasoning_text(delta)
            if thought:
                self._grow(len(thought))
                self.reasoning.append(thought)
                self.reasoning_added += thought
            raw_calls = delta.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise invalid_response("a streamed chunk's tool_calls is not a list", data, 200)
            for position, raw in enumerate(raw_calls):
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
            if isinstance(arguments, dict):
                arguments = json.dumps(arguments)
            if isinstance(arguments, str):
                self._grow(len(arguments))
                call.arguments.append(arguments)

    def _grow(self, added: int) -> None:
        self.size += added
        if self.max_chars is not None and self.size > self.max_chars:
            raise LLMError(
                ErrorKind.RESPONSE_TOO_LARGE,
                f"the streamed reply is longer than max_response_bytes={self.max_chars:,} "
                f"(text and tool-call arguments)",
                status_code=200,
            )

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
                raise invalid_response("a streamed tool call has no function name", "", 200)
            calls.append(
                ToolCall(
                    name=partial.name,
                    arguments=decode_arguments("".join(partial.arguments)),
                    id=partial.id,
                )
            )
        raw = self.finish_reason
        return LLMResponse(
            text="".join(self.text),
            reasoning="".join(self.reasoning),
            tool_calls=calls,
            stop_reason=stop_reason(raw),
            raw_stop_reason=None if raw is None else str(raw),
            usage=self.usage,
            model=self.model,
        )
