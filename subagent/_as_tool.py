"""An agent as a tool of another agent: ``SubAgent.as_tool()``.

The tool runs the agent (on its own model, or on the calling run's), returns its output,
and keeps the child's :class:`~subagent.Step` on the parent's tool result; a failed child
run is a tool error the parent's model sees.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel

from subagent._build import current_approval
from subagent._checks import check_int
from subagent._context import RunContext
from subagent._definition import AgentDefinition
from subagent._errors import ConfigurationError
from subagent._nesting import current_depth
from subagent.records import FailReason, Failure, Step
from subagent.records._runs import build_step
from subagent.tools import NestedRunError, Tool, ToolOutput

__all__ = ["PASS_DOWN", "agent_tool"]

PASS_DOWN: Any = object()  # as_tool(deps=...) not given: the calling run's deps

# The rule Tool applies to names (subagent/tools); here to suggest one before Tool refuses.
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


def tool_name_from(name: str) -> str:
    """A valid tool name close to an agent's name: other characters become ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", name.strip()).strip("_") or "agent"
    if not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = f"_{cleaned}"
    return cleaned[:64]


def agent_tool(
    agent: AgentDefinition[Any, Any],
    run_agent: Callable[..., Awaitable[Step[Any]]],
    *,
    name: str | None,
    description: str | None,
    parameters: type[BaseModel] | Mapping[str, Any] | None,
    max_depth: int,
    deps: Any,
    requires_approval: bool,
) -> Tool:
    """``agent`` as a tool of another agent (see :meth:`SubAgent.as_tool`)."""
    check_int("max_depth", max_depth, 1)
    if current_approval(agent) is not None:
        raise ConfigurationError("approval", _PAUSING.format(name=agent.name))
    named = agent.name if name is None else name
    if not isinstance(named, str) or not TOOL_NAME.match(named):
        whose = f"agent {agent.name!r}" if name is None else f"{name!r}"
        suggestion = tool_name_from(named if isinstance(named, str) else agent.name)
        raise ConfigurationError(
            "name",
            f"{whose} is not a valid tool name (letters, digits, _ and -, starting with "
            f"a letter or _, at most 64 characters): give the tool one with "
            f"as_tool(name={suggestion!r})",
        )
    signature, model = tool_signature(agent._task.variables(), parameters)

    async def call(run: RunContext[Any], /, **arguments: Any) -> ToolOutput:
        depth = current_depth() + 1
        if depth > max_depth:
            raise NestedRunError(
                f"agent {agent.name!r} was not run: it would be nested {depth} deep, "
                f"past max_depth={max_depth}; answer without it"
            )
        context: Mapping[str, Any] | BaseModel = (
            model(**arguments) if model is not None else arguments
        )
        if (
            current_approval(agent) is not None
        ):  # a source listed a tool that needs approval since as_tool()
            raise NestedRunError(_PAUSING.format(name=agent.name))
        started = time.perf_counter()
        try:
            step = await run_agent(context, deps=run.deps if deps is PASS_DOWN else deps)
        except Exception as exc:  # a bug below; its turns (and tokens) stay counted
            message = f"agent {agent.name!r} raised {type(exc).__name__}: {exc}"
            failed = build_step(
                agent=agent.name, output=None,
                failure=Failure(reason=FailReason.ERROR, message=message),
                turns=list(getattr(exc, "turns", ())), max_turns=agent.max_turns,
                return_retries=agent.return_retries,
                duration_s=time.perf_counter() - started,
            )  # fmt: skip
            raise NestedRunError(message, failed) from exc
        if step.paused:  # its tools changed between the check and the run: nothing ran
            raise NestedRunError(_PAUSING.format(name=agent.name), step)
        if step.failure is not None:
            failure = step.failure
            raise NestedRunError(
                f"agent {agent.name!r} failed ({failure.reason.value}): {failure.message}",
                step,
            )
        return ToolOutput(step.output, step=step)

    # The run's context first (passed by the calling run, never in the schema; named so
    # that no prompt variable clashes with it), then the tool's arguments.
    context_parameter = inspect.Parameter(
        "_subagent_run", inspect.Parameter.POSITIONAL_ONLY, annotation=RunContext
    )
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[context_parameter, *signature.parameters.values()]
    )
    call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    call.__annotations__["_subagent_run"] = RunContext
    return Tool(
        call,
        name=name or agent.name,
        description=description or agent.description or f"Delegate to the {agent.name} agent.",
        requires_approval=requires_approval,
    )


_PAUSING = (
    "agent {name!r} asks for approval of tool calls (its approval policy, or a tool of its "
    "own or of one of its tool sources marked requires_approval), so it cannot be another "
    "agent's tool: its run would pause inside the parent's tool call, which a saved state "
    "cannot resume; give the approval to the parent instead (as_tool(requires_approval="
    "True), or the parent's approval policy)"
)


def tool_signature(
    variables: set[str], parameters: type[BaseModel] | Mapping[str, Any] | None
) -> tuple[inspect.Signature, type[BaseModel] | None]:
    """The signature of an agent's tool, and the model its arguments build (if any)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    if parameters is None:
        return inspect.Signature(
            [inspect.Parameter(v, keyword, annotation=str) for v in sorted(variables)]
        ), None
    if isinstance(parameters, type) and issubclass(parameters, BaseModel):
        fields = parameters.model_fields
        declared = [
            inspect.Parameter(
                field_name, keyword,
                annotation=Annotated[info.annotation, info],
                default=inspect.Parameter.empty if info.is_required() else info.get_default(),
            )
            for field_name, info in fields.items()
        ]  # fmt: skip
        names, model = set(fields), parameters
    elif isinstance(parameters, Mapping):
        declared = [inspect.Parameter(str(v), keyword, annotation=t) for v, t in parameters.items()]
        names, model = {str(v) for v in parameters}, None
    else:
        raise ConfigurationError(
            "parameters",
            f"must be a pydantic model or a mapping of variable names to types, got {parameters!r}",
        )
    missing = sorted(variables - names)
    if missing:
        raise ConfigurationError(
            "parameters", f"leaves out {missing}, which the agent's prompt needs"
        )
    return inspect.Signature(declared), model
