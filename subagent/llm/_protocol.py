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

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from subagent._errors import ErrorKind, LLMError
from subagent.records import (
    LLMRequest,
    LLMResponse,
    Message,
    OutputMode,
    OutputRequest,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    TurnInfo,
    Usage,
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
    ``server_port`` attributes; tracing records them when present. An adapter that talks
    to a server may define ``base_url`` (where its requests go, without credentials: the
    command line names it) and ``async aclose()`` (its connections closed: the command
    line calls it after its runs). How an adapter serves :attr:`LLMRequest.output` is in
    this module's documentation.
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
