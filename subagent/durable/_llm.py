"""A model whose calls are DBOS steps: a completed call is never made again on resume."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from dbos import DBOS

from subagent._checks import check_seconds
from subagent._errors import ConfigurationError, ErrorKind, LLMError
from subagent.durable._context import in_workflow_body
from subagent.llm import LLM, LLMRequest, LLMResponse, StreamDelta

__all__ = ["DurableLLM"]

_FORWARDED = ("model_name", "provider_name", "server_address", "server_port")


class DurableLLM:
    """Wraps a model so that, in a DBOS workflow, each call is a checkpointed DBOS step.

    Outside a workflow (or inside another step) it calls the model as it is. In a
    workflow's body, the reply (or the :class:`~subagent.LLMError` the call raised) is
    written to DBOS's system database when the call returns; a workflow resumed after a
    crash reads it back instead of calling the model again.

    The call timeout is applied inside the step (give it here, not as the run's
    ``timeout``): a call that timed out is then recorded as timed out, and a resumed run
    takes the same path as the run that never stopped. A transport retry is one more
    step: each attempt is recorded.

    In a workflow, :meth:`stream` calls the model in full inside the step and yields the
    reply's text as one piece: a checkpoint holds a whole reply, not its pieces.

    Args:
        llm: The model to wrap (any :class:`~subagent.llm.LLM`).
        timeout: Seconds one call may take (``None``: no limit of its own).
        step_name: The name of the DBOS step of each call (seen in DBOS's records).

    Raises:
        ConfigurationError: ``llm`` is not an LLM, or ``timeout`` is not a positive number.
    """

    __slots__ = ("_llm", "_step", "model_name", "provider_name", "server_address",
                 "server_port", "timeout")  # fmt: skip

    def __init__(
        self, llm: LLM, *, timeout: float | None = None, step_name: str = "subagent.llm"
    ) -> None:
        if not isinstance(llm, LLM):
            raise ConfigurationError("llm", f"must be an LLM (with complete()), got {llm!r}")
        if not isinstance(step_name, str) or not step_name:
            raise ConfigurationError("step_name", f"must be a non-empty str, got {step_name!r}")
        self._llm = llm
        self.timeout = check_seconds("timeout", timeout)
        self._step = step_name
        # Tracing reads these from the model it is given: the wrapped model's values.
        for name in _FORWARDED:
            setattr(self, name, getattr(llm, name, None))

    @property
    def wrapped(self) -> LLM:
        """The model this one calls."""
        return self._llm

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request``: a DBOS step in a workflow's body, a plain call elsewhere.

        Raises:
            LLMError: The call failed (also when read back from a checkpoint).
        """
        if not in_workflow_body():
            return await self._call(request)
        return await DBOS.run_step_async({"name": self._step}, self._call, request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamDelta]:
        """The reply as deltas; in a workflow, one delta of the whole (checkpointed) reply."""
        response = await self.complete(request)
        yield StreamDelta(text=response.text, reasoning=response.reasoning)
        yield StreamDelta(response=response)

    async def _call(self, request: LLMRequest) -> LLMResponse:
        if self.timeout is None:
            return await self._llm.complete(request)
        with anyio.move_on_after(self.timeout):
            return await self._llm.complete(request)
        raise LLMError(ErrorKind.TIMEOUT, f"no reply within {self.timeout:g} s")

    def __repr__(self) -> str:
        return f"DurableLLM({self._llm!r}, timeout={self.timeout!r})"


DurableLLM.__module__ = "subagent.durable"
