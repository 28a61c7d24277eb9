"""Whether the code running now is a DBOS workflow's body (where steps are checkpointed)."""

from __future__ import annotations

from dbos import DBOS

__all__ = ["in_workflow_body"]


def in_workflow_body() -> bool:
    """True inside a workflow and outside any step: a call here becomes a step.

    Inside a step (a tool that runs a nested agent, say) calls run as they are: the step
    around them is what is checkpointed.
    """
    return DBOS.workflow_id is not None and DBOS.step_id is None
