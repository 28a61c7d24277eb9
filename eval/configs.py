"""The evaluation's configurations: which tasks run, with which budgets and options.

Every configuration runs at temperature 0 with a fixed seed, so a configuration's runs are
the same on every machine with the same model files and server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks import Task

__all__ = ["CONFIGS", "MAX_TOKENS", "SEED", "TIGHT_MAX_TOKENS", "Config", "config_named"]

SEED = 7
MAX_TOKENS = 160
"""Enough for every task's answer (the longest, a plan, takes about 80 tokens)."""
TIGHT_MAX_TOKENS = 24
"""The cut-reply comparison: a bare JSON answer fits, one with a fence or prose around it
usually does not."""

_WITHOUT_TOOLS = ("extract", "arithmetic", "plan", "trap")


@dataclass(frozen=True)
class Config:
    """One configuration of the evaluation.

    Attributes:
        name: A stable name (it keys the stored results).
        title: What the report calls it.
        categories: The task categories it runs.
        max_turns: The work budget.
        return_retries: The correction budget.
        context_policy: ``"collapse"`` (the default) or ``"accumulate"``.
        protocol: ``"native"`` tool calls or ``"react"`` text.
        max_tokens: The completion limit of every call.
        correct_cut_replies: The agent's option: a reply cut at ``max_tokens`` gets
            feedback without being parsed (``True``, the default) or is parsed like any
            reply (``False``).
        only_length_tasks: Run only the tasks marked for the cut-reply comparison.
    """

    name: str
    title: str
    categories: tuple[str, ...] = _WITHOUT_TOOLS
    max_turns: int = 1
    return_retries: int = 0
    context_policy: str = "collapse"
    protocol: str = "native"
    max_tokens: int = MAX_TOKENS
    correct_cut_replies: bool = True
    only_length_tasks: bool = False

    def selects(self, task: Task) -> bool:
        """Whether the configuration runs ``task``."""
        if self.only_length_tasks and not task.length:
            return False
        return task.category in self.categories

    def agent_changes(self) -> dict[str, Any]:
        """Definition-level changes to the task's agent."""
        return {"protocol": self.protocol, "correct_cut_replies": self.correct_cut_replies}

    def run_options(self) -> dict[str, Any]:
        """The options of ``SubAgent.run`` (besides the model)."""
        return {
            "max_turns": self.max_turns,
            "return_retries": self.return_retries,
            "context_policy": self.context_policy,
            "settings": {"temperature": 0, "seed": SEED, "max_tokens": self.max_tokens},
            "timeout": 180,
        }


CONFIGS: tuple[Config, ...] = (
    *(
        Config(name=f"retries-{n}", title=f"max_turns=1, return_retries={n}", return_retries=n)
        for n in range(4)
    ),
    Config(
        name="accumulate-3",
        title="return_retries=3, failed attempts accumulated",
        return_retries=3,
        context_policy="accumulate",
    ),
    # A lookup needs a tool turn and then an answer: two work turns. With three, the turn
    # after the tool result is a normal one rather than the must-return turn (with its
    # "final turn" warning).
    *(
        Config(
            name=f"tools-{protocol}{'' if max_turns == 2 else f'-{max_turns}'}",
            title=f"lookup, {title} (max_turns={max_turns}, return_retries=2)",
            categories=("lookup",),
            max_turns=max_turns,
            return_retries=2,
            protocol=protocol,
        )
        for max_turns in (2, 3)
        for protocol, title in (("native", "native tool calls"), ("react", "ReAct text"))
    ),
    Config(
        name="tight-corrected",
        title=f"max_tokens={TIGHT_MAX_TOKENS}, cut replies corrected (return_retries=2)",
        return_retries=2,
        max_tokens=TIGHT_MAX_TOKENS,
        only_length_tasks=True,
    ),
    Config(
        name="tight-parsed",
        title=f"max_tokens={TIGHT_MAX_TOKENS}, cut replies parsed (return_retries=2)",
        return_retries=2,
        max_tokens=TIGHT_MAX_TOKENS,
        correct_cut_replies=False,
        only_length_tasks=True,
    ),
)


def config_named(name: str) -> Config:
    """The configuration called ``name``.

    Raises:
        KeyError: No configuration has that name (the message lists them).
    """
    for config in CONFIGS:
        if config.name == name:
            return config
    raise KeyError(f"no configuration {name!r}; there are: {', '.join(c.name for c in CONFIGS)}")
