"""The report's plot: success rate against cost per case, one point per variant.

matplotlib is an optional extra (``evals``): it is imported here, when a plot is asked for,
and never otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subagent.evals._report import Report

__all__ = ["plot_report"]

_UNITS = {"cost": "cost per case", "tokens": "tokens per case", "calls": "LLM calls per case"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "Report.plot needs matplotlib: pip install 'subagent-runtime[evals]'"
        ) from None
    matplotlib.use("Agg")  # files only: never a window
    import matplotlib.pyplot as plt

    return plt


def plot_report(report: Report, path: Path) -> Path:
    """Draw ``report``'s variants, success (with its 95% interval) against cost, to ``path``."""
    plt = _pyplot()
    measure = report.measure
    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    for result in report.variants:
        if measure == "cost":
            x = result.cost_per_case or 0.0
        elif measure == "tokens":
            x = (result.prompt_tokens + result.completion_tokens) / max(result.runs, 1)
        else:
            x = result.calls_per_case
        low, high = result.success_interval
        rate = result.success_rate
        axes.errorbar([x], [100 * rate], yerr=[[100 * (rate - low)], [100 * (high - rate)]],
                      fmt="o", capsize=3)  # fmt: skip
        axes.annotate(result.variant, (x, 100 * rate), textcoords="offset points",
                      xytext=(6, 4), fontsize=8)  # fmt: skip
    axes.set(xlabel=_UNITS[measure], ylabel="correct, % (95% CI)", ylim=(0, 100),
             title=f"{report.dataset}: success against cost")  # fmt: skip
    axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None} if path.suffix == ".png" else None)
    plt.close(figure)
    return path
