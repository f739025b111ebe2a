"""Project-wide pytest setup: Hypothesis profiles.

- ``ci`` (the default): derandomized, so every run tries the same examples; no deadline
  (CI machines are slow and noisy); a fixed number of examples.
- ``long``: many more examples, randomized, for hunting bugs locally or in soak runs.

Select one with ``--hypothesis-profile=long`` (Hypothesis' pytest plugin) or the
``HYPOTHESIS_PROFILE`` environment variable. A test that needs a different size uses
``@settings(max_examples=examples(n))`` (`tests.scale`): n under ci, ten times n under long.

Under ``long`` a property test runs up to 50 times as many examples as under ci, so the
per-test time limit (pytest-timeout, pyproject's ``timeout``) grows by as much for tests
that set none of their own: the limit is there to catch a hang, not a long soak.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.scale import CI_MAX_EXAMPLES, LONG_MAX_EXAMPLES, long_profile

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=CI_MAX_EXAMPLES,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    derandomize=False,
    deadline=None,
    max_examples=LONG_MAX_EXAMPLES,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not long_profile():
        return
    limit = float(config.getini("timeout") or 0) * (LONG_MAX_EXAMPLES // CI_MAX_EXAMPLES)
    if limit <= 0:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit))
