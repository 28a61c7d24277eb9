"""``subagent resume``: a paused run (or one saved between turns) goes on, with decisions."""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pydantic

from subagent._agent import SubAgent
from subagent._build import check_state
from subagent._claims import SQLiteClaims
from subagent._errors import ConfigurationError, InvalidStateError
from subagent._loading import described
from subagent.cli._agents import agent_of
from subagent.cli._decisions import add_decision_flags, decisions_for, flag_decisions
from subagent.cli._flags import add_agent_flags, run_options
from subagent.cli._model import chosen_model, opened
from subagent.cli._reading import json_object, read_limited
from subagent.cli._run import exit_status, printed
from subagent.cli._status import AgentError, UsageError
from subagent.cli._trace import traced
from subagent.llm import LLM
from subagent.records import Decision, RunState, Step

__all__ = ["add_resume_command", "check_resumable", "read_state", "signing_key"]


def add_resume_command(commands: Any) -> None:
    """Add ``resume`` to the program's subcommands."""
    resume = commands.add_parser(
        "resume", help="resume a paused run: approve, deny or edit each waiting call"
    )
    add_agent_flags(resume)
    resume.add_argument(
        "state",
        metavar="STATE",
        help="a file (- for stdin) holding what `subagent run --json` printed, or a RunState",
    )
    add_decision_flags(resume)
    resume.add_argument(
        "--key-file", default=None, metavar="FILE",
        help="STATE is signed (RunState.signed): the key is this file's bytes (one "
        "trailing newline dropped); the signature must match",
    )  # fmt: skip
    resume.add_argument(
        "--key-env", default=None, metavar="VAR",
        help="STATE is signed: the key is the environment variable VAR (never a flag value)",
    )  # fmt: skip
    resume.add_argument(
        "--claims", default=None, metavar="FILE",
        help="resume each pause once: its id is claimed in this SQLite file first (created "
        "when missing) and a pause claimed already is refused (exit 2)",
    )  # fmt: skip
    resume.add_argument("--json", action="store_true", help="print the Step as JSON instead")
    resume.add_argument(
        "--trace",
        nargs="?",
        const="console",
        choices=("console", "otlp"),
        default=None,
        help="as for run: the resumed part's span tree (console) or its export (otlp)",
    )
    resume.set_defaults(command=_resume_command, name="resume", parser=resume)


def _resume_command(args: argparse.Namespace) -> int:
    agent = agent_of(args)
    state = read_state(args.state, signing_key(args))
    check_resumable(agent, state, "STATE")
    decisions = decisions_for(state, flag_decisions(args), "STATE")
    options = run_options(agent, args)
    claims = _claims(args.claims)
    with traced(args.trace) as (provider, report):
        with chosen_model(agent, args) as llm:
            try:
                step = anyio.run(
                    _resume_once, agent, state, decisions, llm, options, provider, claims
                )
            except InvalidStateError as exc:  # the state, as resume() checks it
                raise UsageError(f"STATE: {exc}") from None
            except ConfigurationError as exc:  # the decisions, as resume() checks them
                raise UsageError(str(exc)) from None
            except Exception as exc:  # the agent's code (a parser, a validator) raised
                raise AgentError(described(exc)) from exc
        report()
    print(printed(step, as_json=args.json))
    return exit_status([step])


async def _resume_once(
    agent: SubAgent[Any],
    state: RunState,
    decisions: dict[str, Decision],
    llm: LLM,
    options: dict[str, Any],
    provider: Any,
    claims: SQLiteClaims | None,
) -> Step[Any]:
    async with opened(llm):
        return await agent.resume(state, decisions, llm=llm, tracer_provider=provider,
                                  claims=claims, **options)  # fmt: skip


def signing_key(args: argparse.Namespace) -> bytes | None:
    """The key of ``--key-file`` or ``--key-env`` (``None``: neither was given).

    Raises:
        UsageError: Both were given, or the file cannot be read, or the variable is unset
            or empty (the message names the file or the variable, never the key).
    """
    if args.key_file is not None and args.key_env is not None:
        raise UsageError("--key-file and --key-env: give the key one way")
    if args.key_file is not None:
        try:
            key = Path(args.key_file).read_bytes()[: MAX_KEY_BYTES + 2]
        except OSError as exc:
            raise UsageError(f"--key-file: cannot read {args.key_file!r}: {exc.strerror}") from None
        key = key[:-1] if key.endswith(b"\n") else key
        key = key[:-1] if key.endswith(b"\r") else key
        where = f"--key-file {args.key_file}"
    elif args.key_env is not None:
        key = os.environb.get(os.fsencode(args.key_env), b"")
        where = f"--key-env {args.key_env}"
    else:
        return None
    if not key:
        raise UsageError(f"{where}: the key is empty (or unset)")
    if len(key) > MAX_KEY_BYTES:
        raise UsageError(f"{where}: a key is at most {MAX_KEY_BYTES} bytes")
    return key


MAX_KEY_BYTES = 4096
"""The longest signing key ``--key-file`` or ``--key-env`` gives, in bytes."""


def _claims(path: str | None) -> SQLiteClaims | None:
    if path is None:
        return None
    try:
        return SQLiteClaims(path)
    except sqlite3.Error as exc:
        raise UsageError(f"--claims {path}: not a claims file: {exc}") from None


def read_state(name: str, key: bytes | None = None) -> RunState:
    """``STATE``: a Step as ``subagent run --json`` prints it (its ``state``), or a state.

    A state as JSON, or signed (``RunState.signed``): then ``key`` must match its
    signature.

    Raises:
        UsageError: The file cannot be read or is not one of them, the Step has no state
            (it ended: nothing to resume), or a signed state has no key or another one
            (and a key was given for a state that is not signed).
    """
    source = f"STATE {name}"
    text = read_limited(name, source)
    data = json_object(text, source)
    signed = "subagent_state" in data and "hmac" in data
    if signed or key is not None:
        if key is None:
            raise UsageError(f"{source}: the state is signed: give its key with --key-file "
                             "FILE or --key-env VAR")  # fmt: skip
        try:
            return RunState.from_signed(text, key)
        except InvalidStateError as exc:
            raise UsageError(f"{source}: {exc}") from None
    if "state" in data and "fingerprint" not in data:  # a Step
        if data["state"] is None:
            raise UsageError(f"{source}: the Step has no state to resume: it {_ended(data)}")
        data = data["state"]
        source += ": state"
    try:
        return RunState.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UsageError(
            f"{source}: not a RunState ({exc.error_count()} error(s); {where or 'the value'}: "
            f"{first['msg']})"
        ) from None


def check_resumable(agent: SubAgent[Any], state: RunState, where: str) -> None:
    """Refuse, before anything runs, a state ``agent`` did not save.

    Raises:
        UsageError: Naming what differs (the agent, its output, tools, prompts, protocol).
    """
    try:
        check_state(agent, state)
    except InvalidStateError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _ended(step: dict[str, Any]) -> str:
    failure = step.get("failure")
    return f"ended failed({failure.get('reason')})" if isinstance(failure, dict) else "ended done"
