"""``subagent run``: one run of an agent, its turns printed (or its Step as JSON)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from subagent._agent import SubAgent
from subagent._errors import ConfigurationError, TemplateError
from subagent._loading import described
from subagent.cli._agents import agent_of
from subagent.cli._flags import add_agent_flags, add_budget_flags, check_prompt, run_options
from subagent.cli._model import chosen_model, opened
from subagent.cli._reading import parse_context
from subagent.cli._show import turn_table
from subagent.cli._status import EXIT_DONE, EXIT_FAILED, EXIT_PAUSED, AgentError, UsageError
from subagent.cli._trace import traced
from subagent.llm import LLM
from subagent.records import Step

__all__ = ["add_run_command", "exit_status", "printed"]


def add_run_command(commands: Any) -> None:
    """Add ``run`` to the program's subcommands."""
    run = commands.add_parser("run", help="run an agent once and print its turns")
    add_agent_flags(run)
    add_budget_flags(run)
    run.add_argument(
        "--context",
        default="{}",
        metavar="JSON|@FILE|@-",
        help="the prompt's variables: a JSON object, @file holding one, or @- for stdin",
    )
    run.add_argument("--json", action="store_true", help="print the Step as JSON instead")
    run.add_argument(
        "--trace",
        nargs="?",
        const="console",
        choices=("console", "otlp"),
        default=None,
        help="console (the default): print the run's span tree on stderr; otlp: export "
        "the spans to OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT and say whether it worked",
    )
    run.set_defaults(command=_run_command, name="run", parser=run)


def _run_command(args: argparse.Namespace) -> int:
    agent = agent_of(args)
    context = parse_context(args.context)
    options = run_options(agent, args)
    check_prompt(agent, context, "--context")
    with traced(args.trace) as (provider, report):
        with chosen_model(agent, args) as llm:
            try:
                step = anyio.run(_run_once, agent, context, llm, options, provider)
            except (ConfigurationError, TemplateError) as exc:  # raised mid-run
                raise UsageError(f"--context: {exc}") from None
            except Exception as exc:  # the agent's code (a parser, a validator) raised
                raise AgentError(described(exc)) from exc
        report()
    print(printed(step, as_json=args.json))
    return exit_status([step])


async def _run_once(
    agent: SubAgent[Any],
    context: dict[str, Any],
    llm: LLM,
    options: dict[str, Any],
    provider: Any,
) -> Step[Any]:
    async with opened(llm):
        return await agent.run(context, llm=llm, tracer_provider=provider, **options)


def printed(step: Step[Any], *, as_json: bool) -> str:
    """A Step as the command prints it: the turn table, or (``--json``) the Step's JSON."""
    return step.model_dump_json(indent=2) if as_json else turn_table(step)


def exit_status(steps: list[Step[Any]]) -> int:
    """Done when every run is; failed when one failed; else paused when one paused."""
    if any(step.failure is not None for step in steps):
        return EXIT_FAILED
    if any(step.state is not None for step in steps):
        return EXIT_PAUSED
    return EXIT_DONE
