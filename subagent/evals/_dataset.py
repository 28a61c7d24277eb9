"""A dataset: cases and the judges of their runs; read from and written to files.

Files: JSON Lines (``.jsonl``, always): one case per line, and an optional first line
``{"dataset": {"name": ..., "judges": [...]}}``; YAML (``.yaml`` / ``.yml``, with PyYAML,
the ``evals`` extra): a mapping with ``name``, ``judges`` and ``cases``. A file names only
the built-in judges (``equals_expected``, ``fields_match``); judges written in code are
given in code (``Dataset.from_file(path, judges=[...])``): a data file never names code to
import.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic

import anyio
from typing_extensions import TypeVar, Unpack

from subagent._agent import RunArguments, SubAgent
from subagent._errors import ConfigurationError
from subagent._limits import Price, UsageLimits
from subagent.evals._cases import Case, case_from_data, case_to_data, check_cases
from subagent.evals._judges import Judge, as_judge
from subagent.evals._records import MAX_LINE_BYTES
from subagent.evals._report import Report
from subagent.evals._runner import ImportedRun, count_pending, import_runs, run_evaluation
from subagent.evals._systems import System
from subagent.evals._variants import Variants

__all__ = ["Dataset"]

OutputT = TypeVar("OutputT", default=Any)
_YAML_SUFFIXES = (".yaml", ".yml")


def _yaml() -> Any:
    try:
        return importlib.import_module("yaml")
    except ImportError:
        raise ImportError(
            "YAML datasets need PyYAML: pip install 'subagent-runtime[evals]' "
            "(JSON Lines, .jsonl, need nothing)"
        ) from None


class Dataset(Generic[OutputT]):
    """Cases to run an agent on, and the judges of their runs.

    Args:
        cases: The cases (names unique).
        judges: Judges of every successful run: :class:`Judge` objects, functions of a
            :class:`JudgeContext` (sync or async), agents (LLM judges), or the names of
            built-in judges (``"equals_expected"``). With none, a run is correct when it
            is valid.
        name: What reports and traces call the dataset.

    Raises:
        ConfigurationError: Two cases share a name, two judges share one, or a judge is
            not one.
    """

    def __init__(
        self,
        cases: Iterable[Case[OutputT]],
        judges: Sequence[Judge | object] = (),
        *,
        name: str = "dataset",
    ):
        if isinstance(cases, Case) or not isinstance(cases, Iterable):
            raise ConfigurationError("cases", f"must be a list of Case, got {cases!r:.80}")
        self.cases: tuple[Case[OutputT], ...] = tuple(cases)
        check_cases(self.cases)
        if isinstance(judges, str | Judge) or not isinstance(judges, Sequence):
            judges = [judges]
        self.judges: tuple[Judge, ...] = tuple(as_judge(judge) for judge in judges)
        names = [judge.name for judge in self.judges]
        for judge_name in names:
            if names.count(judge_name) > 1:
                raise ConfigurationError(
                    "judges", f"two judges are named {judge_name!r}: give one another name"
                )
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("name", f"a dataset needs a name, got {name!r}")
        self.name = name

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[Case[OutputT]]:
        return iter(self.cases)

    def __repr__(self) -> str:
        return f"Dataset(name={self.name!r}, cases={len(self.cases)}, judges={list(self.judges)})"

    # --- files ---

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        judges: Sequence[Judge | object] = (),
        name: str | None = None,
    ) -> Dataset[Any]:
        """Read a dataset from a ``.jsonl`` or ``.yaml`` file.

        Args:
            path: The file.
            judges: Judges besides those the file names (judges written in code).
            name: The dataset's name (default: the file's own, else the file's stem).

        Raises:
            ConfigurationError: The file cannot be read or holds something that is not a
                case (naming the file, the line or case, and the field).
            ImportError: A YAML file without PyYAML installed.
        """
        path = Path(path)
        if path.suffix in _YAML_SUFFIXES:
            header, cases = _read_yaml(path)
        elif path.suffix == ".jsonl":
            header, cases = _read_jsonl(path)
        else:
            raise ConfigurationError(
                "path", f"{str(path)!r}: a dataset file is .jsonl or .yaml, not {path.suffix!r}"
            )
        named = header.get("judges") or []
        if not isinstance(named, list):
            raise ConfigurationError("judges", f"{path}: must be a list of built-in judges")
        own = header.get("name")
        own_name = own if isinstance(own, str) and own.strip() else None
        return cls(cases, [*named, *judges], name=name or own_name or path.stem)

    def to_file(self, path: str | Path) -> Path:
        """Write the dataset to a ``.jsonl`` or ``.yaml`` file.

        The built-in judges go with it; judges written in code are left out.

        Raises:
            ConfigurationError: The suffix is neither, or a case holds a value with no
                JSON form.
            ImportError: A YAML file without PyYAML installed.
        """
        path = Path(path)
        judges = [spec for judge in self.judges if (spec := judge.spec()) is not None]
        cases = [case_to_data(case) for case in self.cases]
        if path.suffix in _YAML_SUFFIXES:
            document = {"name": self.name, "judges": judges, "cases": cases}
            text = _yaml().safe_dump(document, sort_keys=False, allow_unicode=True)
            path.write_text(text, encoding="utf-8")
        elif path.suffix == ".jsonl":
            header = {"dataset": {"name": self.name, "judges": judges}}
            lines = [json.dumps(item, ensure_ascii=False) for item in [header, *cases]]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        else:
            raise ConfigurationError(
                "path", f"{str(path)!r}: a dataset file is .jsonl or .yaml, not {path.suffix!r}"
            )
        return path

    # --- evaluating ---

    async def evaluate(
        self,
        agent: SubAgent[OutputT]
        | Mapping[str, SubAgent[Any]]
        | Callable[[Case[OutputT]], SubAgent[Any]]
        | System,
        variants: Variants = None,
        *,
        out: str | Path | None = None,
        repeat: int = 1,
        concurrency: int = 8,
        progress: bool | None = None,
        batch_limits: UsageLimits | None = None,
        prices: Price | Mapping[str, Price] | None = None,
        rerun_failed: bool = False,
        **options: Unpack[RunArguments],
    ) -> Report:
        """Run ``agent`` on every case under every variant, judge the runs, report.

        Args:
            agent: What runs the cases: one agent; agents by name (``{"person":
                person_agent, ...}``), each case naming its own (``Case.agent``); a
                function of a case making the agent that runs it (tools or validators made
                from the case's data), called once per run; or a :class:`System`, a
                function that is not a subagent agent (a raw model call, another
                framework) returning a :class:`SystemRun`. Variants apply to each agent.
            variants: The settings compared: ``{"name": {run options}}``, a list of
                :class:`Variant` (:func:`grid` spans combinations), or ``None`` for the
                agent as it is. A variant's options are ``run()``'s keyword arguments
                (``max_turns``, ``return_retries``, ``llm``, ``settings``...) or fields of
                the agent (``prompt``, ``prompts``, ``instructions``...).
            out: A JSON Lines file of records, one per run, appended as runs finish. Runs
                it already records (same case, variant and repetition, unchanged) are not
                made again: a killed evaluation resumes where it stopped.
            repeat: Runs of each case under each variant (more than 1 for a model that
                answers differently from one call to the next).
            concurrency: Runs in flight at once.
            progress: Show a progress bar on standard error (default: when it is a
                terminal).
            batch_limits: What the whole evaluation may spend (tokens, tool calls, cost):
                once reached, the runs still to make are not made (nor recorded: see
                ``Report.pending``).
            prices: What tokens cost (a :class:`~subagent.Price`, or a mapping of model
                names to prices), for the report's cost; default: ``batch_limits``'s.
            rerun_failed: Make again the recorded runs that never became a result of their
                variant: they raised (a bug since fixed) or their model could not be
                reached (``Outcome.crashed``). Their new records take the old ones' place.
            **options: Run options of every run (``llm=``, ``tracer_provider=``...), under
                each variant's own.

        Returns:
            The report of every run recorded (with ``out``: every run in the file).

        Raises:
            ConfigurationError: A variant or option is invalid, or a case names an agent
                the evaluation was not given (before any run).
        """
        return await run_evaluation(
            dataset=self.name,
            cases=self.cases,
            judges=self.judges,
            agent=agent,
            variants=variants,
            out=out,
            repeat=repeat,
            concurrency=concurrency,
            progress=progress,
            batch_limits=batch_limits,
            prices=prices,
            options=options,
            rerun_failed=rerun_failed,
        )

    def evaluate_sync(
        self,
        agent: SubAgent[OutputT]
        | Mapping[str, SubAgent[Any]]
        | Callable[[Case[OutputT]], SubAgent[Any]]
        | System,
        variants: Variants = None,
        *,
        backend: str = "asyncio",
        **arguments: Any,
    ) -> Report:
        """:meth:`evaluate` from synchronous code (starts and stops an event loop)."""
        call = functools.partial(self.evaluate, agent, variants, **arguments)
        return anyio.run(call, backend=backend)

    def pending(
        self,
        agent: SubAgent[OutputT]
        | Mapping[str, SubAgent[Any]]
        | Callable[[Case[OutputT]], SubAgent[Any]]
        | System,
        variants: Variants = None,
        *,
        out: str | Path,
        repeat: int = 1,
        **options: Any,
    ) -> int:
        """How many runs ``evaluate`` (with the same arguments) has still to make.

        Nothing runs: the variants are planned and checked, and the runs ``out`` records
        are left out. What to know before starting what the runs need (a model server).

        Raises:
            ConfigurationError: As :meth:`evaluate` (an invalid variant or option).
        """
        return count_pending(cases=self.cases, agent=agent, variants=variants, out=out,
                             repeat=repeat, options=options)  # fmt: skip

    async def import_runs(
        self,
        agent: SubAgent[OutputT]
        | Mapping[str, SubAgent[Any]]
        | Callable[[Case[OutputT]], SubAgent[Any]]
        | System,
        variants: Variants,
        runs: Iterable[ImportedRun],
        *,
        out: str | Path,
        prices: Price | Mapping[str, Price] | None = None,
        **options: Any,
    ) -> int:
        """Record runs made elsewhere (an older harness, a log) as ``evaluate`` would have.

        Each run is planned as ``evaluate(agent, variants, **options)`` plans it (the same
        variant digest), judged by the dataset's judges, and appended to ``out``: the
        evaluation then counts it, and does not make it again. Runs ``out`` already holds
        are skipped.

        Args:
            agent: As for :meth:`evaluate`.
            variants: As for :meth:`evaluate`.
            runs: ``(case name, variant name, result)`` or ``(case name, variant name,
                result, repetition)``; a result is a :class:`~subagent.Step` or a
                :class:`SystemRun` (a run summarised without its Step).
            out: The records file.
            prices: As for :meth:`evaluate`.
            **options: As for :meth:`evaluate`: they make the variants' digests.

        Returns:
            How many runs were recorded.

        Raises:
            ConfigurationError: A run names a case or a variant the evaluation does not
                have, or is neither a Step nor a SystemRun (the runs before it are kept).
        """
        return await import_runs(
            dataset=self.name,
            cases=self.cases,
            judges=self.judges,
            agent=agent,
            variants=variants,
            runs=runs,
            out=out,
            prices=prices,
            options=options,
        )


def _read_jsonl(path: Path) -> tuple[dict[str, Any], list[Case[Any]]]:
    header: dict[str, Any] = {}
    cases: list[Case[Any]] = []
    try:
        file = path.open("rb")
    except OSError as exc:
        raise ConfigurationError("path", f"cannot read {str(path)!r}: {exc.strerror}") from None
    with file:
        number = 0
        while raw := file.readline(MAX_LINE_BYTES + 1):
            number += 1
            where = f"{path}:{number}"
            if len(raw) > MAX_LINE_BYTES:
                raise ConfigurationError("cases", f"{where}: longer than {MAX_LINE_BYTES} bytes")
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise ConfigurationError("cases", f"{where}: not JSON: {exc}") from None
            except RecursionError:
                raise ConfigurationError("cases", f"{where}: nested too deeply") from None
            if number == 1 and isinstance(data, dict) and set(data) == {"dataset"}:
                if not isinstance(data["dataset"], dict):
                    raise ConfigurationError("dataset", f"{where}: must be a JSON object")
                header = data["dataset"]
                continue
            cases.append(case_from_data(data, where))
    return header, cases


def _loader_without_aliases(yaml: Any) -> Any:
    """PyYAML's safe loader, refusing aliases (``*name``).

    An alias repeats a node by reference: a few hundred bytes of aliases to aliases expand
    to billions of strings when the cases are digested or rendered (the "billion laughs").
    A dataset has no use for them, so a file that uses one is refused where it does.
    """

    class NoAliases(yaml.SafeLoader):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, "an alias (*name): a dataset file may not use aliases", mark
                )
            return super().compose_node(parent, index)

    return NoAliases


def _read_yaml(path: Path) -> tuple[dict[str, Any], list[Case[Any]]]:
    yaml = _yaml()
    try:
        size = path.stat().st_size
        if size > MAX_LINE_BYTES:
            raise ConfigurationError("path", f"{path}: larger than {MAX_LINE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError("path", f"cannot read {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError("path", f"{path}: not UTF-8 ({exc.reason})") from None
    try:
        document = yaml.load(text, Loader=_loader_without_aliases(yaml))
    except yaml.YAMLError as exc:
        raise ConfigurationError("cases", f"{path}: not YAML: {exc}") from None
    except RecursionError:
        raise ConfigurationError("cases", f"{path}: nested too deeply") from None
    if isinstance(document, list):
        document = {"cases": document}
    if not isinstance(document, dict) or not isinstance(document.get("cases"), list):
        raise ConfigurationError("cases", f"{path}: expected a mapping with a list of 'cases'")
    cases = [
        case_from_data(item, f"{path}: case {index + 1}")
        for index, item in enumerate(document["cases"])
    ]
    header = {key: value for key, value in document.items() if key != "cases"}
    return header, cases
