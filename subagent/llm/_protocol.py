"""The LLM protocol: requests, responses, and the adapters that speak it.

An LLM is anything with ``async complete(request) -> response``. The runtime builds one
:class:`LLMRequest` per turn (messages, the tools offered this turn, settings, turn info, and
how the answer is asked for) and expects one :class:`LLMResponse` back (text, tool calls, a
normalised :class:`StopReason`, usage). Transport failures are reported by raising
:class:`~subagent.LLMError` with a classified :class:`~subagent.ErrorKind`; the runtime
decides whether to retry.

What an adapter does with :attr:`LLMRequest.output` (an :class:`OutputRequest`, or ``None``):

- ``None``, or mode ``"text"``: nothing. The answer is asked for in the prompt and comes back
  as the reply's text (what every request did before output modes existed).
- ``"json_schema"``: ask the provider to constrain the reply's text to
  :attr:`OutputRequest.json_schema` (its structured output, a grammar on the server's side),
  in whatever form the provider takes. The answer still comes back as the reply's text.
- ``"tool"``: offer one more tool, named :attr:`OutputRequest.name`, whose parameters are the
  schema, and force the model to call it; then return that call's arguments, as JSON, as the
  reply's text, with no tool call left in the reply. The answer comes back as text here too,
  so whoever reads it need not know which mode asked for it.

An adapter that cannot serve a mode raises :class:`UnsupportedOutputError` (an
:class:`~subagent.LLMError` of kind ``bad_request``, never retried) naming the mode and the
server, before sending anything when it can tell; it never silently falls back to another mode.
Adapters that know nothing of output modes (written before them) keep working for requests
without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, Protocol, runtime_checkable

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from subagent._errors import ErrorKind, LLMError
from subagent._text import (
    MAX_ARGUMENT_DEPTH,
    first_non_finite,
    nested_deeper_than,
    scrub_surrogates,
    scrub_surrogates_in,
)

__all__ = [
    "LLM",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OutputMode",
    "OutputRequest",
    "StopReason",
    "StreamDelta",
    "StreamingLLM",
    "ToolCall",
    "ToolDefinition",
    "TurnInfo",
    "UnsupportedOutputError",
    "Usage",
]

# Text that came from a model or a server: lone surrogates (a JSON "\ud800" escape) become
# U+FFFD, so every record holding it can be dumped as JSON.
_Text = Annotated[str, AfterValidator(scrub_surrogates)]


class StopReason(StrEnum):
    """Why the model stopped producing its reply, normalised across providers."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    ERROR = "error"
    UNKNOWN = "unknown"


class Usage(BaseModel):
    """Token counts of one call, or a sum of calls.

    Attributes:
        input_tokens: Tokens of the prompt.
        output_tokens: Tokens of the reply.
        unreported: Calls whose usage the server did not report (a stream from a server
            that ignores ``stream_options``, such as llama-cpp-python): each counts 0 tokens
            here, so with ``unreported > 0`` the counts are a lower bound, not a
            measurement. Left out of the JSON form when 0.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    unreported: int = Field(default=0, exclude_if=lambda count: count == 0)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def known(self) -> bool:
        """Whether every call counted reported its usage (``unreported == 0``)."""
        return self.unreported == 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            unreported=self.unreported + other.unreported,
        )


class ToolCall(BaseModel):
    """A tool call requested by the model.

    Attributes:
        name: The tool's name.
        arguments: The decoded arguments, or the raw string when the provider sent
            arguments that are not a JSON object (reported back to the model as an error).
            Arguments holding NaN or an infinity are kept as their JSON text: JSON has no
            such numbers, so they are not valid arguments (and could not be stored).
            Arguments nested more than 100 levels deep are kept as a note saying so (the
            adapter keeps the raw text): invalid arguments, never walked recursively.
        id: The provider's call id; the runtime assigns one when it is empty.
    """

    model_config = ConfigDict(frozen=True)

    name: _Text
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: _Text = ""

    @field_validator("arguments")
    @classmethod
    def _storable_arguments(cls, value: dict[str, Any] | str) -> dict[str, Any] | str:
        if isinstance(value, str):
            return scrub_surrogates(value)
        if nested_deeper_than(value, MAX_ARGUMENT_DEPTH):  # never walked recursively
            return f"(arguments nested more than {MAX_ARGUMENT_DEPTH} levels deep)"
        value = scrub_surrogates_in(value)
        if first_non_finite(value) is not None:
            return json.dumps(value, ensure_ascii=False)
        return value


class Message(BaseModel):
    """One chat message in OpenAI-compatible shape."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ToolDefinition(BaseModel):
    """What the model is told about one tool: its name, description and JSON schema."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class TurnInfo(BaseModel):
    """Where a request sits in its run, for adapters and logs.

    Attributes:
        index: The 1-based turn number.
        type: ``normal``, ``must_return`` or ``retry``.
        agent: The agent's name.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    type: str
    agent: str = ""


OutputMode = Literal["text", "json_schema", "tool"]
"""How a request asks for its answer: in the prompt (``text``), as the provider's structured
output (``json_schema``), or as the arguments of a forced tool call (``tool``)."""

# What OpenAI accepts as a response_format or function name; vLLM and llama.cpp take the same.
_OUTPUT_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


class OutputRequest(BaseModel):
    """How one request asks for the answer (:attr:`LLMRequest.output`).

    Attributes:
        mode: ``"text"``: in the prompt only, nothing more is sent (the same as no
            ``OutputRequest``). ``"json_schema"``: the provider's structured output, the
            schema sent as a grammar the reply must follow. ``"tool"``: one tool taking the
            schema as its parameters, offered and forced; its arguments become the reply's
            text. Each adapter sends these in its provider's form; the module documentation
            of :mod:`subagent.llm` says what an adapter must do with each.
        json_schema: The JSON schema of the answer (the output's, or that of a list of
            calls); required by ``json_schema`` and ``tool``.
        name: The schema's name (OpenAI's ``json_schema.name``) and the forced tool's name:
            1 to 64 letters, digits, ``_`` or ``-``.
        description: What the forced tool is for, told to the model (mode ``tool``).
        strict: Ask for strict adherence where the provider has such a switch (OpenAI's
            ``strict: true``), when the schema can be made to meet its rules; otherwise the
            schema is sent with ``strict: false``.
    """

    model_config = ConfigDict(frozen=True)

    mode: OutputMode
    json_schema: dict[str, Any] | None = None
    name: str = "final_answer"
    description: str = ""
    strict: bool = True

    @field_validator("name")
    @classmethod
    def _name_the_provider_takes(cls, value: str) -> str:
        if not _OUTPUT_NAME.fullmatch(value):
            raise ValueError(
                f"must be 1 to 64 letters, digits, '_' or '-' (a provider's rule), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _schema_where_needed(self) -> OutputRequest:
        if self.mode != "text" and not self.json_schema:
            raise ValueError(f"mode {self.mode!r} needs a json_schema")
        return self


class LLMRequest(BaseModel):
    """Everything an adapter needs for one call.

    Attributes:
        messages: The conversation to send.
        tools: The tools offered this turn; empty in ``must_return`` and ``retry``.
        tool_choice: ``"none"`` when tool schemas are kept for prompt caching but the model
            must not call them; ``None`` leaves the provider's default.
        settings: Provider settings (``temperature``, ``max_tokens``, ``response_format``...).
        turn: Which turn of which run this request belongs to.
        output: How the answer is asked for (:class:`OutputRequest`); ``None``, the default,
            asks for it in the prompt only and sends nothing more, as mode ``"text"`` does.
    """

    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...]
    tools: list[ToolDefinition] = Field(default_factory=list)
    tool_choice: Literal["auto", "none", "required"] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    turn: TurnInfo | None = None
    output: OutputRequest | None = None


class LLMResponse(BaseModel):
    r"""One reply from the model.

    Attributes:
        text: The reply's text content (``""`` when there is none). Lone surrogates (a
            server may send ``"\ud800"`` as a JSON escape) are replaced by U+FFFD.
        tool_calls: Tool calls the model requested.
        stop_reason: The normalised stop reason; defaults to ``tool_calls`` when there are
            tool calls and ``stop`` otherwise.
        raw_stop_reason: The provider's own value, kept for diagnosis.
        usage: Token counts of this call.
        model: The model that answered, when the provider says.
        reasoning: The model's reasoning, when the provider sends it apart from the text
            (``reasoning_content``); never parsed as the answer.
    """

    model_config = ConfigDict(frozen=True)

    text: _Text = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: StopReason = StopReason.STOP
    raw_stop_reason: _Text | None = None
    usage: Usage = Field(default_factory=Usage)
    model: _Text | None = None
    reasoning: _Text = ""

    def model_post_init(self, context: Any, /) -> None:
        """Default the stop reason to ``tool_calls`` when the reply calls tools."""
        if self.tool_calls and "stop_reason" not in self.model_fields_set:
            object.__setattr__(self, "stop_reason", StopReason.TOOL_CALLS)


class StreamDelta(BaseModel):
    """A piece of a streamed reply.

    Attributes:
        text: Text appended by this delta.
        reasoning: Reasoning appended by this delta (``reasoning_content``).
        response: Set on the last item only: the complete reply.
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    reasoning: str = ""
    response: LLMResponse | None = None


class UnsupportedOutputError(LLMError):
    """A request asked for an output mode its model or server cannot serve.

    An :class:`~subagent.LLMError` of kind ``bad_request`` (never retried: the same request
    gets the same answer). The message names the mode and the server (its profile, base URL
    and model; never a key).

    Attributes:
        mode: The output mode asked for.
        server: The server, as the message names it.
    """

    def __init__(self, mode: str, server: str, reason: str) -> None:
        super().__init__(
            ErrorKind.BAD_REQUEST, f"output mode {mode!r} is not served by {server}: {reason}"
        )
        self.mode = mode
        self.server = server
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable as itself (a batch shard's errors cross process boundaries).
        return (_rebuild_unsupported, (self.mode, self.server, self.reason, self.message))


def _rebuild_unsupported(
    mode: str, server: str, reason: str, message: str
) -> UnsupportedOutputError:
    error = UnsupportedOutputError(mode, server, reason)
    error._replace_text(message, None)  # as redacted
    return error


@runtime_checkable
class LLM(Protocol):
    """Anything that can answer an :class:`LLMRequest`.

    Adapters may also define ``model_name``, ``provider_name``, ``server_address`` and
    ``server_port`` attributes; tracing records them when present. How an adapter serves
    :attr:`LLMRequest.output` is in this module's documentation.
    """

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer one request, or raise :class:`~subagent.LLMError`.

        What the runtime takes for a failed call (retried as the run's policy says, then
        the turn's ``llm_error``): an :class:`~subagent.LLMError` with its
        :class:`~subagent.ErrorKind`, a ``TimeoutError``, and a network error left
        unclassified (``httpx.TransportError``, ``ConnectionError``). Anything else raised
        here is a bug in the adapter: it is raised out of the run as it is, with the run's
        turns in ``.turns``.
        """
        ...


@runtime_checkable
class StreamingLLM(LLM, Protocol):
    """An LLM that can also stream its reply."""

    def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """Yield deltas; the last one carries the complete :class:`LLMResponse`."""
        ...


def messages_from(
    mapping_or_messages: Sequence[Message | Mapping[str, Any]] | str,
) -> list[Message]:
    """Normalise user input (a prompt string, dicts or :class:`Message`) to messages."""
    if isinstance(mapping_or_messages, str):
        return [Message(role="user", content=mapping_or_messages)]
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in mapping_or_messages]
