"""The patterns room: ready-made ways to use runs, built on the public pieces.

What lives here:

- ``_think``: :func:`think_with_retry`, one question and one parser, corrected until it
  parses (a single-shot :class:`~subagent.SubAgent` underneath).
- ``_retry_loop``: :func:`retry_loop`, validate -> correct -> re-validate for orchestrators.

What it may import: everything below it (the agent, the parsers, the records). Nothing in
the library imports this room except the package's public namespace.
"""

from subagent.patterns._retry_loop import CorrectionError, RetryLoop, RetryLoopResult, retry_loop
from subagent.patterns._think import ThinkError, think_with_retry

__all__ = [
    "CorrectionError",
    "RetryLoop",
    "RetryLoopResult",
    "ThinkError",
    "retry_loop",
    "think_with_retry",
]
