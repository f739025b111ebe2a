"""Value types shared by the Raft core, its storage and its wire codec.

Offsets are Kafka log offsets (int, first record is 0). Epochs are Raft terms
(Kafka's leader epochs). Times are milliseconds on whatever clock the driver
passes in; the core never reads a clock itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from quorum.frozen_init import fast_frozen_init

NodeId = int
Epoch = int
Offset = int

NO_LEADER: NodeId = -1
NO_VOTE: NodeId = -1


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """A log position: compares by epoch first, then offset (Kafka's OffsetAndEpoch).

    Used for snapshot ids (offset = exclusive end offset, epoch = epoch of the last
    contained record) and for diverging-epoch answers (offset = end offset of
    that epoch on the leader).
    """

    epoch: Epoch
    offset: Offset


class ControlType(IntEnum):
    """Kafka's ControlRecordType values used by the metadata log."""

    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5  # KRaftVersionRecord (KIP-853): the finalized kraft.version
    KRAFT_VOTERS = 6  # VotersRecord (KIP-853): the whole voter set from this offset on


@dataclass(frozen=True, slots=True)
class Batch:
    """One record batch of the replicated log: records base_offset .. base_offset+n-1.

    Invariants: a batch never spans epochs, holds at least one record, and is
    the unit of append, fetch and truncation (so the high watermark, fetch
    offsets and snapshot ids always fall on batch boundaries).
    `records` are the record values as opaque bytes. A control batch
    (`control_type` set) holds control records of that type, e.g. one encoded
    LeaderChangeMessage.
    """

    base_offset: Offset
    epoch: Epoch
    records: tuple[bytes, ...]
    timestamp_ms: int = 0
    control_type: ControlType | None = None

    @property
    def last_offset(self) -> Offset:
        return self.base_offset + len(self.records) - 1

    @property
    def end_offset(self) -> Offset:
        """Exclusive end: the offset of the record after this batch."""
        return self.base_offset + len(self.records)

    @property
    def is_control(self) -> bool:
        return self.control_type is not None


fast_frozen_init(Batch)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The durable quorum state (Kafka's quorum-state file).

    Written atomically (temp file, fsync, rename) before any message that
    depends on it leaves the node. `voted_id` is -1 when no vote was cast in
    `epoch`; `leader_id` is -1 when no leader is known in `epoch`.
    """

    epoch: Epoch
    voted_id: NodeId = NO_VOTE
    leader_id: NodeId = NO_LEADER


fast_frozen_init(ElectionState)  # not a decorator: mypyc makes a decorated class a Python class
