"""Which coordinator partitions to load and unload after a metadata change."""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["leadership_changes"]


def leadership_changes(
    count: int, led_epoch: Callable[[int], int | None], loaded: Mapping[int, int]
) -> tuple[list[int], list[tuple[int, int]]]:
    """(partitions to unload, (partition, leader epoch) to load) given the topic's partition
    count, this broker's leader epoch of each partition (None: not the leader) and the loaded
    partitions' epochs. A partition led in a new epoch is unloaded and loaded again: its
    state may have changed under another leader meanwhile."""
    unload: list[int] = []
    load: list[tuple[int, int]] = []
    for n in range(count):
        epoch = led_epoch(n)
        current = loaded.get(n)
        if current is not None and (epoch is None or epoch != current):
            unload.append(n)
            current = None
        if current is None and epoch is not None:
            load.append((n, epoch))
    unload.extend(n for n in loaded if n >= count)
    return unload, load
