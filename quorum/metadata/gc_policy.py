"""Keeping Python's cyclic garbage collector off the metadata image.

An image of N partitions holds a few tracked objects per partition (registrations,
dicts, persistent-map nodes). None of them is ever part of a reference cycle (images
are immutable trees), so the cyclic GC can never free any of them, yet every full
collection walks all of them: about 0.1 s per 300,000 partitions, with the event loop
stopped. Refcounting frees them when an image is dropped, frozen or not.

So every FREEZE_EVERY_PARTITIONS partition changes applied (`partitions_changed`),
and after a large image change, which runs with the collector paused (`large_change`), and then
what is alive is moved to the permanent generation (`gc.freeze`, O(1)), which
collections skip. The cost: cyclic garbage alive at that moment is never collected.
It is small (an image change makes none; what the event loop made meanwhile), and
large changes are rare (snapshot loads, fencing a broker). Collecting the young
generations first would walk every new object, stalling the loop as long as a full
collection of them: `freeze_image(collect=True)` does it where the loop is blocked
anyway (a snapshot load).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "FREEZE_EVERY_PARTITIONS",
    "YOUNG_GENERATION_THRESHOLD",
    "freeze_image",
    "large_change",
    "partitions_changed",
    "tune_collector",
]

# Freeze once this many partition registrations were created (added or changed) since
# the last freeze: a full collection then walks at most about this many registrations'
# objects (~20 ms per 50,000 here), however large the image.
FREEZE_EVERY_PARTITIONS = 50_000

# Generation-0 threshold of a node process: allocations net of deallocations between two
# young collections. CPython's 700 makes allocation-heavy metadata work collect every few
# hundred new objects (a 100-topic create builds about 10,000), and every tenth of those
# collections walks generation 1 too: 20 % of the CPU of creating 10,000 topics x 10
# partitions from 64 clients. At 10,000 a young collection walks at most that many objects
# (about a millisecond); unreachable cycles wait that much longer to be freed.
YOUNG_GENERATION_THRESHOLD = 10_000

_since_freeze = 0


def tune_collector() -> None:
    """Set the cyclic collector's thresholds for a node process (at its start)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, older, oldest)


def freeze_image(*, collect: bool = False) -> None:
    """Exclude everything alive now (a freshly built image) from future collections;
    `collect`: collect the young generations first (walks every object made since the
    last collection)."""
    global _since_freeze
    if collect:
        gc.collect(1)
    gc.freeze()
    _since_freeze = 0


def partitions_changed(count: int) -> None:
    """`count` partition registrations were just created (an applied batch); freeze
    after FREEZE_EVERY_PARTITIONS of them. The young generations are collected first
    (cheap with the collector running: at most a few thousand objects), so what is
    frozen is what survived them: the image, and whatever long-lived objects were alive
    then (connections, tasks); those that later die in a cycle are not reclaimed, a
    bounded cost per freeze."""
    global _since_freeze
    _since_freeze += count
    if _since_freeze >= FREEZE_EVERY_PARTITIONS and gc.isenabled():
        freeze_image(collect=True)


@contextmanager
def large_change(*, collect: bool = False) -> Iterator[None]:
    """No cyclic collection while building a large image; `freeze_image` after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            freeze_image(collect=collect)
            gc.enable()
