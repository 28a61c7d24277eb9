"""Parser benchmark: multi_section_parser and json_parser on 1 KB, 100 KB and 1 MB replies.

Prints the median time per parse and the microseconds per KB (flat = linear), then the
worst case of a naive section parser -- thousands of distinct headers -- against such a
parser (kept here only) that checks every line against the header *list* and pre-scans the
reply once per header: O(lines x headers).

Run with `python bench/parsers.py`.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from subagent import json_parser, multi_section_parser

SIZES = {"1 KB": 1_024, "100 KB": 100 * 1_024, "1 MB": 1_024 * 1_024}
HEADERS = ["[Plan]", "[Timeline]", "[Budget]"]
PROSE = "The study compares three brewing methods across forty volunteers, noting taste."


class Item(BaseModel):
    name: str
    quantity: int
    note: str


class Order(BaseModel):
    id: int
    items: list[Item]


def sections_reply(size: int) -> str:
    """A reply of about ``size`` bytes: a preamble, then three sections of prose lines."""
    per_section = max(1, (size - 100) // (len(PROSE) + 1) // len(HEADERS))
    parts = ["Here is the plan you asked for."]
    for header in HEADERS:
        parts.append(f"**{header}**")
        parts.extend(f"{PROSE} ({i})" for i in range(per_section))
    return "\n".join(parts)


def json_body(size: int) -> str:
    item = Item(name="green tea", quantity=3, note=PROSE).model_dump_json()
    count = max(1, size // (len(item) + 2))
    items = [Item(name="green tea", quantity=i, note=PROSE) for i in range(count)]
    return Order(id=1, items=items).model_dump_json(indent=1)


def json_fenced_reply(size: int) -> str:
    return f"Sure, here is the order:\n```json\n{json_body(size)}\n```\nAnything else?"


def json_prose_reply(size: int) -> str:
    """No fence: the bracket scanner finds the JSON in the prose."""
    return f"Sure, here is the order: {json_body(size)} -- let me know [if] anything is off."


def median_seconds(
    func: Callable[[], object], budget: float = 0.6, max_repeats: int = 200, warm_up: bool = True
) -> float:
    """Median wall time of ``func`` over as many repeats as fit in ``budget`` seconds."""
    if warm_up:
        func()
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < max_repeats and (len(times) < 5 or time.perf_counter() < deadline):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --- the naive algorithm: each line checked against the header list ----------------------


def naive_multi_section_parser(
    raw_reply: str, section_headers: list[str], match_mode: str = "ALL"
) -> dict[str, Any]:
    if match_mode == "ALL":
        for header in section_headers:  # fast pre-check: one scan of the reply per header
            if header not in raw_reply:
                return {"status": "error", "feedback": f"Missing required section: {header}"}
    lines = raw_reply.split("\n")
    found_sections: dict[str, str] = {}
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line in section_headers:  # a list: O(headers) per line
            content = []
            for j in range(i + 1, len(lines)):
                next_line = lines[j].strip()
                if next_line in section_headers:
                    break
                content.append(lines[j])
            found_sections[line] = "\n".join(content).strip()
            if match_mode == "ALL" and len(found_sections) == len(section_headers):
                break
    if match_mode == "ALL" and len(found_sections) != len(section_headers):
        missing = set(section_headers) - set(found_sections)
        return {"status": "error", "feedback": f"Missing sections: {missing}"}
    if match_mode == "ANY" and not found_sections:
        return {"status": "error", "feedback": "No sections found"}
    return {"status": "success", "sections": found_sections}


def many_headers_reply(count: int) -> tuple[list[str], str]:
    headers = [f"[Section {i}]" for i in range(count)]
    return headers, "\n".join(f"{header}\ncontent of {header}" for header in headers)


# --- main ----------------------------------------------------------------------------------


def main() -> dict[str, float]:
    """Print the timings; return them in microseconds, keyed ``parser/case/size``."""
    results: dict[str, float] = {}
    order = json_parser(Order)
    cases: dict[str, tuple[Callable[[int], str], Callable[[str], Any]]] = {
        "multi_section_parser": (sections_reply, lambda text: multi_section_parser(text, HEADERS)),
        "json_parser (fenced)": (json_fenced_reply, order),
        "json_parser (in prose)": (json_prose_reply, order),
    }
    print("parsers: median per parse (us), and us per KB (flat = linear)")
    print(f"  {'parser':<24}" + "".join(f"{label:>22}" for label in SIZES))
    for name, (build, parse) in cases.items():
        cells = []
        for label, size in SIZES.items():
            text = build(size)
            assert parse(text).ok
            seconds = median_seconds(functools.partial(parse, text))
            micros = seconds * 1e6
            per_kb = micros / (len(text.encode()) / 1024)
            results[f"{name}/{label}"] = micros
            cells.append(f"{micros:>10.0f} ({per_kb:5.1f}/KB)")
        print(f"  {name:<24}" + "".join(f"{cell:>22}" for cell in cells))

    print("naive worst case: N distinct headers, one content line each (ALL mode)")
    print(f"  {'N headers':>10} {'reply':>9} {'naive (ms)':>11} {'ours (ms)':>11} {'speed-up':>9}")
    for count in (1_000, 10_000):
        headers, text = many_headers_reply(count)
        expected = naive_multi_section_parser(text, headers)["sections"]
        assert multi_section_parser(text, headers).sections == expected
        naive_run = functools.partial(naive_multi_section_parser, text, headers)
        naive = median_seconds(naive_run, max_repeats=1, warm_up=False)  # seconds per call
        ours = median_seconds(
            functools.partial(multi_section_parser, text, headers), max_repeats=20
        )
        results[f"naive/{count}"] = naive * 1e6
        results[f"ours/{count}"] = ours * 1e6
        print(
            f"  {count:>10,} {len(text) / 1024:>7.0f}KB {naive * 1e3:>11.1f} {ours * 1e3:>11.2f}"
            f" {naive / ours:>8.0f}x"
        )
    return results


if __name__ == "__main__":
    main()
