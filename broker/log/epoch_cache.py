"""Kafka's leader-epoch cache lookup (``LeaderEpochFileCache.endOffsetFor``) on plain values.

A leader-epoch cache is the ordered list of ``(epoch, start_offset)`` entries of a log: the
first offset written (or, for a leader, assigned) in each epoch. Both epochs and start
offsets are strictly increasing. The real partition log and the simulation's in-memory log
answer ``end_offset_for_epoch`` with this one function.
"""

from __future__ import annotations

from collections.abc import Sequence

UNDEFINED_EPOCH = -1
"""No epoch (an empty log, or an unknown one): Kafka's ``RecordBatch.NO_PARTITION_LEADER_EPOCH``."""
UNDEFINED_EPOCH_OFFSET = -1
"""No offset: Kafka's ``OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET``."""


def end_offset_for(entries: Sequence[tuple[int, int]], requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
    """``(epoch, end_offset)`` for ``requested_epoch``: the largest known epoch <= the requested
    one and the offset where it ended (the start of the next known epoch, or the log end
    offset for the latest epoch).

    - requested is UNDEFINED_EPOCH, or larger than every known epoch (and not the latest):
      ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``;
    - requested is the latest epoch: ``(latest, log_end_offset)``;
    - requested is smaller than every known epoch: ``(requested, start of the first epoch)``;
    - otherwise ``(largest known epoch <= requested, start of the next known epoch)``.
    """
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if entries[-1][0] == requested_epoch:
        return requested_epoch, log_end_offset
    floor: tuple[int, int] | None = None
    for epoch, start in entries:
        if epoch > requested_epoch:
            if floor is None:
                return requested_epoch, start
            return floor[0], start
        floor = (epoch, start)
    return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
