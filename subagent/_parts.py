"""What a run is given: its agent's prepared parts and its resolved options.

:class:`AgentParts` is built once per agent (once per tool listing for an agent with tool
sources) and shared by its runs; :class:`RunOptions` is built once per run from the
agent's defaults and the caller's keyword arguments. Neither changes during a run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry.trace import TracerProvider

from subagent._conversation import ContextPolicy
from subagent._correction import Correction
from subagent._hooks import NO_HOOKS, Hooks
from subagent._templates import TemplateSet
from subagent.llm import LLM, Message, OutputRequest, RetryPolicy, ToolCall, TurnInfo
from subagent.observe import EventHandler
from subagent.parsers import OutputContract
from subagent.protocols._protocol import ReplyProtocol
from subagent.records import RunState, TurnType
from subagent.tools import SourceNotReadyError, Tool
from subagent.tools._execute import Toolbox
from subagent.tools._source import AgentTools

__all__ = ["AgentParts", "RunOptions", "SourcedParts", "Systems", "ToolParts"]

_CACHE_LIMIT = 256


class Systems(NamedTuple):
    """The system messages of a run: in turns that offer tools, and in the others."""

    with_tools: Message
    without_tools: Message

    def extended(self, text: str) -> Systems:
        """Both messages with ``text`` added after a blank line."""
        return Systems(
            Message(role="system", content=f"{self.with_tools.content}\n\n{text}"),
            Message(role="system", content=f"{self.without_tools.content}\n\n{text}"),
        )


@dataclass(frozen=True, slots=True)
class AgentParts:
    """What a run needs from its :class:`~subagent.SubAgent`, prepared once per agent."""

    name: str
    templates: TemplateSet
    contract: OutputContract
    toolbox: Toolbox
    protocol: ReplyProtocol
    parallel_tool_calls: bool
    correct_cut_replies: bool
    validators: Sequence[Any]
    systems: Systems
    # Whether a call needs approval before it runs (None: no tool of the agent does).
    approval: Callable[[ToolCall], bool] | None = None
    # What must match between the agent that saved a RunState and the one resuming it.
    fingerprint: Callable[[], dict[str, str]] = dict
    # Immutable records every run of the agent would otherwise build again (bounded).
    _turn_infos: dict[tuple[int, TurnType], TurnInfo] = field(default_factory=dict)
    _notices: dict[str, Message] = field(default_factory=dict)
    # Whether a validator takes a RunContext: the run builds one for validators only then.
    validators_take_context: bool = False
    # Whether the model may give up ({"fail": ...}); else a fail is fed back to correct.
    allow_fail: bool = True
    # The correction of runs that give none (default_correction), and what it asks of the
    # turns it takes (the output's grammar where the server has one); None: untyped output.
    default_correction: Correction | None = None
    default_output: OutputRequest | None = None

    def turn_info(self, index: int, turn_type: TurnType) -> TurnInfo:
        """The (shared, frozen) :class:`TurnInfo` of turn ``index`` of this agent."""
        info = self._turn_infos.get((index, turn_type))
        if info is None:
            info = TurnInfo(index=index, type=turn_type, agent=self.name)
            if len(self._turn_infos) < _CACHE_LIMIT:
                self._turn_infos[(index, turn_type)] = info
        return info

    def notice(self, text: str) -> Message:
        """A runtime's own user message (a must-return warning), shared when it repeats."""
        message = self._notices.get(text)
        if message is None:
            message = Message(role="user", content=text)
            if len(self._notices) < _CACHE_LIMIT and len(text) <= 1024:
                self._notices[text] = message
        return message


@dataclass(slots=True)
class RunOptions:
    """The resolved options of one run (built once per run, never changed)."""

    llm: LLM
    max_turns: int
    return_retries: int
    context_policy: ContextPolicy
    retry_policy: RetryPolicy
    timeout: float | None
    mission_timeout: float | None
    settings: dict[str, Any]
    keep_tool_schemas: bool
    tracer_provider: TracerProvider | None
    on_event: EventHandler | None
    on_text: Callable[[str], object] | None = None
    # The caller's deps: handed to tools and validators in a RunContext, never recorded.
    deps: Any = field(default=None, repr=False)
    # The run's extensions (approval, usage limits, on_state), in the order they are called.
    hooks: Hooks = NO_HOOKS
    # How correction turns differ from the failed attempt (None: they do not), and what it
    # resolves to: the model, the settings and the output mode of the turns that take it.
    correction: Correction | None = None
    correction_llm: LLM | None = None
    correction_settings: dict[str, Any] = field(default_factory=dict)
    correction_output: OutputRequest | None = None
    # Called with the run's state after each turn that leaves it active or paused (kept
    # for the record of what was asked; the on_state hook calls it).
    on_state: Callable[[RunState], object] | None = None
    # An earlier conversation the task follows (opened before the run starts).
    message_history: Sequence[Message | Mapping[str, Any]] | None = None


class ToolParts(NamedTuple):
    """What a run's tools make, always together from the same tools.

    The tools a run starts with (the plain ones and every source's current tools, after
    selection and mapping) are resolved once per run into one toolbox; the request's tool
    list, the system prompts that list the tools, the approval rule and the tool stage all
    read this one record, so a source's tool is judged exactly like a plain one.
    """

    toolbox: Toolbox
    systems: Systems
    # Whether a call needs approval before it runs (None: no call of these tools ever does).
    approval: Callable[[ToolCall], bool] | None


class SourcedParts:
    """The parts of an agent with tool sources: rebuilt when a source's tool list moves.

    Each run reads the sources' cached lists when it starts (nothing is awaited); the
    parts built from one set of lists are kept until a source's revision moves.
    """

    __slots__ = ("_built", "_template", "_tool_parts", "tools")

    def __init__(
        self,
        tools: AgentTools,
        template: AgentParts,
        tool_parts: Callable[[Mapping[str, Tool]], ToolParts],
    ):
        self.tools = tools
        self._template = template
        self._tool_parts = tool_parts
        self._built: tuple[tuple[int, ...], AgentParts] | None = None

    def check_now(self) -> None:
        """Refuse a name clash at once when every source is ready (connected) already."""
        with contextlib.suppress(SourceNotReadyError):
            self.parts()

    def parts(self) -> AgentParts:
        """The parts of a run starting now.

        Raises:
            ConfigurationError: A source is not ready, or two tools share a name.
        """
        revisions, tools = self.tools.current()
        built = self._built
        if built is not None and built[0] == revisions:
            return built[1]
        parts = dataclasses.replace(self._template, **self._tool_parts(tools)._asdict())
        self._built = (revisions, parts)
        return parts
