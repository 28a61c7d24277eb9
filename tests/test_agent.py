"""SubAgent: configuration validation, overrides, run_sync, as_tool."""

from __future__ import annotations

import itertools
import warnings

import anyio
import pytest
from pydantic import BaseModel

from subagent import (
    ConfigurationError,
    MissingVariableError,
    ParseResult,
    ReplyPolicy,
    ScriptedLLM,
    SubAgent,
    TemplateError,
    Tool,
)
from subagent.parsers._contract import DEFAULT_MAX_REPLY_CHARS


class Answer(BaseModel):
    x: int


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("max_turns", 0, "max_turns: must be an integer >= 1, got 0 (int)"),
        ("max_turns", True, "max_turns: must be an integer >= 1, got True (bool)"),
        ("max_turns", "1", "max_turns: must be an integer >= 1, got '1' (str)"),
        ("max_turns", 1.0, "max_turns: must be an integer >= 1, got 1.0 (float)"),
        ("return_retries", -1, "return_retries: must be an integer >= 0, got -1 (int)"),
        ("return_retries", "1", "return_retries: must be an integer >= 0, got '1' (str)"),
        ("return_retries", True, "return_retries: must be an integer >= 0, got True (bool)"),
        ("llm", object(), "llm: <object object"),
        ("name", "", "name: must be a non-empty string"),
        ("validators", [42], "validators: 42 is not callable"),
        ("tools", [lambda *args: 0], "tools: tool name '<lambda>'"),
    ],
)
def test_bad_configuration_fails_at_construction_naming_the_field(
    field: str, value: object, expected: str
) -> None:
    options: dict[str, object] = {"name": "a", "prompt": "p", field: value}
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(**options)  # type: ignore[arg-type]
    assert str(caught.value).startswith(expected)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("option", "value"), [("max_turns", 0), ("return_retries", "2"), ("max_turns", False)]
)
def test_bad_run_overrides_are_rejected_before_any_call(option: str, value: object) -> None:
    llm = ScriptedLLM(['{"x": 1}'])
    agent = SubAgent(name="a", prompt="p", output=Answer)
    with pytest.raises(ConfigurationError, match=f"^{option}: "):
        agent.run_sync(llm=llm, **{option: value})
    assert llm.requests == []


def test_unknown_prompt_override_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="sytem"):
        SubAgent(name="a", prompt="p", prompts={"sytem": "x"})


@pytest.mark.parametrize(
    ("prompts", "template"),
    [
        ({"system": "{{#open}}never closed"}, "system"),  # not valid Mustache
        ({"system": 42}, "system"),  # not a string
        ({"sytem": "x"}, "sytem"),  # no such template
        ({"system": "{{> nowhere}}"}, "system"),  # includes a template that does not exist
    ],
)
def test_a_malformed_prompt_override_is_reported_under_prompts(
    prompts: dict[str, object], template: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt="p", prompts=prompts)  # type: ignore[arg-type]
    assert caught.value.field == "prompts"
    assert f"{template!r}" in caught.value.message
    assert isinstance(caught.value.__cause__, TemplateError)
    assert caught.value.__cause__.template == template


def test_prompt_overrides_that_are_not_a_mapping_are_reported_under_prompts() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt="p", prompts=[("system", "x")])  # type: ignore[arg-type]
    assert caught.value.field == "prompts"


@pytest.mark.parametrize("prompt", ["{{#a}}never closed", "Do {{> system}}"])
def test_a_malformed_task_prompt_is_reported_under_prompt_at_construction(prompt: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt=prompt)
    assert caught.value.field == "prompt"


def test_an_override_may_include_a_known_template() -> None:
    llm = ScriptedLLM(["ok"])
    agent = SubAgent(
        name="a", prompt="p", prompts={"system": "Be brief. {{> tool_list}}{{output_instructions}}"}
    )
    assert agent.run_sync(llm=llm).ok
    assert llm.requests[0].messages[0].content == (
        "Be brief. When you have the answer, reply with it as plain text."
    )


def test_tool_with_var_args_is_rejected_naming_the_tool() -> None:
    def spread(*values: int) -> int:
        return sum(values)

    with pytest.raises(ConfigurationError, match="tool 'spread' takes \\*values"):
        SubAgent(name="a", prompt="p", tools=[spread])


def test_duplicate_tool_names_are_rejected() -> None:
    def f() -> None: ...

    with pytest.raises(ConfigurationError, match="two tools are named 'f'"):
        SubAgent(name="a", prompt="p", tools=[f, Tool(f)])


def test_agent_is_immutable() -> None:
    agent = SubAgent(name="a", prompt="p")
    with pytest.raises(AttributeError):
        agent.max_turns = 3  # type: ignore[misc]


def test_missing_prompt_variable_raises_naming_it_before_any_call() -> None:
    llm = ScriptedLLM(["x"])
    with pytest.raises(MissingVariableError, match="'question'"):
        SubAgent(name="a", prompt="Answer {{question}}").run_sync({}, llm=llm)
    assert llm.requests == []


def test_run_without_a_model_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"^llm: agent 'a' has no model"):
        SubAgent(name="a", prompt="p").run_sync()


def test_run_overrides_apply_to_that_run_only() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, max_turns=1, return_retries=0)
    llm = ScriptedLLM(['{"x": "bad"}', '{"x": 2}'])
    assert agent.run_sync(llm=llm, return_retries=1).ok
    assert agent.return_retries == 0
    assert not agent.run_sync(llm=ScriptedLLM(['{"x": "bad"}'])).ok


def test_prompt_renders_context_from_a_mapping_or_a_model() -> None:
    class Question(BaseModel):
        question: str

    llm = ScriptedLLM(["a", "b"])
    agent = SubAgent(name="a", prompt="Q: {{question}}", llm=llm)
    agent.run_sync({"question": 'say "hi" & <go>'})
    agent.run_sync(Question(question="two"))
    assert llm.requests[0].messages[1].content.startswith('Q: say "hi" & <go>')
    assert llm.requests[1].messages[1].content.startswith("Q: two")


def test_messages_replace_the_rendered_prompt() -> None:
    llm = ScriptedLLM(["ok"])
    agent = SubAgent(name="a", llm=llm)
    step = agent.run_sync(messages=[{"role": "user", "content": "hello"}])
    assert step.output == "ok"
    assert [m.role for m in llm.requests[0].messages] == ["system", "user"]
    assert llm.requests[0].messages[1].content == "hello"


def test_settings_merge_over_the_agents() -> None:
    llm = ScriptedLLM(["a"])
    agent = SubAgent(name="a", prompt="p", llm=llm, settings={"temperature": 0, "max_tokens": 9})
    agent.run_sync(settings={"temperature": 1})
    assert llm.requests[0].settings == {"temperature": 1, "max_tokens": 9}


def test_run_sync_refuses_to_run_inside_an_event_loop() -> None:
    agent = SubAgent(name="a", prompt="p", llm=ScriptedLLM(["x"]))

    async def inside() -> None:
        with pytest.raises(RuntimeError, match=r"use `await agent\.run"):
            agent.run_sync()

    anyio.run(inside)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_sync_works_on_both_backends(backend: str) -> None:
    step = SubAgent(name="a", prompt="p", llm=ScriptedLLM(["hi"])).run_sync(backend=backend)
    assert step.output == "hi"


def test_as_tool_takes_the_prompt_variables_as_string_parameters() -> None:
    inner = SubAgent(name="inner", prompt="{{city}} in {{country}}", description="Find a city.")
    tool = inner.as_tool()
    assert tool.name == "inner" and tool.description == "Find a city."
    assert tool.definition.parameters["required"] == ["city", "country"]
    assert tool.definition.parameters["properties"]["city"]["type"] == "string"


def test_defaults_are_five_work_turns_and_no_corrections() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer)
    assert (agent.max_turns, agent.return_retries, agent.reply_policy.context_policy) == (
        5,
        0,
        "collapse",
    )
    llm = ScriptedLLM(['{"x": "bad"}'] * 5)
    step = agent.run_sync(llm=llm)
    assert len(step.turns) == 5 and step.turns[-1].type == "must_return"
    assert not step.ok and llm.remaining == 0


def test_a_callers_system_message_extends_the_system_prompt_instead_of_adding_one() -> None:
    llm = ScriptedLLM(["ok"])
    agent = SubAgent(name="a", llm=llm)
    agent.run_sync(messages=[{"role": "system", "content": "Answer in French."},
                             {"role": "user", "content": "hello"}])  # fmt: skip
    assert [m.role for m in llm.requests[0].messages] == ["system", "user"]
    system = llm.requests[0].messages[0].content
    assert system.startswith("You are a") and system.endswith("Answer in French.")


def test_messages_with_only_a_system_message_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match=r"^messages: "):
        SubAgent(name="a", llm=ScriptedLLM([])).run_sync(
            messages=[{"role": "system", "content": "x"}]
        )


def test_an_output_type_pydantic_cannot_validate_is_rejected_naming_output() -> None:
    class Opaque:
        pass

    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt="p", output=Opaque)
    assert caught.value.field == "output"
    assert str(caught.value).startswith("output: ")
    assert "Opaque" in caught.value.message and "cannot be validated by pydantic" in str(
        caught.value
    )


# --- the longest reply parsed --------------------------------------------------------------


def test_a_reply_over_max_reply_chars_gets_feedback_without_being_parsed() -> None:
    seen: list[str] = []

    def parse(text: str) -> ParseResult:
        seen.append(text)
        return ParseResult.success(text)

    agent = SubAgent(name="a", prompt="p", output=parse, max_turns=1, return_retries=1,
                     reply_policy=ReplyPolicy(max_reply_chars=100))  # fmt: skip
    llm = ScriptedLLM(['{"fail": "' + "x" * 200 + '"}', "short"])
    step = agent.run_sync(llm=llm)
    assert step.ok and step.output == "short"
    assert seen == ["short"]  # the long reply never reached the parser
    first = step.turns[0]
    assert first.error_type == "invalid_output"  # not an explicit fail: it was not scanned
    assert first.error is not None and "212 characters long, more than the 100" in first.error
    assert "212 characters long" in llm.requests[1].messages[-1].content


def test_by_default_a_5_mb_reply_of_braces_is_not_scanned() -> None:
    agent = SubAgent(name="a", prompt="p", output=Answer, max_turns=1)
    assert agent.reply_policy.max_reply_chars == DEFAULT_MAX_REPLY_CHARS == 1_000_000
    step = agent.run_sync(llm=ScriptedLLM(["{" * 5_000_000]))
    error = step.turns[0].error
    assert error is not None and error.startswith("Your reply is 5,000,000 characters long")


def test_max_reply_chars_none_parses_any_length() -> None:
    agent = SubAgent(
        name="a", prompt="p", max_turns=1, reply_policy=ReplyPolicy(max_reply_chars=None)
    )
    step = agent.run_sync(llm=ScriptedLLM(["y" * 1_000_001]))
    assert step.ok and step.output is not None and len(step.output) == 1_000_001


# --- messages that say what to do ------------------------------------------------------------


@pytest.mark.parametrize("call", ["start", "stream", "check_options", "run_sync"])
def test_an_unknown_run_option_names_the_public_call_and_the_nearest_option(call: str) -> None:
    agent = SubAgent(name="a", prompt="p", llm=ScriptedLLM([]))
    with pytest.raises(TypeError) as caught:
        getattr(agent, call)(max_turn=3)
    message = str(caught.value)
    assert message.startswith(f"SubAgent.{call}() got an unexpected keyword argument 'max_turn'")
    assert "did you mean 'max_turns'?" in message
    assert "._options()" not in message


def test_an_unknown_run_option_far_from_any_suggests_none_but_lists_them() -> None:
    agent = SubAgent(name="a", prompt="p", llm=ScriptedLLM([]))
    with pytest.raises(TypeError) as caught:
        agent.check_options(zzz=1)
    assert "did you mean" not in str(caught.value)
    assert "return_retries" in str(caught.value)


@pytest.mark.parametrize(("agent_name", "suggested"), [("my calc", "my_calc"), ("1st!", "_1st")])
def test_as_tool_on_an_agent_name_that_is_no_tool_name_suggests_as_tool_name(
    agent_name: str, suggested: str
) -> None:
    agent = SubAgent(name=agent_name, prompt="Add {{a}}")
    with pytest.raises(ConfigurationError) as caught:
        agent.as_tool()
    assert caught.value.field == "name"
    assert f"as_tool(name={suggested!r})" in str(caught.value)
    assert "with Tool" not in str(caught.value)
    assert agent.as_tool(name=suggested).name == suggested  # the suggestion is valid


def test_as_tool_with_an_invalid_name_suggests_a_valid_one() -> None:
    with pytest.raises(ConfigurationError, match=r"as_tool\(name='add_them'\)"):
        SubAgent(name="adder", prompt="Add {{a}}").as_tool(name="add them")


@pytest.mark.parametrize(
    ("output", "shown"), [(42, "got 42, an int instance"), (Answer(x=1), "got Answer(x=1)")]
)
def test_an_output_value_instead_of_a_type_says_output_must_be_a_type(
    output: object, shown: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt="p", output=output)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("output: must be a type")
    assert shown in message
    assert "arbitrary_types_allowed" not in message


def test_type_forms_that_are_not_classes_are_still_accepted_as_output() -> None:
    from typing import Annotated, Any, Literal, Optional

    from pydantic import Field
    from typing_extensions import TypeAliasType

    alias = TypeAliasType("alias", list[int])
    forms: list[Any] = [
        list[int], int | None, Optional[int], Literal["a", "b"],  # noqa: UP045
        Annotated[int, Field(ge=0)], Any, alias, dict[str, Answer],
    ]  # fmt: skip
    for form in forms:
        SubAgent(name="a", prompt="p", output=form)


def test_a_string_given_as_context_points_to_messages() -> None:
    agent = SubAgent(name="a", prompt="p", llm=ScriptedLLM([]))
    with pytest.raises(ConfigurationError) as caught:
        agent.run_sync("what is 1+2?")  # type: ignore[arg-type]
    assert caught.value.field == "context"
    assert "messages=" in str(caught.value) and "context={name: value}" in str(caught.value)


# --- instructions= -------------------------------------------------------------------------------


def test_static_instructions_follow_the_runtimes_system_prompt_and_keep_the_schema() -> None:
    llm = ScriptedLLM(['{"x": 1}'])
    agent = SubAgent(name="a", prompt="p", output=Answer, instructions="You are an accountant.")
    assert agent.run_sync(llm=llm).ok
    system = llm.requests[0].messages[0]
    assert system.role == "system"
    assert system.content.endswith("\n\nYou are an accountant.")
    assert '"x"' in system.content and "JSON schema" in system.content  # the schema stays
    assert system.content.startswith(SubAgent(name="a", prompt="p", output=Answer)._parts
                                     .systems.without_tools.content)  # fmt: skip


def test_instructions_as_a_function_get_the_runs_context_in_every_phase() -> None:
    seen: list[dict[str, object]] = []

    def instructions(context: object) -> str:
        seen.append(dict(context))  # type: ignore[call-overload]
        return f"Answer in {context['lang']}."  # type: ignore[index]

    llm = ScriptedLLM(["bad", '{"x": 1}'])
    agent = SubAgent(name="a", prompt="Say {{lang}}", output=Answer, instructions=instructions)
    step = agent.run_sync({"lang": "Danish"}, llm=llm, max_turns=1, return_retries=1)
    assert step.ok and seen == [{"lang": "Danish"}]  # called once per run
    for request in llm.requests:
        assert request.messages[0].content.endswith("\n\nAnswer in Danish.")
        assert "JSON schema" in request.messages[0].content


def test_instructions_from_a_pydantic_context_and_beside_a_callers_system_message() -> None:
    class Ctx(BaseModel):
        lang: str

    llm = ScriptedLLM(["ok"])
    agent = SubAgent(name="a", prompt="p", instructions=lambda c: f"In {c['lang']}.")
    agent.run_sync(Ctx(lang="Greek"), llm=llm)
    assert llm.requests[0].messages[0].content.endswith("\n\nIn Greek.")
    llm = ScriptedLLM(["ok"])
    agent.run_sync(
        Ctx(lang="Greek"), llm=llm,
        messages=[{"role": "system", "content": "Caller."}, {"role": "user", "content": "hi"}],
    )  # fmt: skip
    assert llm.requests[0].messages[0].content.endswith("\n\nIn Greek.\n\nCaller.")


def test_instructions_that_are_neither_text_nor_a_function_are_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt="p", instructions=42)  # type: ignore[arg-type]
    assert caught.value.field == "instructions"


def test_an_instructions_function_returning_no_text_is_refused_before_any_call() -> None:
    llm = ScriptedLLM(["ok"])
    agent = SubAgent(name="a", prompt="p", instructions=lambda c: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigurationError, match=r"^instructions: the function must return"):
        agent.run_sync(llm=llm)
    assert llm.requests == []


def test_a_system_override_without_output_instructions_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SubAgent(name="a", prompt="p", output=Answer, prompts={"system": "Be brief."})
    assert caught.value.field == "prompts"
    assert "{{output_instructions}}" in str(caught.value) and "instructions=" in str(caught.value)


def test_an_override_reading_an_unknown_variable_is_refused_at_construction_not_mid_run() -> None:
    with pytest.raises(ConfigurationError, match=r"'must_return_warning' reads \{\{retries\}\}"):
        SubAgent(name="a", prompt="p", prompts={"must_return_warning": "{{retries}} left"})


def test_structured_context_values_reach_the_prompt_as_json_not_repr() -> None:
    class Item(BaseModel):
        name: str

    class Ctx(BaseModel):
        item: Item
        tags: list[str]

    llm = ScriptedLLM(["ok"])
    SubAgent(name="a", prompt="{{item}} {{tags}} {{item.name}}").run_sync(
        Ctx(item=Item(name="tea"), tags=["x"]), llm=llm
    )
    assert llm.requests[0].messages[-1].content == '{"name": "tea"} ["x"] tea'


# --- tools that can never be offered --------------------------------------------------------------


def _adder(name: str = "calc") -> SubAgent[Answer]:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    return SubAgent(name=name, prompt="p", output=Answer, tools=[add])


def test_running_an_agent_with_tools_at_max_turns_1_warns_once_per_agent() -> None:
    agent = _adder()
    with pytest.warns(UserWarning, match=r"agent 'calc' has tools but runs with max_turns=1"):
        agent.run_sync(llm=ScriptedLLM(['{"x": 1}']), max_turns=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.run_sync(llm=ScriptedLLM(['{"x": 1}']), max_turns=1)  # not again
    with pytest.warns(UserWarning, match="max_turns=1"):
        _adder("other").check_options(max_turns=1, llm=ScriptedLLM([]))


def test_the_warning_points_at_the_callers_line() -> None:
    agent = _adder()
    with pytest.warns(UserWarning, match="max_turns=1") as caught:
        agent.check_options(max_turns=1, llm=ScriptedLLM([]))
    assert caught[0].filename == __file__


def test_run_sync_warns_at_the_callers_line() -> None:
    with pytest.warns(UserWarning, match="max_turns=1") as caught:
        _adder().run_sync(llm=ScriptedLLM(['{"x": 1}']), max_turns=1)
    assert caught[0].filename == __file__


def test_no_warning_without_tools_or_with_more_than_one_turn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _adder().run_sync(llm=ScriptedLLM(['{"x": 1}']), max_turns=2)
        SubAgent(name="a", prompt="p", output=Answer).run_sync(
            llm=ScriptedLLM(['{"x": 1}']), max_turns=1
        )


def test_start_warns_at_the_callers_line_too() -> None:
    agent = _adder()

    async def main() -> None:
        async with agent.start(llm=ScriptedLLM(['{"x": 1}']), max_turns=1) as run:
            await run.result()

    with pytest.warns(UserWarning, match="max_turns=1") as caught:
        anyio.run(main)
    assert caught[0].filename == __file__


# --- the conversation of a run, and going on with it ----------------------------------------


def test_a_steps_messages_are_the_conversation_then_the_final_reply() -> None:
    agent = SubAgent(name="chat", prompt="Say hi to {{name}}", max_turns=1)
    step = agent.run_sync({"name": "Ada"}, llm=ScriptedLLM(["Hi Ada!"]))
    assert [(m.role, m.content) for m in step.messages] == [
        ("user", "Say hi to Ada"), ("assistant", "Hi Ada!"),
    ]  # fmt: skip
    assert type(step).model_validate_json(step.model_dump_json()).messages == step.messages


def test_a_steps_messages_keep_what_the_context_policy_kept_of_failed_attempts() -> None:
    agent = SubAgent(name="n", prompt="A number?", output=Answer, max_turns=1)
    step = agent.run_sync(llm=ScriptedLLM(["no", "still no", '{"x": 1}']), return_retries=2)
    roles = [m.role for m in step.messages]
    # collapse: the task, the latest failed attempt and its feedback, the final reply
    assert roles == ["user", "assistant", "user", "assistant"]
    assert step.messages[1].content == "still no" and step.messages[-1].content == '{"x": 1}'


def test_a_chat_goes_on_from_the_message_history_of_the_step_before() -> None:
    agent = SubAgent(name="chat", prompt="{{question}}", max_turns=1)
    llm = ScriptedLLM(["Paris.", "About 2.1 million."])
    first = agent.run_sync({"question": "Capital of France?"}, llm=llm)
    second = agent.run_sync({"question": "Its population?"}, llm=llm,
                            message_history=first.messages)  # fmt: skip
    sent = llm.requests[1].messages
    assert [(m.role, m.content) for m in sent[1:3]] == [
        ("user", "Capital of France?"), ("assistant", "Paris."),
    ]  # fmt: skip
    assert sent[3].content.startswith("Its population?")  # (the final-turn notice joined)
    assert [m.content for m in second.messages] == [
        "Capital of France?",
        "Paris.",
        "Its population?",
        "About 2.1 million.",
    ]


def test_a_failed_runs_messages_end_with_the_reply_that_ended_it() -> None:
    agent = SubAgent(name="n", prompt="A number?", output=Answer, max_turns=1)
    llm = ScriptedLLM(["no", "still no", "Paris.", "About 2.1 million."])
    failed = agent.run_sync(llm=llm, return_retries=1)
    assert failed.failure is not None
    assert [(m.role, m.content) for m in failed.messages][-1] == ("assistant", "still no")
    chat = SubAgent(name="chat", prompt="{{question}}", max_turns=1)
    chat.run_sync({"question": "Capital of France?"}, llm=llm, message_history=failed.messages)
    roles = [m.role for m in llm.requests[-1].messages]
    assert all(a != b for a, b in itertools.pairwise(roles[1:]))  # no two in a row


def test_a_message_history_that_is_not_messages_is_refused_naming_it() -> None:
    agent = SubAgent(name="chat", prompt="hi", max_turns=1)
    with pytest.raises(ConfigurationError) as caught:
        agent.run_sync(llm=ScriptedLLM(["x"]), message_history="earlier")  # type: ignore[arg-type]
    assert caught.value.field == "message_history"
