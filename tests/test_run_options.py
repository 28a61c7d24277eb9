"""The run options, spelled once (subagent/_options.py: RUN_OPTION_RULES).

Every entry point's typed arguments are checked against the one table, and every option an
entry point does not take is refused there by name, with the table's reason: a new option
added to a group and not to the table (or the other way round) fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from subagent import LLMResponse, ScriptedLLM, SubAgent, Tool, ToolCall
from subagent._options import (
    RUN_OPTION_RULES,
    RUN_OPTIONS,
    ResumeArguments,
    RunArguments,
    taken_by,
)
from subagent.evals import Case, Dataset, EqualsExpected, Variant

pytestmark = pytest.mark.anyio

ENTRY_POINTS = ("resume", "ray", "durable", "evals")


class Answer(BaseModel):
    x: int


def test_every_run_option_has_one_rule_and_every_rule_one_option() -> None:
    assert list(RUN_OPTION_RULES) == list(RUN_OPTIONS) == list(RunArguments.__annotations__)


def test_resume_is_typed_with_exactly_the_options_it_takes() -> None:
    assert set(ResumeArguments.__annotations__) == taken_by("resume")


def test_a_ray_batch_is_typed_with_exactly_the_options_it_takes() -> None:
    from subagent.ray import RayRunArguments

    own_parameters = {"llm", "tracer_provider"}  # run_on_ray's, with their own meaning
    assert set(RayRunArguments.__annotations__) | own_parameters == taken_by("ray")


def test_a_durable_run_is_typed_with_exactly_the_options_it_takes() -> None:
    pytest.importorskip("dbos", reason="the dbos extra is not installed")
    from subagent.durable._agent import _RESUME_OPTIONS, DurableRunArguments

    assert set(DurableRunArguments.__annotations__) == taken_by("durable")
    # what goes on to a resumed part: every durable option resume() takes
    assert set(_RESUME_OPTIONS) == taken_by("durable") & taken_by("resume")
    assert {"correction", "usage_limits", "settings"} <= set(_RESUME_OPTIONS)


def test_an_evaluation_variant_sets_the_options_it_takes_and_digests_what_shapes_runs() -> None:
    from subagent.evals._variants import _RUN_OPTIONS, RUN_ONLY_OPTIONS

    assert set(_RUN_OPTIONS) == taken_by("evals")
    assert {n for n, rule in RUN_OPTION_RULES.items() if not rule.shapes_runs} == RUN_ONLY_OPTIONS


def test_each_flag_the_table_names_is_a_flag_of_subagent_run() -> None:
    import argparse

    from subagent.cli import _main

    parser = _main._parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    run = commands.choices["run"]
    flags = {flag for action in run._actions for flag in action.option_strings}
    named = {flag.strip() for rule in RUN_OPTION_RULES.values() if rule.cli
             for flag in rule.cli.split(",")}  # fmt: skip
    assert named and named <= flags


def refused(entry: str) -> list[tuple[str, str]]:
    return [(name, getattr(rule, entry)) for name, rule in RUN_OPTION_RULES.items()
            if getattr(rule, entry) is not None]  # fmt: skip


def deploy(env: str) -> str:
    """Deploy."""
    return env


def agent() -> SubAgent[Answer]:
    return SubAgent(name="ops", prompt="Ship", output=Answer, max_turns=3,
                    tools=[Tool(deploy, requires_approval=True, run_in_thread=False)])  # fmt: skip


@pytest.mark.parametrize(("option", "reason"), refused("resume"))
async def test_resume_refuses_each_option_it_does_not_take_saying_why(
    option: str, reason: str
) -> None:
    paused = await agent().run(llm=ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="deploy", arguments={"env": "a"})])
    ]))  # fmt: skip
    assert paused.state is not None
    with pytest.raises(TypeError, match=option) as raised:
        await agent().resume(paused.state, {"c1": True}, **{option: None})  # type: ignore[misc]
    assert reason in str(raised.value)


@pytest.mark.parametrize(("option", "reason"), refused("ray"))
async def test_a_ray_batch_refuses_each_option_it_does_not_take_before_ray_is_needed(
    option: str, reason: str
) -> None:
    from subagent.ray import run_on_ray

    with pytest.raises(TypeError, match=f"does not take {option}=") as raised:
        await run_on_ray(agent(), [{}], **{option: print})  # type: ignore[misc]
    assert reason in str(raised.value)


@pytest.mark.parametrize(("option", "reason"), refused("durable"))
async def test_a_durable_run_refuses_each_option_it_does_not_take_saying_why(
    option: str, reason: str
) -> None:
    pytest.importorskip("dbos", reason="the dbos extra is not installed")
    from subagent.durable import DurableAgent

    durable = DurableAgent(agent(), llm=ScriptedLLM([]), name=f"options-{option}")
    with pytest.raises(TypeError, match=f"does not take {option}=") as raised:
        await durable.run(**{option: None})  # type: ignore[misc]
    assert reason in str(raised.value)


@pytest.mark.parametrize(("option", "reason"), refused("evals"))
async def test_an_evaluation_variant_refuses_each_option_it_does_not_take_saying_why(
    option: str, reason: str
) -> None:
    dataset: Dataset[Any] = Dataset([Case(name="c", context={}, expected=Answer(x=1))],
                                    [EqualsExpected()])  # fmt: skip
    with pytest.raises(Exception, match=option) as raised:
        await dataset.evaluate(agent(), variants=[Variant("v", {option: None})],
                               llm=ScriptedLLM(['{"x": 1}']))  # fmt: skip
    assert reason in str(raised.value)
