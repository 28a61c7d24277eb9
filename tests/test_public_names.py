"""The public surface: what each room exports is what the docs name, and no more than 200 names."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import subagent

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ["subagent"] + [
    f"subagent.{module.name}"
    for module in pkgutil.iter_modules(subagent.__path__)
    if not module.name.startswith("_")
]
# The pages a user reads; docs/architecture.md maps the internals, so it does not count.
PAGES = [page for page in sorted((ROOT / "docs").glob("*.md")) if page.name != "architecture.md"]


def _named_in_docs() -> str:
    """The code the user pages show: inline code and Python blocks, joined."""
    texts = [page.read_text() for page in [*PAGES, ROOT / "README.md"]]
    return " ".join(
        " ".join(re.findall(r"`[^`\n]+`", text))
        + " ".join(re.findall(r"```python\n.*?```", text, re.S))
        for text in texts
    )


NAMED = _named_in_docs()


def exported(room: str) -> list[str]:
    return list(getattr(importlib.import_module(room), "__all__", []))


@pytest.mark.parametrize("room", ROOMS)
def test_every_name_a_room_exports_is_named_in_the_docs(room: str) -> None:
    unnamed = [
        name
        for name in exported(room)
        if not name.startswith("__") and not re.search(rf"\b{re.escape(name)}\b", NAMED)
    ]
    assert unnamed == [], f"{room} exports names no user page shows: {unnamed}"


@pytest.mark.parametrize("room", ROOMS)
def test_every_name_a_room_exports_is_there(room: str) -> None:
    module = importlib.import_module(room)
    assert [name for name in exported(room) if not hasattr(module, name)] == []


def test_the_rooms_export_at_most_200_distinct_names() -> None:
    names = {name for room in ROOMS for name in exported(room) if not name.startswith("__")}
    assert len(names) <= 200, len(names)
