"""The systems `make eval-bfcl` compares, as ``subagent.evals`` variants or systems.

Variants where they are subagent runs, evals systems where they are not.

Every system gets the same case (the question's messages, the function docs as OpenAI tools
or as JSON in the prompt), the same server, model, temperature, seed and ``max_tokens``, and
ends with the calls BFCL grades: a subagent agent's output (a :class:`Calls`), a raw call's
or a peer's native calls (a :class:`~subagent.evals.SystemRun`).

- ``raw``: one chat completion with the functions as native ``tools``; the answer is the
  reply's native tool calls. The report also grades the same reply's *text* read leniently
  as a JSON call (``raw-lenient``: the floor a user writes in a few lines).
- ``subagent-rN``: a ``SubAgent`` whose output *is* the call: ``max_turns=1`` (one work
  turn: the answer), ``return_retries=N``, the functions in its instructions, the answer a
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

A subagent system is a variant (its run options, in :attr:`BfclSystem.options`) of an
agent made per case (:class:`ContractAgent`, :class:`ToolsAgent`, :class:`TextToolsAgent`:
the tools and validators come from the case's functions). A raw call and a peer are
:class:`~subagent.evals.System` functions returning a :class:`~subagent.evals.SystemRun`;
their variants' options are the functions' keyword arguments. A failed run is never
graded as an answer (on ``irrelevance``, no answer is not "no call").
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from bfcl_data import Case, calls_schema, expects_no_call, functions, grade, openai_tools
from pydantic import BaseModel, Field, RootModel, field_validator, model_validator

from subagent import Correction, SubAgent
from subagent._templates import default_templates
from subagent.evals import System, SystemReply, SystemRun, Variant

__all__ = [
    "CALLS_PROMPT",
    "CHOOSE_PARTS",
    "CONTRACT_PROMPT",
    "MAX_TOKENS",
    "SEED",
    "SETTINGS",
    "SYSTEMS",
    "BfclSystem",
    "Calls",
    "ContractAgent",
    "Server",
    "TextToolsAgent",
    "ToolsAgent",
    "calls_in_text",
    "chosen_calls",
    "decoded_arguments",
    "first_attempt",
    "oracle_feedback",
    "run_raw",
    "system_named",
]

MAX_TOKENS = 256
"""Room for three or four calls with their arguments (parallel cases), not for rambling."""
SEED = 7
TEMPERATURE = 0.0
CALL_TIMEOUT = 300.0
SETTINGS: dict[str, Any] = {"temperature": TEMPERATURE, "seed": SEED, "max_tokens": MAX_TOKENS}
"""The sampling settings every system sends."""


@dataclass(frozen=True)
class Server:
    """Where the model is: an OpenAI-compatible base URL and the model's name there."""

    base_url: str
    model: str = "local"
    setup: str = "template"

    @property
    def settings(self) -> dict[str, Any]:
        """The sampling settings every system sends."""
        return dict(SETTINGS)


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
    case: Case[Any], *, server: Server, client: httpx.AsyncClient, system: str | None = None
) -> SystemRun:
    """One chat completion with the functions as native tools (and ``system``, if given)."""
    prompt = [] if system is None else [{"role": "system", "content": system}]
    body: dict[str, Any] = {
        "model": server.model,
        "messages": [*prompt, *case.messages],  # type: ignore[misc]
        "tools": openai_tools(functions(case)),
        **server.settings,
    }
    if server.setup == "tools":
        # OpenAI's default with tools; llama-cpp-python's tools format takes a missing
        # tool_choice as "none" and never calls.
        body["tool_choice"] = "auto"
    response = await client.post(f"{server.base_url}/chat/completions", json=body)
    response.raise_for_status()
    data = response.json()
    choice = data["choices"][0]
    message = choice["message"]
    calls = [
        {
            "name": call["function"]["name"],
            "arguments": decoded_arguments(call["function"]["arguments"]),
        }
        for call in message.get("tool_calls") or []
    ]
    usage = data.get("usage") or {}
    text = message.get("content") or ""
    return SystemRun(
        output=calls,
        replies=[SystemReply(text=text, tool_calls=calls, stop_reason=choice.get("finish_reason"))],
        input_tokens=usage.get("prompt_tokens", 0),
        output_tokens=usage.get("completion_tokens", 0),
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
    from subagent.tools._schema_defaults import admitting_defaults

    # A documented default is a right value (the tools' own validation accepts it too).
    validator = jsonschema.Draft202012Validator(admitting_defaults(schemas[call.name]))
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


def _validator(case: Case[Any]) -> Callable[[Any], Any]:
    schemas = {
        tool["function"]["name"]: tool["function"]["parameters"]
        for tool in openai_tools(functions(case))
    }

    def check_calls(calls: Calls) -> Any:
        from subagent import Validation

        problems = [problem for call in calls.root for problem in _schema_problems(call, schemas)]
        return Validation.fail(*problems) if problems else Validation.ok()

    return check_calls


def oracle_feedback(case: Case[Any], calls: Sequence[Mapping[str, Any]]) -> str | None:
    """What BFCL's checker finds wrong with ``calls`` against the ground truth (``None``: right).

    The feedback of the oracle run (``subagent-oracle-r1``): it knows the answer, which no
    real validator does, so that run measures how much a correction turn can buy on this
    model when the feedback is as good as it gets, not what subagent's own feedback buys.
    """
    correct, error = grade(case, calls)
    if correct:
        return None
    if expects_no_call(case):
        return "none of the functions does what the user asks: call none, answer []"
    needed = len(case.expected or ())
    if not calls or error.startswith("Wrong number of functions"):
        return f"the request needs {needed} function call(s); you made {len(calls)}"
    return f"the answer is wrong: {error}"


def _oracle(case: Case[Any]) -> Callable[[Any], Any]:
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


def _compact_functions(case: Case[Any]) -> str:
    return "\n".join(json.dumps(tool["function"]) for tool in openai_tools(functions(case)))


def first_attempt(
    text: str, tool_calls: Sequence[Any], names: Sequence[str]
) -> list[dict[str, Any]]:
    """The calls a first reply made (or wrote), whether or not they were valid.

    Its native calls (objects or ``{"name", "arguments"}`` data), else a list of calls (or
    one call) written as JSON, else any call written as JSON in its text.
    """
    if tool_calls:
        return [{"name": c["name"], "arguments": decoded_arguments(c.get("arguments"))}
                if isinstance(c, Mapping) else
                {"name": c.name, "arguments": decoded_arguments(c.arguments)}
                for c in tool_calls]  # fmt: skip
    from subagent.parsers._json_extract import extract_json

    found = extract_json(text)
    if found.ok:
        try:
            return [c.model_dump() for c in Calls.model_validate(found.value).root]
        except ValueError:
            pass
    return calls_in_text(text, names)


@dataclass(frozen=True)
class ContractAgent:
    """Makes each case's agent whose output *is* the call (``subagent-rN``).

    The functions go in its instructions, as JSON (:data:`CONTRACT_PROMPT`): a system
    message after subagent's own system prompt; the answer is a JSON list of calls,
    validated against the functions' schemas. Budgets come from the variant.
    """

    def __call__(self, case: Case[Any]) -> SubAgent[Calls]:
        """The agent of ``case``."""
        return SubAgent(
            name="function_caller",
            output=Calls,
            validators=[_validator(case)],
            instructions=CONTRACT_PROMPT.replace("{{functions}}", _compact_functions(case)),
        )


def _recording_tools(
    case: Case[Any], final_value: Callable[[list[dict[str, Any]]], Any], *, final: bool = True
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
        for tool in openai_tools(functions(case))
    ]
    return tools, made


# The calls prompt and subagent's own system prompt share their rule for calls (the
# library's ``tool_calls_rule`` template): one source for both, so the default a tool agent
# gets is what this prompt is measured with. The text is byte for byte the one the
# records of ``raw-prompted`` and ``subagent-prompted-r1`` were made with.
CALLS_PROMPT = (
    "Do what the user asks by calling the functions you are given. Your answer is the JSON "
    'list of every call the request needs, as {"name": <function name>, "arguments": '
    f"{{<argument>: <value>}}}} objects: {default_templates().render('tool_calls_rule')}; "
    "[] when none of the functions can do it."
)


@dataclass(frozen=True)
class ToolsAgent:
    """Makes each case's agent with the functions as tools.

    The first valid call(s) end the run as its output (``subagent-tools-rN``,
    ``-react-rN``, ``-prompted-r1``, ``-calls-r1``, ``-oracle-r1``).

    Every call of the turn is recorded before the run judges the first final value, so the
    output is all of them: the tools hand back the shared list itself, not a copy. The
    protocol and the budgets come from the variant.

    Attributes:
        system: A system message's text after subagent's own system prompt.
        system_template: Replaces subagent's own system prompt (its ``system`` template)
            with this text: no agent preamble, no tool list, no explicit-fail escape.
        oracle: A validator that checks the answer against the ground truth
            (:func:`oracle_feedback`).
    """

    system: str | None = None
    system_template: str | None = None
    oracle: bool = False

    def __call__(self, case: Case[Any]) -> SubAgent[Calls]:
        """The agent of ``case`` (tools that record its calls, made afresh for each run)."""
        tools, _ = _recording_tools(case, lambda made: made)
        return SubAgent(
            name="function_caller",
            output=Calls,
            tools=tools,
            validators=[_validator(case), *([_oracle(case)] if self.oracle else [])],
            # The output instructions are the whole system prompt: no agent preamble, no
            # tool list (the chat template lists the tools), no explicit-fail escape.
            prompts={}
            if self.system_template is None
            else {"system": "{{output_instructions}}", "output_json": self.system_template},
            instructions=self.system,
        )


@dataclass(frozen=True)
class SchemaCorrectedToolsAgent(ToolsAgent):
    """A :class:`ToolsAgent` whose correction turns are under the server's grammar.

    The grammar is that of the request's calls (``Correction(output="json_schema",
    json_schema=calls_schema(case))``): the first answer as before, a refused one corrected
    under the grammar. A class of its own, not a field of :class:`ToolsAgent`: a variant's
    digest covers its factory's fields, and a new field would make every recorded run of
    the other ``ToolsAgent`` systems look changed, so a resumed run would make them again.
    """

    def __call__(self, case: Case[Any]) -> SubAgent[Calls]:
        """The agent of ``case``, its correction turns under the calls' grammar."""
        correction = Correction(output="json_schema", json_schema=calls_schema(case))
        return dataclasses.replace(super().__call__(case), correction=correction)


@dataclass(frozen=True)
class TextToolsAgent:
    """Makes each case's agent with the functions as tools and a free-text answer.

    ``subagent-tools-text``: a call ends the run (its output is the calls as JSON text),
    prose means no call.

    The model's own way of calling (its template shows it the tools; it writes the call as
    text, which ``text_tool_calls`` reads) with nothing else asked of it: no output schema
    in the prompt. With ``max_turns=3`` (the variant's), a call whose arguments fail the
    schema is fed back and the model may call again in the next (still ``normal``) turn.
    """

    def __call__(self, case: Case[Any]) -> SubAgent[Any]:
        """The agent of ``case``."""
        tools, _ = _recording_tools(case, json.dumps)
        return SubAgent(name="function_caller", tools=tools)


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


@dataclass(frozen=True)
class BfclSystem:
    """One system of the comparison.

    Attributes:
        name: Its stable name (its records file is ``<name>@<set-up>.jsonl``, its variant
            ``<name>@<set-up>``).
        title: What the report calls it.
        kind: ``raw``, ``subagent`` or ``peer``.
        options: Its variant's options: run options and agent fields for a subagent system,
            the function's keyword arguments for a raw call or a peer.
        agent: What makes each case's agent (subagent systems).
        venv: ``main`` (the project's venv) or ``peers`` (``make bench-peers``'s).
        corrects: Whether it may correct itself (the report's first-attempt salvage).
    """

    name: str
    title: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)
    agent: Callable[[Case[Any]], SubAgent[Any]] | None = None
    venv: str = "main"
    corrects: bool = False

    def variant(self, setup: str) -> Variant:
        """The system on one server set-up, as a variant."""
        return Variant(f"{self.name}@{setup}", self.options)

    def target(self, server: Server, client: Any) -> Any:
        """What an evaluation runs: the agent factory, or the raw call or peer as a system.

        ``client``: an ``httpx.AsyncClient`` for a raw call (the model adapter of a subagent
        system goes as the evaluation's ``llm=``).
        """
        if self.kind == "subagent":
            return self.agent
        if self.kind == "raw":
            return System(functools.partial(run_raw, server=server, client=client), name="raw")
        return System(functools.partial(_peer, server=server), name="peers")


async def _peer(case: Case[Any], *, server: Server, peer: str) -> SystemRun:
    import bfcl_peers

    return await bfcl_peers.run_peer(peer, case, server)


def _subagent(name: str, title: str, agent: Callable[[Case[Any]], SubAgent[Any]], *,
              max_turns: int, return_retries: int, **options: Any) -> BfclSystem:  # fmt: skip
    budgets = {"max_turns": max_turns, "return_retries": return_retries}
    corrects = return_retries > 0 or max_turns > 1
    return BfclSystem(name, title, "subagent",
                      {**budgets, **options, "settings": SETTINGS, "timeout": CALL_TIMEOUT},
                      agent, corrects=corrects)  # fmt: skip


def _prompted_r1(
    name: str, title: str, kind: type[ToolsAgent] = ToolsAgent, **agent: Any
) -> BfclSystem:
    """``subagent-prompted-r1``: ``kind`` of agent with ``agent``'s fields on top.

    The calls prompt as the whole system prompt, native tools, ``max_turns=2``,
    ``return_retries=1``.
    """
    return _subagent(name, title, kind(system_template=CALLS_PROMPT, **agent),
                     max_turns=2, return_retries=1, protocol="native")  # fmt: skip


def _subagent_contract(n: int, policy: str = "collapse") -> BfclSystem:
    suffix = "" if policy == "collapse" else f"-{policy}"
    title = f"subagent, the call as output, return_retries={n}" + (
        "" if policy == "collapse" else f", context_policy={policy!r}"
    )
    policy_option = {} if policy == "collapse" else {"context_policy": policy}
    return _subagent(f"subagent-r{n}{suffix}", title, ContractAgent(), max_turns=1,
                     return_retries=n, **policy_option)  # fmt: skip


def _subagent_tools(protocol: str, n: int) -> BfclSystem:
    label = "native tool calls" if protocol == "native" else "ReAct"
    prefix = "subagent-tools" if protocol == "native" else "subagent-react"
    title = f"subagent, {label}, max_turns=2, return_retries={n}"
    return _subagent(f"{prefix}-r{n}", title, ToolsAgent(), max_turns=2, return_retries=n,
                     protocol=protocol)  # fmt: skip


SYSTEMS: tuple[BfclSystem, ...] = (
    BfclSystem("raw", "raw chat completion, native tools", "raw"),
    BfclSystem(
        "raw-prompted",
        "raw chat completion, native tools, with subagent-calls-r1's system prompt",
        "raw",
        {"system": CALLS_PROMPT},
    ),
    *(_subagent_contract(n) for n in (0, 1, 2)),
    _subagent_contract(1, "quote"),
    _subagent_tools("native", 1),
    _subagent(
        "subagent-tools-text",
        "subagent, native tool calls read from text, free-text answer, max_turns=3",
        TextToolsAgent(),
        max_turns=3,
        return_retries=0,
    ),
    _subagent_tools("react", 1),
    _prompted_r1(
        "subagent-prompted-r1",
        "subagent, native tool calls, raw-prompted's prompt as its system prompt, "
        "max_turns=2, return_retries=1",
    ),
    _prompted_r1(
        "subagent-oracle-r1",
        "subagent-prompted-r1 told by BFCL's checker what is wrong (knows the answer: the "
        "ceiling of a correction turn, not a system a user can run)",
        oracle=True,
    ),
    _prompted_r1(
        "subagent-prompted-r1-schema",
        "subagent-prompted-r1 with its correction turn under the grammar of the request's "
        "calls (Correction(output='json_schema'))",
        SchemaCorrectedToolsAgent,
    ),
    _subagent(
        "subagent-calls-r1",
        "subagent, native tool calls asked for one per request, max_turns=2, return_retries=1",
        ToolsAgent(system=CALLS_PROMPT),
        max_turns=2,
        return_retries=1,
        protocol="native",
    ),
    BfclSystem(
        "pydantic-ai", "pydantic-ai, defaults", "peer", {"peer": "pydantic-ai"}, venv="peers"
    ),
    BfclSystem(
        "openai-agents",
        "OpenAI Agents SDK, defaults",
        "peer",
        {"peer": "openai-agents"},
        venv="peers",
    ),
    BfclSystem(
        "openai-agents-auto",
        "OpenAI Agents SDK, tool_choice='auto' (OpenAI's default, which the SDK leaves unsent)",
        "peer",
        {"peer": "openai-agents-auto"},
        venv="peers",
    ),
)


def system_named(name: str) -> BfclSystem:
    """The system called ``name``.

    Raises:
        KeyError: No system has that name (the message lists them).
    """
    for system in SYSTEMS:
        if system.name == name:
            return system
    raise KeyError(f"no system {name!r}; there are: {', '.join(s.name for s in SYSTEMS)}")
