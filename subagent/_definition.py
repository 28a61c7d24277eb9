"""What an agent is made of: the fields of a :class:`~subagent.SubAgent`, and nothing else.

:class:`AgentDefinition` holds the fields (and the parts built from them, once); the
modules that build the parts (``_build``), resolve a run's options (``_options``) and
make an agent a tool (``_as_tool``) read a definition, and :class:`~subagent.SubAgent`
adds the entry points (``run``, ``resume``...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar

from subagent._context import RunContext
from subagent._correction import Correction
from subagent._hooks import RunHook
from subagent._limits import UsageLimits
from subagent._parts import AgentParts, SourcedParts
from subagent._policies import ReplyPolicy, Timeouts, ToolPolicy
from subagent._templates import Template
from subagent.llm import LLM, RetryPolicy
from subagent.parsers import OutputParser
from subagent.tools import Tool, ToolSource

__all__ = ["AgentDefinition"]

OutputT = TypeVar("OutputT", default=str)
DepsT = TypeVar("DepsT", default=Any)


@dataclass(frozen=True, eq=False)
class AgentDefinition(Generic[OutputT, DepsT]):
    """The fields of an agent (see :class:`~subagent.SubAgent` for their meaning)."""

    name: str
    prompt: str = ""
    output: type[OutputT] | OutputParser[OutputT] | None = None
    tools: Sequence[Tool | Callable[..., Any] | ToolSource] = ()
    llm: LLM | str | None = None
    max_turns: int = 5
    return_retries: int = 0
    validators: Sequence[Callable[[Any], Any] | Callable[[RunContext[DepsT], Any], Any]] = ()
    prompts: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    description: str = ""
    instructions: (
        str
        | Callable[[Mapping[str, Any]], str]
        | Callable[[RunContext[DepsT], Mapping[str, Any]], str]
        | None
    ) = None
    deps_type: type[DepsT] | None = None
    usage_limits: UsageLimits | None = None
    correction: Correction | None = None
    hooks: Sequence[RunHook] = ()
    tool_policy: ToolPolicy = field(default_factory=ToolPolicy)
    reply_policy: ReplyPolicy = field(default_factory=ReplyPolicy)
    timeouts: Timeouts = field(default_factory=Timeouts)
    _parts: AgentParts = field(init=False, repr=False)
    _task: Template = field(init=False, repr=False)
    # The settings every run without overrides sends (one dict, read by adapters only).
    _settings: dict[str, Any] = field(init=False, repr=False)
    # Whether a run with tools it can never use (max_turns=1) was warned about already.
    _warned_unused_tools: bool = field(init=False, repr=False, default=False)
    # The fixed tools and the tool sources (MCP servers); None without sources.
    _sources: SourcedParts | None = field(init=False, repr=False, default=None)
