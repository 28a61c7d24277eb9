"""The records a model call is made of: messages, tool calls, requests, replies, usage.

What the runtime sends a model (:class:`LLMRequest`) and what comes back
(:class:`LLMResponse`), with their parts; how a request asks for the answer
(:class:`OutputRequest`); a failed call repeated inside a turn (:class:`TransportRetry`).
The LLM protocol itself, and the adapters, live in ``subagent.llm``.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from subagent._text import (
    MAX_ARGUMENT_DEPTH,
    first_non_finite,
    nested_deeper_than,
    scrub_surrogates,
    scrub_surrogates_in,
)
from subagent.records._kinds import ErrorKind, TurnType

__all__ = [
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OutputMode",
    "OutputRequest",
    "StopReason",
    "StreamDelta",
    "ToolCall",
    "ToolDefinition",
    "TransportRetry",
    "TurnInfo",
    "Usage",
    "trusted",
    "user_message",
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
        input_tokens: Tokens of the prompt, all of them: those read from or written to a
            provider's prompt cache included (as OpenTelemetry's GenAI conventions count
            ``gen_ai.usage.input_tokens``).
        output_tokens: Tokens of the reply.
        unreported: Calls whose usage the server did not report (a stream from a server
            that ignores ``stream_options``, such as llama-cpp-python): each counts 0 tokens
            here, so with ``unreported > 0`` the counts are a lower bound, not a
            measurement. Left out of the JSON form when 0.
        cache_read_tokens: Of ``input_tokens``, those the provider read from its prompt
            cache (Anthropic's ``cache_read_input_tokens``). Left out of the JSON form when 0.
        cache_write_tokens: Of ``input_tokens``, those the provider wrote to its prompt
            cache (Anthropic's ``cache_creation_input_tokens``). Left out of the JSON form
            when 0.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    unreported: int = Field(default=0, exclude_if=lambda count: count == 0)
    cache_read_tokens: int = Field(default=0, exclude_if=lambda count: count == 0)
    cache_write_tokens: int = Field(default=0, exclude_if=lambda count: count == 0)

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
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
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
        type: The phase the turn starts in (a :class:`~subagent.TurnType`, as
            ``Turn.type`` is: ``request.turn.type is TurnType.NORMAL`` holds).
        agent: The agent's name.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    type: TurnType
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
        fallback: ``"text"``: where the server cannot serve ``mode``, send the request
            without it (the answer asked for in the prompt alone) rather than refuse it;
            ``None``: refuse (:class:`~subagent.llm.UnsupportedOutputError`). What an agent's
            default correction sends (``Correction(output="auto")``).
    """

    model_config = ConfigDict(frozen=True)

    mode: OutputMode
    json_schema: dict[str, Any] | None = None
    name: str = "final_answer"
    description: str = ""
    strict: bool = True
    fallback: Literal["text"] | None = Field(default=None, exclude_if=lambda value: value is None)

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
        model: The model that answered, as the provider names it (often a dated name:
            ``gpt-4o-mini-2024-07-18`` for ``gpt-4o-mini``), when it says.
        reasoning: The model's reasoning, when the provider sends it apart from the text
            (``reasoning_content``); never parsed as the answer.
        model_name: The configured name (the adapter's ``model_name``) of the model that
            produced the reply, set by a model that answers with one of several (a
            :class:`~subagent.FallbackLLM`: the one that answered); ``None``: the model
            called. Prices, ``Turn.model`` and ``usage.by_model`` go by this name, never
            by the provider's ``model``. Left out of the JSON form when ``None``.
    """

    model_config = ConfigDict(frozen=True)

    text: _Text = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: StopReason = StopReason.STOP
    raw_stop_reason: _Text | None = None
    usage: Usage = Field(default_factory=Usage)
    model: _Text | None = None
    reasoning: _Text = ""
    model_name: str | None = Field(default=None, exclude_if=lambda value: value is None)

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


class TransportRetry(BaseModel):
    """A failed LLM call that was followed by another attempt inside the same turn.

    The next attempt is the same model again after ``delay_s``, or, for a
    :class:`~subagent.FallbackLLM`, the next of its models (``fallback_to``).

    Attributes:
        attempt: The 1-based number of the attempt that failed (counted per model).
        kind: Its classified error.
        message: The error's message.
        delay_s: Seconds waited before the next attempt (0 before a fallback).
        usage: Tokens the failed attempt used, when the server reported any.
        model: The model that failed, when a :class:`~subagent.FallbackLLM` made the call
            (``None`` otherwise: the run's model). Left out of the JSON form when ``None``.
        fallback_to: The model the call moved on to after this failure; ``None`` when the
            same model was called again. Left out of the JSON form when ``None``.
    """

    model_config = ConfigDict(frozen=True)

    attempt: int
    kind: ErrorKind
    message: str
    delay_s: float
    usage: Usage = Field(default_factory=Usage)
    model: str | None = Field(default=None, exclude_if=lambda value: value is None)
    fallback_to: str | None = Field(default=None, exclude_if=lambda value: value is None)


ModelT = TypeVar("ModelT", bound=BaseModel)


def trusted(cls: type[ModelT], fields_set: set[str], values: dict[str, Any]) -> ModelT:
    """A record built from values that are already valid and complete, without validation.

    The turn loop builds its requests, turns and Steps from typed parts it made itself, at
    every turn of every run: validating them again would cost more than the rest of a
    turn. ``values`` must hold every field (defaults included) with a value of its type,
    text already scrubbed of lone surrogates; ``fields_set`` is shared by every record
    built the same way (frozen records never change it). A test keeps this equal to
    validated construction.
    """
    record = cls.__new__(cls)
    _set(record, "__dict__", values)
    _set(record, "__pydantic_fields_set__", fields_set)
    _set(record, "__pydantic_extra__", None)
    _set(record, "__pydantic_private__", None)
    return record


_set = object.__setattr__
_USER_FIELDS = {"role", "content"}


def with_content(message: Message, content: str) -> Message:
    """``message`` with ``content`` instead of its own (text already scrubbed), trusted.

    What the loop uses in place of ``model_copy``, which copies the record through
    ``copy.copy`` (several times the cost, on every run that joins a notice to its task).
    """
    values = dict(message.__dict__)
    values["content"] = content
    return trusted(Message, message.__pydantic_fields_set__ | _CONTENT, values)


_CONTENT = frozenset({"content"})


def assistant_message(text: str) -> Message:
    """An assistant message holding ``text`` (a reply as the conversation keeps it), trusted."""
    return trusted(Message, _USER_FIELDS, {
        "role": "assistant", "content": scrub_surrogates(text), "tool_calls": (),
        "tool_call_id": None, "name": None,
    })  # fmt: skip


def user_message(text: str) -> Message:
    """A user message of the runtime's own making (a task, a notice, feedback), trusted."""
    return trusted(Message, _USER_FIELDS, {
        "role": "user", "content": scrub_surrogates(text), "tool_calls": (),
        "tool_call_id": None, "name": None,
    })  # fmt: skip
