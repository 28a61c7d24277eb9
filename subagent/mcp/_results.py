"""What the model reads of an MCP tool's result.

A ``tools/call`` result holds content blocks (text, images, audio, resource links, embedded
resources), optionally a structured value, and ``isError``. Tool results reach the model as
text, so: text blocks are kept as they are, one after another; an embedded text resource
gives its text; what the model cannot read as text (an image, audio, a binary resource) is
named with its type and size rather than pasted as base64; a result with no text but a
structured value gives that value as JSON. The runtime's result cap then applies as to any
tool.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types

__all__ = ["result_text"]


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text the model is shown for one ``tools/call`` result (its error text too)."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=repr)
    return "\n".join(parts)


def _block_text(block: Any) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {_decoded_size(block.data)} bytes: not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        title = f" ({block.name})" if block.name else ""
        return f"[resource link {block.uri}{title}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return resource.text
        mime = f", {resource.mime_type}" if resource.mime_type else ""
        size = _decoded_size(getattr(resource, "blob", ""))
        return f"[resource {resource.uri}{mime}, {size} bytes of binary: not shown]"
    return f"[{getattr(block, 'type', type(block).__name__)} content: not shown]"


def _decoded_size(data: str) -> int:
    """The size of base64 ``data`` once decoded (without decoding it)."""
    return len(data) * 3 // 4 - data[-2:].count("=")
