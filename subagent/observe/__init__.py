"""The observation room: what a run reports, to whoever listens.

What lives here:

- ``_events``: the typed run events (``RunStarted``, ``TurnStarted``, ``TurnEnded``,
  ``RunEnded``) and the ``on_event`` callback type.
- ``_otel``: OpenTelemetry spans of a run (the API only; never a provider).

What it may import: the records (``subagent._records``), the LLM room's records and the
base modules. The run loop reports into it; it never calls back into the loop.
"""

from subagent.observe._events import (
    EventHandler,
    RunEnded,
    RunEvent,
    RunStarted,
    TurnEnded,
    TurnStarted,
)
from subagent.observe._otel import CAPTURE_CONTENT_ENV, Telemetry

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "EventHandler",
    "RunEnded",
    "RunEvent",
    "RunStarted",
    "Telemetry",
    "TurnEnded",
    "TurnStarted",
]
