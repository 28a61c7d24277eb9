"""The tools room: typed Python callables offered to the model, and how a call is run.

What lives here:

- ``_tool``: :class:`Tool`, built from a function's signature and docstring; its JSON schema
  and the validation of the model's arguments.
- ``_execute``: :class:`Toolbox`, an agent's tools ready to run the model's calls: every
  failure becomes a result the model reads, never an exception.

What it may import: the records (``ToolResult``), the LLM room's records, the parsers room's
error formatting, and the base modules.
"""

from subagent.tools._execute import Toolbox
from subagent.tools._tool import Tool, ToolArgumentsError, build_tools, render_result

__all__ = ["Tool", "ToolArgumentsError", "Toolbox", "build_tools", "render_result"]
