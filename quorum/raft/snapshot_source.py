"""`SnapshotSource`: the read-only view of local snapshots the leader serves from.

The core reads snapshot bytes through it (as etcd's raft reads its Storage) and
never writes: received snapshots leave the core as `SnapshotChunk`s in a Ready.
"""

from __future__ import annotations

from typing import Protocol

from quorum.raft.types import OffsetAndEpoch


class SnapshotSource(Protocol):
    def exists(self, snapshot_id: OffsetAndEpoch) -> bool: ...

    def size(self, snapshot_id: OffsetAndEpoch) -> int:
        """Total size of the snapshot in bytes."""
        ...

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to max_bytes of the snapshot starting at byte `position`."""
        ...
