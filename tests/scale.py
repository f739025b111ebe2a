"""Property-test sizes that follow the active Hypothesis profile (registered in the
top-level conftest.py): a test asks for `examples(n)`, n being its size under ``ci``, and
gets `LONG_MULTIPLIER` times more under ``long``, so that ``HYPOTHESIS_PROFILE=long`` (or
``--hypothesis-profile=long``) runs every property test longer, not only those that take
the profile's default.

Read at import (decoration) time: the profile is loaded before test modules are collected.
"""

from __future__ import annotations

from typing import Final

from hypothesis import settings

CI_MAX_EXAMPLES: Final = 100  # the ci profile's default number of examples
LONG_MAX_EXAMPLES: Final = 5_000  # the long profile's default
LONG_MULTIPLIER: Final = 10  # examples under long per example under ci, for an explicit size


def long_profile() -> bool:
    """The long profile (or any profile at least as large) is active."""
    return settings().max_examples >= LONG_MAX_EXAMPLES


def multiplier() -> int:
    return LONG_MULTIPLIER if long_profile() else 1


def examples(n: int) -> int:
    """`n` examples under ci, `n` * LONG_MULTIPLIER under long."""
    return n * multiplier()
