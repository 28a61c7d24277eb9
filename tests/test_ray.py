"""subagent.ray: a batch split into shards run as Ray tasks, on a local Ray runtime.

One local cluster (``ray.init(num_cpus=2)``, two workers) serves the whole module; its
workers export spans to a local OTLP receiver named by their ``OTEL_*`` variables, and
import the agents of ``tests/ray_agents.py`` by reference.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from otlp_receiver import Receiver, http_receiver, wire_attributes
from ray_agents import CRASH, DiesOnce, Doubled, Signal, deploy, double, no_model

from subagent import ConfigurationError, FailReason, Step, tracing
from subagent.ray import RayRunArguments, run_on_ray, stream_on_ray

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def cluster(receiver: Receiver) -> Iterator[None]:
    """A local Ray runtime with two CPUs; its workers export spans to ``receiver``."""
    workers_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "ray-worker",
        # Ray passes on the driver's script directory only: the agents' modules are here.
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(EXAMPLES)]),
    }
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": workers_env})  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


def numbers(values: list[int]) -> list[dict[str, int]]:
    return [{"n": n} for n in values]


async def test_steps_come_back_in_input_order_and_round_trip(cluster: None) -> None:
    steps = await run_on_ray("ray_agents:double", numbers(list(range(10))), shards=3,
                             concurrency=2)  # fmt: skip
    assert [step.output.value for step in steps if step.output] == [2 * n for n in range(10)]
    assert all(isinstance(step.output, Doubled) for step in steps)
    for step in steps:
        assert Step[Doubled].model_validate_json(step.model_dump_json()) == step


async def test_an_agent_object_is_pickled_to_the_workers(cluster: None) -> None:
    steps = await run_on_ray(double, numbers([3, 4, 5]), shards=2)
    assert [step.output.value for step in steps if step.output] == [6, 8, 10]


async def test_a_shard_whose_runs_fail_keeps_its_failed_steps(cluster: None) -> None:
    steps = await run_on_ray("ray_agents:double", numbers([1, 2, -3, -4, 5, 6]), shards=3)
    assert [step.ok for step in steps] == [True, True, False, False, True, True]
    for step in steps[2:4]:
        assert step.failure is not None
        assert step.failure.reason is FailReason.BUDGET_EXHAUSTED
        assert len(step.turns) == 1
        assert step.turns[0].error is not None


async def test_a_shard_that_raises_keeps_its_finished_runs_and_the_other_shards(
    cluster: None,
) -> None:
    steps = await run_on_ray("ray_agents:double", numbers([1, 2, 3, 4, 5, CRASH]), shards=2,
                             concurrency=1)  # fmt: skip
    assert [step.output.value for step in steps[:5] if step.output] == [2, 4, 6, 8, 10]
    failure = steps[5].failure
    assert failure is not None and failure.reason is FailReason.ERROR
    assert failure.message.startswith("shard 1 failed: ")
    assert "ShardCrash" in failure.message
    assert not steps[5].retryable
    assert steps[5].agent == "double"


async def kill_a_worker_mid_shard(
    tmp_path: Path, **task_options: Any
) -> tuple[list[int], dict[int, Step[Any]], Counter[int]]:
    """Eight inputs in one shard, one run at a time; the run of input 4 kills its worker
    once the caller has received the Steps of inputs 0 to 3. Returns the order the Steps
    arrived in, the Steps by input, and how many times each input called the model."""
    signal = Signal.remote()  # type: ignore[attr-defined]
    log = tmp_path / "calls.log"
    llm = DiesOnce(at=4, flag=tmp_path / "died", log=log, signal=signal)
    arrived: list[int] = []
    steps: dict[int, Step[Any]] = {}
    batch = stream_on_ray("ray_agents:double", numbers(list(range(8))), shards=1,
                          concurrency=1, llm=llm, task_options=task_options)  # fmt: skip
    async with batch:
        async for item in batch:
            arrived.append(item.index)
            steps[item.index] = item.step
            if len(arrived) == 4:
                signal.send.remote()
    calls = Counter(int(line) for line in log.read_text(encoding="utf-8").split())
    return arrived, steps, calls


async def test_a_worker_killed_mid_shard_sends_only_its_unfinished_runs_again(
    cluster: None, tmp_path: Path
) -> None:
    arrived, steps, calls = await kill_a_worker_mid_shard(tmp_path)
    assert arrived[:4] == [0, 1, 2, 3] and sorted(arrived) == list(range(8))
    outputs = [steps[n].output for n in range(8)]
    assert [output.value for output in outputs if output] == [2 * n for n in range(8)]
    # Finished runs are never run again: only input 4, whose run the worker died in.
    assert calls == Counter({4: 2, 0: 1, 1: 1, 2: 1, 3: 1, 5: 1, 6: 1, 7: 1})


async def test_without_retries_a_dead_workers_unfinished_runs_fail_retryably(
    cluster: None, tmp_path: Path
) -> None:
    arrived, steps, calls = await kill_a_worker_mid_shard(tmp_path, max_retries=0)
    assert arrived[:4] == [0, 1, 2, 3] and sorted(arrived) == list(range(8))
    assert all(steps[n].ok for n in range(4))
    for n in range(4, 8):
        failure = steps[n].failure
        assert failure is not None and failure.reason is FailReason.WORKER_LOST
        assert failure.message.startswith("shard 0 lost its worker before this run finished: ")
        assert "WorkerCrashedError" in failure.message
        assert steps[n].retryable
    assert calls == Counter({0: 1, 1: 1, 2: 1, 3: 1, 4: 1})


async def test_a_model_factory_runs_in_the_worker_opened_around_the_shard(
    cluster: None,
) -> None:
    steps = await run_on_ray("ray_agents:no_model", numbers([1, 2, 3]), shards=2,
                             llm="ray_agents:OpenedDoubler")  # fmt: skip
    assert [step.output.value for step in steps if step.output] == [2, 4, 6]


async def test_run_options_travel_to_the_workers(cluster: None) -> None:
    steps = await run_on_ray(no_model, numbers([-1, 2]), shards=2, llm="ray_agents:double.llm",
                             return_retries=1)  # fmt: skip
    assert [len(step.turns) for step in steps] == [2, 1]
    assert steps[0].failure is not None
    assert steps[0].failure.reason is FailReason.BUDGET_EXHAUSTED


async def test_the_runs_of_every_shard_are_children_of_the_batch_span(
    cluster: None, receiver: Receiver
) -> None:
    receiver.requests.clear()  # spans of the tests before
    driver = tracing.configure(service_name="batch-driver", endpoint=receiver.endpoint,
                               console=False, set_global=False)  # fmt: skip
    try:
        steps = await run_on_ray("ray_agents:slow_double", numbers(list(range(8))), shards=2,
                                 concurrency=4, tracer_provider=driver.provider)  # fmt: skip
    finally:
        assert driver.shutdown()
    assert all(step.ok for step in steps)

    spans = [(resource, span) for resource, _, span in receiver.spans()]
    (batch,) = [span for _, span in spans if span.name == "run_on_ray slow_double"]
    trace_id = batch.trace_id
    in_trace = [(resource, span) for resource, span in spans if span.trace_id == trace_id]
    by_name: dict[str, list[Any]] = {}
    for resource, span in in_trace:
        by_name.setdefault(span.name, []).append((resource, span))

    assert wire_attributes(batch) == {
        "gen_ai.agent.name": "slow_double",
        "subagent.batch.runs": 8,
        "subagent.batch.shards": 2,
        "subagent.batch.concurrency": 4,
        "subagent.batch.done": 8,
        "subagent.batch.failed": 0,
        "subagent.batch.paused": 0,
        "subagent.batch.failed_shards": 0,
    }
    shards = by_name["ray_shard slow_double"]
    assert sorted(wire_attributes(span)["subagent.shard.index"] for _, span in shards) == [0, 1]
    assert all(span.parent_span_id == batch.span_id for _, span in shards)
    # Two worker processes, neither of them this one, each with its own provider.
    pids = {resource["process.pid"] for resource, _ in shards}
    assert len(pids) == 2
    assert os.getpid() not in pids
    assert {resource["service.name"] for resource, _ in shards} == {"ray-worker"}

    runs = by_name["invoke_agent slow_double"]
    assert len(runs) == 8
    shard_ids = {span.span_id for _, span in shards}
    assert all(span.parent_span_id in shard_ids for _, span in runs)
    assert len(by_name["agent_turn must_return"]) == 8
    assert len(by_name["chat doubler"]) == 8


async def test_the_example_runs_a_batch_on_ray_in_input_order(
    cluster: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("ray_batch")
    await example.main(runs=100, shards=2, concurrency=25)
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"100 runs in 2 shards of 25 concurrent runs: [\d.]+ s, \d+ runs/s",
                        lines[0])  # fmt: skip
    assert lines[1:3] == ["in input order: True", "failed: 50, 100"]
    assert "done                98 (98.0%)" in lines
    assert "  budget_exhausted  2" in lines


async def test_configuration_errors_come_before_any_task() -> None:
    with pytest.raises(ConfigurationError, match="agent: cannot import 'ray_agents_nowhere'"):
        await run_on_ray("ray_agents_nowhere:double", numbers([1]))
    with pytest.raises(ConfigurationError, match="agent: 'ray_agents:missing'"):
        await run_on_ray("ray_agents:missing", numbers([1]))
    with pytest.raises(ConfigurationError, match="agent: must be 'module:attribute'"):
        await run_on_ray("ray_agents.double", numbers([1]))
    with pytest.raises(ConfigurationError, match="agent: must be a SubAgent"):
        await run_on_ray("ray_agents:Doubled", numbers([1]))
    with pytest.raises(ConfigurationError, match="llm: cannot import"):
        await run_on_ray(double, numbers([1]), llm="nowhere:model")
    with pytest.raises(ConfigurationError, match="shards"):
        await run_on_ray(double, numbers([1]), shards=0)
    with pytest.raises(ConfigurationError, match="concurrency"):
        await run_on_ray(double, numbers([1]), concurrency=0)
    with pytest.raises(ConfigurationError, match="max_turns"):
        await run_on_ray(double, numbers([1]), max_turns=0)
    with pytest.raises(ConfigurationError, match="contexts"):
        await run_on_ray(double, {"n": 1})
    with pytest.raises(ConfigurationError, match="task_options max_retries"):
        await run_on_ray(double, numbers([1]), task_options={"max_retries": -2})
    with pytest.raises(ConfigurationError, match="retry_exceptions is not supported"):
        await run_on_ray(double, numbers([1]), task_options={"retry_exceptions": True})
    with pytest.raises(ConfigurationError, match="num_returns is not supported"):
        await run_on_ray(double, numbers([1]), task_options={"num_returns": 2})
    assert await run_on_ray(double, []) == []


async def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'subagent-runtime\[ray\]'"):
        await run_on_ray(double, numbers([1]))


def test_the_options_that_travel_are_the_run_options_but_the_callers_own() -> None:
    from subagent import RunArguments

    local = {"llm", "tracer_provider", "on_event", "on_text", "on_state", "hooks"}
    assert set(RayRunArguments.__annotations__) == set(RunArguments.__annotations__) - local


async def test_paused_runs_come_back_paused_with_their_state_and_are_counted_apart(
    cluster: None, receiver: Receiver
) -> None:
    receiver.requests.clear()
    driver = tracing.configure(service_name="batch-driver", endpoint=receiver.endpoint,
                               console=False, set_global=False)  # fmt: skip
    try:
        steps = await run_on_ray(deploy, numbers([1, 2, 3]), shards=2,
                                 tracer_provider=driver.provider)  # fmt: skip
    finally:
        assert driver.shutdown()
    assert [step.paused for step in steps] == [True, True, True]
    assert all(step.state is not None and step.failure is None for step in steps)
    assert steps[0].pending is not None
    assert [call.name for call in steps[0].pending.waiting] == ["release"]

    (batch,) = [span for _, _, span in receiver.spans() if span.name == "run_on_ray deploy"]
    attributes = wire_attributes(batch)
    assert (attributes["subagent.batch.done"], attributes["subagent.batch.failed"],
            attributes["subagent.batch.paused"]) == (0, 0, 3)  # fmt: skip
