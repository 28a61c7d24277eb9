"""``subagent batch``: an agent run once per input line, each Step appended as it finishes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from subagent._agent import SubAgent
from subagent.batch import stream_many, summarize
from subagent.cli._agents import agent_of
from subagent.cli._batch_files import (
    Input,
    check_writable,
    listed,
    output_line,
    plan_batch,
    read_inputs,
    read_outputs,
)
from subagent.cli._batch_paused import Resume, decided, report_paused, resume_all
from subagent.cli._flags import add_agent_flags, add_budget_flags, check_prompt, run_options
from subagent.cli._model import chosen_model, opened
from subagent.cli._run import exit_status
from subagent.cli._status import EXIT_ERROR, EXIT_INTERRUPTED, UsageError
from subagent.llm import LLM
from subagent.records import FailReason, Step

__all__ = ["add_batch_command"]


def add_batch_command(commands: Any) -> None:
    """Add ``batch`` to the program's subcommands."""
    batch = commands.add_parser("batch", help="run an agent once per input line, resumably")
    add_agent_flags(batch)
    add_budget_flags(batch)
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
        "--decisions",
        default=None,
        metavar="FILE|-",
        help='resume the paused runs decided in this JSON file: {"LINE": {"ID": decision}}',
    )
    batch.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    batch.set_defaults(command=_batch_command, name="batch", parser=batch)


def _batch_command(args: argparse.Namespace) -> int:
    agent = agent_of(args)
    if args.concurrency < 1:
        raise UsageError(f"--concurrency: must be at least 1, got {args.concurrency}")
    options = run_options(agent, args)
    inputs = read_inputs(args.input)
    for item in inputs:  # a variable missing from any line: nothing runs
        check_prompt(agent, item.context, f"--input: line {item.line}")
    plan = plan_batch(inputs, read_outputs(args.output), rerun_failed=args.rerun_failed,
                      rerun_retryable=args.rerun_retryable)  # fmt: skip
    resumes = decided(agent, args, inputs, plan.done)
    for note in plan.notes(args.input, args.output):
        print(note, file=sys.stderr)
    done = dict(plan.done)
    if plan.pending or resumes:
        check_writable(args.output)
        if plan.pending:
            print(
                f"{len(plan.pending)} of {len(inputs)} inputs to run "
                f"({len(inputs) - len(plan.pending)} already in {args.output})",
                file=sys.stderr,
            )
        if resumes:
            print(f"{len(resumes)} paused run(s) to resume (--decisions)", file=sys.stderr)
        new: dict[int, Step[Any]] = {}
        try:
            with chosen_model(agent, args) as llm:
                anyio.run(_run_batch, agent, inputs, plan.pending, resumes, llm, options, args,
                          new)  # fmt: skip
        except KeyboardInterrupt:
            ran = len([index for index in new if index not in resumes])
            finished = len(inputs) - len(plan.pending) + ran
            print(
                f"subagent batch: interrupted: {finished} of {len(inputs)} inputs have "
                f"their result in {args.output} ({ran} from this run); run the same "
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
    report_paused(inputs, done, args, sys.stderr)
    errors = [index for index in sorted(done) if _raised(done[index])]
    if errors:
        first = done[errors[0]]
        message = " ".join((first.failure.message if first.failure is not None else "").split())
        lines = listed([inputs[index].line for index in errors])
        print(
            f"subagent batch: error in the agent or code it runs: {len(errors)} run(s) "
            f"raised (failed(error), lines {lines} of {args.input}); line "
            f"{inputs[errors[0]].line}: {message}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return exit_status(steps)


def _raised(step: Step[Any]) -> bool:
    return step.failure is not None and step.failure.reason is FailReason.ERROR


async def _run_batch(
    agent: SubAgent[Any],
    inputs: list[Input],
    pending: list[int],
    resumes: dict[int, Resume],
    llm: LLM,
    options: dict[str, Any],
    args: argparse.Namespace,
    finished: dict[int, Step[Any]],
) -> None:
    """The decided paused runs resumed, then the inputs to run, each line written at once."""
    async with opened(llm):
        with args.output.open("a", encoding="utf-8") as output:

            def write(index: int, step: Step[Any]) -> None:
                output.write(output_line(index, inputs[index].context, step) + "\n")
                output.flush()  # a killed batch loses only the runs in flight
                finished[index] = step

            if resumes:
                await resume_all(agent, resumes, llm, options, args.concurrency, write)
            if not pending:
                return
            batch = stream_many(
                agent,
                [inputs[index].context for index in pending],
                llm=llm,
                concurrency=args.concurrency,
                progress=args.progress,
                **options,
            )
            async with batch as items:
                async for item in items:
                    write(pending[item.index], item.step)
