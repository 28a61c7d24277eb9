"""The evaluation's configurations: ``subagent.evals`` variants, in groups by the tasks they run.

A configuration is a :class:`~subagent.evals.Variant`: a name and the options of its runs
(run options such as ``max_turns``, ``return_retries``, ``context_policy``, ``settings``,
and agent fields such as ``protocol`` and ``correct_cut_replies``). A run option the
library gains later (the correction settings) is one more key of a variant's mapping,
nothing else. Every configuration runs at temperature 0 with a fixed seed.

The configurations that run the same tasks form a :class:`Group`: one evaluation (one
records file per model), so its report compares like with like (its recommendation among
them included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from subagent.evals import Case, Variant

__all__ = [
    "CONFIGS",
    "GROUPS",
    "MAX_TOKENS",
    "SEED",
    "TIGHT_MAX_TOKENS",
    "Group",
    "config_named",
    "options",
]

SEED = 7
MAX_TOKENS = 160
"""Enough for every task's answer (the longest, a plan, takes about 80 tokens)."""
TIGHT_MAX_TOKENS = 24
"""The cut-reply comparison: a bare JSON answer fits, one with a fence or prose around it
usually does not."""
TIMEOUT = 180


def options(
    *,
    max_turns: int = 1,
    return_retries: int = 0,
    context_policy: str = "collapse",
    protocol: str = "native",
    max_tokens: int = MAX_TOKENS,
    correct_cut_replies: bool = True,
) -> dict[str, Any]:
    """A configuration's options: every run option and agent field it sets, spelled out."""
    return {
        "max_turns": max_turns,
        "return_retries": return_retries,
        "context_policy": context_policy,
        "settings": {"temperature": 0, "seed": SEED, "max_tokens": max_tokens},
        "timeout": TIMEOUT,
        "protocol": protocol,
        "correct_cut_replies": correct_cut_replies,
    }


@dataclass(frozen=True)
class Group:
    """Configurations that run the same tasks: one evaluation, one records file per model.

    Attributes:
        name: The group's name (its records are ``eval/results/<model>/<name>.jsonl``).
        tags: The tasks it runs: those with any of these tags (a category, or ``length``).
        variants: Its configurations.
    """

    name: str
    tags: tuple[str, ...]
    variants: tuple[Variant, ...]

    def selects(self, case: Case[Any]) -> bool:
        """Whether the group runs ``case``."""
        return not set(self.tags).isdisjoint(case.tags)

    def cases(self, cases: Sequence[Case[Any]]) -> list[Case[Any]]:
        """The cases of ``cases`` the group runs, in order."""
        return [case for case in cases if self.selects(case)]


GROUPS: tuple[Group, ...] = (
    Group(
        "budgets",
        ("extract", "arithmetic", "plan", "trap"),
        (
            *(Variant(f"retries-{n}", options(return_retries=n)) for n in range(4)),
            Variant("accumulate-3", options(return_retries=3, context_policy="accumulate")),
        ),
    ),
    # A lookup needs a tool turn and then an answer: two work turns. With three, the turn
    # after the tool result is a normal one rather than the must-return turn (with its
    # "final turn" warning).
    Group(
        "tools",
        ("lookup",),
        tuple(
            Variant(
                f"tools-{protocol}{'' if max_turns == 2 else f'-{max_turns}'}",
                options(max_turns=max_turns, return_retries=2, protocol=protocol),
            )
            for max_turns in (2, 3)
            for protocol in ("native", "react")
        ),
    ),
    Group(
        "tight",
        ("length",),
        (
            Variant("tight-corrected", options(return_retries=2, max_tokens=TIGHT_MAX_TOKENS)),
            Variant(
                "tight-parsed",
                options(return_retries=2, max_tokens=TIGHT_MAX_TOKENS, correct_cut_replies=False),
            ),
        ),
    ),
)

CONFIGS: tuple[Variant, ...] = tuple(variant for group in GROUPS for variant in group.variants)
"""Every configuration, in the report's order."""


def config_named(name: str) -> Variant:
    """The configuration called ``name``.

    Raises:
        KeyError: No configuration has that name (the message lists them).
    """
    for config in CONFIGS:
        if config.name == name:
            return config
    raise KeyError(f"no configuration {name!r}; there are: {', '.join(c.name for c in CONFIGS)}")
