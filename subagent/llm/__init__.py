"""The LLM room: the protocol every model speaks, the adapters, model strings, and retries.

What lives here:

- ``_protocol``: the :class:`LLM` protocol and its records (:class:`LLMRequest`,
  :class:`LLMResponse`, :class:`Message`, :class:`ToolCall`, :class:`Usage`...).
- ``_providers``: the seam providers register on: model strings (``"openai:gpt-4o-mini"``,
  ``"vllm:..."``) parsed, :class:`LLMSpec` (a model named by a string, its adapter opened
  per call) and :func:`open_llm` (one adapter opened for many calls). An adapter module
  registers its providers when imported; nothing else names them.
- ``_openai``: :class:`OpenAIChat`, the adapter for OpenAI-compatible servers (the
  ``openai`` provider and the local servers'); ``_wire`` its JSON bodies and streamed
  chunks, ``_structured`` the output modes in each server's dialect, ``_profile``
  (:class:`ModelProfile`) what a server can do (structured-output dialect, forced tool
  choice, native or text tool calls), the known servers' profiles, and how an unknown
  server is identified and remembered.
- ``_anthropic``: :class:`AnthropicChat`, Anthropic's Messages API natively (the
  ``anthropic`` provider): system prompt, content blocks, stop reasons, prompt-cache usage,
  thinking, its error types.
- What HTTP adapters share: ``_http`` (the client, base URLs, limits, JSON within depth,
  failed exchanges classified into error kinds, ``Retry-After``), ``_sse`` (server-sent
  events and bodies read within bounds), ``_decode`` (bodies decompressed in bounded
  pieces), ``_redact`` (the secrets kept out of what servers send back), ``_text_calls``
  (tool calls written as text, read back as calls).
- ``_retry_policy`` and ``_transport``: :class:`RetryPolicy` and :func:`call_with_retries`,
  the transient failures of one call repeated inside the same turn.
- ``_fallback``: :class:`FallbackLLM`, the next model when one's call fails for good;
  :func:`answering_names`, the models whose replies a run may be charged for.
- ``_allow``: whether adapters may send real requests (the switch of
  ``subagent.testing.block_model_requests()``), :class:`ModelRequestsBlockedError`.
- ``_reasoning``: :func:`split_reasoning` and :class:`ReasoningSplitter`, ``<think>`` blocks
  kept apart from the answer, in whole replies and in streams.

What it may import: the base modules only (``subagent._errors``, ``subagent._checks``,
``subagent._text``). Modules outside the room use its names here, never an adapter's
module (checked by an import contract).
It knows nothing of agents, turns or phases; the run loop calls into it.
"""

# Adapters register their providers as they are imported; OpenAI's first, so a string that
# names none is told the forms in that order.
from subagent.llm._openai import (
    OpenAIChat,
)

# isort: split
from subagent.llm._allow import ModelRequestsBlockedError
from subagent.llm._anthropic import AnthropicChat
from subagent.llm._fallback import (
    FallbackLLM,
)
from subagent.llm._profile import (
    PROFILES,
    ModelProfile,
    StructuredOutput,
    forget_profiles,
)
from subagent.llm._protocol import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    OutputMode,
    OutputRequest,
    StopReason,
    StreamDelta,
    StreamingLLM,
    ToolCall,
    ToolDefinition,
    TurnInfo,
    UnsupportedOutputError,
    Usage,
)
from subagent.llm._providers import (
    LLMSpec,
    open_llm,
)
from subagent.llm._retry_policy import (
    RetryPolicy,
)
from subagent.llm._structured import strict_schema
from subagent.llm._transport import (
    TransportRetry,
)

__all__ = [
    "LLM",
    "PROFILES",
    "AnthropicChat",
    "FallbackLLM",
    "LLMRequest",
    "LLMResponse",
    "LLMSpec",
    "Message",
    "ModelProfile",
    "ModelRequestsBlockedError",
    "OpenAIChat",
    "OutputMode",
    "OutputRequest",
    "RetryPolicy",
    "StopReason",
    "StreamDelta",
    "StreamingLLM",
    "StructuredOutput",
    "ToolCall",
    "ToolDefinition",
    "TransportRetry",
    "TurnInfo",
    "UnsupportedOutputError",
    "Usage",
    "forget_profiles",
    "open_llm",
    "strict_schema",
]
