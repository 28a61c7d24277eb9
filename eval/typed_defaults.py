"""``make eval``'s typed tasks with the library's defaults: no correction given.

    python eval/typed_defaults.py --model qwen1.5b      # and --model qwen

Every typed task of the correction study (``correction_study._tasks``: the 32 tasks whose
output has a JSON schema) runs once with the agent as a user gets it, ``return_retries=1``
and nothing else set: the correction is the library's default for its output
(``subagent._correction.default_correction``). Records go to
``eval/results/corrections/<model>/defaults.jsonl`` (resumable), which
``eval/correction_report.py`` reads beside the study's settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import correction_study

from subagent.evals import Variant

VARIANT = Variant("defaults", {"return_retries": 1})
"""The library's defaults, one correction turn."""


async def check(args: argparse.Namespace, base_url: str) -> None:
    """Run every typed task with the defaults on the model at ``base_url``."""
    (dataset,), agent_of, options = correction_study._tasks(args)
    out = correction_study.RESULTS / args.model / "defaults.jsonl"
    async with correction_study._chat(base_url) as llm:
        report = await dataset.evaluate(
            agent_of, [VARIANT], out=out, concurrency=1, llm=llm, **options
        )
    print(report.to_markdown())


def main() -> None:
    """The command line: start the local model, run the tasks, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen1.5b")
    parser.add_argument("--base-url", default=None)
    correction_study.on_model(check, parser.parse_args())


if __name__ == "__main__":
    main()
