"""The batch room: many runs of one agent, and what they came to.

What lives here:

- ``_run_many``: :func:`run_many` (Steps in input order) and :func:`stream_many` (outcomes
  as they complete), a bounded pool of workers, failures isolated, retryable failures
  rerun on request.
- ``_summary``: :func:`summarize`, counts by outcome, failure and stop reason, turns and
  tokens by what they bought, as data and as a table.
- ``_progress``: the progress bar (tqdm), only when shown.

What it may import: the agent and everything below it. Nothing in the library imports
this room except the public namespace and the command line.
"""

from subagent.batch._run_many import Batch, BatchItem, run_many, stream_many
from subagent.batch._summary import BatchSummary, summarize

__all__ = ["Batch", "BatchItem", "BatchSummary", "run_many", "stream_many", "summarize"]
