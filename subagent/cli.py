"""The command line: ``subagent run``, ``subagent batch``, ``subagent chart``, ``subagent eval``.

``python -m subagent`` is the same program. It may import every room of the library: it is
an application of it, at the top of the layers (see ``docs/architecture.md``).

Exit status (``docs/cli.md``): 0 when every run ended ``done``; 1 when a run failed (the
model's run: budgets, an explicit fail, an LLM error, a timeout); 2 on bad usage (a bad
argument, file or input line, an agent that cannot be found, a prompt variable the context
lacks, no model), the message naming the argument or value; 3 when the agent or code it
runs raised (a bug to fix, said in one line, not a traceback); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Final, NoReturn, cast

import anyio
import httpx

from subagent.__about__ import __version__
from subagent._agent import SubAgent
from subagent._errors import ConfigurationError, TemplateError
from subagent._phases import mermaid_chart
from subagent._records import FailReason, Step
from subagent.batch import stream_many, summarize
from subagent.evals import _cli as evals_cli
from subagent.llm import LLM, LLMRequest, LLMResponse, OpenAIChat

__all__ = [
    "EXIT_DONE",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_PAUSED",
    "EXIT_USAGE",
    "MAX_INPUT_BYTES",
    "main",
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
"""A run paused for approval of tool calls (and none failed): its Step's ``state`` resumes
it (``SubAgent.resume``); ``--json`` prints it."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted (Ctrl-C); a batch says how far it got and how to resume."""

MAX_INPUT_BYTES: Final = 16 * 1024 * 1024
"""The largest ``--context`` and the longest ``--input`` line, in bytes (16 MiB)."""

_TRACEBACK_VARIABLE = "SUBAGENT_TRACEBACK"
_LOCAL_MODELS = ("qwen", "smollm2")
_LISTED = 10  # line numbers listed in one message, at most


class UsageError(Exception):
    """Bad usage; the message names the argument or the value."""


class AgentError(Exception):
    """The agent, or code it runs or imports, raised: the message says what, in one line."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: The arguments, without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: :data:`EXIT_DONE`, :data:`EXIT_FAILED`, :data:`EXIT_USAGE`,
        :data:`EXIT_ERROR` or :data:`EXIT_INTERRUPTED`.
    """
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)  # exits with status 2 on its own errors
    if unknown:  # the subcommand's usage, not the top level's
        _subparser(args, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        result: int = args.command(args)
    except UsageError as exc:
        print(f"subagent {args.name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except AgentError as exc:
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
            f"subagent {args.name}: unexpected error: {_described(exc)} "
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

    run = commands.add_parser("run", help="run an agent once and print its turns")
    _agent_arguments(run)
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

    batch = commands.add_parser("batch", help="run an agent once per input line, resumably")
    _agent_arguments(batch)
    batch.add_argument(
        "--input",
        required=True,
        type=Path,
        metavar="FILE.jsonl",
        help="one JSON object (a prompt context) per line",
    )
    batch.add_argument(
        "--output",
        required=True,
        type=Path,
        metavar="FILE.jsonl",
        help="one line per finished run; inputs with a result there are skipped",
    )
    batch.add_argument(
        "--concurrency", type=int, default=8, metavar="N", help="runs in flight at once (default 8)"
    )
    batch.add_argument(
        "--rerun-failed",
        action="store_true",
        help="run again the inputs whose result in the output failed",
    )
    batch.add_argument(
        "--rerun-retryable",
        action="store_true",
        help="run again the inputs whose result failed retryably (a transient transport error)",
    )
    batch.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    batch.set_defaults(command=_batch_command, name="batch", parser=batch)

    chart = commands.add_parser("chart", help="print the state chart (mermaid)")
    chart.set_defaults(command=_chart_command, name="chart", parser=chart)
    evals_cli.register(commands)  # `subagent eval run / report / compare`
    return parser


def _agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "agent", metavar="MODULE:AGENT", help="a SubAgent: module.path:name or path/to/file.py:name"
    )
    parser.add_argument(
        "--max-turns", type=int, default=None, metavar="N",
        help="the work budget (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--return-retries", type=int, default=None, metavar="N",
        help="the correction budget (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="S",
        help="seconds for one LLM call (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--mission-timeout", type=float, default=None, metavar="S",
        help="seconds for a whole run (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=float, default=None, metavar="T",
        help="the model setting, over the agent's settings",
    )  # fmt: skip
    parser.add_argument(
        "--max-tokens", type=int, default=None, metavar="N",
        help="the model setting, over the agent's settings",
    )  # fmt: skip
    parser.add_argument(
        "--protocol", choices=("native", "react"), default=None,
        help="how tools travel (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--llm",
        default=None,
        metavar="SPEC",
        help="the model, in SUBAGENT_LLM's form ('openai:MODEL', 'openai:MODEL@URL'); "
        "wins over the agent's own llm= and the environment",
    )
    parser.add_argument(
        "--local-model",
        default=None,
        choices=_LOCAL_MODELS,
        help="with no model configured, build (the first time: minutes) and start this "
        "local model from a checkout's scripts/local_llm.py",
    )


# --- commands ---


def _run_command(args: argparse.Namespace) -> int:
    agent = _agent(args)
    context = parse_context(args.context)
    options = _run_options(agent, args)
    check_prompt(agent, context, "--context")
    with _tracing(args.trace) as (provider, report):
        with _model(agent, args) as llm:
            try:
                step = anyio.run(_run_once, agent, context, llm, options, provider)
            except (ConfigurationError, TemplateError) as exc:  # raised mid-run
                raise UsageError(f"--context: {exc}") from None
            except Exception as exc:  # the agent's code (a parser, a validator) raised
                raise AgentError(_described(exc)) from exc
        report()
    if args.json:
        print(step.model_dump_json(indent=2))
    else:
        print(turn_table(step))
    return _exit_code([step])


def _exit_code(steps: list[Step[Any]]) -> int:
    """Done when every run is; failed when one failed; else paused when one paused."""
    if any(step.failure is not None for step in steps):
        return EXIT_FAILED
    if any(step.state is not None for step in steps):
        return EXIT_PAUSED
    return EXIT_DONE


async def _run_once(
    agent: SubAgent[Any],
    context: dict[str, Any],
    llm: LLM,
    options: dict[str, Any],
    provider: Any,
) -> Step[Any]:
    async with _opened(llm):
        return await agent.run(context, llm=llm, tracer_provider=provider, **options)


def _batch_command(args: argparse.Namespace) -> int:
    agent = _agent(args)
    if args.concurrency < 1:
        raise UsageError(f"--concurrency: must be at least 1, got {args.concurrency}")
    options = _run_options(agent, args)
    inputs = read_inputs(args.input)
    for item in inputs:  # a variable missing from any line: nothing runs
        check_prompt(agent, item.context, f"--input: line {item.line}")
    plan = plan_batch(inputs, read_outputs(args.output), rerun_failed=args.rerun_failed,
                      rerun_retryable=args.rerun_retryable)  # fmt: skip
    for note in plan.notes(args.input, args.output):
        print(note, file=sys.stderr)
    done = dict(plan.done)
    if plan.pending:
        _check_writable(args.output)
        print(
            f"{len(plan.pending)} of {len(inputs)} inputs to run "
            f"({len(inputs) - len(plan.pending)} already in {args.output})",
            file=sys.stderr,
        )
        new: dict[int, Step[Any]] = {}
        try:
            with _model(agent, args) as llm:
                anyio.run(_run_batch, agent, inputs, plan.pending, llm, options, args, new)
        except KeyboardInterrupt:
            finished = len(inputs) - len(plan.pending) + len(new)
            print(
                f"subagent batch: interrupted: {finished} of {len(inputs)} inputs have "
                f"their result in {args.output} ({len(new)} from this run); run the same "
                f"command again to run the other {len(inputs) - finished}",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        done.update(new)
    steps = [done[index] for index in range(len(inputs)) if index in done]
    print(summarize(steps).table())
    if retryable := sum(step.retryable for step in steps):
        print(
            f"{retryable} run(s) failed retryably: the same command with --rerun-retryable "
            "runs them again",
            file=sys.stderr,
        )
    errors = [index for index in sorted(done) if _raised(done[index])]
    if errors:
        first = done[errors[0]]
        message = " ".join((first.failure.message if first.failure is not None else "").split())
        lines = _listed([inputs[index].line for index in errors])
        print(
            f"subagent batch: error in the agent or code it runs: {len(errors)} run(s) "
            f"raised (failed(error), lines {lines} of {args.input}); line "
            f"{inputs[errors[0]].line}: {message}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return _exit_code(list(steps))


def _raised(step: Step[Any]) -> bool:
    return step.failure is not None and step.failure.reason is FailReason.ERROR


async def _run_batch(
    agent: SubAgent[Any],
    inputs: list[Input],
    pending: list[int],
    llm: LLM,
    options: dict[str, Any],
    args: argparse.Namespace,
    finished: dict[int, Step[Any]],
) -> None:
    async with _opened(llm):
        batch = stream_many(
            agent,
            [inputs[index].context for index in pending],
            llm=llm,
            concurrency=args.concurrency,
            progress=args.progress,
            **options,
        )
        async with batch as items:
            with args.output.open("a", encoding="utf-8") as output:
                async for item in items:
                    index = pending[item.index]
                    output.write(output_line(index, inputs[index].context, item.step) + "\n")
                    output.flush()  # a killed batch loses only the runs in flight
                    finished[index] = item.step


def _chart_command(args: argparse.Namespace) -> int:
    print(mermaid_chart())
    return EXIT_DONE


# --- arguments ---


def _agent(args: argparse.Namespace) -> SubAgent[Any]:
    agent = load_agent(args.agent)
    if args.protocol is not None and args.protocol != agent.protocol:
        try:
            agent = dataclasses.replace(agent, protocol=args.protocol)
        except ConfigurationError as exc:
            raise UsageError(f"--protocol: {exc}") from None
    return agent


def load_agent(reference: str) -> SubAgent[Any]:
    """The :class:`SubAgent` that ``module:name`` or ``path/to/file.py:name`` names.

    A dotted module is imported with the current directory on the path, as ``python -m``
    does; a file is imported with its own folder on the path, so it can import its
    neighbours.

    Raises:
        UsageError: The reference is malformed, the module is not found, or the name is
            missing or not a SubAgent.
        AgentError: The module raised while it was imported (a bug in it).
    """
    module_name, colon, attribute = reference.rpartition(":")
    if not colon or not module_name or not attribute:
        raise UsageError(
            f"MODULE:AGENT: expected 'module:name' or 'file.py:name', got {reference!r}"
        )
    module = _import(module_name)
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise UsageError(f"MODULE:AGENT: {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, SubAgent):
        kind = type(found).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        raise UsageError(f"MODULE:AGENT: {reference!r} is {article} {kind}, not a SubAgent")
    return found


def _import(name: str) -> ModuleType:
    if name.endswith(".py"):
        return _import_file(Path(name))
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise UsageError(f"MODULE:AGENT: cannot import {name!r}: {_described(exc)}") from exc
        raise AgentError(f"importing {name!r} raised {_described(exc)}") from exc
    except Exception as exc:  # whatever the module raised on import: a bug in it
        raise AgentError(f"importing {name!r} raised {_described(exc)}") from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise UsageError(f"MODULE:AGENT: no file {str(path)!r}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"MODULE:AGENT: cannot import {str(path)!r}")
    sys.path.insert(0, str(path.resolve().parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # whatever the module raised on import: a bug in it
        del sys.modules[path.stem]
        raise AgentError(f"importing {str(path)!r} raised {_described(exc)}") from exc
    return module


def _described(exc: BaseException) -> str:
    """``Type: message`` on one line, at most 1,000 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 1000 else text[:999] + "…"


def _strict_json(text: str) -> Any:
    """``json.loads`` without NaN and Infinity, which strict JSON (and the output) lacks."""

    def refuse(constant: str) -> NoReturn:
        raise ValueError(f"{constant} is not JSON (write it as a string or null)")

    return json.loads(text, parse_constant=refuse)


def _json_object(text: str, source: str) -> dict[str, Any]:
    try:
        value = _strict_json(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None
    except ValueError as exc:  # NaN, Infinity
        raise UsageError(f"{source}: {exc}") from None
    except RecursionError:
        raise UsageError(f"{source}: nested too deeply") from None
    if not isinstance(value, dict):
        raise UsageError(f"{source}: must be a JSON object, got {type(value).__name__}")
    return value


def _decoded(raw: bytes, source: str, *, first: bool = True) -> str:
    """UTF-8 (a leading byte-order mark allowed at the start of a file), else bad usage."""
    try:
        return raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def parse_context(value: str) -> dict[str, Any]:
    """``--context``: a JSON object, ``@file`` holding one, or ``@-`` (standard input).

    A file (or standard input) is UTF-8, a byte-order mark allowed, of at most
    :data:`MAX_INPUT_BYTES`.

    Raises:
        UsageError: The file cannot be read, is too large or not UTF-8, or the text is not
            a strict JSON object (no NaN or Infinity).
    """
    if not value.startswith("@"):
        return _json_object(value.removeprefix("\ufeff"), "--context")
    source = f"--context {value}"
    try:
        if value == "@-":
            raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with Path(value[1:]).open("rb") as file:
                raw = file.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{source}: cannot read {value[1:]!r}: {exc.strerror}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise UsageError(f"{source}: larger than the limit of {_mib(MAX_INPUT_BYTES)}")
    return _json_object(_decoded(raw, source), source)


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"


@dataclass(frozen=True, slots=True)
class Input:
    """One input of a batch.

    Attributes:
        line: Its line number in the file, from 1.
        context: The prompt context.
        key: A digest of the context: what its result in the output is found by.
    """

    line: int
    context: dict[str, Any]
    key: str


def input_key(context: Any) -> str:
    """The digest a batch finds an input's result by: SHA-256 of its canonical JSON."""
    canonical = json.dumps(context, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_inputs(path: Path) -> list[Input]:
    r"""``--input``: one JSON object per line (blank lines are skipped).

    Lines end at ``\n`` only (a ``\r`` before it is dropped), so a raw U+2028, U+2029 or
    U+0085 inside a string is just a character; the file is UTF-8 (a byte-order mark
    allowed) and a line holds at most :data:`MAX_INPUT_BYTES`.

    Raises:
        UsageError: The file cannot be read, or a line is too long, not UTF-8 or not a
            strict JSON object (the line is named).
    """
    inputs: list[Input] = []
    try:
        with path.open("rb") as file:
            for number, raw in enumerate(_lines(file), 1):
                source = f"--input: line {number}"
                if len(raw) > MAX_INPUT_BYTES:
                    raise UsageError(f"{source} is longer than the limit of "
                                     f"{_mib(MAX_INPUT_BYTES)}")  # fmt: skip
                text = _decoded(raw, source, first=number == 1)
                if not text.strip():
                    continue
                try:
                    context = _strict_json(text)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{source} is not JSON: {exc}") from None
                except ValueError as exc:
                    raise UsageError(f"{source}: {exc}") from None
                except RecursionError:
                    raise UsageError(f"{source}: nested too deeply") from None
                if not isinstance(context, dict):
                    raise UsageError(
                        f"{source} must be a JSON object, got {type(context).__name__}"
                    )
                inputs.append(Input(number, context, input_key(context)))
    except OSError as exc:
        raise UsageError(f"--input: cannot read {str(path)!r}: {exc.strerror}") from None
    return inputs


def _lines(file: BinaryIO) -> Iterator[bytes]:
    r"""A file's lines split at ``\n`` only, without it or a ``\r`` before it.

    A line longer than :data:`MAX_INPUT_BYTES` comes back with one byte more than the limit
    (and ends the reading): it is never held whole.
    """
    while raw := file.readline(MAX_INPUT_BYTES + 2):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        elif len(raw) > MAX_INPUT_BYTES:
            yield raw[: MAX_INPUT_BYTES + 1]
            return
        yield raw.removesuffix(b"\r")


def output_line(index: int, context: dict[str, Any], step: Step[Any]) -> str:
    """One line of a batch's output: the input's index and context, and the run's Step."""
    head = json.dumps({"index": index, "context": context}, allow_nan=False)
    return f'{head[:-1]}, "step": {step.model_dump_json()}}}'


@dataclass(frozen=True, slots=True)
class Result:
    """One line of a batch's output: the input's index then, its key, and the run's Step."""

    index: int
    key: str
    step: Step[Any]


def read_outputs(path: Path) -> list[Result]:
    """The results a batch's output already holds, in file order; none if it does not exist.

    Bytes after the last newline (a batch killed while writing, perhaps inside a character)
    are cut off the file before anything is decoded: that input runs again.

    Raises:
        UsageError: The file cannot be read or cut, or a complete line is not an output
            line (named).
    """
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--output: cannot read {str(path)!r}: {exc.strerror}") from None
    end = data.rfind(b"\n") + 1
    if end < len(data):  # a batch killed while writing: drop the part line
        try:
            os.truncate(path, end)
        except OSError as exc:
            raise UsageError(f"--output: cannot write {str(path)!r}: {exc.strerror}") from None
    results: list[Result] = []
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw.decode("utf-8"))
            context = line["context"]
            step = Step[Any].model_validate(line["step"])
            result = Result(int(line["index"]), input_key(context), step)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise UsageError(
                f"--output: line {number} is not a batch result: {type(exc).__name__}"
            ) from None
        if not isinstance(context, dict):
            raise UsageError(f"--output: line {number} is not a batch result: its context")
        results.append(result)
    return results


@dataclass
class Plan:
    """What a batch reuses from its output and what it runs.

    Attributes:
        done: The reused results' Steps, by input index.
        pending: The input indices to run, in order.
        changed: Line numbers of inputs whose line's earlier result was for another input.
        stale: Results matching no input (edited, removed, or superseded by a rerun).
        rerun: Line numbers run again by ``--rerun-failed`` / ``--rerun-retryable``.
        rerun_flags: Those of the two flags that were given.
    """

    done: dict[int, Step[Any]]
    pending: list[int]
    changed: list[int]
    stale: int
    rerun: list[int]
    rerun_flags: str = ""

    def notes(self, input_path: Path, output_path: Path) -> list[str]:
        """What the batch tells on stderr before it runs."""
        notes = []
        if self.changed:
            one = len(self.changed) == 1
            notes.append(
                f"{'line' if one else 'lines'} {_listed(self.changed)} of {input_path} changed "
                f"since {'its result was' if one else 'their results were'} written: "
                f"{'it runs' if one else 'they run'} again"
            )
        if self.stale:
            notes.append(
                f"{self.stale} result(s) in {output_path} match no input of {input_path} "
                "(edited or removed since): kept in the file, not reused or counted"
            )
        if self.rerun:
            notes.append(
                f"{'line' if len(self.rerun) == 1 else 'lines'} {_listed(self.rerun)} of "
                f"{input_path} run again ({self.rerun_flags})"
            )
        return notes


def _listed(numbers: list[int]) -> str:
    shown = ", ".join(str(number) for number in numbers[:_LISTED])
    return shown + (f" and {len(numbers) - _LISTED} more" if len(numbers) > _LISTED else "")


def plan_batch(
    inputs: Sequence[Input],
    results: Sequence[Result],
    *,
    rerun_failed: bool = False,
    rerun_retryable: bool = False,
) -> Plan:
    """Match the output's results to the inputs by the inputs themselves.

    A result serves an input when it was written for the same context (the same
    :func:`input_key`), at the same index if there is one, else at any index (the file was
    reordered); a later line for the same context and index supersedes an earlier one.
    Each result serves one input at most, so duplicated inputs each run once. Inputs
    without a result, and with ``rerun_failed`` / ``rerun_retryable`` those whose result
    failed (retryably), are to run.
    """
    latest: dict[tuple[str, int], Result] = {}
    for result in results:
        latest[(result.key, result.index)] = result
    matched: dict[int, Result] = {}
    used: set[tuple[str, int]] = set()
    for index, item in enumerate(inputs):
        if (item.key, index) in latest:
            matched[index] = latest[(item.key, index)]
            used.add((item.key, index))
    free: dict[str, list[tuple[str, int]]] = {}  # the results left, by key, last first
    for slot in reversed(latest):
        if slot not in used:
            free.setdefault(slot[0], []).append(slot)
    for index, item in enumerate(inputs):
        if index not in matched and free.get(item.key):
            slot = free[item.key].pop()
            matched[index] = latest[slot]
            used.add(slot)
    unused = [slot for slot in latest if slot not in used]
    written_at = {index for _, index in unused}
    changed = [item.line for index, item in enumerate(inputs)
               if index not in matched and index in written_at]  # fmt: skip
    flags = [flag for flag, given in (("--rerun-failed", rerun_failed),
                                      ("--rerun-retryable", rerun_retryable)) if given]  # fmt: skip
    rerun = []
    for index in sorted(matched):
        step = matched[index].step
        if (rerun_failed and step.failure is not None) or (rerun_retryable and step.retryable):
            rerun.append(inputs[index].line)
            del matched[index]
    return Plan(
        done={index: result.step for index, result in matched.items()},
        pending=[index for index in range(len(inputs)) if index not in matched],
        changed=changed,
        stale=len(unused),
        rerun=rerun,
        rerun_flags=" ".join(flags),
    )


def _check_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--output: cannot write {str(path)!r}: {exc.strerror}") from None


def check_prompt(agent: SubAgent[Any], context: dict[str, Any], source: str) -> None:
    """Render the agent's prompt with ``context`` before any model is called.

    Raises:
        UsageError: A variable the prompt needs is missing (or the prompt is empty).
    """
    try:
        agent.check_options(context, llm=_ModelChosenLater())
    except (ConfigurationError, TemplateError) as exc:
        raise UsageError(f"{source}: {exc}") from None


def _run_options(agent: SubAgent[Any], args: argparse.Namespace) -> dict[str, Any]:
    """The run options the flags give, checked as ``run()`` would check them."""
    flags = {"max_turns": "--max-turns", "return_retries": "--return-retries",
             "timeout": "--timeout", "mission_timeout": "--mission-timeout"}  # fmt: skip
    options: dict[str, Any] = {
        name: getattr(args, name) for name in flags if getattr(args, name) is not None
    }
    settings = {name: getattr(args, name) for name in ("temperature", "max_tokens")
                if getattr(args, name) is not None}  # fmt: skip
    if settings:
        options["settings"] = settings
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens: must be at least 1, got {args.max_tokens}")
    try:
        agent.check_options(**options, llm=_ModelChosenLater())
    except ConfigurationError as exc:
        raise UsageError(f"{flags.get(exc.field, exc.field)}: {exc.message}") from None
    return options


class _ModelChosenLater:
    """Stands for the model while the options are checked, before one is chosen."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError("the model is chosen after the arguments are checked")


# --- the model ---


@contextlib.contextmanager
def _model(agent: SubAgent[Any], args: argparse.Namespace) -> Iterator[LLM]:
    """The model for the runs, announced on stderr with where it comes from.

    ``--llm``, else the agent's own ``llm=``, else the environment's, else (asked for with
    ``--local-model``) the local one. Explicit beats implicit.
    """
    if args.llm is not None:
        try:
            chosen = OpenAIChat.from_env({**os.environ, "SUBAGENT_LLM": args.llm},
                                         text_tool_calls=True)  # fmt: skip
        except ConfigurationError as exc:
            raise UsageError(f"--llm: {exc.message}") from None
        _announce(chosen, "--llm")
        yield chosen
        return
    if agent.llm is not None:
        own = cast(LLM, agent.llm)  # a spec string is an LLMSpec once the agent is built
        _announce(own, "the agent's own llm=")
        yield own
        return
    if OpenAIChat.env_configured():
        try:
            configured = OpenAIChat.from_env(text_tool_calls=True)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        where = "SUBAGENT_LLM" if os.environ.get("SUBAGENT_LLM", "").strip() else "OPENAI_*"
        _announce(configured, where)
        yield configured
        return
    local = _local_llm_module()
    if local is None or args.local_model is None:
        local_hint = (
            "; or --local-model qwen to build (minutes, the first time) and start the local "
            "model of make demo"
            if local is not None
            else ""
        )
        raise UsageError(
            "no model: pass --llm or set SUBAGENT_LLM (e.g. 'openai:gpt-4o-mini', or "
            "'openai:local@http://127.0.0.1:8080/v1'), or OPENAI_BASE_URL and OPENAI_MODEL"
            + local_hint
        )
    print(
        f"starting the local model {args.local_model!r} (scripts/local_llm.py; the first "
        "time it builds the server and downloads the weights, several minutes)",
        file=sys.stderr,
    )
    local.setup([args.local_model])
    with local.running(args.local_model) as server:
        started = OpenAIChat(
            model=local.MODEL_ALIAS,
            base_url=server.base_url,
            timeout=180,
            text_tool_calls=True,
            _environ={},
        )
        _announce(started, f"--local-model {args.local_model}")
        yield started


def _announce(llm: LLM, where: str) -> None:
    print(f"model: {describe_model(llm)} ({where})", file=sys.stderr)


def describe_model(llm: LLM) -> str:
    """The model's name and, for an HTTP one, its server: never a key or URL credentials."""
    if isinstance(llm, OpenAIChat):
        return f"{llm.model_name} at {safe_url(llm.base_url)}"
    name = getattr(llm, "model_name", None)
    return name if isinstance(name, str) and name else type(llm).__name__


def safe_url(url: str) -> str:
    """``url`` without user, password, query or fragment (where credentials may hide)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "(an invalid URL)"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path}"


def _local_llm_module() -> ModuleType | None:
    """``scripts/local_llm.py`` of the checkout this package runs from, if it is one."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "local_llm.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("local_llm", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules["local_llm"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@contextlib.asynccontextmanager
async def _opened(llm: LLM) -> AsyncIterator[None]:
    """Close the model's connections after the runs, when it has any."""
    if isinstance(llm, OpenAIChat):
        async with llm:
            yield
    else:
        yield


# --- tracing ---


@contextlib.contextmanager
def _tracing(mode: str | None) -> Iterator[tuple[Any, Callable[[], None]]]:
    """``(tracer provider or None, report)`` for ``--trace console|otlp``.

    The spans are kept in memory; after the run ``report`` prints their tree (console) or
    exports them all at once and says whether the receiver took them (otlp).
    """
    if mode is None:
        yield None, lambda: None
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from subagent import tracing
    except ImportError:
        raise UsageError(
            "--trace: needs the OpenTelemetry SDK, which comes with the otlp "
            "extra: pip install 'subagent-runtime[otlp]'"
        ) from None
    report: Callable[[], None]
    memory = InMemorySpanExporter()
    if mode == "console":
        provider = TracerProvider()

        def report() -> None:
            print(span_tree(memory.get_finished_spans()), file=sys.stderr)

    else:
        try:
            protocol = tracing._resolve_protocol(None)
        except ValueError as exc:
            raise UsageError(f"--trace otlp: {exc}") from None
        url, endpoint = tracing._resolve_endpoint(None, protocol)
        if url is None:
            raise UsageError(
                "--trace otlp: no receiver: set OTEL_EXPORTER_OTLP_ENDPOINT (or "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); --trace alone prints the tree"
            )
        try:
            exporter = tracing._otlp_exporter(protocol, endpoint)
        except ImportError as exc:
            raise UsageError(f"--trace otlp: {exc}") from None
        service = os.environ.get("OTEL_SERVICE_NAME") or "subagent-cli"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        target = f"{safe_url(url)} (OTLP/{protocol})"

        def report() -> None:
            spans = memory.get_finished_spans()
            try:
                outcome = exporter.export(spans)
            except Exception as exc:  # an exporter that raises instead of reporting
                outcome = SpanExportResult.FAILURE
                print(f"--trace otlp: {_described(exc)}", file=sys.stderr)
            finally:
                exporter.shutdown()
            if outcome is SpanExportResult.SUCCESS:
                print(f"{len(spans)} spans exported to {target}", file=sys.stderr)
            else:
                print(
                    f"--trace otlp: exporting {len(spans)} spans to {target} failed: the "
                    "receiver was unreachable or refused them (none were exported)",
                    file=sys.stderr,
                )

    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        yield provider, report
    finally:
        provider.shutdown()


def span_tree(spans: Sequence[Any]) -> str:
    """Finished spans as an indented tree: name, status, duration, the telling attributes."""
    ids = {span.context.span_id for span in spans}
    children: dict[int | None, list[Any]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(span)
    for siblings in children.values():
        siblings.sort(key=lambda span: span.start_time or 0)
    lines: list[str] = []

    def walk(span: Any, prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└─ " if last else "├─ ")
        lines.append(f"{prefix}{branch}{_span_label(span)}")
        below = children.get(span.context.span_id, [])
        inner = prefix + ("" if root else ("   " if last else "│  "))
        for index, child in enumerate(below):
            walk(child, inner, index == len(below) - 1, False)

    for span in children.get(None, []):
        walk(span, "", True, True)
    return "\n".join(lines)


def _span_label(span: Any) -> str:
    attributes = span.attributes or {}
    parts = [span.name]
    for key in (
        "subagent.outcome",
        "subagent.turn.outcome",
        "error.type",
        "gen_ai.response.finish_reasons",
    ):
        if key in attributes:
            value = attributes[key]
            parts.append(",".join(value) if isinstance(value, tuple) else str(value))
    if "gen_ai.usage.input_tokens" in attributes:
        parts.append(
            f"tokens {attributes['gen_ai.usage.input_tokens']}/"
            f"{attributes.get('gen_ai.usage.output_tokens', 0)}"
        )
    if span.start_time is not None and span.end_time is not None:
        parts.append(f"{(span.end_time - span.start_time) / 1e6:.1f} ms")
    return "  ".join(parts)


# --- output ---


def turn_table(step: Step[Any]) -> str:
    """The per-turn table of a Step.

    One row per turn (type, outcome, tokens, seconds, error or tool calls), then the Step's
    summary and, when it is done, its output.
    """
    rows = [
        f"{'turn':>4}  {'type':<11} {'outcome':<8} {'tok in':>6} {'tok out':>7} "
        f"{'s':>6}  error / tool calls"
    ]
    for turn in step.turns:
        error = (turn.error or "").strip().splitlines()
        note = error[0][:70] if error else ""
        if turn.tool_calls and not note:
            note = "called " + ", ".join(call.name for call in turn.tool_calls)
        rows.append(
            f"{turn.index:>4}  {turn.type.value:<11} {turn.outcome.value:<8} "
            f"{turn.usage.input_tokens:>6} {turn.usage.output_tokens:>7} "
            f"{turn.duration_s:>6.2f}  {note}"
        )
    rows.append(step.summary())
    pending = step.pending
    if pending is not None:
        rows += [f"awaiting approval: {call.name} (call {call.id})" for call in pending.waiting]
    if step.ok:
        rows.append(f"output: {step.output!r}")
    return "\n".join(rows)
