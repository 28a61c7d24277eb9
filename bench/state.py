"""A run's state between turns: what saving it costs per turn, and what resuming costs.

S1 and S2 of ``core.py`` (ScriptedLLM, tracing off, CPU time), each run:

- plain;
- with ``on_state`` keeping each turn's :class:`~subagent.RunState` (the snapshot only);
- with ``on_state`` writing each state as JSON (``model_dump_json``: what saving costs);
- resumed from the state saved after turn 1 (read back from JSON, then the last turn).

The per-turn cost is the difference to the plain run over the turns that took a state
(S1 and S2 take one each: the last turn of a run ends it, and a finished run has no state).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from core import CONTEXT, S1_AGENT, S1_SCRIPT, S2_AGENT, S2_SCRIPT, measure

from subagent import RunState, ScriptedLLM, SubAgent


def scenario(
    agent: SubAgent[object], script: list[object], keep: str | None, **options: object
) -> Callable[[], object]:
    async def run() -> object:
        saved: list[object] = []
        on_state = None
        if keep == "state":
            on_state = saved.append
        elif keep == "json":

            def on_state(state: RunState) -> None:
                saved.append(state.model_dump_json())

        step = await agent.run(CONTEXT, llm=ScriptedLLM(script), on_state=on_state, **options)  # type: ignore[arg-type]
        assert step.ok and len(saved) == (0 if keep is None else 1)
        return step

    return run


async def resumed(
    agent: SubAgent[object], script: list[object], **options: object
) -> tuple[Callable[[], object], Callable[[], object]]:
    """Resuming from the state after turn 1 (read from JSON), and reading that state."""
    saved: list[RunState] = []
    await agent.run(CONTEXT, llm=ScriptedLLM(script), on_state=saved.append, **options)  # type: ignore[arg-type]
    text = saved[0].model_dump_json()

    async def resume() -> object:
        step = await agent.resume(RunState.model_validate_json(text), llm=ScriptedLLM(script[1:]))
        assert step.ok and len(step.turns) == 2
        return step

    async def read() -> object:
        return RunState.model_validate_json(text)

    return resume, read


async def main() -> dict[str, float]:
    results: dict[str, float] = {}
    cases = {
        "S1": (S1_AGENT, S1_SCRIPT, {"max_turns": 1, "return_retries": 2}),
        "S2": (S2_AGENT, S2_SCRIPT, {"max_turns": 2}),
    }
    print("state between turns (ScriptedLLM, tracing off, asyncio; CPU time)")
    for name, (agent, script, options) in cases.items():
        plain = await measure(scenario(agent, script, None, **options))
        state = await measure(scenario(agent, script, "state", **options))
        as_json = await measure(scenario(agent, script, "json", **options))
        resume, read = await resumed(agent, script, **options)
        resume_us = await measure(resume)
        read_us = await measure(read)
        per_turn = plain / 2
        results.update({
            f"{name} plain": plain, f"{name} state": state, f"{name} json": as_json,
            f"{name} resume": resume_us, f"{name} read": read_us,
        })  # fmt: skip
        print(f"  {name}: plain {plain:7.1f} us/run ({per_turn:.1f} us/turn)")
        print(f"      snapshot per turn   : {state - plain:+6.1f} us "
              f"({(state - plain) / per_turn:+.1%} of a plain turn)")  # fmt: skip
        print(f"      snapshot + JSON     : {as_json - plain:+6.1f} us "
              f"({(as_json - plain) / per_turn:+.1%} of a plain turn)")  # fmt: skip
        print(f"      resume after turn 1 : {resume_us:7.1f} us/run (state read from JSON: "
              f"{read_us:.1f} us)")  # fmt: skip
    return results


if __name__ == "__main__":
    anyio.run(main)
