"""The local model servers of the end-to-end tests: one per model and set-up, per session.

Each starts on first use (setting up llama-cpp-python and the model if needed, see
docs/models.md) on a free port of 127.0.0.1, and stops when the session ends.
"""

from collections.abc import Iterator

import local_llm
import pytest


@pytest.fixture(scope="session")
def smollm2() -> Iterator[local_llm.LocalServer]:
    with local_llm.running("smollm2") as server:
        yield server


@pytest.fixture(scope="session")
def qwen() -> Iterator[local_llm.LocalServer]:
    with local_llm.running("qwen") as server:
        yield server


@pytest.fixture(scope="session")
def qwen_tools() -> Iterator[local_llm.LocalServer]:
    with local_llm.running("qwen", tools=True) as server:
        yield server
