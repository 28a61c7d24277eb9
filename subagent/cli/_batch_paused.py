"""A batch's paused lines: listed at every run, resumed with ``--decisions``.

A paused run's line is not final: :func:`report_paused` lists it with the calls it waits
on; ``--decisions FILE`` (``{"LINE": {"CALL_ID": decision}}``) decides them, checked before
anything runs (:func:`decided`), and :func:`resume_all` resumes the decided lines.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import anyio

from subagent._agent import SubAgent
from subagent.cli._batch_files import Input, listed
from subagent.cli._decisions import Given, decision_from_json, decisions_for, read_decisions
from subagent.cli._resume import check_resumable
from subagent.cli._show import call_line
from subagent.cli._status import UsageError
from subagent.llm import LLM
from subagent.records import Decision, FailReason, Failure, RunState, Step
from subagent.records._runs import build_step

__all__ = ["MAX_LISTED_PAUSED", "Resume", "decided", "report_paused", "resume_all"]

MAX_LISTED_PAUSED = 10
"""Paused lines whose waiting calls :func:`report_paused` lists, at most."""
_BUDGETS = ("max_turns", "return_retries")  # a resumed run takes them from its state


@dataclass(frozen=True, slots=True)
class Resume:
    """A paused result to resume: its state, and the decisions about its waiting calls."""

    state: RunState
    decisions: dict[str, Decision]


def decided(
    agent: SubAgent[Any],
    args: argparse.Namespace,
    inputs: list[Input],
    done: dict[int, Step[Any]],
) -> dict[int, Resume]:
    """The paused results ``--decisions`` decides, checked before anything runs, by index.

    Raises:
        UsageError: The file is not ``{"LINE": {"ID": decision}}``, names a line the input
            lacks, or a paused line's decisions do not decide exactly its waiting calls;
            or the agent is not the one that paused a line.
    """
    if args.decisions is None:
        return {}
    source = f"--decisions {args.decisions}"
    by_line = {item.line: index for index, item in enumerate(inputs)}
    resumes: dict[int, Resume] = {}
    for key, calls in read_decisions(args.decisions).items():
        line = int(key) if key.isdigit() else None
        if line is None or line not in by_line:
            raise UsageError(f"{source}: {key!r} is not a line of {args.input} that holds an "
                             'input (expected {"LINE": {"CALL_ID": decision}})')  # fmt: skip
        where = f"line {line} of {args.input}"
        if not isinstance(calls, dict):
            raise UsageError(f"{source}: {where}: expected {{\"CALL_ID\": decision}}, got "
                             f"{type(calls).__name__}")  # fmt: skip
        step = done.get(by_line[line])
        if step is None or step.state is None:
            now = "has no result yet" if step is None else f"is {_outcome(step)}, not paused"
            print(f"{source}: {where} {now}: its decisions are not used", file=sys.stderr)
            continue
        check_resumable(agent, step.state, where)
        given = {
            call_id: Given(decision_from_json(value, f"{source}: {where}: {call_id!r}"), source)
            for call_id, value in calls.items()
        }
        resumes[by_line[line]] = Resume(step.state, decisions_for(step.state, given, where))
    return resumes


def _outcome(step: Step[Any]) -> str:
    return "done" if step.failure is None else f"failed({step.failure.reason.value})"


def report_paused(
    inputs: list[Input], done: dict[int, Step[Any]], args: argparse.Namespace, out: TextIO
) -> None:
    """Each paused line and the calls it waits on: never final, never silently kept."""
    paused = [index for index in sorted(done) if done[index].state is not None]
    if not paused:
        return
    lines = listed([inputs[index].line for index in paused])
    print(
        f"{len(paused)} run(s) paused awaiting approval ({'line' if len(paused) == 1 else 'lines'} "
        f"{lines} of {args.input}): "
        f'decide their calls in a file, {{"LINE": {{"CALL_ID": {{"action": "approve"}}}}}}, '
        "and run the same command with --decisions FILE to resume them:",
        file=out,
    )
    for index in paused[:MAX_LISTED_PAUSED]:
        state = done[index].state
        for call in state.pending.waiting if state is not None and state.pending else []:
            print(f"  line {inputs[index].line}: {call_line(call)}", file=out)
    if len(paused) > MAX_LISTED_PAUSED:
        print(f"  and {len(paused) - MAX_LISTED_PAUSED} more: each line's waiting calls are in "
              f"{args.output} (step.state.pending)", file=out)  # fmt: skip


async def resume_all(
    agent: SubAgent[Any],
    resumes: dict[int, Resume],
    llm: LLM,
    options: dict[str, Any],
    concurrency: int,
    write: Callable[[int, Step[Any]], None],
) -> None:
    """Resume each decided run, at most ``concurrency`` at once; ``write`` each Step.

    A run that raises is recorded as ``failed(error)``, as ``stream_many`` records it, and
    the others go on.
    """
    resume_options = {name: value for name, value in options.items() if name not in _BUDGETS}
    planned = iter(resumes.items())

    async def worker() -> None:
        for index, resume in planned:  # shared by the workers: each takes the next
            try:
                step = await agent.resume(resume.state, resume.decisions, llm=llm,
                                          **resume_options)  # fmt: skip
            except Exception as exc:  # isolated: recorded, the batch goes on
                step = _errored(resume.state, exc)
            write(index, step)

    async with anyio.create_task_group() as group:
        for _ in range(min(concurrency, len(resumes))):
            group.start_soon(worker)


def _errored(state: RunState, exc: Exception) -> Step[Any]:
    failure = Failure(reason=FailReason.ERROR, message=f"{type(exc).__name__}: {exc}")
    turns = list(getattr(exc, "turns", ()) or state.turns)
    return build_step(agent=state.agent, output=None, failure=failure, turns=turns,
                      max_turns=state.max_turns, return_retries=state.return_retries,
                      duration_s=0.0)  # fmt: skip
