"""The agent's grouped knobs (ToolPolicy, ReplyPolicy, Timeouts) and the keywords they replaced."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from pydantic import BaseModel

from subagent import (
    ConfigurationError,
    ParseResult,
    ReplyPolicy,
    ScriptedLLM,
    SubAgent,
    Timeouts,
    ToolPolicy,
)
from subagent.evals import Variant
from subagent.evals._variants import _agent_digest, plan_variants


class Answer(BaseModel):
    x: int


def lookup(key: str) -> str:
    return key


def test_subagent_has_at_most_twenty_public_fields() -> None:
    public = [f.name for f in dataclasses.fields(SubAgent) if f.init]
    assert len(public) <= 20, public
    assert {"tool_policy", "reply_policy", "timeouts"} <= set(public)


def test_each_old_keyword_still_works_and_its_warning_says_where_it_goes() -> None:
    with pytest.warns(DeprecationWarning, match="deprecated") as caught:
        old = SubAgent(name="a", tools=[lookup], protocol="react", allow_fail=False,
                       timeout=5.0, mission_timeout=60.0, max_tool_result_chars=100)  # fmt: skip
    message = str(caught[0].message)
    assert "tool_policy=ToolPolicy(protocol=...)" in message
    assert "reply_policy=ReplyPolicy(allow_fail=...)" in message
    assert "timeouts=Timeouts(call=...)" in message and "Timeouts(run=...)" in message
    assert caught[0].filename == __file__  # the warning points at the caller's line
    new = SubAgent(name="a", tools=[lookup],
                   tool_policy=ToolPolicy(protocol="react", max_tool_result_chars=100),
                   reply_policy=ReplyPolicy(allow_fail=False),
                   timeouts=Timeouts(call=5.0, run=60.0))  # fmt: skip
    assert (old.tool_policy, old.reply_policy, old.timeouts) == (
        new.tool_policy,
        new.reply_policy,
        new.timeouts,
    )


def test_an_old_keyword_given_with_its_record_changes_that_field_only() -> None:
    with pytest.warns(DeprecationWarning, match="deprecated"):
        agent = SubAgent(name="a", tool_policy=ToolPolicy(parallel_tool_calls=False),
                         protocol="react")  # fmt: skip
    assert agent.tool_policy == ToolPolicy(protocol="react", parallel_tool_calls=False)


def test_replace_with_an_old_keyword_keeps_the_records_other_fields() -> None:
    agent = SubAgent(name="a", reply_policy=ReplyPolicy(context_policy="quote"))
    with pytest.warns(DeprecationWarning, match="deprecated"):
        changed = dataclasses.replace(agent, allow_fail=True)
    assert changed.reply_policy == ReplyPolicy(context_policy="quote", allow_fail=True)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: ToolPolicy(protocol="smoke"), "protocol: must be one of"),
        (lambda: ToolPolicy(parallel_tool_calls="yes"), "parallel_tool_calls: must be a bool"),
        (lambda: ToolPolicy(max_tool_calls_per_turn=0), "max_tool_calls_per_turn: must be an"),
        (lambda: ToolPolicy(approval="always"), "approval: must be a function"),
        (lambda: ReplyPolicy(context_policy="forget"), "context_policy: must be one of"),
        (lambda: ReplyPolicy(allow_fail="no"), "allow_fail: must be a bool"),
        (lambda: ReplyPolicy(max_reply_chars=0), "max_reply_chars: must be an integer >= 1"),
        (lambda: ReplyPolicy(max_reply_chars=1e6), "max_reply_chars: must be an integer >= 1"),
        (lambda: Timeouts(call=0), "timeout: must be a number of seconds > 0"),
        (lambda: Timeouts(run=-5), "mission_timeout: must be a number of seconds > 0"),
    ],
)
def test_a_bad_value_in_a_record_is_refused_naming_its_field(make: Any, expected: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make()
    assert str(caught.value).startswith(expected)
    assert caught.value.field == expected.split(":")[0]


def test_a_record_of_the_wrong_kind_is_refused_naming_the_agent_field() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", tool_policy=ReplyPolicy())  # type: ignore[arg-type]
    assert caught.value.field == "tool_policy"


def test_the_records_reach_the_run() -> None:
    llm = ScriptedLLM(['{"fail": "no"}', '{"x": 1}'])
    agent = SubAgent(name="a", prompt="x?", output=Answer,
                     reply_policy=ReplyPolicy(allow_fail=False),
                     timeouts=Timeouts(call=30.0))  # fmt: skip
    step = agent.run_sync(llm=llm, max_turns=1, return_retries=1)
    assert step.output == Answer(x=1)  # the fail was corrected, not taken
    assert "fail" not in llm.requests[0].messages[0].content


def test_parser_kwargs_become_a_partial_of_the_parser() -> None:
    def parse(text: str, *, scale: int = 1) -> ParseResult[int]:
        return ParseResult(ok=True, data=int(text) * scale)

    with pytest.warns(DeprecationWarning, match=r"functools.partial"):
        old = SubAgent(name="p", prompt="n?", output=parse, parser_kwargs={"scale": 10})
    new = SubAgent(name="p", prompt="n?", output=functools.partial(parse, scale=10))
    assert old.run_sync(llm=ScriptedLLM(["4"])).output == 40
    assert new.run_sync(llm=ScriptedLLM(["4"])).output == 40
    assert old._parts.fingerprint() == new._parts.fingerprint()


def test_records_made_before_the_policy_records_keep_their_variant_digests() -> None:
    # The digests of these agents at 439499d, when the knobs were SubAgent's own fields.
    typed = SubAgent(name="x", output=Answer,
                     tool_policy=ToolPolicy(protocol="react", max_tool_result_chars=100),
                     reply_policy=ReplyPolicy(allow_fail=False, context_policy="quote"),
                     timeouts=Timeouts(call=5.0))  # fmt: skip
    assert _agent_digest(typed) == "e980ba87bf58910f"
    assert _agent_digest(SubAgent(name="x")) == "15c91927c80b93a4"


def test_a_variant_names_a_records_field_by_its_old_keyword_without_a_warning() -> None:
    agent = SubAgent(name="a", output=Answer, tools=[lookup],
                     tool_policy=ToolPolicy(parallel_tool_calls=False))  # fmt: skip
    [plan] = plan_variants(agent, [Variant("react", {"protocol": "react"})],
                           {"llm": ScriptedLLM([])})  # fmt: skip
    assert plan.agent is not None
    assert plan.agent.tool_policy == ToolPolicy(protocol="react", parallel_tool_calls=False)
