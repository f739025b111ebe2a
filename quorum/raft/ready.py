"""`Ready`: what the sans-IO core asks its driver to do, and in which order.

Contract (the driver must follow it; the simulation and the node do):
 1. If `election` is set, persist it durably (quorum-state: temp, fsync, rename).
 2. If `snapshot_chunks` is non-empty, write them to the snapshot being received
    (a chunk at position 0 starts the transfer of that snapshot over);
    if `install_snapshot` is set, make that snapshot durable and visible, load it
    into the state machine, and reset the log so that it is empty and starts at
    `install_snapshot.offset`.
 3. If `truncate_to` is set, truncate the log so its end offset is that value.
 4. Append `entries` (contiguous, starting at the log's end after step 3).
 5. If `must_sync`, fsync the log (not set for an observer's plain appends). Only then:
 6. send `messages`, and apply `committed` batches to the state machine in order
    (all of them are below `high_watermark`).
 7. If `delete_before` is set, the log below that offset may be deleted (a
    snapshot at or beyond it exists).
 8. Answer `voter_changes` (results of `core.change_voters`; each is final).
 9. Call `core.advance(ready)`.
Steps 1-5 are "persist before send": a vote, a fetch offset (the follower's ack)
or a leader's claim never leaves the node before the state it depends on is on disk.
One exception, `send_before_sync`: a leader's Ready with no election state, truncation or
snapshot may send its `messages` after step 4 and before the fsync of step 5 (the leader's
fsync and its followers' fetch of the same entries overlap, as in Raft's section 10.2.1).
Nothing those messages say depends on the fsync: the high watermark they carry counts the
leader's own log only up to its flushed end (`advance`), so entries the leader has not
fsynced are committed only once a majority of *other* durable copies holds them; and a
crash loses only uncommitted entries, which a later leader may or may not keep, as for
any uncommitted entry.
A leader's driver may apply `committed` (and answer what waited on it) before steps 1-5:
the leader computed that high watermark from durable acknowledgements (its own flushed end
among them), so those batches are on a majority's disks already and never among `entries`.
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.frozen_init import fast_frozen_init
from quorum.raft.messages import Envelope
from quorum.raft.types import Batch, ElectionState, Offset, OffsetAndEpoch
from quorum.raft.voter_change import VoterChangeResult


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """Bytes of a snapshot being received from the leader, at byte `position`."""

    snapshot_id: OffsetAndEpoch
    position: int
    data: bytes
    size: int  # total size of the snapshot


fast_frozen_init(SnapshotChunk)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class Ready:
    election: ElectionState | None = None
    snapshot_chunks: tuple[SnapshotChunk, ...] = ()
    install_snapshot: OffsetAndEpoch | None = None
    truncate_to: Offset | None = None
    entries: tuple[Batch, ...] = ()
    must_sync: bool = False
    messages: tuple[Envelope, ...] = ()
    high_watermark: Offset | None = None  # new HW, when it changed
    committed: tuple[Batch, ...] = ()
    delete_before: Offset | None = None
    voter_changes: tuple[VoterChangeResult, ...] = ()
    # A leader's Ready: `messages` may leave before the fsync of step 5 (see the contract).
    send_before_sync: bool = False

    @property
    def log_end_offset(self) -> Offset | None:
        """End offset of the log once this Ready is persisted, if it touches the log."""
        if self.entries:
            return self.entries[-1].end_offset
        if self.truncate_to is not None:
            return self.truncate_to
        if self.install_snapshot is not None:
            return self.install_snapshot.offset
        return None

    def is_empty(self) -> bool:
        return (
            self.election is None
            and not self.snapshot_chunks
            and self.install_snapshot is None
            and self.truncate_to is None
            and not self.entries
            and not self.messages
            and self.high_watermark is None
            and not self.committed
            and self.delete_before is None
            and not self.voter_changes
        )


fast_frozen_init(Ready)  # not a decorator: mypyc makes a decorated class a Python class
