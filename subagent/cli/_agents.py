"""The agent a command runs: ``MODULE:AGENT`` loaded, and ``--protocol`` applied."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from subagent._agent import SubAgent
from subagent._errors import ConfigurationError
from subagent._loading import ImportRaisedError, LoadError, load_object
from subagent.cli._status import AgentError, UsageError

__all__ = ["agent_of", "load_agent"]


def load_agent(reference: str) -> SubAgent[Any]:
    """The :class:`SubAgent` that ``module:name`` or ``path/to/file.py:name`` names.

    A dotted module is imported with the current directory on the path, as ``python -m``
    does; a file is imported with its own folder on the path, so it can import its
    neighbours.

    Raises:
        UsageError: The reference is malformed, the module is not found, or the name is
            missing or not a SubAgent.
        AgentError: The module raised while it was imported (a bug in it).
    """
    try:
        found: SubAgent[Any] = load_object(reference, "MODULE:AGENT", SubAgent)
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    except ImportRaisedError as exc:
        raise AgentError(str(exc)) from exc
    return found


def agent_of(args: argparse.Namespace) -> SubAgent[Any]:
    """The agent ``MODULE:AGENT`` names, with the protocol ``--protocol`` chose."""
    agent = load_agent(args.agent)
    if args.protocol is not None and args.protocol != agent.tool_policy.protocol:
        try:
            policy = dataclasses.replace(agent.tool_policy, protocol=args.protocol)
            agent = dataclasses.replace(agent, tool_policy=policy)
        except ConfigurationError as exc:
            raise UsageError(f"--protocol: {exc}") from None
    return agent
