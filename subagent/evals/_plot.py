"""The report's plot: success rate against cost per case, one point per variant.

matplotlib is an optional extra (``evals``): it is imported here, when a plot is asked for,
and never otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_points"]


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


def plot_points(
    title: str, xlabel: str, points: Sequence[tuple[str, float, float, float, float]], path: Path
) -> Path:
    """Draw one point per variant, success (with its 95% interval) against cost, to ``path``.

    ``points``: (variant, cost per case, success rate, interval low, interval high).
    """
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    for label, x, rate, low, high in points:
        axes.errorbar([x], [100 * rate], yerr=[[100 * (rate - low)], [100 * (high - rate)]],
                      fmt="o", capsize=3)  # fmt: skip
        axes.annotate(label, (x, 100 * rate), textcoords="offset points",
                      xytext=(6, 4), fontsize=8)  # fmt: skip
    axes.set(xlabel=xlabel, ylabel="correct, % (95% CI)", ylim=(0, 100),
             title=title)  # fmt: skip
    axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None} if path.suffix == ".png" else None)
    plt.close(figure)
    return path
