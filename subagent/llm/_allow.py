"""Whether adapters may send real model requests: the switch tests turn off.

A test suite that must never reach a real model (no key spent, no flaky network) blocks
requests once, process-wide, and every adapter that talks to a server
(:class:`~subagent.OpenAIChat`, a spec string's :class:`~subagent.llm.LLMSpec`) then
raises :class:`ModelRequestsBlockedError` instead of sending anything. Test doubles
(``ScriptedLLM``, ``TestLLM``, ``FunctionLLM``) never send, so they are never blocked.

The public functions are in :mod:`subagent.testing` (``block_model_requests()``,
``allow_model_requests()``); this module keeps the state, where the adapters can see it.

Two levels: a process-wide setting, and a context variable that wins over it inside a
``with`` block (and in the tasks started there, so one test's block never leaks into a
test running beside it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from subagent._errors import SubAgentError

__all__ = [
    "ModelRequestsBlockedError",
    "check_model_request",
    "model_requests_allowed",
    "set_model_requests_allowed",
]


class ModelRequestsBlockedError(SubAgentError):
    """An adapter was about to send a real model request while requests are blocked.

    Raised out of the run as it is (never retried, never a failed Step): the test reached
    a real model where it meant to use a test double.
    """


_allowed_in_process = True
_allowed_here: ContextVar[bool | None] = ContextVar("subagent_model_requests", default=None)


def set_model_requests_allowed(allowed: bool) -> None:
    """Allow or block real model requests in the whole process (a ``with`` block wins)."""
    global _allowed_in_process
    _allowed_in_process = bool(allowed)


@contextmanager
def model_requests_allowed(allowed: bool) -> Iterator[None]:
    """Allow or block real model requests inside the block, whatever the process says."""
    token = _allowed_here.set(bool(allowed))
    try:
        yield
    finally:
        _allowed_here.reset(token)


def check_model_request(llm: object) -> None:
    """Raise unless real model requests are allowed here.

    Args:
        llm: The adapter about to send (its ``repr`` goes into the message).

    Raises:
        ModelRequestsBlockedError: Requests are blocked; the message says how to allow them.
    """
    here = _allowed_here.get()
    if here is True or (here is None and _allowed_in_process):
        return
    raise ModelRequestsBlockedError(
        f"{llm!r} would send a real model request, and model requests are blocked "
        f"(subagent.testing.block_model_requests()). Give the run a test model "
        f"(ScriptedLLM, TestLLM, FunctionLLM; agent.override(llm=...) for code that runs "
        f"its own agents), or allow real requests in a block: "
        f"`with subagent.testing.allow_model_requests(): ...`"
    )
