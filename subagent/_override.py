"""``agent.override(llm=...)``: an agent's model replaced inside a ``with`` block (for tests).

The replacement lives in a context variable: it reaches every run of that agent started in
the block, in the tasks the block starts and in the runs those runs start (an agent called
as a tool of another), and nothing outside it, so two tests running at once each keep
their own. Inside the block it wins over the model the agent was built with and over a
``llm=`` given to the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from subagent._errors import ConfigurationError
from subagent.llm import LLM

__all__ = ["overridden_llm", "override_llm"]

# (agent, model) pairs, innermost block first; agents compared by identity.
_OVERRIDES: ContextVar[tuple[tuple[object, LLM], ...]] = ContextVar(
    "subagent_llm_overrides", default=()
)


def overridden_llm(agent: object) -> LLM | None:
    """The model ``agent`` runs on in this context instead of its own, if any."""
    for owner, llm in _OVERRIDES.get():
        if owner is agent:
            return llm
    return None


@contextmanager
def override_llm(agent: object, llm: LLM | None) -> Iterator[None]:
    """Run ``agent`` on ``llm`` inside the block.

    Raises:
        ConfigurationError: ``llm`` is ``None``.
    """
    if llm is None:
        raise ConfigurationError("llm", "override() needs the model to run the agent on")
    token = _OVERRIDES.set(((agent, llm), *_OVERRIDES.get()))
    try:
        yield
    finally:
        _OVERRIDES.reset(token)
