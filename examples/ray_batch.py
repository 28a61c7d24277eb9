"""A batch beyond one machine: shards run as Ray tasks, Steps gathered in input order.

Run it with `python examples/ray_batch.py [RUNS] [SHARDS]` (default 400 runs, 2 shards); it
needs the `ray` extra (`pip install 'subagent-runtime[ray]'`). It starts a local Ray
runtime with two CPUs, or joins the cluster that `RAY_ADDRESS` names. The inputs are split
into shards; each shard is one Ray task running `run_many` in its worker's own event loop,
on a stand-in model that takes 50 ms per call and has no answer for multiples of 50. The
Steps come back as JSON, in input order, and the script prints the throughput and the
batch's summary.

The workers import the agent by reference (`ray_batch:agent`): Ray puts this script's
folder on their path. With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the batch is one trace: the
batch's span here, and under it each shard's span and its runs, exported by the workers
(they inherit the variables from this process when it starts Ray).
"""

from __future__ import annotations

import json
import os
import sys
import time

import anyio
import ray
from pydantic import BaseModel

from subagent import LLMRequest, LLMResponse, SubAgent, summarize, tracing
from subagent.ray import run_on_ray

AGENT = "ray_batch:agent"
"""The agent, as every worker finds it: this file, imported as the module `ray_batch`."""


class Parity(BaseModel):
    n: int
    even: bool


class SlowParityModel:
    """A stand-in for a real model: 50 ms per call; no answer for multiples of 50."""

    model_name = "slow-parity"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await anyio.sleep(0.05)
        n = int(str(request.messages[1].content).split()[1])
        if n % 50 == 0:
            return LLMResponse(text="I would rather not say.")
        return LLMResponse(text=json.dumps({"n": n, "even": n % 2 == 0}))


agent = SubAgent(name="parity", prompt="Is {{n}} even?", output=Parity, max_turns=1,
                 llm=SlowParityModel())  # fmt: skip


async def main(runs: int = 400, shards: int = 2, concurrency: int = 50) -> None:
    contexts = [{"n": n} for n in range(1, runs + 1)]
    started = time.perf_counter()
    steps = await run_on_ray(AGENT, contexts, shards=shards, concurrency=concurrency)
    elapsed = time.perf_counter() - started
    print(f"{runs} runs in {shards} shards of {concurrency} concurrent runs: "
          f"{elapsed:.2f} s, {runs / elapsed:.0f} runs/s")  # fmt: skip
    pairs = list(zip(contexts, steps, strict=True))
    in_order = all(step.output.n == context["n"] for context, step in pairs if step.output)
    print(f"in input order: {in_order}")
    print(f"failed: {', '.join(str(context['n']) for context, step in pairs if not step.ok)}")
    print(summarize(steps))


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    shards = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        tracing.configure(service_name="ray-batch")  # the batch's span; workers their own
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # the cluster it names
    else:
        ray.init(num_cpus=2, include_dashboard=False)  # a local runtime, two workers
    anyio.run(main, runs, shards)
