"""subagent: LLM sub-agents driven by an explicit finite-state machine.

A :class:`SubAgent` gets a task, may use tools for a budget of work turns (``max_turns``),
must then return a result that validates, and gets a separate budget of correction turns
(``return_retries``) when its final answer is invalid. Every run returns a typed
:class:`Step`; every turn is an OpenTelemetry span.

Evaluations (what a budget or a model buys on your own cases) have their own namespace:
``from subagent.evals import Case, Dataset``.
"""

from types import FunctionType

from subagent.__about__ import __version__
from subagent._agent import RunArguments, SubAgent
from subagent._claims import MemoryClaims, SQLiteClaims, StateClaims
from subagent._context import RunContext
from subagent._correction import Correction
from subagent._errors import (
    ConfigurationError,
    ErrorKind,
    InvalidStateError,
    LLMContractError,
    LLMError,
    MissingVariableError,
    ParserContractError,
    RunFailedError,
    RunPausedError,
    ScriptExhaustedError,
    StateMismatchError,
    SubAgentError,
    TemplateError,
)
from subagent._handle import AgentRun
from subagent._hooks import InputGuardrail, Pause, RunHook, ToolBatch
from subagent._limits import Price, UsageLimits
from subagent._options import ResumeArguments
from subagent._phases import Phase
from subagent._policies import ReplyPolicy, Timeouts, ToolPolicy
from subagent.batch import Batch, BatchItem, BatchSummary, run_many, stream_many, summarize
from subagent.llm import (
    LLM,
    AnthropicChat,
    FallbackLLM,
    LLMRequest,
    LLMResponse,
    Message,
    ModelProfile,
    ModelRequestsBlockedError,
    OpenAIChat,
    OutputRequest,
    RetryPolicy,
    StopReason,
    StreamDelta,
    ToolCall,
    ToolDefinition,
    TransportRetry,
    UnsupportedOutputError,
    Usage,
)
from subagent.observe import (
    CallRetried,
    EventHandler,
    PartialOutput,
    ReasoningDelta,
    RunEnded,
    RunEvent,
    RunPaused,
    RunStarted,
    TextDelta,
    ToolCallEnded,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)
from subagent.parsers import (
    JSONParser,
    OutputParser,
    ParseResult,
    SectionsParser,
    Validation,
    json_parser,
    multi_section_parser,
    sections_parser,
)
from subagent.patterns import (
    CorrectionError,
    RetryLoop,
    RetryLoopResult,
    ThinkError,
    retry_loop,
    think_with_retry,
)
from subagent.records import (
    Decision,
    FailReason,
    Failure,
    PendingCalls,
    RunState,
    Step,
    ToolResult,
    Turn,
    TurnOutcome,
    TurnType,
    UsageSummary,
)
from subagent.testing import FunctionLLM, ScriptedLLM, TestLLM
from subagent.tools import (
    FromExtras,
    Tool,
    ToolOutput,
    ToolSourceLostError,
    ToolTimeoutError,
    tool,
)

__all__ = [
    "LLM",
    "AgentRun",
    "AnthropicChat",
    "Batch",
    "BatchItem",
    "BatchSummary",
    "CallRetried",
    "ConfigurationError",
    "Correction",
    "CorrectionError",
    "Decision",
    "ErrorKind",
    "EventHandler",
    "FailReason",
    "Failure",
    "FallbackLLM",
    "FromExtras",
    "FunctionLLM",
    "InputGuardrail",
    "InvalidStateError",
    "JSONParser",
    "LLMContractError",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "MemoryClaims",
    "Message",
    "MissingVariableError",
    "ModelProfile",
    "ModelRequestsBlockedError",
    "OpenAIChat",
    "OutputParser",
    "OutputRequest",
    "ParseResult",
    "ParserContractError",
    "PartialOutput",
    "Pause",
    "PendingCalls",
    "Phase",
    "Price",
    "ReasoningDelta",
    "ReplyPolicy",
    "ResumeArguments",
    "RetryLoop",
    "RetryLoopResult",
    "RetryPolicy",
    "RunArguments",
    "RunContext",
    "RunEnded",
    "RunEvent",
    "RunFailedError",
    "RunHook",
    "RunPaused",
    "RunPausedError",
    "RunStarted",
    "RunState",
    "SQLiteClaims",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "SectionsParser",
    "StateClaims",
    "StateMismatchError",
    "Step",
    "StopReason",
    "StreamDelta",
    "SubAgent",
    "SubAgentError",
    "TemplateError",
    "TestLLM",
    "TextDelta",
    "ThinkError",
    "Timeouts",
    "Tool",
    "ToolBatch",
    "ToolCall",
    "ToolCallEnded",
    "ToolCallStarted",
    "ToolDefinition",
    "ToolOutput",
    "ToolPolicy",
    "ToolResult",
    "ToolSourceLostError",
    "ToolTimeoutError",
    "TransportRetry",
    "Turn",
    "TurnEnded",
    "TurnOutcome",
    "TurnStarted",
    "TurnType",
    "UnsupportedOutputError",
    "Usage",
    "UsageLimits",
    "UsageSummary",
    "Validation",
    "__version__",
    "json_parser",
    "multi_section_parser",
    "retry_loop",
    "run_many",
    "sections_parser",
    "stream_many",
    "summarize",
    "think_with_retry",
    "tool",
]


def _present_as_public() -> None:
    # The classes and functions above live in private modules; they are documented, shown
    # in reprs and pickled as ``subagent.X`` (as httpx and trio do), so moving code between
    # modules never shows to users.
    namespace = globals()
    for name in __all__:
        obj = namespace[name]
        if isinstance(obj, type | FunctionType) and obj.__module__.startswith("subagent."):
            obj.__module__ = __name__


_present_as_public()
