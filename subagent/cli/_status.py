"""The exit statuses of the command line, and the two errors that end a command early."""

from __future__ import annotations

from typing import Final

__all__ = [
    "EXIT_DONE",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_PAUSED",
    "EXIT_USAGE",
    "AgentError",
    "UsageError",
]

EXIT_DONE: Final = 0
"""Every run ended ``done``."""
EXIT_FAILED: Final = 1
"""A run ended ``failed``: the model's run did not succeed."""
EXIT_USAGE: Final = 2
"""Bad usage: the message names the argument or value."""
EXIT_ERROR: Final = 3
"""The agent or code it runs raised: a bug to fix (a ``failed(error)`` run in a batch)."""
EXIT_PAUSED: Final = 4
"""A run paused for approval of tool calls (and none failed): ``subagent resume`` decides
and goes on (its ``--json`` Step's ``state``, or the batch's output line, is what it
resumes)."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted (Ctrl-C); a batch says how far it got and how to resume."""


class UsageError(Exception):
    """Bad usage; the message names the argument or the value."""


class AgentError(Exception):
    """The agent, or code it runs or imports, raised: the message says what, in one line."""
