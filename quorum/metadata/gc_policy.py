"""Keeping Python's cyclic garbage collector off the metadata image.

An image of N partitions holds a few tracked objects per partition (registrations,
dicts, persistent-map nodes). None of them is ever part of a reference cycle (images
are immutable trees), so the cyclic GC can never free any of them, yet every full
collection walks all of them: about 0.1 s per 300,000 partitions, with the event loop
stopped. Refcounting frees them when an image is dropped, frozen or not.

So a large image change runs with the collector paused (`large_change`), and then
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

__all__ = ["freeze_image", "large_change"]


def freeze_image(*, collect: bool = False) -> None:
    """Exclude everything alive now (a freshly built image) from future collections;
    `collect`: collect the young generations first (walks every object made since the
    last collection)."""
    if collect:
        gc.collect(1)
    gc.freeze()


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
