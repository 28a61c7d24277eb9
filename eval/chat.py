"""The chat set: short questions with known answers, asked of a plain text agent.

    python eval/chat.py --model qwen [--variants fail-line,no-fail-line] [--base-url URL]
                        [--results DIR]

``eval/chat.jsonl`` is a ``subagent.evals`` dataset (20 one-line questions and two that
follow a conversation, each with the words a right answer holds); :func:`chat_judge`
passes a run whose answer holds one of them (case aside, as a whole word). The agent is
what a user writes for a chat: ``SubAgent(name="assistant")``, its text output, its
defaults, the conversation as the run's messages. The variants differ in one thing:

- ``fail-line``: the system prompt offers the explicit fail (``allow_fail=True``);
- ``no-fail-line``: it does not (``allow_fail=False``);

and ``--raw`` adds the control: one chat completion of the conversation alone, no system
prompt (``raw``, its records in ``<model>-raw.jsonl``): what the model answers outside the
runtime, so a wrong fact is told from a runtime that lost an answer.

Records go to ``eval/results/chat/<model>.jsonl`` (resumable: recorded runs are skipped).
Temperature 0 and a fixed seed, as ``make eval``.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402

from subagent import OpenAIChat, SubAgent  # noqa: E402
from subagent.evals import (  # noqa: E402
    Case,
    Dataset,
    FunctionJudge,
    JudgeContext,
    Report,
    System,
    SystemReply,
    SystemRun,
    Variant,
    Verdict,
)

__all__ = [
    "CHAT_FILE",
    "RESULTS",
    "VARIANTS",
    "chat_agent",
    "chat_judge",
    "evaluate",
    "evaluate_raw",
    "load_chat",
    "main",
    "raw_chat",
]

CHAT_FILE = Path(__file__).resolve().parent / "chat.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "chat"
SETTINGS: dict[str, Any] = {"temperature": 0, "seed": 7, "max_tokens": 256}

VARIANTS: dict[str, Variant] = {
    "fail-line": Variant("fail-line", {"allow_fail": True}),
    "no-fail-line": Variant("no-fail-line", {"allow_fail": False}),
}
"""The settings the chat set compares (see the module's docstring)."""


def chat_agent() -> SubAgent[str]:
    """The agent a user writes for a chat: a name, nothing else."""
    return SubAgent(name="assistant")


def chat_judge(ctx: JudgeContext[Any]) -> Verdict:
    """Right when the answer holds one of the case's expected words (case aside)."""
    answer = ctx.output if isinstance(ctx.output, str) else ""
    expected = ctx.case.expected or []
    for words in expected:
        if re.search(rf"(?<!\w){re.escape(words)}(?!\w)", answer, re.IGNORECASE):
            return Verdict(True)
    return Verdict(False, f"none of {expected} in the answer")


def load_chat() -> Dataset[Any]:
    """``eval/chat.jsonl``, judged by :func:`chat_judge`."""
    return Dataset.from_file(CHAT_FILE, judges=[FunctionJudge(chat_judge, name="answer")])


async def raw_chat(case: Case[Any], *, base_url: str, client: httpx.AsyncClient) -> SystemRun:
    """One chat completion of the case's conversation alone (no system prompt)."""
    body = {"model": "local", "messages": case.messages, **SETTINGS}
    response = await client.post(f"{base_url}/chat/completions", json=body)
    response.raise_for_status()
    data = response.json()
    choice = data["choices"][0]
    text = choice["message"].get("content") or ""
    usage = data.get("usage") or {}
    return SystemRun(
        output=text,
        replies=[SystemReply(text=text, stop_reason=choice.get("finish_reason"))],
        input_tokens=usage.get("prompt_tokens", 0),
        output_tokens=usage.get("completion_tokens", 0),
    )


async def evaluate_raw(base_url: str, out: Path) -> Report:
    """The raw-call control on every case, recorded in ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    async with httpx.AsyncClient(timeout=300) as client:
        system = System(functools.partial(raw_chat, base_url=base_url, client=client), name="raw")
        return await load_chat().evaluate(system, [Variant("raw", {})], out=out, concurrency=1)


async def evaluate(base_url: str, variants: list[Variant], out: Path) -> Report:
    """Every case under every variant on the server at ``base_url``, recorded in ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    async with OpenAIChat(model="local", base_url=base_url, timeout=300, _environ={}) as llm:
        return await load_chat().evaluate(
            chat_agent(), variants, out=out, concurrency=1, llm=llm, settings=SETTINGS
        )


def main(argv: list[str] | None = None) -> None:
    """The command line: start the local model (or use ``--base-url``), run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--raw", action="store_true", help="the raw-call control too")
    args = parser.parse_args(argv)
    try:
        variants = [VARIANTS[name] for name in args.variants.split(",") if name]
    except KeyError as exc:
        parser.error(f"--variants: no variant {exc.args[0]!r}; there are: {', '.join(VARIANTS)}")
    out = args.results / f"{args.model}.jsonl"

    def run(base_url: str) -> None:
        report = anyio.run(evaluate, base_url, variants, out)
        print(report)
        if args.raw:
            print(anyio.run(evaluate_raw, base_url, out.with_name(f"{args.model}-raw.jsonl")))

    if args.base_url:
        run(args.base_url)
        return
    import local_llm

    with local_llm.running(args.model) as server:
        run(server.base_url)


if __name__ == "__main__":
    main()
