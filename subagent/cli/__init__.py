"""The command line: ``subagent run``, ``batch``, ``chart`` and ``eval``.

``python -m subagent`` is the same program (the console script is ``subagent.cli:main``).
It may import every room of the library: it is an application of it, at the top of the
layers (see ``docs/architecture.md``). One module per job:

- ``_main``: the parser, and ``main``, which dispatches and maps errors to exit statuses
  (``_status``: the statuses, ``UsageError`` and ``AgentError``);
- ``_agents``: the agent ``MODULE:AGENT`` names (through ``subagent._loading``, the loader
  ``subagent eval`` shares); ``_flags``: the flags the commands share, and the run options
  they give;
- ``_reading``: JSON the user hands over (``--context``), strict and bounded;
  ``_batch_files``: a batch's inputs and output, and what a re-run reuses of them;
  ``_batch_paused``: its paused lines, listed at every run and resumed with decisions;
- ``_model``: the model the runs call (``--llm``, the agent's, the environment's, or
  ``--local-model`` through :mod:`subagent.local_model`);
- ``_show``: the turn table, the pause line and the span tree; ``_trace``: ``--trace
  console|otlp``; ``_decisions``: decisions about waiting calls, from flags or a file;
- ``_run``, ``_resume``, ``_batch``: the commands (``eval``'s is ``subagent.evals._cli``).

Exit status (``docs/cli.md``): 0 when every run ended ``done``; 1 when a run failed (the
model's run: budgets, an explicit fail, an LLM error, a timeout); 2 on bad usage (a bad
argument, file or input line, an agent that cannot be found, a prompt variable the context
lacks, no model), the message naming the argument or value; 3 when the agent or code it
runs raised (a bug to fix, said in one line, not a traceback); 4 when a run paused for
approval and none failed; 130 when interrupted.
"""

from subagent.cli._main import main

__all__ = ["main"]
