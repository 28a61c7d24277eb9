"""Durable runs on DBOS (the ``dbos`` extra): a run that outlives its process.

A run becomes a DBOS workflow; each LLM call and each tool call is a DBOS step, checkpointed
in DBOS's system database (SQLite by default, Postgres in production). A process killed at
any point resumes, when DBOS is launched again, from its last completed step: no completed
LLM call or tool call is made again, and the resumed run ends with the Step the run that
never stopped would have made (:func:`comparable` says which fields may differ). The kernel
is unchanged: the model and the tools are wrapped from outside the loop.

What lives here:

- ``_llm``: :class:`DurableLLM`, a model whose calls are DBOS steps (the call timeout
  inside the step, so a timed-out call is recorded like any other).
- ``_tools``: :func:`durable_tool`, a tool whose function runs as a DBOS step (its timeout
  and its exception recorded with it).
- ``_sources``: the agent's tool sources (MCP servers) in a durable run: their tools mapped
  through :func:`durable_tool` (``subagent.tools.mapped_source``), and the tools a run
  starts with recorded (its first step) and pinned for it, so a replay finds the tools its
  steps called or is refused, naming them.
- ``_agent``: :class:`DurableAgent`, an agent's runs and batches as DBOS workflows.
- ``_approval``: how a paused durable run waits for approval: the DBOS event saying what
  waits (:data:`PENDING_EVENT`, a :class:`PendingApproval`) and the DBOS message deciding
  it (:data:`APPROVAL_TOPIC`), bound to the pause it answers.
- ``_compare``: :func:`comparable`, a Step without the fields a replay measures anew.

It needs the extra (``pip install 'subagent-runtime[dbos]'``); nothing else in the library
imports this room. What it may import: the agent and everything below it.
"""

try:
    import dbos as _dbos  # noqa: F401  (the extra: a clear error when it is missing)
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("subagent.durable needs DBOS: pip install 'subagent-runtime[dbos]'") from exc

from subagent.durable._agent import (
    DurableAgent,
    DurableRunArguments,
)
from subagent.durable._approval import (
    APPROVAL_TOPIC,
    PENDING_EVENT,
    AlreadyDecidedError,
    PendingApproval,
    decisions_message,
)
from subagent.durable._compare import comparable
from subagent.durable._llm import DurableLLM
from subagent.durable._tools import durable_tool

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "AlreadyDecidedError",
    "DurableAgent",
    "DurableLLM",
    "DurableRunArguments",
    "PendingApproval",
    "comparable",
    "decisions_message",
    "durable_tool",
]
