"""The command line: ``subagent run``, ``subagent batch``, ``subagent chart``.

``python -m subagent`` is the same program. It may import every room of the library: it is
an application of it, at the top of the layers (see ``docs/architecture.md``).

Exit status: 0 when every run ended ``done``, 1 when one failed, 2 on bad usage (a bad
argument, an agent that cannot be found, a context that is not a JSON object, no model);
the message names the argument or value.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import anyio

from subagent._agent import SubAgent
from subagent._errors import ConfigurationError, TemplateError
from subagent._phases import mermaid_chart
from subagent._records import Step
from subagent.batch import stream_many, summarize
from subagent.llm import LLM, LLMRequest, LLMResponse, OpenAIChat

__all__ = ["EXIT_DONE", "EXIT_FAILED", "EXIT_USAGE", "main"]

EXIT_DONE: Final = 0
"""Every run ended ``done``."""
EXIT_FAILED: Final = 1
"""A run ended ``failed``."""
EXIT_USAGE: Final = 2
"""Bad usage: the message names the argument or value."""

LOCAL_MODEL: Final = "qwen"
"""The model of ``make demo`` started when nothing else is configured (from a checkout)."""
_OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class UsageError(Exception):
    """Bad usage; the message names the argument or the value."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: The arguments, without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: :data:`EXIT_DONE`, :data:`EXIT_FAILED` or :data:`EXIT_USAGE`.
    """
    parser = _parser()
    args = parser.parse_args(argv)  # exits with status 2 on its own errors
    try:
        result: int = args.command(args)
    except UsageError as exc:
        print(f"subagent {args.name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (`subagent chart | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="subagent",
        description="Run sub-agents defined in Python modules, one at a time or in batches.",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run an agent once and print its turns")
    _agent_arguments(run)
    run.add_argument(
        "--context",
        default="{}",
        metavar="JSON|@FILE",
        help="the prompt's variables: a JSON object, or @file holding one",
    )
    run.add_argument("--json", action="store_true", help="print the Step as JSON instead")
    run.add_argument(
        "--trace",
        action="store_true",
        help="print the run's span tree on stderr (or export it over OTLP when "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set)",
    )
    run.set_defaults(command=_run_command, name="run")

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
        help="one line per finished run; inputs already there are skipped",
    )
    batch.add_argument(
        "--concurrency", type=int, default=8, metavar="N", help="runs in flight at once (default 8)"
    )
    batch.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    batch.set_defaults(command=_batch_command, name="batch")

    chart = commands.add_parser("chart", help="print the state chart (mermaid)")
    chart.set_defaults(command=_chart_command, name="chart")
    return parser


def _agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "agent", metavar="MODULE:AGENT", help="a SubAgent: module.path:name or path/to/file.py:name"
    )
    parser.add_argument(
        "--max-turns",
        type=int,
        default=None,
        metavar="N",
        help="the work budget (default: the agent's)",
    )
    parser.add_argument(
        "--return-retries",
        type=int,
        default=None,
        metavar="N",
        help="the correction budget (default: the agent's)",
    )
    parser.add_argument(
        "--local-model",
        default=LOCAL_MODEL,
        metavar="NAME",
        help="with no model configured, the local model to start from a checkout's "
        f"scripts/local_llm.py: qwen or smollm2 (default {LOCAL_MODEL})",
    )


# --- commands ---


def _run_command(args: argparse.Namespace) -> int:
    agent = load_agent(args.agent)
    context = parse_context(args.context)
    options = _budgets(agent, args)
    with _tracing(args.trace) as (provider, print_tree):
        with _model(agent, args.local_model) as llm:
            try:
                step = anyio.run(_run_once, agent, context, llm, options, provider)
            except (ConfigurationError, TemplateError) as exc:  # e.g. a variable not given
                raise UsageError(f"--context: {exc}") from None
        print_tree()
    if args.json:
        print(step.model_dump_json(indent=2))
    else:
        print(turn_table(step))
    return EXIT_DONE if step.ok else EXIT_FAILED


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
    agent = load_agent(args.agent)
    if args.concurrency < 1:
        raise UsageError(f"--concurrency: must be at least 1, got {args.concurrency}")
    contexts = read_inputs(args.input)
    done = read_outputs(args.output)
    pending = [index for index in range(len(contexts)) if index not in done]
    options = _budgets(agent, args)
    if pending:
        print(
            f"{len(pending)} of {len(contexts)} inputs to run "
            f"({len(contexts) - len(pending)} already in {args.output})",
            file=sys.stderr,
        )
        with _model(agent, args.local_model) as llm:
            new = anyio.run(_run_batch, agent, contexts, pending, llm, options, args)
        done.update(new)
    steps = [done[index] for index in range(len(contexts)) if index in done]
    print(summarize(steps).table())
    return EXIT_DONE if all(step.ok for step in steps) else EXIT_FAILED


async def _run_batch(
    agent: SubAgent[Any],
    contexts: list[dict[str, Any]],
    pending: list[int],
    llm: LLM,
    options: dict[str, Any],
    args: argparse.Namespace,
) -> dict[int, Step[Any]]:
    finished: dict[int, Step[Any]] = {}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    async with _opened(llm):
        batch = stream_many(
            agent,
            [contexts[index] for index in pending],
            llm=llm,
            concurrency=args.concurrency,
            progress=args.progress,
            **options,
        )
        async with batch as items:
            with args.output.open("a", encoding="utf-8") as output:
                async for item in items:
                    index = pending[item.index]
                    output.write(output_line(index, contexts[index], item.step) + "\n")
                    output.flush()  # a killed batch loses only the runs in flight
                    finished[index] = item.step
    return finished


def _chart_command(args: argparse.Namespace) -> int:
    print(mermaid_chart())
    return EXIT_DONE


# --- arguments ---


def load_agent(reference: str) -> SubAgent[Any]:
    """The :class:`SubAgent` that ``module:name`` or ``path/to/file.py:name`` names.

    A dotted module is imported with the current directory on the path, as ``python -m``
    does; a file is imported with its own folder on the path, so it can import its
    neighbours.

    Raises:
        UsageError: The reference is malformed, the module cannot be imported, or the name
            is missing or not a SubAgent.
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
        raise UsageError(f"MODULE:AGENT: {reference!r} is a {type(found).__name__}, not a SubAgent")
    return found


def _import(name: str) -> ModuleType:
    if name.endswith(".py"):
        return _import_file(Path(name))
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except Exception as exc:  # whatever the module raised on import
        raise UsageError(f"MODULE:AGENT: cannot import {name!r}: {_described(exc)}") from exc


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
    except Exception as exc:  # whatever the module raised on import
        del sys.modules[path.stem]
        raise UsageError(f"MODULE:AGENT: cannot import {str(path)!r}: {_described(exc)}") from exc
    return module


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def parse_context(value: str) -> dict[str, Any]:
    """``--context``: a JSON object, or ``@file`` holding one.

    Raises:
        UsageError: The file cannot be read, or the text is not a JSON object.
    """
    source = "--context"
    if value.startswith("@"):
        path = Path(value[1:])
        source = f"--context {value}"
        try:
            value = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{source}: cannot read {str(path)!r}: {exc.strerror}") from None
    try:
        context = json.loads(value)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None
    if not isinstance(context, dict):
        raise UsageError(f"{source}: must be a JSON object, got {type(context).__name__}")
    return context


def read_inputs(path: Path) -> list[dict[str, Any]]:
    """``--input``: one JSON object per line (blank lines are skipped).

    Raises:
        UsageError: The file cannot be read, or a line is not a JSON object (named).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"--input: cannot read {str(path)!r}: {exc.strerror}") from None
    contexts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            context = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--input: line {number} is not JSON: {exc}") from None
        if not isinstance(context, dict):
            raise UsageError(
                f"--input: line {number} must be a JSON object, got {type(context).__name__}"
            )
        contexts.append(context)
    return contexts


def output_line(index: int, context: dict[str, Any], step: Step[Any]) -> str:
    """One line of a batch's output: the input's index and context, and the run's Step."""
    head = json.dumps({"index": index, "context": context})
    return f'{head[:-1]}, "step": {step.model_dump_json()}}}'


def read_outputs(path: Path) -> dict[int, Step[Any]]:
    """The Steps a batch's output already holds, by input index; none if it does not exist.

    A last line without its newline (a batch killed while writing) is removed from the
    file: that input runs again.

    Raises:
        UsageError: A complete line is not an output line (named).
    """
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--output: cannot read {str(path)!r}: {exc.strerror}") from None
    if text and not text.endswith("\n"):  # a batch killed while writing: drop the part line
        text = text[: text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    steps: dict[int, Step[Any]] = {}
    for number, line in enumerate(text.split("\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            steps[int(data["index"])] = Step[Any].model_validate(data["step"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(
                f"--output: line {number} is not a batch result: {type(exc).__name__}"
            ) from None
    return steps


def _budgets(agent: SubAgent[Any], args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if args.max_turns is not None:
        options["max_turns"] = args.max_turns
    if args.return_retries is not None:
        options["return_retries"] = args.return_retries
    try:
        agent.check_options(**options, llm=_ModelChosenLater())
    except ConfigurationError as exc:
        flag = {"max_turns": "--max-turns", "return_retries": "--return-retries"}
        raise UsageError(f"{flag.get(exc.field, exc.field)}: {exc.message}") from None
    return options


class _ModelChosenLater:
    """Stands for the model while the budgets are checked, before one is chosen."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError("the model is chosen after the arguments are checked")


# --- the model ---


@contextlib.contextmanager
def _model(agent: SubAgent[Any], local_model: str) -> Iterator[LLM]:
    """The model for the runs: the environment's, else the agent's, else the local one."""
    if OpenAIChat.env_configured():
        try:
            configured = OpenAIChat.from_env(text_tool_calls=True)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        yield configured
        return
    if agent.llm is not None:
        yield agent.llm  # type: ignore[misc]  # a spec string is an LLMSpec once built
        return
    local = _local_llm_module()
    if local is None:
        raise UsageError(
            "no model: set SUBAGENT_LLM (e.g. 'openai:gpt-4o-mini', or "
            "'openai:local@http://127.0.0.1:8080/v1') or OPENAI_BASE_URL and OPENAI_MODEL"
        )
    if local_model not in local.MODELS:
        raise UsageError(f"--local-model: no local model {local_model!r}; there are: "
                         f"{', '.join(local.MODELS)}")  # fmt: skip
    print(
        f"no SUBAGENT_LLM or OPENAI_BASE_URL set: starting the local model {local_model!r} "
        "(scripts/local_llm.py; the first time it builds and downloads)",
        file=sys.stderr,
    )
    local.setup([local_model])
    with local.running(local_model) as server:
        yield OpenAIChat(
            model=local.MODEL_ALIAS,
            base_url=server.base_url,
            timeout=180,
            text_tool_calls=True,
            _environ={},
        )


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
def _tracing(enabled: bool) -> Iterator[tuple[Any, Callable[[], None]]]:
    """``(tracer provider or None, print the span tree)`` for ``--trace``."""
    if not enabled:
        yield None, lambda: None
        return
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from subagent import tracing
    except ImportError:
        raise UsageError(
            "--trace: needs the OpenTelemetry SDK, which comes with the otlp "
            "extra: pip install 'subagent-runtime[otlp]'"
        ) from None
    if any(os.environ.get(name, "").strip() for name in _OTLP_VARIABLES):
        handle = tracing.configure(
            service_name=os.environ.get("OTEL_SERVICE_NAME") or "subagent-cli",
            console=False,
            set_global=False,
        )
        try:
            yield (
                handle.provider,
                lambda: print(f"spans exported to {handle.endpoint}", file=sys.stderr),
            )
        finally:
            handle.shutdown()
        return
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, lambda: print(span_tree(exporter.get_finished_spans()), file=sys.stderr)
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
    if step.ok:
        rows.append(f"output: {step.output!r}")
    return "\n".join(rows)
