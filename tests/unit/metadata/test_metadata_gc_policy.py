"""gc_policy: the collector settings of a node process."""

from __future__ import annotations

import gc

from quorum.metadata.gc_policy import YOUNG_GENERATION_THRESHOLD, tune_collector


def test_tune_collector_raises_only_the_young_generation_threshold() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        tune_collector()
        assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, 11, 12)
        tune_collector()  # idempotent
        assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, 11, 12)
    finally:
        gc.set_threshold(*before)
