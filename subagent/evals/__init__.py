"""Evaluations: what a budget, a correction setting or a model buys on your own cases.

``from subagent.evals import Case, Dataset``: a dataset of cases and judges runs an agent
under several variants (named mappings of run options), records every run as one JSON
line (resumable), and reports per variant success with its 95% interval, correction
salvage, repeated corrections, calls, tokens, cost and wall time; compares an evaluation
with a baseline by paired tests; and recommends the cheapest variant within a margin of
the best. See ``docs/evals.md``.

What lives here:

- ``_cases``: :class:`Case`; ``_dataset``: :class:`Dataset` (files, ``evaluate``).
- ``_judges``: :class:`Verdict`, :class:`Judge` and the built-in judges.
- ``_variants``: :class:`Variant`, :func:`grid`, and each variant made ready to run for
  one agent, agents by name, a function making each case's agent, or a system.
- ``_systems``: :class:`System` (a function that is not a subagent agent, evaluated
  beside them) and what its run comes to, :class:`SystemRun`.
- ``_runner``: the evaluation's runs, through the batch room's ``stream_many``; runs made
  elsewhere imported into its records.
- ``_records``: the records file (one JSON line per run), read and appended.
- ``_outcomes``: what one record counts for; ``_report``: :class:`Report`;
  ``_compare``: comparisons with a baseline and the recommendation; ``_plot``: the plot
  (matplotlib, the ``evals`` extra, imported only when asked for).
- ``_tracing``: each case run as a trace, its verdicts as ``gen_ai.evaluation.result``
  events; ``_spans``: a case run's spans captured for the judges that read them.
- ``_html``: the report as one self-contained HTML page.
- ``_cli``: ``subagent eval run / report / compare``.

What it may import: batches and everything below them. Nothing in the library imports
this room but the command line.
"""

from types import FunctionType

from subagent.evals._cases import Case
from subagent.evals._compare import Change, Comparison, Recommendation
from subagent.evals._dataset import Dataset
from subagent.evals._judges import (
    AgentJudge,
    AgentVerdict,
    Contains,
    EqualsExpected,
    FieldsMatch,
    FunctionJudge,
    HasMatchingSpan,
    IsInstance,
    Judge,
    JudgeContext,
    LLMJudge,
    MaxDuration,
    Verdict,
    VerdictRecord,
    judge,
)
from subagent.evals._outcomes import Outcome
from subagent.evals._records import read_records
from subagent.evals._report import CaseResult, Report, VariantResult
from subagent.evals._spans import CapturedSpan
from subagent.evals._systems import System, SystemReply, SystemRun
from subagent.evals._variants import Variant, grid

__all__ = [
    "AgentJudge",
    "AgentVerdict",
    "CapturedSpan",
    "Case",
    "CaseResult",
    "Change",
    "Comparison",
    "Contains",
    "Dataset",
    "EqualsExpected",
    "FieldsMatch",
    "FunctionJudge",
    "HasMatchingSpan",
    "IsInstance",
    "Judge",
    "JudgeContext",
    "LLMJudge",
    "MaxDuration",
    "Outcome",
    "Recommendation",
    "Report",
    "System",
    "SystemReply",
    "SystemRun",
    "Variant",
    "VariantResult",
    "Verdict",
    "VerdictRecord",
    "grid",
    "judge",
    "read_records",
]


def _present_as_public() -> None:
    # As the top-level namespace does: the objects live in private modules and show, in
    # docs, reprs and pickles, as subagent.evals.X.
    namespace = globals()
    for name in __all__:
        obj = namespace[name]
        if isinstance(obj, type | FunctionType) and obj.__module__.startswith(__name__ + "."):
            obj.__module__ = __name__


_present_as_public()
