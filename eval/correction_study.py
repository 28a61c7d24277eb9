"""The correction study: what a correction budget buys, with corrections that differ.

    python eval/correction_study.py --model qwen1.5b --benchmark bfcl [--agent contract]
        [--categories simple_python,...] [--cases 20] [--offset 0]
        [--settings same,quote,structured,sampled] [--escalate-url URL]
        [--base-url URL] [--results DIR]
    python eval/correction_study.py --model qwen --benchmark tasks

Each case's first attempt is made **once**, with ``return_retries=2``: the run is stopped
(its state kept) the moment it enters its first correction turn. Every correction setting
then resumes that same state (``SubAgent.resume``), so the settings are compared on the
very same failed first attempt (a paired design, and no first attempt paid twice):

- ``same``: the correction turns as the work turns (the default when the study was made;
  ``Correction()`` since the defaults changed);
- ``quote``: the failed reply quoted inside the feedback (``context_policy="quote"``);
- ``structured``: the output's JSON schema sent as the provider's structured output
  (``Correction(output="json_schema")``): think freely first, correct under the grammar;
- ``tool``: a forced final-answer tool (``Correction(output="tool")``);
- ``sampled``: the corrections at temperature 0.7 (``Correction(settings=...)``);
- ``escalated``: the corrections on another model (``--escalate-url``: the 1.5B corrects
  the 0.5B's attempt); ``escalated-structured``: there, under the output's schema.

Each setting's run is recorded three times over, as the budgets ``r0`` (the first attempt
alone), ``r1`` (stopped after its first correction) and ``r2`` (the whole run): ``r1`` is
read from the ``r2`` run (its first correction was told "attempt 1 of 2", not "1 of 1";
every first attempt was told that two corrections follow). A first attempt that needs no
correction (valid, or failed for another reason) is the same run under every setting.

Records go, one ``subagent.evals`` record per case and variant, to
``eval/results/corrections/<model>/<benchmark>-<agent>.jsonl`` (resumable: a case whose
records are all there is skipped); ``eval/bfcl_report.py`` and ``eval/eval_report.py`` read
them like any evaluation's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from subagent import Correction, OpenAIChat, RunArguments, RunState, Step, SubAgent  # noqa: E402
from subagent.evals import Case, Dataset, Variant  # noqa: E402
from subagent.records import FailReason, Failure  # noqa: E402
from subagent.records._runs import build_step  # noqa: E402

__all__ = [
    "BUDGETS",
    "SETTINGS",
    "FirstAttempt",
    "first_attempt",
    "on_model",
    "quoted",
    "setting_runs",
    "variants_of",
]

RESULTS = Path(__file__).resolve().parent / "results" / "corrections"
BUDGETS = (0, 1, 2)
SEED = 7
SAMPLED = {"temperature": 0.7, "seed": 11}

SETTINGS = ("same", "quote", "structured", "tool", "sampled", "escalated", "escalated-structured")
"""The correction settings the study knows (see the module's docstring)."""


AS_WORK_TURNS = Correction()
"""Every turn sent as the work turns: the study's first attempts and its ``same`` setting."""


def setting_options(name: str, escalate: Any = None) -> dict[str, Any]:
    """What setting ``name`` changes in a run (a variant's options, the resumed part's)."""
    # Correction(): as the work turns, which the library's default no longer is for a typed
    # output (the study's `same` is the default it had when the study was made).
    if name == "same":
        return {"correction": AS_WORK_TURNS}
    if name == "quote":
        return {"context_policy": "quote", "correction": AS_WORK_TURNS}
    if name == "structured":
        return {"correction": Correction(output="json_schema")}
    if name == "tool":
        return {"correction": Correction(output="tool")}
    if name == "sampled":
        return {"correction": Correction(settings=SAMPLED)}
    if name in ("escalated", "escalated-structured"):
        if escalate is None:
            raise ValueError(f"setting {name!r} needs the other model (--escalate-url)")
        output = "json_schema" if name == "escalated-structured" else None
        return {"correction": Correction(llm=escalate, output=output)}
    raise ValueError(f"no setting {name!r}; there are: {', '.join(SETTINGS)}")


class _Stopped(Exception):
    """Raised by the first attempt's ``on_state`` once the run enters its first correction."""


@dataclasses.dataclass
class FirstAttempt:
    """A case's first attempt: its Step when it needed no correction, else the state."""

    step: Step[Any] | None = None
    state: RunState | None = None


async def first_attempt(agent: SubAgent[Any], run: Mapping[str, Any]) -> FirstAttempt:
    """Run ``agent`` until it enters its first correction turn (``return_retries=2``)."""
    kept: list[RunState] = []

    def stop_at_the_first_correction(state: RunState) -> None:
        if state.phase == "retry":
            kept.append(state)
            raise _Stopped

    try:
        step = await agent.run(**{"correction": AS_WORK_TURNS, **run}, return_retries=2,
                               on_state=stop_at_the_first_correction)  # fmt: skip
    except _Stopped:
        return FirstAttempt(state=kept[0])
    return FirstAttempt(step=step)


def quoted(state: RunState) -> RunState:
    """``state`` as the ``quote`` context policy would have kept its failed attempt."""
    from subagent._conversation import quoted_attempt

    latest = state.latest_failure
    if state.context_policy == "quote" or len(latest) != 2:
        return state.model_copy(update={"context_policy": "quote"})
    reply, feedback = latest
    return state.model_copy(update={
        "context_policy": "quote", "latest_failure": [quoted_attempt(reply, feedback)],
    })  # fmt: skip


def _failed_first(state: RunState) -> Step[Any]:
    """The first attempt alone, as a run with no correction budget ends: exhausted."""
    last = state.turns[-1]
    message = (f"no valid answer within max_turns={state.max_turns} and return_retries=0; "
               f"last error: {last.error}")  # fmt: skip
    return build_step(agent=state.agent, output=None, turns=list(state.turns),
                      failure=Failure(reason=FailReason.BUDGET_EXHAUSTED, message=message),
                      max_turns=state.max_turns, return_retries=0,
                      duration_s=state.elapsed_s)  # fmt: skip


def _after_first_correction(step: Step[Any], first: int) -> Step[Any]:
    """The run ``step`` (``return_retries=2``) as ``return_retries=1`` would have ended it.

    ``first``: how many turns the first attempt took. A run that ended at its first
    correction (or before) ended the same; one that went on to a second correction would
    have ended after the first, its budget exhausted.
    """
    if len(step.turns) <= first + 1:
        return step.model_copy(update={"return_retries": 1})
    turns = list(step.turns[: first + 1])
    message = (f"no valid answer within max_turns={step.max_turns} and return_retries=1; "
               f"last error: {turns[-1].error}")  # fmt: skip
    return build_step(agent=step.agent, output=None, turns=turns,
                      failure=Failure(reason=FailReason.BUDGET_EXHAUSTED, message=message),
                      max_turns=step.max_turns, return_retries=1,
                      duration_s=sum(t.duration_s for t in turns))  # fmt: skip


def variants_of(settings: Iterable[str], escalate: Any = None) -> list[Variant]:
    """The study's variants: each setting at each budget (``same-r0`` ... ``escalated-r2``)."""
    return [
        Variant(f"{name}-r{budget}", {"return_retries": budget,
                                      **setting_options(name, escalate)})
        for name in settings
        for budget in BUDGETS
    ]  # fmt: skip


async def setting_runs(
    agent: SubAgent[Any],
    first: FirstAttempt,
    settings: Sequence[str],
    run: Mapping[str, Any],
    escalate: Any = None,
) -> AsyncIterator[tuple[str, Step[Any]]]:
    """(variant name, Step) for every setting and budget of one case."""
    if first.step is not None:  # no correction ran: the same run under every setting
        for name in settings:
            for budget in BUDGETS:
                yield f"{name}-r{budget}", first.step
        return
    state = first.state
    assert state is not None
    resume_options = {k: v for k, v in run.items() if k in ("llm", "settings", "timeout",
                                                           "retry_policy")}  # fmt: skip
    failed = _failed_first(state)
    for name in settings:
        changes = setting_options(name, escalate)
        saved = quoted(state) if changes.pop("context_policy", None) == "quote" else state
        step = await agent.resume(saved, **resume_options, **changes)
        yield f"{name}-r0", failed
        yield f"{name}-r1", _after_first_correction(step, len(state.turns))
        yield f"{name}-r2", step


# --- the command line ----------------------------------------------------------------------


Study = tuple[list[Dataset[Any]], Callable[[Case[Any]], SubAgent[Any]], dict[str, Any]]


def _bfcl(args: argparse.Namespace) -> Study:
    """BFCL's categories, and the agent each case gets (its output is the call)."""
    import bfcl_data
    from bfcl_systems import CALL_TIMEOUT, CALLS_PROMPT, ContractAgent, ToolsAgent
    from bfcl_systems import SETTINGS as BFCL_SETTINGS

    if args.agent == "contract":
        agent: Callable[[Case[Any]], SubAgent[Any]] = ContractAgent()
        budgets: dict[str, Any] = {"max_turns": 1}
    else:
        agent = ToolsAgent(system_template=CALLS_PROMPT)
        budgets = {"max_turns": 2, "protocol": "native"}
    datasets = [bfcl_data.dataset(category, args.cases, args.offset)
                for category in args.categories.split(",") if category]  # fmt: skip
    return datasets, agent, {**budgets, "settings": BFCL_SETTINGS, "timeout": CALL_TIMEOUT}


def _tasks(args: argparse.Namespace) -> Study:
    """``make eval``'s tasks of its budgets group, and their agents."""
    import configs
    from tasks import AGENTS, load_tasks

    tasks = load_tasks()
    (group,) = [group for group in configs.GROUPS if group.name == "budgets"]
    dataset = Dataset(group.cases(tasks.cases), tasks.judges, name=group.name)
    options = {k: v for k, v in configs.options().items() if k != "return_retries"}
    # The configuration's agent fields (protocol...) go on the agent; the rest are run options.
    fields = {k: options.pop(k) for k in list(options) if k not in RunArguments.__annotations__}
    agents = {name: dataclasses.replace(agent, **fields) for name, agent in AGENTS.items()}
    # A correction under a schema needs one: the tasks whose output is a parser (plan's
    # sections) are left out of the study.
    typed = [case for case in dataset.cases if _has_schema(agents[str(case.agent)])]
    dataset = Dataset(typed, dataset.judges, name=dataset.name)
    return [dataset], (lambda case: agents[str(case.agent)]), options


def _has_schema(agent: SubAgent[Any]) -> bool:
    """Whether the agent's output has a JSON schema (a model or a type, not a parser)."""
    output = agent.output
    return isinstance(output, type) or typing.get_origin(output) is not None


async def _study(args: argparse.Namespace, base_url: str) -> None:
    datasets, agent_of, options = _bfcl(args) if args.benchmark == "bfcl" else _tasks(args)
    settings = [s for s in args.settings.split(",") if s]
    if any(s.startswith("escalated") for s in settings) and not args.escalate_url:
        raise SystemExit("--settings escalated needs --escalate-url (the stronger model's server)")
    name = args.benchmark if args.benchmark == "tasks" else f"{args.benchmark}-{args.agent}"
    out = args.results / args.model / f"{name}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        llm = await stack.enter_async_context(_chat(base_url))
        escalate = None
        if args.escalate_url:
            escalate = await stack.enter_async_context(_chat(args.escalate_url, "escalated"))
        variants = variants_of(settings, escalate)
        run = {**options, "llm": llm}
        for dataset in datasets:
            done = _recorded(out)
            for case in dataset.cases:
                if all((case.name, v.name) in done for v in variants):
                    continue
                started = time.perf_counter()
                agent = agent_of(case)
                first = await first_attempt(agent, {**run, **_inputs(case)})
                runs = [(case.name, name, step) async for name, step in
                        setting_runs(agent, first, settings, run, escalate)]  # fmt: skip
                await dataset.import_runs(agent_of, variants, runs, out=out,
                                          **_planning(run))  # fmt: skip
                print(f"{case.name}: {'no correction' if first.state is None else 'corrected'} "
                      f"in {time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip


def _inputs(case: Case[Any]) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    if case.messages is not None:
        inputs["messages"] = case.messages
    if case.context is not None:
        inputs["context"] = case.context
    return inputs


def _planning(run: Mapping[str, Any]) -> dict[str, Any]:
    """The options a variant's digest is planned with (the run's, less where it is served)."""
    return dict(run)


def _recorded(out: Path) -> set[tuple[str, str]]:
    if not out.exists():
        return set()
    seen = set()
    for line in out.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            seen.add((record.get("case"), record.get("variant")))
    return seen


def _chat(base_url: str, model: str = "local") -> OpenAIChat:
    return OpenAIChat(model=model, base_url=base_url, timeout=300, text_tool_calls=True,
                      _environ={})  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    from bfcl_data import DEFAULT_CATEGORIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen")
    parser.add_argument("--benchmark", choices=("bfcl", "tasks"), default="bfcl")
    parser.add_argument("--agent", choices=("contract", "prompted"), default="contract")
    parser.add_argument("--categories", default=",".join(DEFAULT_CATEGORIES))
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--settings", default="same,quote,structured,sampled")
    parser.add_argument("--escalate-url", default=None)
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    on_model(_study, args)


def on_model(study: Callable[[argparse.Namespace, str], Awaitable[None]],
             args: argparse.Namespace) -> None:  # fmt: skip
    """Run ``study(args, base_url)`` on ``args.base_url``, else on ``args.model`` started here."""
    if getattr(args, "base_url", None):
        anyio.run(study, args, args.base_url)
        return
    import local_llm

    with local_llm.running(args.model) as server:
        anyio.run(study, args, server.base_url)


if __name__ == "__main__":
    main()
