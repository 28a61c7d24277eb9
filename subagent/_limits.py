"""Usage limits as a budget: tokens, tool calls and cost a run (or a batch) may spend.

:class:`UsageLimits` is the user's configuration. A :class:`Ledger` keeps the books of
one set of limits: a run's, or a whole batch's. A run charges its spending to its own
ledger and to every ledger above it (the runs that called it as a tool, the batch it is
part of): the ledgers in scope travel in a context variable, set around the code that may
start a nested run. :class:`RunLimits` is what one run checks: before each LLM call, after
each reply, and before running a reply's tool calls; :class:`LimitsHook` makes those
checks a hook of the turn loop, which turns a limit reached into the table's
``limit_reached`` trigger.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from subagent._checks import check_int, check_number
from subagent._errors import ConfigurationError
from subagent._hooks import Pause, RunHook, ToolBatch
from subagent.llm import LLM, LLMResponse, Usage
from subagent.llm._fallback import answering_names

__all__ = [
    "Ledger",
    "LimitsHook",
    "Price",
    "RunLimits",
    "UsageLimits",
    "ledgers_in_scope",
    "limits_hook",
    "run_limits",
]


@dataclass(frozen=True, slots=True)
class Price:
    """What a model's tokens cost, per million (in the currency of ``max_cost``).

    Args:
        input_per_million: The price of a million input tokens.
        output_per_million: The price of a million output tokens.
    """

    input_per_million: float
    output_per_million: float

    def __post_init__(self) -> None:
        check_number("input_per_million", self.input_per_million, 0)
        check_number("output_per_million", self.output_per_million, 0)

    def of(self, usage: Usage) -> float:
        """The cost of ``usage``."""
        return (
            usage.input_tokens * self.input_per_million
            + usage.output_tokens * self.output_per_million
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class UsageLimits:
    """What a run (or a batch, ``run_many(batch_limits=...)``) may spend; ``None``: no limit.

    Tokens are those the server reported (a call whose usage was not reported counts 0).
    Before each LLM call the run ends ``failed(usage_limit)`` when a limit is already
    reached (tokens or cost at or over it: any call would cross it); after each reply,
    when the reply took a limit past it (the reply is kept on its turn, not acted on: no
    tool runs, nothing is parsed); before a reply's tool calls run, when they would take
    the tool calls past ``max_tool_calls`` (none of them runs).

    Args:
        max_input_tokens: Input (prompt) tokens.
        max_output_tokens: Output (reply) tokens.
        max_total_tokens: Input plus output tokens.
        max_tool_calls: Tool calls run (refused calls do not count).
        max_cost: Cost, by ``prices``: each reply at the price of the model that produced
            it (a :class:`~subagent.FallbackLLM`'s member that answered, a correction
            turn's model), by its configured ``model_name``, not the server's name for it.
        prices: What tokens cost: one :class:`Price` for every model, or a mapping of model
            names (the adapter's ``model_name``) to prices. Needed with ``max_cost``. A
            run that could be answered by a model the mapping does not price (its model,
            any model of a ``FallbackLLM``, a correction's model) is refused before its
            first call.

    Raises:
        ConfigurationError: A limit is not a number of its kind, or ``max_cost`` has no
            ``prices``.
    """

    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_tool_calls: int | None = None
    max_cost: float | None = None
    prices: Price | Mapping[str, Price] | None = None

    def __post_init__(self) -> None:
        for name in ("max_input_tokens", "max_output_tokens", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, 1)
        if self.max_tool_calls is not None:
            check_int("max_tool_calls", self.max_tool_calls, 0)
        if self.max_cost is not None:
            check_number("max_cost", self.max_cost, 0, exclusive=True)
            if self.prices is None:
                raise ConfigurationError("prices", "max_cost needs prices to count the cost by")
        prices = self.prices
        if prices is not None and not _is_price_table(prices):
            raise ConfigurationError(
                "prices",
                f"must be a Price or a mapping of model names to Price, got {prices!r}",
            )

    def price_for(self, model: str | None, role: str = "") -> Price | None:
        """The price of ``model``'s tokens (``None`` when no cost is counted).

        ``role``: what the model is to the run (``"the run's model"``), for the message.

        Raises:
            ConfigurationError: ``max_cost`` is set and the table has no price for ``model``.
        """
        prices = self.prices
        if self.max_cost is None or prices is None:
            return None
        if isinstance(prices, Price):
            return prices
        price = prices.get(model or "")
        if price is None:
            priced = ", ".join(sorted(prices)) or "none"
            what = f"{role}, " if role else ""
            raise ConfigurationError(
                "prices", f"has no price for model {model!r} ({what}priced: {priced})"
            )
        return price


def _is_price_table(prices: object) -> bool:
    if isinstance(prices, Price):
        return True
    return isinstance(prices, Mapping) and all(
        isinstance(key, str) and isinstance(value, Price) for key, value in prices.items()
    )


class Ledger:
    """The books of one set of limits: what was spent against them so far.

    Args:
        limits: The limits.
        owner: Whose limits they are, for messages (``agent 'x'``, ``the batch``).
    """

    __slots__ = ("cost", "input_tokens", "limits", "output_tokens", "owner", "tool_calls")

    def __init__(self, limits: UsageLimits, owner: str):
        self.limits = limits
        self.owner = owner
        self.input_tokens = 0
        self.output_tokens = 0
        self.tool_calls = 0
        self.cost = 0.0

    def charge(self, usage: Usage, price: Price | None) -> None:
        """Count one reply's tokens (and their cost)."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if price is not None:
            self.cost += price.of(usage)

    def reached(self) -> str | None:
        """Which limit is reached already (no call can stay within it), if any."""
        return self._over(at=True)

    def exceeded(self) -> str | None:
        """Which limit is past, if any."""
        return self._over(at=False)

    def tools_over(self, calls: int) -> str | None:
        """Whether ``calls`` more tool calls would take the count past its limit."""
        limit = self.limits.max_tool_calls
        if limit is not None and self.tool_calls + calls > limit:
            return (
                f"max_tool_calls={limit} of {self.owner}: {self.tool_calls} call(s) made, "
                f"{calls} more asked for"
            )
        return None

    def _over(self, *, at: bool) -> str | None:
        limits = self.limits
        spent = (
            ("max_input_tokens", limits.max_input_tokens, self.input_tokens),
            ("max_output_tokens", limits.max_output_tokens, self.output_tokens),
            ("max_total_tokens", limits.max_total_tokens, self.input_tokens + self.output_tokens),
            ("max_cost", limits.max_cost, self.cost),
        )
        for name, limit, used in spent:
            if limit is not None and (used >= limit if at else used > limit):
                shown = f"{used:.6g}" if isinstance(used, float) else str(used)
                return f"{name}={limit:g} of {self.owner}: {shown} spent"
        return None


# The ledgers a run started here charges besides its own: its callers' and its batch's.
_LEDGERS: contextvars.ContextVar[tuple[Ledger, ...]] = contextvars.ContextVar(
    "subagent_ledgers", default=()
)


def ledgers_in_scope() -> contextvars.ContextVar[tuple[Ledger, ...]]:
    """The context variable holding the ledgers a run started now would charge."""
    return _LEDGERS


class RunLimits:
    """The limits one run checks: its own ledger (if it has limits) and those above it.

    Args:
        ledgers: The ledgers the run charges.
        prices: Each ledger's price of the run's model's replies (``None``: no cost counted).
        by_model: Each ledger's price, by the name of another model that may produce a reply
            (a fallback's, a correction's), checked when the run starts.
    """

    __slots__ = ("_by_model", "_prices", "ledgers")

    def __init__(
        self,
        ledgers: tuple[Ledger, ...],
        prices: tuple[Price | None, ...],
        by_model: Mapping[str | None, tuple[Price | None, ...]] | None = None,
    ):
        self.ledgers = ledgers
        self._prices = prices
        self._by_model = by_model

    def before_call(self) -> str | None:
        """Why the next LLM call may not be sent (a limit reached already), if so."""
        for ledger in self.ledgers:
            reached = ledger.reached()
            if reached is not None:
                return f"usage limit reached before the call: {reached}"
        return None

    def after_reply(self, usage: Usage, model: str | None = None) -> str | None:
        """Charge one reply of ``model`` (``None``: the run's); why the run must end, if so."""
        prices = self._prices
        unpriced = None
        by_model = self._by_model
        if by_model is not None and model is not None:
            found = by_model.get(model)
            if found is None:  # a name no model of the run gave before it started
                found, unpriced = self._priced(model)
            prices = found
        for ledger, price in zip(self.ledgers, prices, strict=True):
            ledger.charge(usage, price)
        if unpriced is not None:
            return f"usage limit: the reply's cost cannot be counted: {unpriced}"
        for ledger in self.ledgers:
            exceeded = ledger.exceeded()
            if exceeded is not None:
                return f"usage limit exceeded by the reply: {exceeded}"
        return None

    def _priced(self, model: str) -> tuple[tuple[Price | None, ...], str | None]:
        """Each ledger's price of ``model``, and why one has none (``None``: all have)."""
        prices: list[Price | None] = []
        unpriced = None
        for ledger in self.ledgers:
            try:
                prices.append(ledger.limits.price_for(model, "the model that answered"))
            except ConfigurationError as exc:
                prices.append(None)
                unpriced = f"{exc} (the limits of {ledger.owner})"
        return tuple(prices), unpriced

    def before_tools(self, calls: int) -> str | None:
        """Count ``calls`` tool calls about to run; why they may not, if so (none counted)."""
        for ledger in self.ledgers:
            over = ledger.tools_over(calls)
            if over is not None:
                return f"usage limit: {over}"
        for ledger in self.ledgers:
            ledger.tool_calls += calls
        return None


def run_limits(
    limits: UsageLimits | None, agent: str, llm: LLM, correction_llm: LLM | None = None
) -> RunLimits | None:
    """The limits a run of ``agent`` on ``llm`` checks: ``None`` when there are none.

    ``correction_llm``: the model of the run's correction turns, when it has its own.

    Raises:
        ConfigurationError: A limit counts cost and has no price for a model that may
            answer the run: its model, a model of a ``FallbackLLM``, the correction's model.
    """
    above = _LEDGERS.get()
    if limits is None and not above:
        return None
    ledgers = above if limits is None else (*above, Ledger(limits, f"agent {agent!r}"))
    model: Any = getattr(llm, "model_name", None)
    name = model if isinstance(model, str) else None
    prices = tuple(ledger.limits.price_for(name, "the run's model") for ledger in ledgers)
    if not any(_by_model_name(ledger.limits) for ledger in ledgers):
        # No cost counted, or one price for every model: which model answered is moot.
        return RunLimits(ledgers, prices)
    # Every model that may answer, priced now: none is found unpriced half-way through.
    by_model: dict[str | None, tuple[Price | None, ...]] = {name: prices}
    answering = [(other, "a model of the run's FallbackLLM") for other in answering_names(llm)]
    if correction_llm is not None and correction_llm is not llm:
        answering += [
            (other, "the correction's model") for other in answering_names(correction_llm)
        ]
    for other, role in answering:
        if other not in by_model:
            by_model[other] = tuple(ledger.limits.price_for(other, role) for ledger in ledgers)
    return RunLimits(ledgers, prices, by_model)


def _by_model_name(limits: UsageLimits) -> bool:
    """Whether ``limits`` count cost at a price that depends on the model."""
    return limits.max_cost is not None and not isinstance(limits.prices, Price)


class LimitsHook(RunHook):
    """Usage limits as a hook of the loop.

    Checked before each call, after each reply and before a turn's calls run; handed down
    to the runs a run's tools and validators start.
    """

    __slots__ = ("_limits",)

    def __init__(self, limits: RunLimits):
        self._limits = limits

    def before_call(self) -> str | None:  # type: ignore[override]
        return self._limits.before_call()

    def after_reply(self, *, response: LLMResponse, model: str | None) -> str | None:  # type: ignore[override]
        return self._limits.after_reply(response.usage, model)

    def before_tools(self, *, batch: ToolBatch) -> Pause | str | None:  # type: ignore[override]
        # Denied and refused calls never run: they do not count.
        return self._limits.before_tools(batch.to_run)

    def enter_user_code(self) -> contextvars.Token[tuple[Ledger, ...]]:
        return _LEDGERS.set(self._limits.ledgers)

    def leave_user_code(self, token: Any) -> None:
        _LEDGERS.reset(token)


def limits_hook(
    limits: UsageLimits | None, agent: str, llm: LLM, correction_llm: LLM | None = None
) -> LimitsHook | None:
    """The hook of a run's usage limits (its own and those above it): ``None`` when none.

    Raises:
        ConfigurationError: A limit counts cost and has no price for a model that may
            answer the run (see :func:`run_limits`).
    """
    checked = run_limits(limits, agent, llm, correction_llm)
    return None if checked is None else LimitsHook(checked)
