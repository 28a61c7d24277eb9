"""The progress bar of a batch: tqdm on standard error, only when shown."""

from __future__ import annotations

import sys
from typing import Any

from subagent.records import Step

__all__ = ["Progress"]


class Progress:
    """Counts a batch's finished runs on a tqdm bar (``done`` / ``failed`` as its postfix).

    Nothing is imported or drawn unless ``show``.
    """

    __slots__ = ("_bar", "_done", "_failed")

    def __init__(self, name: str, total: int | None, show: bool):
        self._done = 0
        self._failed = 0
        self._bar: Any = None
        if show:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=name, unit="run", file=sys.stderr,
                             dynamic_ncols=True)  # fmt: skip

    def record(self, step: Step[Any]) -> None:
        """Count one finished run."""
        if step.failure is None and step.state is None:
            self._done += 1
        elif step.failure is not None:
            self._failed += 1
        if self._bar is not None:
            self._bar.set_postfix(done=self._done, failed=self._failed, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        """Leave the bar as it ends."""
        if self._bar is not None:
            self._bar.close()
