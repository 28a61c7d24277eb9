"""The systems `make eval-bfcl` compares, each a short adapter from a BFCL case to its calls.

Every system gets the same case (the question's messages, the function docs as OpenAI tools
or as JSON in the prompt), the same server, model, temperature, seed and ``max_tokens``, and
answers with :class:`Outcome`: the calls it ends with (what BFCL grades), the calls of its
first attempt (for the salvage rate), and what it cost.

- ``raw``: one chat completion with the functions as native ``tools``; the answer is the
  reply's native tool calls. The report also grades the same reply's *text* read leniently
  as a JSON call (``raw-lenient``: the floor a user writes in a few lines).
- ``subagent-rN``: a ``SubAgent`` whose output *is* the call: ``max_turns=1`` (one work
  turn: the answer), ``return_retries=N``, the functions in the system prompt, the answer a
  JSON list of calls validated against the functions' JSON schemas (an unknown function, a
  missing or mistyped argument, a value outside an enum is named in the feedback of a
  correction turn).
- ``subagent-r1-quote``: the same with ``context_policy="quote"``: a failed attempt is
  quoted inside the correction's feedback instead of sent back as the model's own turn.
- ``subagent-tools-text``: the functions as tools, the answer free text (no output schema
  in the prompt), ``max_turns=3``: a call ends the run; invalid arguments are fed back and
  the model may call again; prose is no call.
- ``subagent-tools-rN`` / ``subagent-react-rN``: the functions as tools (from their JSON
  schemas) under the native or the ReAct protocol; a call ends the run with the call(s) as
  the output (``ToolOutput(final=True)``), as BFCL wants a call, not its result.
- ``pydantic-ai`` and ``openai-agents``: the peers with their defaults, the functions
  declared from their JSON schemas; the answer is the tool calls of the first model
  response (run in the peers' venv: see ``bfcl_peers.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from bfcl_data import Case, function_names, grade, openai_tools
from pydantic import BaseModel, Field, RootModel, field_validator, model_validator

__all__ = [
    "MAX_TOKENS",
    "SEED",
    "SYSTEMS",
    "Outcome",
    "Server",
    "System",
    "calls_in_text",
    "decoded_arguments",
    "system_named",
]

MAX_TOKENS = 256
"""Room for three or four calls with their arguments (parallel cases), not for rambling."""
SEED = 7
TEMPERATURE = 0.0
CALL_TIMEOUT = 300.0


@dataclass(frozen=True)
class Server:
    """Where the model is: an OpenAI-compatible base URL and the model's name there."""

    base_url: str
    model: str = "local"
    setup: str = "template"

    @property
    def settings(self) -> dict[str, Any]:
        """The sampling settings every system sends."""
        return {"temperature": TEMPERATURE, "seed": SEED, "max_tokens": MAX_TOKENS}


@dataclass
class Outcome:
    """What one system did with one case.

    Attributes:
        calls: The calls it ended with, ``{"name": ..., "arguments": {...}}`` each.
        first_calls: The calls of its first attempt (``None``: a single attempt).
        text: The last reply's text.
        llm_calls: Requests sent to the model.
        prompt_tokens: Prompt tokens over all requests.
        completion_tokens: Completion tokens over all requests.
        turns: One compact record per model reply: its text, its calls, the feedback.
        error: Why the system failed, if it did (a failed run is graded as no call).
        seconds: Wall time of the case.
    """

    calls: list[dict[str, Any]] = field(default_factory=list)
    first_calls: list[dict[str, Any]] | None = None
    text: str = ""
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON object."""
        return asdict(self)


def decoded_arguments(raw: Any) -> Any:
    """Tool-call arguments as JSON values (a JSON string decoded; text that is not JSON kept)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw


def calls_in_text(text: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """Calls written as JSON anywhere in ``text``, read leniently (``raw-lenient``).

    Every JSON object in the text (inside a fence, ``<tool_call>`` tags or prose) whose
    ``name`` is one of ``names`` counts, with its ``arguments`` (or ``parameters``); a JSON
    list of such objects too. A few lines, as any user of a raw call could write them.
    """
    decoder = json.JSONDecoder()
    calls: list[dict[str, Any]] = []
    position = 0
    while (
        start := min(
            (i for i in (text.find("{", position), text.find("[", position)) if i >= 0), default=-1
        )
    ) >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and item.get("name") in names:
                arguments = decoded_arguments(item.get("arguments", item.get("parameters", {})))
                calls.append({"name": item["name"], "arguments": arguments})
        position = end
    return calls


# --- raw ------------------------------------------------------------------------------------


async def run_raw(
    case: Case, server: Server, client: httpx.AsyncClient, system: str | None = None
) -> Outcome:
    """One chat completion with the functions as native tools (and ``system``, if given)."""
    prompt = [] if system is None else [{"role": "system", "content": system}]
    body: dict[str, Any] = {
        "model": server.model,
        "messages": [*prompt, *case.messages],
        "tools": openai_tools(case.functions),
        **server.settings,
    }
    if server.setup == "tools":
        # OpenAI's default with tools; llama-cpp-python's tools format takes a missing
        # tool_choice as "none" and never calls.
        body["tool_choice"] = "auto"
    response = await client.post(f"{server.base_url}/chat/completions", json=body)
    response.raise_for_status()
    data = response.json()
    message = data["choices"][0]["message"]
    calls = [
        {
            "name": call["function"]["name"],
            "arguments": decoded_arguments(call["function"]["arguments"]),
        }
        for call in message.get("tool_calls") or []
    ]
    usage = data.get("usage") or {}
    text = message.get("content") or ""
    return Outcome(
        calls=calls,
        text=text,
        llm_calls=1,
        prompt_tokens=usage.get("prompt_tokens", 0),
        completion_tokens=usage.get("completion_tokens", 0),
        turns=[{"text": text, "calls": calls}],
    )


# --- subagent ---------------------------------------------------------------------------------


class Call(BaseModel):
    """One function call: the function's name and its arguments."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_as_the_wire_writes_them(cls, value: Any) -> Any:
        # The chat template shows the model its earlier native calls with the arguments as
        # the wire format's JSON string, and a correction turn copies that form.
        return decoded_arguments(value) if isinstance(value, str) else value


CALLS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    },
}


class Calls(RootModel[list[Call]]):
    """The calls that do what the user asks (``[]`` when no function fits)."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        # What the model is shown: the shape alone, without pydantic's titles, $defs and
        # docstrings (a small model copies those back instead of answering).
        return CALLS_SCHEMA

    @model_validator(mode="before")
    @classmethod
    def _one_call_is_a_list(cls, value: Any) -> Any:
        # A single call object is the commonest reply of a small model: take it as a list
        # of one rather than spend a correction turn on the brackets.
        return [value] if isinstance(value, dict) else value


def _schema_problems(call: Call, schemas: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What is wrong with ``call`` against the functions' JSON schemas, in words."""
    import jsonschema

    if call.name not in schemas:
        return [
            f"there is no function named {call.name!r} (the functions are: "
            f"{', '.join(schemas)}). If none of them does what the user asks, "
            "answer with an empty list []."
        ]
    validator = jsonschema.Draft202012Validator(schemas[call.name])
    problems = []
    for error in sorted(validator.iter_errors(call.arguments), key=lambda e: list(e.path)):
        where = "/".join(str(part) for part in error.absolute_path)
        argument = f"argument {where!r}" if where else "the arguments"
        if error.validator == "enum":
            allowed = ", ".join(json.dumps(v) for v in error.validator_value)
            problems.append(
                f"{call.name}: {argument} is {json.dumps(error.instance)}; "
                f"allowed values: {allowed}"
            )
        elif error.validator == "type":
            problems.append(
                f"{call.name}: {argument} must be of type {error.validator_value}, "
                f"got {json.dumps(error.instance)}"
            )
        elif error.validator == "required":
            problems.append(f"{call.name}: {error.message} (a required argument)")
        else:
            problems.append(f"{call.name}: {argument}: {error.message}")
    return problems


def _validator(case: Case) -> Callable[[Any], Any]:
    schemas = {
        tool["function"]["name"]: tool["function"]["parameters"]
        for tool in openai_tools(case.functions)
    }

    def check_calls(calls: Calls) -> Any:
        from subagent import Validation

        problems = [problem for call in calls.root for problem in _schema_problems(call, schemas)]
        return Validation.fail(*problems) if problems else Validation.ok()

    return check_calls


def oracle_feedback(case: Case, calls: Sequence[Mapping[str, Any]]) -> str | None:
    """What BFCL's checker finds wrong with ``calls`` against the ground truth (``None``: right).

    The feedback of the oracle run (``subagent-oracle-r1``): it knows the answer, which no
    real validator does, so that run measures how much a correction turn can buy on this
    model when the feedback is as good as it gets, not what subagent's own feedback buys.
    """
    correct, error = grade(case, calls)
    if correct:
        return None
    if case.expects_no_call:
        return "none of the functions does what the user asks: call none, answer []"
    needed = len(case.answer or ())
    if not calls or error.startswith("Wrong number of functions"):
        return f"the request needs {needed} function call(s); you made {len(calls)}"
    return f"the answer is wrong: {error}"


def _oracle(case: Case) -> Callable[[Any], Any]:
    def check_against_the_answer(calls: Calls) -> Any:
        from subagent import Validation

        wrong = oracle_feedback(case, [c.model_dump() for c in calls.root])
        return Validation.ok() if wrong is None else Validation.fail(wrong)

    return check_against_the_answer


CONTRACT_PROMPT = (
    "You can call these functions (JSON schemas of their arguments):\n{{functions}}\n\n"
    "Answer the user's request with the function call(s) it asks for, as a JSON list of "
    '{"name": <function name>, "arguments": {<argument>: <value>}} objects: one call for '
    "each thing the user asks for, and no call the request does not need. If none of the "
    "functions can do what the user asks, answer with an empty list []."
)


def _compact_functions(case: Case) -> str:
    return "\n".join(json.dumps(tool["function"]) for tool in openai_tools(case.functions))


def _native_calls(tool_calls: Sequence[Any]) -> list[dict[str, Any]]:
    """A turn's tool calls as ``{"name": ..., "arguments": {...}}``."""
    return [{"name": c.name, "arguments": decoded_arguments(c.arguments)} for c in tool_calls]


def _step_outcome(
    step: Any, calls: list[dict[str, Any]], first_calls: list[dict[str, Any]] | None
) -> Outcome:
    """A subagent run's outcome: ``calls`` it ended with, every turn compacted, its cost."""
    turns = [
        {"phase_after": turn.phase_after, "text": turn.reply,
         "calls": _native_calls(turn.tool_calls), "feedback": turn.feedback or turn.error}
        for turn in step.turns
    ]  # fmt: skip
    return Outcome(
        calls=calls,
        first_calls=first_calls,
        text=step.turns[-1].reply if step.turns else "",
        llm_calls=len(step.turns),
        prompt_tokens=sum(turn.usage.input_tokens for turn in step.turns),
        completion_tokens=sum(turn.usage.output_tokens for turn in step.turns),
        turns=turns,
        error=None if step.failure is None else f"{step.failure.reason}: {step.failure.message}",
    )


def _output_calls(step: Any) -> list[dict[str, Any]]:
    """The calls of a run whose output is :class:`Calls` (none when it failed)."""
    return [c.model_dump() for c in step.output.root] if step.output is not None else []


def _first_attempt(step: Any, names: Sequence[str]) -> list[dict[str, Any]]:
    """The calls the first turn's reply made (or wrote), whether or not they were valid."""
    if not step.turns:
        return []
    first = step.turns[0]
    if first.tool_calls:
        return _native_calls(first.tool_calls)
    from subagent.parsers import extract_json

    found = extract_json(first.reply)
    if found.ok:
        try:
            return [c.model_dump() for c in Calls.model_validate(found.value).root]
        except ValueError:
            pass
    return calls_in_text(first.reply, names)


async def run_subagent_contract(
    case: Case, server: Server, llm: Any, *, return_retries: int, context_policy: str = "collapse"
) -> Outcome:
    """The call as the agent's output: one work turn, ``return_retries`` corrections."""
    from subagent import SubAgent

    agent: SubAgent[Calls] = SubAgent(
        name="function_caller",
        output=Calls,
        validators=[_validator(case)],
        max_turns=1,
        return_retries=return_retries,
        context_policy=context_policy,  # type: ignore[arg-type]
        settings=server.settings,
        timeout=CALL_TIMEOUT,
    )
    functions = _compact_functions(case)
    system = CONTRACT_PROMPT.replace("{{functions}}", functions)
    messages = [{"role": "system", "content": system}, *case.messages]
    step = await agent.run(llm=llm, messages=messages)
    first = _first_attempt(step, function_names(case)) if return_retries else None
    return _step_outcome(step, _output_calls(step), first)


def _recording_tools(
    case: Case, final_value: Callable[[list[dict[str, Any]]], Any], *, final: bool = True
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The case's functions as schema tools that record each call (and end the run).

    Returns the tools and the list they append the calls to; each call's
    ``ToolOutput(final=final)`` carries ``final_value`` of the calls of its turn so far. A
    later turn (a correction after its answer was turned down) starts the list afresh, so
    a rejected turn's calls never reach the next answer.
    """
    from subagent import RunContext, Tool, ToolOutput

    made: list[dict[str, Any]] = []
    recorded_turn = [0]

    def recorder(name: str) -> Callable[..., Any]:
        def record(ctx: RunContext[Any], **arguments: Any) -> ToolOutput:
            if ctx.turn != recorded_turn[0]:
                recorded_turn[0] = ctx.turn
                made.clear()
            made.append({"name": name, "arguments": arguments})
            return ToolOutput(final_value(made), final=final)

        return record

    tools = [
        Tool.from_schema(
            name=tool["function"]["name"],
            description=tool["function"].get("description", ""),
            parameters=tool["function"]["parameters"],
            function=recorder(tool["function"]["name"]),
            run_in_thread=False,
        )
        for tool in openai_tools(case.functions)
    ]
    return tools, made


CALLS_PROMPT = (
    "Do what the user asks by calling the functions you are given. Your answer is the JSON "
    'list of every call the request needs, as {"name": <function name>, "arguments": '
    "{<argument>: <value>}} objects: one call for each thing the user asks for, and no call "
    "the request does not need; [] when none of the functions can do it."
)


async def run_subagent_tools(
    case: Case,
    server: Server,
    llm: Any,
    *,
    protocol: str,
    return_retries: int,
    system: str | None = None,
    system_template: str | None = None,
    oracle: bool = False,
) -> Outcome:
    """The functions as tools; the first valid call(s) end the run as its output.

    ``system`` is a system message put before the case's messages; ``system_template``
    replaces subagent's own system prompt (its ``system`` template) instead. ``oracle``
    adds a validator that checks the answer against the ground truth (:func:`oracle_feedback`).

    Every call of the turn is recorded before the run judges the first final value, so the
    output is all of them: the tools hand back the shared list itself, not a copy.
    """
    from subagent import SubAgent

    tools, _ = _recording_tools(case, lambda made: made)
    agent: SubAgent[Calls] = SubAgent(
        name="function_caller",
        output=Calls,
        tools=tools,
        validators=[_validator(case), *([_oracle(case)] if oracle else [])],
        max_turns=2,
        return_retries=return_retries,
        settings=server.settings,
        timeout=CALL_TIMEOUT,
        protocol=protocol,  # type: ignore[arg-type]
        # The output instructions are the whole system prompt: no agent preamble, no tool
        # list (the chat template lists the tools), no explicit-fail escape.
        prompts={}
        if system_template is None
        else {"system": "{{output_instructions}}", "output_json": system_template},
    )
    prompt = [] if system is None else [{"role": "system", "content": system}]
    step = await agent.run(llm=llm, messages=[*prompt, *case.messages])
    return _step_outcome(step, _output_calls(step), _first_attempt(step, function_names(case)))


async def run_subagent_tools_text(case: Case, server: Server, llm: Any) -> Outcome:
    """The functions as tools, the answer free text: a call ends the run, prose means none.

    The model's own way of calling (its template shows it the tools; it writes the call as
    text, which ``text_tool_calls`` reads) with nothing else asked of it: no output schema
    in the prompt. ``max_turns=3``: a call whose arguments fail the schema is fed back and
    the model may call again in the next (still ``normal``) turn.
    """
    from subagent import SubAgent

    tools, made = _recording_tools(case, json.dumps)
    agent: SubAgent[Any] = SubAgent(
        name="function_caller",
        tools=tools,
        max_turns=3,
        settings=server.settings,
        timeout=CALL_TIMEOUT,
    )
    step = await agent.run(llm=llm, messages=list(case.messages))
    called = step.ok and made and step.output == json.dumps(made)
    first = _native_calls(step.turns[0].tool_calls) if step.turns else []
    return _step_outcome(step, list(made) if called else [], first)


def distinct_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``calls`` without the ones that repeat an earlier call exactly, in order."""
    kept: list[dict[str, Any]] = []
    for call in calls:
        if dict(call) not in kept:
            kept.append(dict(call))
    return kept


def chosen_calls(
    native: Sequence[Mapping[str, Any]], listed: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The answer form chosen per request, from the two forms' answers to it.

    ``native`` is the model's own call syntax (``subagent-prompted-r1``), which answers a
    one-call request best; ``listed`` the list-of-calls contract (``subagent-r1``), which
    answers a request for several things best. The list is taken when it extends the native
    answer: the native answer is one call, and the list holds it and at least one other
    distinct call. Where the forms disagree (on the call itself, or on whether to call at
    all) the native form, the better of the two on one-call and no-call requests, is trusted.
    """
    several = distinct_calls(listed)
    if len(native) == 1 and len(several) >= 2 and dict(native[0]) in several:
        return several
    return [dict(call) for call in native]


CHOOSE_PARTS: tuple[str, str] = ("subagent-prompted-r1", "subagent-r1")
"""The systems ``subagent-choose-r1`` is made of: (native form, list contract)."""


# --- the registry ----------------------------------------------------------------------------

Runner = Callable[[Case, Server, Any], Awaitable[Outcome]]


@dataclass(frozen=True)
class System:
    """One system of the comparison.

    Attributes:
        name: Its stable name (it keys the records).
        title: What the report calls it.
        kind: ``raw``, ``subagent`` or ``peer`` (which client it needs).
        run: The adapter.
        venv: ``main`` (the project's venv) or ``peers`` (``make bench-peers``'s).
    """

    name: str
    title: str
    kind: str
    run: Runner
    venv: str = "main"


def _subagent_contract(n: int, policy: str = "collapse") -> System:
    async def run(case: Case, server: Server, llm: Any) -> Outcome:
        return await run_subagent_contract(
            case, server, llm, return_retries=n, context_policy=policy
        )

    suffix = "" if policy == "collapse" else f"-{policy}"
    title = f"subagent, the call as output, return_retries={n}" + (
        "" if policy == "collapse" else f", context_policy={policy!r}"
    )
    return System(f"subagent-r{n}{suffix}", title, "subagent", run)


def _subagent_tools(protocol: str, n: int) -> System:
    async def run(case: Case, server: Server, llm: Any) -> Outcome:
        return await run_subagent_tools(case, server, llm, protocol=protocol, return_retries=n)

    label = "native tool calls" if protocol == "native" else "ReAct"
    prefix = "subagent-tools" if protocol == "native" else "subagent-react"
    return System(
        f"{prefix}-r{n}", f"subagent, {label}, max_turns=2, return_retries={n}", "subagent", run
    )


async def _raw(case: Case, server: Server, client: Any) -> Outcome:
    return await run_raw(case, server, client)


async def _raw_prompted(case: Case, server: Server, client: Any) -> Outcome:
    return await run_raw(case, server, client, system=CALLS_PROMPT)


async def _peer(case: Case, server: Server, name: Any) -> Outcome:
    import bfcl_peers

    return await bfcl_peers.run_peer(name, case, server)


SYSTEMS: tuple[System, ...] = (
    System("raw", "raw chat completion, native tools", "raw", _raw),
    System(
        "raw-prompted",
        "raw chat completion, native tools, with subagent-calls-r1's system prompt",
        "raw",
        _raw_prompted,
    ),
    *(_subagent_contract(n) for n in (0, 1, 2)),
    _subagent_contract(1, "quote"),
    _subagent_tools("native", 1),
    System(
        "subagent-tools-text",
        "subagent, native tool calls read from text, free-text answer, max_turns=3",
        "subagent",
        run_subagent_tools_text,
    ),
    _subagent_tools("react", 1),
    System(
        "subagent-prompted-r1",
        "subagent, native tool calls, raw-prompted's prompt as its system prompt, "
        "max_turns=2, return_retries=1",
        "subagent",
        lambda case, server, llm: run_subagent_tools(
            case, server, llm, protocol="native", return_retries=1, system_template=CALLS_PROMPT
        ),
    ),
    System(
        "subagent-oracle-r1",
        "subagent-prompted-r1 told by BFCL's checker what is wrong (knows the answer: the "
        "ceiling of a correction turn, not a system a user can run)",
        "subagent",
        lambda case, server, llm: run_subagent_tools(
            case,
            server,
            llm,
            protocol="native",
            return_retries=1,
            system_template=CALLS_PROMPT,
            oracle=True,
        ),
    ),
    System(
        "subagent-calls-r1",
        "subagent, native tool calls asked for one per request, max_turns=2, return_retries=1",
        "subagent",
        lambda case, server, llm: run_subagent_tools(
            case, server, llm, protocol="native", return_retries=1, system=CALLS_PROMPT
        ),
    ),
    System("pydantic-ai", "pydantic-ai, defaults", "peer", _peer, venv="peers"),
    System("openai-agents", "OpenAI Agents SDK, defaults", "peer", _peer, venv="peers"),
    System(
        "openai-agents-auto",
        "OpenAI Agents SDK, tool_choice='auto' (OpenAI's default, which the SDK leaves unsent)",
        "peer",
        _peer,
        venv="peers",
    ),
)


def system_named(name: str) -> System:
    """The system called ``name``.

    Raises:
        KeyError: No system has that name (the message lists them).
    """
    for system in SYSTEMS:
        if system.name == name:
            return system
    raise KeyError(f"no system {name!r}; there are: {', '.join(s.name for s in SYSTEMS)}")


def elapsed(started: float) -> float:
    """Seconds since ``started`` (``time.perf_counter``), rounded for the records."""
    return round(time.perf_counter() - started, 3)
