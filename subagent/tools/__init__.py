"""The tools room: typed Python callables offered to the model, and how a call is run.

What lives here:

- ``_tool``: :class:`Tool` and the :func:`tool` decorator, built from a function's signature
  and docstring (or from a JSON schema as given, :meth:`Tool.from_schema`, validated by
  ``jsonschema``); its JSON schema, argument validation and pruning; :class:`ToolOutput`
  (final answers, extras) and :data:`FromExtras`.
- ``_source``: :class:`ToolSource`, what supplies tools known only once connected (an MCP
  server, ``subagent.mcp``), and :class:`AgentTools`, an agent's fixed tools and sources
  made into one set per run (a name clash is an error); :class:`ToolSourceLostError`, how a
  source says it went away mid-run; :func:`mapped_source` (:class:`MappedSource`), a
  source whose tools are another's, each passed through a function (the seam that wraps a
  source's tools for every run, from outside the loop).
- ``_execute``: :class:`Toolbox`, an agent's tools ready to run the model's calls: every
  failure becomes a result the model reads, never an exception; the calls of one reply past
  :data:`TOOL_CALLS_PER_TURN` are refused, never run.

What it may import: the records (``ToolResult``), the LLM room's records, the parsers room's
error formatting, and the base modules.
"""

from subagent.tools._source import (
    MappedSource,
    SourceNotReadyError,
    ToolSource,
    ToolSourceLostError,
    mapped_source,
)
from subagent.tools._tool import (
    FromExtras,
    NestedRunError,
    Tool,
    ToolArgumentsError,
    ToolOutput,
    ToolTimeoutError,
    tool,
)

__all__ = [
    "FromExtras",
    "MappedSource",
    "NestedRunError",
    "SourceNotReadyError",
    "Tool",
    "ToolArgumentsError",
    "ToolOutput",
    "ToolSource",
    "ToolSourceLostError",
    "ToolTimeoutError",
    "mapped_source",
    "tool",
]
