"""``subagent eval run / report / compare``: evaluations from the command line.

``register(subparsers)`` adds the ``eval`` command to the program's parser; ``main(args)``
runs it and returns the exit status: 0 done (``compare``: no significant regression), 1 a
significant regression (``compare``, so CI can gate on it), 2 bad usage (the message names
the argument or value), 130 interrupted (``run``: the records kept so far resume it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from subagent._agent import SubAgent
from subagent._errors import ConfigurationError
from subagent._limits import Price, UsageLimits
from subagent._loading import LoadError, load_object
from subagent.evals._dataset import Dataset, _yaml
from subagent.evals._judges import Judge
from subagent.evals._report import DEFAULT_ALPHA, DEFAULT_MARGIN, Report
from subagent.evals._variants import Variant, grid

__all__ = [
    "EXIT_CRASHED",
    "EXIT_DONE",
    "EXIT_INTERRUPTED",
    "EXIT_REGRESSED",
    "EXIT_USAGE",
    "main",
    "register",
]

EXIT_DONE: Final = 0
EXIT_REGRESSED: Final = 1
"""``compare``: a metric of a variant got significantly worse than the baseline's."""
EXIT_USAGE: Final = 2
EXIT_CRASHED: Final = 3
"""``run``: a run raised or its model could not be reached: a bug to fix, no result (as
``subagent batch``'s status 3); ``--rerun-failed`` makes those runs again."""
EXIT_INTERRUPTED: Final = 130


class _Usage(Exception):
    """Bad usage: the message names the argument or the value."""


def register(subparsers: Any) -> None:
    """Add ``eval run``, ``eval report`` and ``eval compare`` to a program's subcommands."""
    evaluation = subparsers.add_parser(
        "eval", help="evaluate an agent on a dataset under variants; report, compare"
    )
    commands = evaluation.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run (or resume) an evaluation, print its report")
    run.add_argument("dataset", type=Path, metavar="DATASET", help="cases: .jsonl or .yaml")
    run.add_argument("--agent", required=True, metavar="MODULE:AGENT",
                     help="the SubAgent, or a mapping of names to agents (each case names "
                     "its own): module.path:name or path/to/file.py:name")  # fmt: skip
    run.add_argument("--variants", type=Path, metavar="FILE",
                     help='JSON or YAML: {"name": {run options}} or {"grid": {option: '
                     "[values]}}; default: the agent as it is")  # fmt: skip
    run.add_argument("--out", required=True, type=Path, metavar="FILE.jsonl",
                     help="the records, a line per run (recorded runs are skipped)")  # fmt: skip
    run.add_argument("--judge", action="append", default=[], metavar="MODULE:JUDGE",
                     help="a judge written in code (a Judge, a Judge class taking no "
                     "argument, or a function), besides the dataset's (repeat it)")  # fmt: skip
    run.add_argument("--llm", metavar="SPEC",
                     help="the model, as SUBAGENT_LLM names one ('openai:MODEL@URL'); default: "
                     "the agent's own, else SUBAGENT_LLM")  # fmt: skip
    run.add_argument("--repeat", type=int, default=1, metavar="N", help="runs per case and variant")
    run.add_argument("--concurrency", type=int, default=8, metavar="N",
                     help="runs in flight at once (default 8)")  # fmt: skip
    run.add_argument(
        "--prices",
        type=Path,
        metavar="FILE",
        help='JSON: {"model": {"input_per_million": X, "output_per_million": Y}}',
    )
    run.add_argument("--max-cost", type=float, metavar="X",
                     help="what the whole evaluation may spend, by --prices")  # fmt: skip
    run.add_argument("--rerun-failed", action="store_true",
                     help="make again the recorded runs that raised or whose model could not "
                     "be reached")  # fmt: skip
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="show a progress bar (default: when stderr is a terminal)")  # fmt: skip
    _output_arguments(run)
    run.set_defaults(command=main, name="eval run", parser=run, eval_command=_run)

    report = commands.add_parser("report", help="the report of a records file")
    report.add_argument("records", type=Path, metavar="FILE", help="an evaluation's records")
    _output_arguments(report)
    report.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="also draw success against cost (needs matplotlib)")  # fmt: skip
    report.add_argument("--html", type=Path, metavar="FILE.html",
                        help="also write the report as one self-contained HTML page, with "
                        "each run's output (cut) per case")  # fmt: skip
    report.set_defaults(command=main, name="eval report", parser=report, eval_command=_report)

    compare = commands.add_parser(
        "compare", help="compare with a baseline; exit 1 on a significant regression"
    )
    compare.add_argument("records", type=Path, metavar="FILE", help="the current records")
    compare.add_argument("--baseline", required=True, type=Path, metavar="FILE",
                         help="the baseline's records")  # fmt: skip
    compare.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        metavar="A",
        help="significance level for the whole comparison (default 0.05)",
    )
    compare.add_argument("--max-drop", type=float, default=None, metavar="POINTS",
                         help="a success rate down by more points than this is a regression "
                         "whatever the test (for small datasets): 10 means ten points")  # fmt: skip
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.set_defaults(command=main, name="eval compare", parser=compare, eval_command=_compare)


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, metavar="M",
                        help="success the recommendation may give up for a cheaper variant "
                        "(default 0.05: five points)")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    """Run the ``eval`` command ``args`` names; return its exit status."""
    try:
        status: int = args.eval_command(args)
    except (_Usage, ConfigurationError) as exc:
        print(f"subagent {args.name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return status


# --- run ---


def _run(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise _Usage(f"--concurrency: must be at least 1, got {args.concurrency}")
    if args.repeat < 1:
        raise _Usage(f"--repeat: must be at least 1, got {args.repeat}")
    agent = _load(args.agent, "--agent")
    if isinstance(agent, SubAgent):
        own_models = agent.llm is not None
    elif (isinstance(agent, Mapping) and agent
          and all(isinstance(one, SubAgent) for one in agent.values())):  # fmt: skip
        own_models = all(one.llm is not None for one in agent.values())
    else:
        raise _Usage(
            f"--agent: {args.agent!r} is a {type(agent).__name__}, not a SubAgent nor a "
            "mapping of names to agents"
        )
    judges = [_judge(_load(reference, "--judge")) for reference in args.judge]
    try:
        dataset = Dataset.from_file(args.dataset, judges=judges)
    except ImportError as exc:
        raise _Usage(f"DATASET: {exc}") from None
    variants = _variants(args.variants) if args.variants is not None else None
    options: dict[str, Any] = {}
    model = args.llm or (None if own_models else os.environ.get("SUBAGENT_LLM"))
    if model:
        options["llm"] = model
    prices = _prices(args.prices) if args.prices is not None else None
    limits = None
    if args.max_cost is not None:
        if prices is None:
            raise _Usage("--max-cost: needs --prices to count the cost by")
        limits = UsageLimits(max_cost=args.max_cost, prices=prices)
    print(f"dataset: {dataset.name}, {len(dataset)} cases; records: {args.out}", file=sys.stderr)
    try:
        report = dataset.evaluate_sync(agent, variants, out=args.out, repeat=args.repeat,
                                       concurrency=args.concurrency, progress=args.progress,
                                       batch_limits=limits, prices=prices,
                                       rerun_failed=args.rerun_failed, **options)  # fmt: skip
    except KeyboardInterrupt:
        print(
            f"subagent eval run: interrupted: the runs finished are in {args.out}; the same "
            "command runs the others",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if report.pending:
        print(
            f"{report.pending} run(s) not made: the evaluation's --max-cost was reached; a "
            "higher limit and the same command make them",
            file=sys.stderr,
        )
    _print_report(report, args)
    if report.crashed:
        print(
            f"subagent eval run: {report.crashed} run(s) raised or could not reach the model "
            "(the report names what); fix the cause, then the same command with "
            "--rerun-failed makes them again",
            file=sys.stderr,
        )
        return EXIT_CRASHED
    return EXIT_DONE


def _judge(found: Any) -> Any:
    """A judge named on the command line: a Judge class (taking no argument) is made one."""
    if isinstance(found, type) and issubclass(found, Judge):
        try:
            return found()
        except TypeError as exc:
            raise _Usage(f"--judge: {found.__name__} needs arguments: {exc}") from None
    return found


def _load(reference: str, flag: str, expected: type | None = None) -> Any:
    """The object ``module:name`` or ``path/to/file.py:name`` names (the command line's loader).

    A module that raises on import is the command line's to report (exit status 3).
    """
    try:
        return load_object(reference, flag, expected)
    except LoadError as exc:
        raise _Usage(str(exc)) from None


def _read_mapping(path: Path, flag: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _Usage(f"{flag}: cannot read {str(path)!r}: {exc}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            return _yaml().safe_load(text)
        return json.loads(text)
    except ImportError as exc:
        raise _Usage(f"{flag}: {exc}") from None
    except Exception as exc:  # a JSON or YAML syntax error
        raise _Usage(f"{flag}: {path} is not valid {path.suffix[1:] or 'JSON'}: {exc}") from None


def _variants(path: Path) -> list[Variant]:
    data = _read_mapping(path, "--variants")
    if not isinstance(data, Mapping) or not data:
        raise _Usage('--variants: expected {"name": {options}} or {"grid": {option: [values]}}')
    if set(data) == {"grid"}:
        axes = data["grid"]
        if not isinstance(axes, Mapping):
            raise _Usage("--variants: grid must map options to lists of values")
        return grid(**axes)
    for name, options in data.items():
        if not isinstance(options, Mapping):
            raise _Usage(f"--variants: variant {name!r}: its options must be a mapping")
    return [Variant(str(name), options) for name, options in data.items()]


def _prices(path: Path) -> Price | dict[str, Price]:
    data = _read_mapping(path, "--prices")

    def price(value: Any, where: str) -> Price:
        if not isinstance(value, Mapping):
            raise _Usage(f"--prices: {where}: expected input_per_million and output_per_million")
        try:
            return Price(**value)
        except (TypeError, ConfigurationError) as exc:
            raise _Usage(f"--prices: {where}: {exc}") from None

    if not isinstance(data, Mapping):
        raise _Usage("--prices: expected a JSON object")
    if "input_per_million" in data:
        return price(data, "the price")
    return {str(model): price(value, str(model)) for model, value in data.items()}


# --- report and compare ---


def _read(path: Path, flag: str) -> Report:
    if not path.is_file():
        raise _Usage(f"{flag}: no file {str(path)!r}")
    report = Report.read(path)
    if not report.outcomes:
        raise _Usage(f"{flag}: {str(path)!r} holds no evaluation records")
    return report


def _print_report(report: Report, args: argparse.Namespace) -> None:
    if not 0 <= args.margin < 1:
        raise _Usage(f"--margin: must be between 0 and 1, got {args.margin}")
    if args.json:
        print(report.to_json(margin=args.margin))
    else:
        print(report.to_markdown(margin=args.margin), end="")


def _report(args: argparse.Namespace) -> int:
    report = _read(args.records, "FILE")
    _print_report(report, args)
    if args.plot is not None:
        try:
            print(f"plot: {report.plot(args.plot)}", file=sys.stderr)
        except ImportError as exc:
            raise _Usage(f"--plot: {exc}") from None
    if args.html is not None:
        page = report.to_html(records=args.records, margin=args.margin)
        try:
            args.html.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise _Usage(f"--html: cannot write {str(args.html)!r}: {exc}") from None
        print(f"html: {args.html}", file=sys.stderr)
    return EXIT_DONE


def _compare(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        raise _Usage(f"--alpha: must be between 0 and 1, got {args.alpha}")
    max_drop = args.max_drop
    if max_drop is not None and not 0 <= max_drop < 100:
        raise _Usage(f"--max-drop: points between 0 and 100, got {max_drop:g}")
    current = _read(args.records, "FILE")
    baseline = _read(args.baseline, "--baseline")
    comparison = current.compare(
        baseline, alpha=args.alpha, max_drop=None if max_drop is None else max_drop / 100
    )
    if args.json:
        print(comparison.model_dump_json(indent=2))
    else:
        print(comparison.to_markdown())
    if not comparison.paired:
        raise _Usage(
            f"nothing compared: no case of --baseline {args.baseline} pairs with one of "
            f"{args.records} (the same case and variant, by name and digest)"
        )
    return EXIT_REGRESSED if comparison.regressed else EXIT_DONE
