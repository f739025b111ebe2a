"""Project-wide pytest setup: Hypothesis profiles.

- ``ci`` (the default): derandomized, so every run tries the same examples; no deadline
  (CI machines are slow and noisy); a fixed number of examples.
- ``long``: many more examples, randomized, for hunting bugs locally or in soak runs.

Select one with ``--hypothesis-profile=long`` (Hypothesis' pytest plugin) or the
``HYPOTHESIS_PROFILE`` environment variable. A test that needs a different size uses
``@settings(max_examples=examples(n))`` (`tests.scale`): n under ci, ten times n under long.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tests.scale import CI_MAX_EXAMPLES, LONG_MAX_EXAMPLES

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
