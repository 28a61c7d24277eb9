"""Tools whose calls are DBOS steps: a call that completed is never made again on resume."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from dbos import DBOS

from subagent._errors import ConfigurationError
from subagent.durable._context import in_workflow_body
from subagent.tools import Tool, ToolTimeoutError

__all__ = ["durable_tool"]


def durable_tool(tool: Tool | Callable[..., Any]) -> Tool:
    """The same tool, its calls made as DBOS steps in a workflow's body.

    The returned :class:`~subagent.Tool` has the same name, description, schema and
    argument validation; only the call of its function changes. In a workflow's body the
    function runs inside a DBOS step named ``subagent.tool:<name>``, with the tool's timeout
    applied inside the step, and what it returned (or raised) is checkpointed when it
    returns: a workflow resumed after a crash reads it back rather than calling again. A
    call cut off by the crash had not completed and is made again: tools with side effects
    should be idempotent over a crash *inside* their call (DBOS steps run at least once
    until they complete, exactly once after).

    What a durable tool returns is pickled into the checkpoint: a return value (and a
    :class:`~subagent.ToolOutput`'s ``value``, ``extras`` and ``step``) must be picklable.
    An exception that does not pickle is recorded by its type name and message, which is
    all a run shows of it.

    Args:
        tool: A :class:`~subagent.Tool` or a plain function (sync or async).

    Raises:
        ConfigurationError: ``tool`` is neither (the message names it).
    """
    if not isinstance(tool, Tool):
        if not callable(tool):
            raise ConfigurationError("tools", f"{tool!r} is not callable")
        tool = Tool(tool)
    if getattr(tool.function, _MARK, False):
        return tool
    call = _StepCall(tool)

    @functools.wraps(tool.function)
    async def durable(*context: Any, **kwargs: Any) -> Any:
        # ``context``: the RunContext a tool that takes one is given first (Tool.call passes
        # it positionally), handed on as it is; a step's arguments are not recorded, so deps
        # need not pickle.
        if not in_workflow_body():
            return await call(context, kwargs)
        recorded: _Recorded = await DBOS.run_step_async(
            {"name": call.step_name}, call.recorded, context, kwargs
        )
        return recorded.unwrap()

    setattr(durable, _MARK, True)
    # The schema still comes from the original signature (functools.wraps sets
    # __wrapped__); the timeout moves inside the step.
    return dataclasses.replace(tool, function=durable, timeout=None)


_MARK = "__subagent_durable__"


class _StepCall:
    """Calls a tool's function as :meth:`Tool.call` would, its timeout included."""

    __slots__ = ("_function", "_is_async", "_thread", "_timeout", "step_name")

    def __init__(self, tool: Tool):
        self._function = tool.function
        self._is_async = _is_async(tool)
        self._thread = tool.run_in_thread
        self._timeout = tool.timeout
        self.step_name = f"subagent.tool:{tool.name}"

    async def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._timeout is None:
            return await self._invoke(args, kwargs)
        with anyio.move_on_after(self._timeout):
            return await self._invoke(args, kwargs)
        raise ToolTimeoutError(self._timeout)

    async def recorded(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Recorded:
        """The call's outcome as a record to checkpoint (a raised error included)."""
        try:
            return _Recorded(value=await self(args, kwargs))
        except Exception as exc:
            return _Recorded.of_error(exc)

    async def _invoke(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._is_async:
            return await self._function(*args, **kwargs)
        if self._thread:
            return await anyio.to_thread.run_sync(
                functools.partial(self._function, *args, **kwargs), abandon_on_cancel=True
            )
        return self._function(*args, **kwargs)


def _is_async(tool: Tool) -> bool:
    return bool(object.__getattribute__(tool, "_is_async"))


@dataclass(frozen=True, slots=True)
class _Recorded:
    """A tool call's checkpointed outcome: its value, or the error it raised."""

    value: Any = None
    error: BaseException | None = None
    error_type: str = ""
    error_message: str = ""
    timeout: float | None = None

    @classmethod
    def of_error(cls, exc: Exception) -> _Recorded:
        if isinstance(exc, ToolTimeoutError):
            return cls(error_type="ToolTimeoutError", timeout=exc.timeout)
        try:
            restored = pickle.loads(pickle.dumps(exc))
        except Exception:
            restored = None
        if type(restored) is type(exc) and str(restored) == str(exc):
            return cls(error=exc)
        return cls(error_type=type(exc).__name__, error_message=str(exc))

    def unwrap(self) -> Any:
        """The value, or the recorded error raised again (as the same type when it can be)."""
        if self.error is not None:
            raise self.error
        if self.timeout is not None:
            raise ToolTimeoutError(self.timeout)
        if self.error_type:
            # The original type did not survive pickling: one of the same name and message,
            # which is what the tool's result shows the model.
            raise type(self.error_type, (Exception,), {})(self.error_message)
        return self.value
