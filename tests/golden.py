"""The golden corpus: scripted runs covering every row of the state table, recorded.

Each scenario runs an agent on a :class:`ScriptedLLM` (resuming it where it pauses) and
records what a user can observe: each part's Step as comparable JSON, the sequence of
events ``on_event`` saw, the states ``on_state`` was handed, and the spans (names, kinds,
parents, attributes, status, events). ``tests/golden/<scenario>.json`` holds the record
taken at a known-good commit; ``tests/test_golden.py`` runs every scenario again and
asserts the record is unchanged. What a run measures anew (durations, jittered delays,
elapsed time, trace ids) is left out.

    python tests/golden.py            # rewrite every record (after an intended change)
    python tests/golden.py NAME ...   # rewrite some

A change to a record is a change of behaviour: rewrite only when the change is intended,
and say so in the commit.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from opentelemetry.sdk.trace import ReadableSpan
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import Traced

from subagent import (
    Decision,
    ErrorKind,
    InputGuardrail,
    LLMError,
    LLMResponse,
    Message,
    ParseResult,
    ReplyPolicy,
    RetryPolicy,
    RunEvent,
    RunState,
    ScriptedLLM,
    Step,
    StopReason,
    SubAgent,
    Tool,
    ToolCall,
    ToolOutput,
    ToolPolicy,
    ToolSourceLostError,
    Usage,
    UsageLimits,
)

GOLDEN = Path(__file__).resolve().parent / "golden"

# Measured anew by every run: never part of a record.
_MEASURED = frozenset({"duration_s", "delay_s", "elapsed_s", "traceparent"})
_MEASURED_ATTRIBUTES = ("duration", "traceparent")


class Answer(BaseModel):
    """The corpus's output: one integer."""

    x: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def broken_tool(key: str) -> str:
    """A tool that raises (its error is fed back)."""
    raise ValueError(f"no such key: {key}")


def lost_tool(key: str) -> str:
    """A tool whose server is gone."""
    raise ToolSourceLostError("store server 'kv' went away", source="kv")


def deploy(env: str) -> str:
    """Deploy to an environment (needs approval)."""
    return f"deployed to {env}"


def final_answer(x: int) -> ToolOutput:
    """Give the final answer through a tool."""
    return ToolOutput({"x": x}, final=True)


def final_text(text: str) -> ToolOutput:
    """Give the final answer as text through a tool (validated by the output contract)."""
    return ToolOutput(text, final=True)


def calls(*items: tuple[str, dict[str, Any]], usage: Usage | None = None) -> LLMResponse:
    """A reply calling tools, with ids ``c1, c2, ...``."""
    return LLMResponse(
        tool_calls=[
            ToolCall(id=f"c{n}", name=name, arguments=arguments)
            for n, (name, arguments) in enumerate(items, 1)
        ],
        usage=usage or Usage(),
    )


def used(text: str, input_tokens: int, output_tokens: int) -> LLMResponse:
    """A text reply reporting its usage."""
    return LLMResponse(
        text=text, usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    )


GOOD = '{"x": 3}'
BAD = "three"
FAIL = '{"fail": "cannot do it"}'
OFFERS_FAIL = ReplyPolicy(allow_fail=True)  # the explicit fail is offered only when asked
ADD = ("add", {"a": 1, "b": 2})


def agent(**options: Any) -> SubAgent[Answer]:
    """The corpus's agent: an Answer, the add tool; options override."""
    settings: dict[str, Any] = {"name": "golden", "prompt": "Compute 1 + 2", "output": Answer,
                                "tools": [add], "max_turns": 3}  # fmt: skip
    settings.update(options)
    return SubAgent(**settings)


# --- recording ---------------------------------------------------------------------------


def _without_measured(value: Any) -> Any:
    if isinstance(value, dict):
        # A RunState's id is random, new for every state taken.
        drop = _MEASURED | {"id"} if "fingerprint" in value else _MEASURED
        return {k: _without_measured(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list | tuple):
        return [_without_measured(item) for item in value]
    return value


def _data(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _without_measured(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_data(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): _data(v) for k, v in value.items()}
    if hasattr(value, "value") and isinstance(value.value, str):  # an enum
        return value.value
    return value


def _event(event: RunEvent) -> dict[str, Any]:
    return {"event": type(event).__name__, **_data(event)}


def _attribute(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _span(span: ReadableSpan, names: Mapping[int, str]) -> dict[str, Any]:
    parent = span.parent.span_id if span.parent is not None else None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "parent": names.get(parent) if parent is not None else None,
        "status": span.status.status_code.name,
        "status_description": span.status.description,
        "attributes": {
            key: _attribute(value)
            for key, value in sorted((span.attributes or {}).items())
            if not any(part in key for part in _MEASURED_ATTRIBUTES)
        },
        "events": [
            {
                "name": event.name,
                "attributes": {
                    key: _attribute(value)
                    for key, value in sorted((event.attributes or {}).items())
                    if not any(part in key for part in _MEASURED_ATTRIBUTES)
                },
            }
            for event in span.events
        ],
    }


class Recorder:
    """What a scenario's runs show: steps, events, states and (at the end) spans."""

    def __init__(self) -> None:
        self.traced = Traced()
        self.parts: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._states: list[Any] = []

    def options(self) -> dict[str, Any]:
        """The run options that record (pass them to run / resume)."""
        return {
            "tracer_provider": self.traced.provider,
            "on_event": lambda event: self._events.append(_event(event)),
            "on_state": lambda state: self._states.append(_data(state)),
        }

    def part(self, step: Step[Any]) -> Step[Any]:
        """Record one part of the run (a run, or a resume), ending with ``step``."""
        self.parts.append({
            "step": _data(step),
            "events": _tool_events_in_call_order(self._events),
            "states": self._states,
        })  # fmt: skip
        self._events, self._states = [], []
        return step

    def raised(self, error: BaseException) -> None:
        """Record a part that raised (a bug in user code), with the turns it kept."""
        self.parts.append({
            "raised": type(error).__name__,
            "message": str(error),
            "turns": _data(list(getattr(error, "turns", ()))),
            "events": _tool_events_in_call_order(self._events),
            "states": self._states,
        })  # fmt: skip
        self._events, self._states = [], []

    def record(self) -> dict[str, Any]:
        spans = sorted(self.traced.spans, key=lambda s: (s.start_time or 0, s.name))
        names = {span.context.span_id: span.name for span in spans if span.context}
        recorded = [_span(span, names) for span in spans]
        return {"parts": self.parts, "spans": _in_call_order(recorded, _tool_span_key)}


# Parallel tool calls start and end in an order the event loop picks (asyncio and trio
# differ): a run of tool events or tool spans is recorded in call order instead.
_TOOL_EVENTS = {"ToolCallStarted": 0, "ToolCallEnded": 1}


def _tool_event_key(event: dict[str, Any]) -> tuple[str, int] | None:
    kind = _TOOL_EVENTS.get(event["event"])
    if kind is None:
        return None
    call_id = event["call"]["id"] if "call" in event else event["result"]["call_id"]
    return (call_id, kind)


def _tool_span_key(span: dict[str, Any]) -> tuple[str, int] | None:
    if not span["name"].startswith("execute_tool"):
        return None
    return (str(span["attributes"].get("gen_ai.tool.call.id")), 0)


def _in_call_order(
    items: list[dict[str, Any]], key: Callable[[dict[str, Any]], tuple[str, int] | None]
) -> list[dict[str, Any]]:
    ordered: list[dict[str, Any]] = []
    run: list[tuple[tuple[str, int], dict[str, Any]]] = []
    for item in [*items, None]:
        found = None if item is None else key(item)
        if found is not None and item is not None:
            run.append((found, item))
            continue
        ordered += [entry for _, entry in sorted(run, key=lambda pair: pair[0])]
        run = []
        if item is not None:
            ordered.append(item)
    return ordered


def _tool_events_in_call_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _in_call_order(events, _tool_event_key)


Scenario = Callable[[Recorder], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__] = function
    return function


async def run(
    recorder: Recorder, subagent: SubAgent[Any], script: list[Any], **options: Any
) -> Step[Any]:
    """Run ``subagent`` on ``script`` and record the part."""
    step = await subagent.run(llm=ScriptedLLM(script), **recorder.options(), **options)
    return recorder.part(step)


async def raises(
    recorder: Recorder, subagent: SubAgent[Any], script: list[Any], **options: Any
) -> None:
    """Run ``subagent``, expecting a bug in user code to raise out of the run."""
    try:
        await subagent.run(llm=ScriptedLLM(script), **recorder.options(), **options)
    except Exception as error:
        recorder.raised(error)
    else:
        raise AssertionError("the run was expected to raise")


# --- normal -------------------------------------------------------------------------------


@scenario
async def normal_returned(r: Recorder) -> None:
    await run(r, agent(), [GOOD])


@scenario
async def normal_gave_up(r: Recorder) -> None:
    await run(r, agent(reply_policy=OFFERS_FAIL), [FAIL])


@scenario
async def normal_used_tools_then_returned(r: Recorder) -> None:
    await run(r, agent(max_turns=4), [calls(ADD), GOOD])


@scenario
async def normal_missed_then_returned(r: Recorder) -> None:
    await run(r, agent(max_turns=4), [BAD, GOOD])


@scenario
async def normal_to_must_return_after_tools(r: Recorder) -> None:
    await run(r, agent(max_turns=2, return_retries=1), [calls(ADD), GOOD])


@scenario
async def normal_tool_error_fed_back(r: Recorder) -> None:
    subagent = agent(tools=[add, broken_tool], max_turns=4)
    await run(r, subagent, [calls(("broken_tool", {"key": "k"})), calls(ADD), GOOD])


@scenario
async def normal_invalid_arguments_and_unknown_tool(r: Recorder) -> None:
    reply = calls(("add", {"a": "one", "b": 2}), ("nope", {}))
    await run(r, agent(max_turns=4), [reply, GOOD])


@scenario
async def normal_parallel_calls(r: Recorder) -> None:
    await run(r, agent(max_turns=3), [calls(ADD, ("add", {"a": 2, "b": 2})), GOOD])


@scenario
async def normal_calls_past_the_per_reply_limit(r: Recorder) -> None:
    subagent = agent(tool_policy=ToolPolicy(max_tool_calls_per_turn=1, parallel_tool_calls=False))
    await run(r, subagent, [calls(ADD, ("add", {"a": 5, "b": 5})), GOOD])


@scenario
async def normal_final_tool_answer(r: Recorder) -> None:
    subagent = agent(tools=[add, final_answer])
    await run(r, subagent, [calls(("final_answer", {"x": 3})), GOOD])


@scenario
async def normal_invalid_final_tool_answer(r: Recorder) -> None:
    subagent = agent(tools=[final_text], max_turns=3, return_retries=1)
    await run(r, subagent, [calls(("final_text", {"text": "three"})), BAD, GOOD])


@scenario
async def normal_cut_reply(r: Recorder) -> None:
    cut = LLMResponse(text='{"x": ', stop_reason=StopReason.LENGTH)
    await run(r, agent(), [cut, GOOD])


@scenario
async def normal_content_filter(r: Recorder) -> None:
    blocked = LLMResponse(text="", stop_reason=StopReason.CONTENT_FILTER)
    await run(r, agent(), [blocked])


@scenario
async def normal_react_tool_then_answer(r: Recorder) -> None:
    action = 'Action: {"tool": "add", "input": {"a": 1, "b": 2}}'
    await run(r, agent(tool_policy=ToolPolicy(protocol="react")), [action, "Final Answer: " + GOOD])


# --- must_return and retry ---------------------------------------------------------------


@scenario
async def must_return_returned(r: Recorder) -> None:
    await run(r, agent(tools=[]), [GOOD], max_turns=1)


@scenario
async def must_return_gave_up(r: Recorder) -> None:
    await run(r, agent(tools=[], reply_policy=OFFERS_FAIL), [FAIL], max_turns=1)


@scenario
async def must_return_missed_without_retries(r: Recorder) -> None:
    await run(r, agent(tools=[]), [BAD], max_turns=1)


@scenario
async def must_return_tool_call_refused(r: Recorder) -> None:
    await run(r, agent(max_turns=2, return_retries=1), [BAD, calls(ADD), GOOD])


@scenario
async def retry_returned(r: Recorder) -> None:
    await run(r, agent(tools=[]), [BAD, BAD, GOOD], max_turns=1, return_retries=2)


@scenario
async def retry_exhausted(r: Recorder) -> None:
    await run(r, agent(tools=[]), [BAD, BAD, BAD], max_turns=1, return_retries=2)


@scenario
async def retry_gave_up(r: Recorder) -> None:
    await run(r, agent(tools=[], reply_policy=OFFERS_FAIL), [BAD, FAIL], max_turns=1,
              return_retries=2)  # fmt: skip


@scenario
async def retry_accumulate(r: Recorder) -> None:
    subagent = agent(tools=[], reply_policy=ReplyPolicy(context_policy="accumulate"))
    await run(r, subagent, [BAD, BAD, GOOD], max_turns=1, return_retries=2)


@scenario
async def retry_quote(r: Recorder) -> None:
    subagent = agent(tools=[], reply_policy=ReplyPolicy(context_policy="quote"))
    await run(r, subagent, [BAD, BAD, GOOD], max_turns=1, return_retries=2)


@scenario
async def retry_validator_rejects(r: Recorder) -> None:
    def positive(answer: Answer) -> dict[str, Any]:
        return {"valid": answer.x > 0, "errors": [] if answer.x > 0 else ["x must be positive"]}

    subagent = agent(tools=[], validators=[positive])
    await run(r, subagent, ['{"x": -1}', GOOD], max_turns=1, return_retries=1)


# --- aborts --------------------------------------------------------------------------------


@scenario
async def llm_failure_in_normal(r: Recorder) -> None:
    error = LLMError(ErrorKind.AUTHENTICATION, "bad key", status_code=401)
    await run(r, agent(), [error])


@scenario
async def llm_failure_in_retry(r: Recorder) -> None:
    error = LLMError(ErrorKind.BAD_REQUEST, "no", status_code=400)
    await run(r, agent(tools=[]), [BAD, error], max_turns=1, return_retries=1)


@scenario
async def transport_retry_within_a_turn(r: Recorder) -> None:
    busy = LLMError(ErrorKind.RATE_LIMIT, "slow down", status_code=429)
    policy = RetryPolicy(max_attempts=2, initial_delay=0.001, jitter=0.0)
    await run(r, agent(), [busy, GOOD], retry_policy=policy)


@scenario
async def call_timeout(r: Recorder) -> None:
    async def hang(request: Any) -> str:
        await anyio.sleep_forever()
        raise AssertionError

    policy = RetryPolicy(max_attempts=1)
    await run(r, agent(), [hang], timeout=0.01, retry_policy=policy)


@scenario
async def mission_timeout_mid_tool(r: Recorder) -> None:
    async def wait(key: str) -> str:
        """Wait for ever."""
        await anyio.sleep_forever()
        raise AssertionError

    subagent = agent(tools=[Tool(wait, run_in_thread=False)])
    await run(r, subagent, [calls(("wait", {"key": "k"}))], mission_timeout=0.05)


@scenario
async def stopped_mid_tool(r: Recorder) -> None:
    started = anyio.Event()

    async def wait(key: str) -> str:
        """Wait for ever."""
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    subagent = agent(tools=[Tool(wait, run_in_thread=False)])
    async with subagent.start(
        llm=ScriptedLLM([calls(("wait", {"key": "k"}))]), **r.options()
    ) as handle:
        await started.wait()
        handle.stop()
        r.part(await handle.result())


@scenario
async def tool_server_lost(r: Recorder) -> None:
    subagent = agent(tools=[add, lost_tool], tool_policy=ToolPolicy(parallel_tool_calls=False))
    await run(r, subagent, [calls(ADD, ("lost_tool", {"key": "k"})), GOOD])


# --- usage limits -----------------------------------------------------------------------


@scenario
async def limit_before_call(r: Recorder) -> None:
    limits = UsageLimits(max_total_tokens=20)
    await run(r, agent(tools=[]), [used(BAD, 15, 10), GOOD], max_turns=1, return_retries=2,
              usage_limits=limits)  # fmt: skip


@scenario
async def limit_after_reply(r: Recorder) -> None:
    limits = UsageLimits(max_output_tokens=9)
    await run(r, agent(), [used(GOOD, 5, 10)], usage_limits=limits)


@scenario
async def limit_before_tools(r: Recorder) -> None:
    limits = UsageLimits(max_tool_calls=1)
    await run(r, agent(), [calls(ADD, ("add", {"a": 2, "b": 2})), GOOD], usage_limits=limits)


# --- input guardrails ------------------------------------------------------------------


def no_homework(messages: Sequence[Message]) -> str | None:
    """An input guardrail: a task about homework is refused."""
    return "no homework here" if "homework" in messages[-1].content else None


@scenario
async def input_refused_before_any_call(r: Recorder) -> None:
    subagent = agent(prompt="Do my homework: 1 + 2", hooks=[InputGuardrail(no_homework)])
    await run(r, subagent, [GOOD])


# --- approval and resume ---------------------------------------------------------------


def ops(**options: Any) -> SubAgent[Answer]:
    return agent(name="ops", tools=[Tool(deploy, requires_approval=True, run_in_thread=False), add],
                 max_turns=4, **options)  # fmt: skip


async def paused_then(r: Recorder, decisions: list[dict[str, Decision]], script: list[Any]) -> None:
    model = ScriptedLLM(script)
    subagent = ops()
    step = r.part(await subagent.run(llm=model, **r.options()))
    for decided in decisions:
        assert step.state is not None, "the run was expected to pause"
        state = RunState.model_validate_json(step.state.model_dump_json())  # across JSON
        try:
            step = r.part(await subagent.resume(state, decided, llm=model, **r.options()))
        except Exception as error:  # refused before anything ran (an edit that does not fit)
            r.raised(error)
            return


@scenario
async def approval_approved(r: Recorder) -> None:
    await paused_then(r, [{"c2": Decision.approve()}],
                      [calls(ADD, ("deploy", {"env": "prod"})), GOOD])  # fmt: skip


@scenario
async def approval_denied(r: Recorder) -> None:
    await paused_then(r, [{"c1": Decision.deny("not today")}],
                      [calls(("deploy", {"env": "prod"})), GOOD])  # fmt: skip


@scenario
async def approval_edited(r: Recorder) -> None:
    await paused_then(r, [{"c1": Decision.edit({"env": "staging"})}],
                      [calls(("deploy", {"env": "prod"})), GOOD])  # fmt: skip


@scenario
async def approval_edited_invalid(r: Recorder) -> None:
    await paused_then(r, [{"c1": Decision.edit({"env": 5})}],
                      [calls(("deploy", {"env": "prod"})), GOOD])  # fmt: skip


@scenario
async def approval_two_pauses(r: Recorder) -> None:
    await paused_then(
        r,
        [{"c1": Decision.approve()}, {"c1": Decision.deny()}],
        [calls(("deploy", {"env": "staging"})), calls(("deploy", {"env": "prod"})), GOOD],
    )


@scenario
async def approval_by_policy_then_limit(r: Recorder) -> None:
    subagent = agent(
        name="ops", tool_policy=ToolPolicy(approval=lambda name, arguments: arguments.get("a") == 1)
    )
    model = ScriptedLLM([calls(ADD, ("add", {"a": 2, "b": 2})), GOOD])
    step = r.part(await subagent.run(llm=model, **r.options()))
    assert step.state is not None
    limits = UsageLimits(max_tool_calls=1)
    r.part(await subagent.resume(step.state, {"c1": True}, llm=model, usage_limits=limits,
                                 **r.options()))  # fmt: skip


@scenario
async def resumed_from_a_saved_state(r: Recorder) -> None:
    states: list[RunState] = []
    options = r.options()
    options["on_state"] = states.append
    subagent = agent(tools=[], max_turns=1, return_retries=2)
    await subagent.run(llm=ScriptedLLM([BAD, BAD, GOOD]), **options)
    r.part(await subagent.resume(states[0], llm=ScriptedLLM([BAD, GOOD]), **r.options()))


# --- bugs in user code -----------------------------------------------------------------


@scenario
async def parser_raises(r: Recorder) -> None:
    def parser(text: str) -> ParseResult:
        raise RuntimeError("parser bug")

    await raises(r, agent(output=parser, tools=[]), [GOOD], max_turns=1)


@scenario
async def validator_raises(r: Recorder) -> None:
    def check(answer: Answer) -> bool:
        raise RuntimeError("validator bug")

    await raises(r, agent(validators=[check]), [calls(ADD), GOOD])


@scenario
async def template_raises_mid_run(r: Recorder) -> None:
    from subagent import MissingVariableError
    from subagent._templates import TemplateSet

    render = TemplateSet.render

    def failing(self: TemplateSet, name: str, /, **data: Any) -> str:
        if name == "error_feedback":
            raise MissingVariableError("no_such_variable", name)
        return render(self, name, **data)

    TemplateSet.render = failing  # type: ignore[method-assign]
    try:
        await raises(r, agent(max_turns=3), [calls(ADD), BAD, GOOD])
    finally:
        TemplateSet.render = render  # type: ignore[method-assign]


@scenario
async def nested_agent_as_tool(r: Recorder) -> None:
    child = agent(name="child", tools=[], max_turns=1, prompt="Compute {{question}}")
    parent = agent(name="parent", tools=[child.as_tool(description="Ask the child.")])
    script = [calls(("child", {"question": "1 + 2"})), GOOD, GOOD]
    await run(r, parent, script)


# --- the command line -------------------------------------------------------------------


async def record(name: str) -> dict[str, Any]:
    """Run scenario ``name`` and return its record."""
    recorder = Recorder()
    await SCENARIOS[name](recorder)
    return recorder.record()


def path_of(name: str) -> Path:
    return GOLDEN / f"{name}.json"


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(names: list[str]) -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name in names or sorted(SCENARIOS):
        data = anyio.run(record, name)
        path_of(name).write_text(dumps(data), encoding="utf-8")
        print(f"wrote {path_of(name).relative_to(GOLDEN.parent.parent)}")


if __name__ == "__main__":
    # Through the module's import name: the fingerprints name functions by their module.
    import golden

    golden.main(sys.argv[1:])
