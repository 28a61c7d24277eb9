"""The flags the commands share, and the run options they give, checked before any run.

``run`` and ``batch`` take every flag; ``resume`` all but the budgets, which a resumed run
takes from its state.
"""

from __future__ import annotations

import argparse
from typing import Any

from subagent import local_model
from subagent._agent import SubAgent
from subagent._errors import ConfigurationError, TemplateError
from subagent.cli._status import UsageError
from subagent.llm import LLMRequest, LLMResponse

__all__ = ["add_agent_flags", "add_budget_flags", "check_prompt", "run_options"]

_FLAGS = {"max_turns": "--max-turns", "return_retries": "--return-retries",
          "timeout": "--timeout", "mission_timeout": "--mission-timeout"}  # fmt: skip


def add_agent_flags(parser: argparse.ArgumentParser) -> None:
    """``MODULE:AGENT`` and the flags of how it runs: protocol, model, settings, timeouts."""
    parser.add_argument(
        "agent", metavar="MODULE:AGENT", help="a SubAgent: module.path:name or path/to/file.py:name"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="S",
        help="seconds for one LLM call (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--mission-timeout", type=float, default=None, metavar="S",
        help="seconds for a whole run (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=float, default=None, metavar="T",
        help="the model setting, over the agent's settings",
    )  # fmt: skip
    parser.add_argument(
        "--max-tokens", type=int, default=None, metavar="N",
        help="the model setting, over the agent's settings",
    )  # fmt: skip
    parser.add_argument(
        "--protocol", choices=("native", "react"), default=None,
        help="how tools travel (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--llm",
        default=None,
        metavar="SPEC",
        help="the model, in SUBAGENT_LLM's form ('openai:MODEL', 'openai:MODEL@URL'); "
        "wins over the agent's own llm= and the environment",
    )
    parser.add_argument(
        "--local-model",
        default=None,
        choices=tuple(local_model.MODELS),
        help="with no model configured, build (the first time: minutes) and start this "
        "local model (python -m subagent.local_model)",
    )


def add_budget_flags(parser: argparse.ArgumentParser) -> None:
    """``--max-turns`` and ``--return-retries``: a new run's budgets."""
    parser.add_argument(
        "--max-turns", type=int, default=None, metavar="N",
        help="the work budget (default: the agent's)",
    )  # fmt: skip
    parser.add_argument(
        "--return-retries", type=int, default=None, metavar="N",
        help="the correction budget (default: the agent's)",
    )  # fmt: skip


def run_options(agent: SubAgent[Any], args: argparse.Namespace) -> dict[str, Any]:
    """The run options the flags give, checked as ``run()`` would check them."""
    options: dict[str, Any] = {
        name: getattr(args, name) for name in _FLAGS if getattr(args, name, None) is not None
    }
    settings = {name: getattr(args, name) for name in ("temperature", "max_tokens")
                if getattr(args, name) is not None}  # fmt: skip
    if settings:
        options["settings"] = settings
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens: must be at least 1, got {args.max_tokens}")
    try:
        agent.check_options(**options, llm=_ModelChosenLater())
    except ConfigurationError as exc:
        raise UsageError(f"{_FLAGS.get(exc.field, exc.field)}: {exc.message}") from None
    return options


def check_prompt(agent: SubAgent[Any], context: dict[str, Any], source: str) -> None:
    """Render the agent's prompt with ``context`` before any model is called.

    Raises:
        UsageError: A variable the prompt needs is missing (or the prompt is empty).
    """
    try:
        agent.check_options(context, llm=_ModelChosenLater())
    except (ConfigurationError, TemplateError) as exc:
        raise UsageError(f"{source}: {exc}") from None


class _ModelChosenLater:
    """Stands for the model while the options are checked, before one is chosen."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError("the model is chosen after the arguments are checked")
