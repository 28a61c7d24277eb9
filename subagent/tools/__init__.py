"""The tools room: typed Python callables offered to the model, and how a call is run.

What lives here:

- ``_tool``: :class:`Tool`, built from a function's signature and docstring; its JSON schema
  and the validation of the model's arguments.

What it may import: the LLM room's records (``ToolDefinition``) and the base modules.
"""

from subagent.tools._tool import Tool, ToolArgumentsError, build_tools, render_result

__all__ = ["Tool", "ToolArgumentsError", "build_tools", "render_result"]
