"""The program: its parser, and ``main``, which runs a command and maps errors to statuses."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from subagent.__about__ import __version__
from subagent._loading import ImportRaisedError, LoadError, described
from subagent._phases import mermaid_chart
from subagent.cli._batch import add_batch_command
from subagent.cli._resume import add_resume_command
from subagent.cli._run import add_run_command
from subagent.cli._status import (
    EXIT_DONE,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    AgentError,
    UsageError,
)
from subagent.evals import _cli as evals_cli

__all__ = ["main"]

_TRACEBACK_VARIABLE = "SUBAGENT_TRACEBACK"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: The arguments, without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: ``EXIT_DONE``, ``EXIT_FAILED``, ``EXIT_USAGE``, ``EXIT_ERROR``,
        ``EXIT_PAUSED`` or ``EXIT_INTERRUPTED`` (:mod:`subagent.cli`).
    """
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)  # exits with status 2 on its own errors
    if unknown:  # the subcommand's usage, not the top level's
        _subparser(args, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        result: int = args.command(args)
    except (UsageError, LoadError) as exc:
        print(f"subagent {args.name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (AgentError, ImportRaisedError) as exc:
        print(f"subagent {args.name}: error in the agent or code it runs: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"subagent {args.name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`subagent chart | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:  # a bug: one line, the traceback on request
        if os.environ.get(_TRACEBACK_VARIABLE):
            raise
        print(
            f"subagent {args.name}: unexpected error: {described(exc)} "
            f"(set {_TRACEBACK_VARIABLE}=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return result


def _subparser(args: argparse.Namespace, parser: argparse.ArgumentParser) -> _Parser:
    found = getattr(args, "parser", parser)
    assert isinstance(found, _Parser)
    return found


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> _Parser:
    parser = _Parser(
        prog="subagent",
        description="Run sub-agents defined in Python modules, one at a time or in batches.",
    )
    parser.add_argument("--version", action="version", version=f"subagent {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND", parser_class=_Parser)
    add_run_command(commands)
    add_resume_command(commands)
    add_batch_command(commands)
    chart = commands.add_parser("chart", help="print the state chart (mermaid)")
    chart.set_defaults(command=_chart_command, name="chart", parser=chart)
    evals_cli.register(commands)  # `subagent eval run / report / compare`
    return parser


def _chart_command(args: argparse.Namespace) -> int:
    print(mermaid_chart())
    return EXIT_DONE
