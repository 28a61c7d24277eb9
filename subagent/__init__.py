"""subagent: LLM sub-agents driven by an explicit finite-state machine.

A :class:`SubAgent` gets a task, may use tools for a budget of work turns (``max_turns``),
must then return a result that validates, and gets a separate budget of correction turns
(``return_retries``) when its final answer is invalid. Every run returns a typed
:class:`Step`; every turn is an OpenTelemetry span.
"""

from subagent.__about__ import __version__
from subagent._agent import SubAgent
from subagent._errors import (
    ConfigurationError,
    ErrorKind,
    LLMError,
    MissingVariableError,
    ParserContractError,
    RunFailedError,
    ScriptExhaustedError,
    SubAgentError,
    TemplateError,
)
from subagent._events import EventHandler, RunEnded, RunEvent, RunStarted, TurnEnded, TurnStarted
from subagent._json_parser import JSONParser, json_parser
from subagent._parse_result import OutputParser, ParseResult
from subagent._phases import Phase
from subagent._records import (
    FailReason,
    Failure,
    Step,
    ToolResult,
    TransportRetry,
    Turn,
    TurnOutcome,
    TurnType,
    UsageSummary,
)
from subagent._retry_loop import CorrectionError, RetryLoop, RetryLoopResult, retry_loop
from subagent._retry_policy import RetryPolicy
from subagent._sections import SectionsParser, multi_section_parser, sections_parser
from subagent._think import ThinkError, think_with_retry
from subagent._tools import Tool
from subagent._validation import Validation
from subagent.llm import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    OpenAIChat,
    ScriptedLLM,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    Usage,
)

__all__ = [
    "LLM",
    "ConfigurationError",
    "CorrectionError",
    "ErrorKind",
    "EventHandler",
    "FailReason",
    "Failure",
    "JSONParser",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "MissingVariableError",
    "OpenAIChat",
    "OutputParser",
    "ParseResult",
    "ParserContractError",
    "Phase",
    "RetryLoop",
    "RetryLoopResult",
    "RetryPolicy",
    "RunEnded",
    "RunEvent",
    "RunFailedError",
    "RunStarted",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "SectionsParser",
    "Step",
    "StopReason",
    "StreamDelta",
    "SubAgent",
    "SubAgentError",
    "TemplateError",
    "ThinkError",
    "Tool",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "TransportRetry",
    "Turn",
    "TurnEnded",
    "TurnOutcome",
    "TurnStarted",
    "TurnType",
    "Usage",
    "UsageSummary",
    "Validation",
    "__version__",
    "json_parser",
    "multi_section_parser",
    "retry_loop",
    "sections_parser",
    "think_with_retry",
]
