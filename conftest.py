"""pytest collects README.md and docs/*.md: each Python block is a test (tests/docs_harness.py)."""

from docs_harness import SYBIL

pytest_collect_file = SYBIL.pytest()
