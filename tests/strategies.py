"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(*, max_leaves: int = 12, allow_infinity: bool = False) -> st.SearchStrategy[Any]:
    """Values ``json.dumps`` accepts: scalars, and lists and objects of them, nested.

    Args:
        max_leaves: The most scalars in one value.
        allow_infinity: Include infinite floats (``json.dumps`` writes them as ``Infinity``,
            which is not JSON: for replies a parser must survive, not accept).
    """
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=allow_infinity)
        | st.text()
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=max_leaves,
    )
