"""The protocols room: how tools travel between the runtime and the model.

What lives here:

- ``_protocol``: the :class:`ReplyProtocol` interface and :class:`Reading` (what a reply
  asks for: tool calls, an answer attempt, or a problem to feed back).
- ``_native``: the model's own tool calling, and :func:`call_written_as_text`: a reply
  that is a call of the agent's tool written as text, named in feedback for the model.
- ``_react``: the ReAct protocol: tools described in the prompt, one ``Action:`` or
  ``Final Answer:`` per reply, tool results sent back as an ``Observation:``.
- ``_action``: the ReAct reply reader, :func:`read_react_reply` (one action with its tool
  and arguments, a final answer, or a specific problem for the model), and
  :func:`format_action`, the canonical action the prompt shows. Pure text: it knows
  nothing of tools' schemas.

What it may import: the records, the LLM room's records, the parsers room and the base
modules. The run loop asks the agent's protocol to write the system prompt, read each
reply, and keep tool turns in the conversation.
"""

from collections.abc import Mapping

from subagent.protocols._action import (
    read_react_reply,
)
from subagent.protocols._native import NATIVE
from subagent.protocols._protocol import (
    ProtocolName,
    ReplyProtocol,
)
from subagent.protocols._react import REACT

__all__ = [
    "ProtocolName",
    "read_react_reply",
]

PROTOCOLS: Mapping[str, ReplyProtocol] = {"native": NATIVE, "react": REACT}
"""The protocols by name (``SubAgent(protocol=...)``)."""
