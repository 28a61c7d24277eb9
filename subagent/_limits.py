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
        max_cost: Cost, by ``prices``.
        prices: What tokens cost: one :class:`Price` for every model, or a mapping of model
            names (the adapter's ``model_name``) to prices. Needed with ``max_cost``.

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

    def price_for(self, model: str | None) -> Price | None:
        """The price of ``model``'s tokens (``None`` when no cost is counted).

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
            raise ConfigurationError(
                "prices",
                f"has no price for model {model!r} (priced: {', '.join(sorted(prices)) or 'none'})",
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
    """The limits one run checks: its own ledger (if it has limits) and those above it."""

    __slots__ = ("_prices", "ledgers")

    def __init__(self, ledgers: tuple[Ledger, ...], prices: tuple[Price | None, ...]):
        self.ledgers = ledgers
        self._prices = prices

    def before_call(self) -> str | None:
        """Why the next LLM call may not be sent (a limit reached already), if so."""
        for ledger in self.ledgers:
            reached = ledger.reached()
            if reached is not None:
                return f"usage limit reached before the call: {reached}"
        return None

    def after_reply(self, usage: Usage) -> str | None:
        """Charge one reply; why the run must end (a limit now past), if so."""
        for ledger, price in zip(self.ledgers, self._prices, strict=True):
            ledger.charge(usage, price)
        for ledger in self.ledgers:
            exceeded = ledger.exceeded()
            if exceeded is not None:
                return f"usage limit exceeded by the reply: {exceeded}"
        return None

    def before_tools(self, calls: int) -> str | None:
        """Count ``calls`` tool calls about to run; why they may not, if so (none counted)."""
        for ledger in self.ledgers:
            over = ledger.tools_over(calls)
            if over is not None:
                return f"usage limit: {over}"
        for ledger in self.ledgers:
            ledger.tool_calls += calls
        return None


def run_limits(limits: UsageLimits | None, agent: str, llm: LLM) -> RunLimits | None:
    """The limits a run of ``agent`` on ``llm`` checks: ``None`` when there are none.

    Raises:
        ConfigurationError: A limit counts cost and has no price for the run's model.
    """
    above = _LEDGERS.get()
    if limits is None and not above:
        return None
    ledgers = above if limits is None else (*above, Ledger(limits, f"agent {agent!r}"))
    model: Any = getattr(llm, "model_name", None)
    name = model if isinstance(model, str) else None
    return RunLimits(ledgers, tuple(ledger.limits.price_for(name) for ledger in ledgers))


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

    def after_reply(self, *, response: LLMResponse) -> str | None:  # type: ignore[override]
        return self._limits.after_reply(response.usage)

    def before_tools(self, *, batch: ToolBatch) -> Pause | str | None:  # type: ignore[override]
        # Denied and refused calls never run: they do not count.
        return self._limits.before_tools(batch.to_run)

    def enter_user_code(self) -> contextvars.Token[tuple[Ledger, ...]]:
        return _LEDGERS.set(self._limits.ledgers)

    def leave_user_code(self, token: Any) -> None:
        _LEDGERS.reset(token)


def limits_hook(limits: UsageLimits | None, agent: str, llm: LLM) -> LimitsHook | None:
    """The hook of a run's usage limits (its own and those above it): ``None`` when none.

    Raises:
        ConfigurationError: A limit counts cost and has no price for the run's model.
    """
    checked = run_limits(limits, agent, llm)
    return None if checked is None else LimitsHook(checked)
