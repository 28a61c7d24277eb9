"""The protocols room: how tools travel between the runtime and the model.

What lives here:

- ``_protocol``: the :class:`ReplyProtocol` interface and :class:`Reading` (what a reply
  asks for: tool calls, an answer attempt, or a problem to feed back).
- ``_native``: the model's own tool calling.

What it may import: the records, the LLM room's records, the parsers room and the base
modules. The run loop asks the agent's protocol to write the system prompt, read each
reply, and keep tool turns in the conversation.
"""

from collections.abc import Mapping

from subagent.protocols._native import NATIVE, NativeProtocol
from subagent.protocols._protocol import ProtocolName, Reading, ReplyProtocol

__all__ = ["NATIVE", "PROTOCOLS", "NativeProtocol", "ProtocolName", "Reading", "ReplyProtocol"]

PROTOCOLS: Mapping[str, ReplyProtocol] = {"native": NATIVE}
"""The protocols by name (``SubAgent(protocol=...)``)."""
