"""The interface between the replicated log and what it replicates.

A `StateMachine` sees only committed data batches, in offset order, and can be
snapshotted at the offset it has applied up to. The metadata image implements
it in the metadata plane; `DigestStateMachine` is the quorum's own: it keeps a
count and a running CRC32C of every committed record, so that replicas can be
compared byte for byte (tests, the synthetic load) without storing the records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

import crc32c

from quorum.raft.types import Batch, Offset


class StateMachine(Protocol):
    @property
    def applied_offset(self) -> Offset:
        """Every committed record below this offset has been applied."""
        ...

    def apply(self, batch: Batch) -> None:
        """Apply one committed batch; batch.base_offset == applied_offset. Control
        batches are passed too (they only move applied_offset)."""
        ...

    def snapshot_records(self) -> Sequence[bytes]:
        """The state at applied_offset as snapshot records."""
        ...

    def load_snapshot(self, end_offset: Offset, records: Sequence[bytes]) -> None:
        """Replace the state with a snapshot's, which covers the log below end_offset."""
        ...


class DigestStateMachine:
    """Record count and CRC32C chain of all committed data records."""

    def __init__(self) -> None:
        self.applied_offset: Offset = 0
        self.records = 0
        self.digest = 0
        self.bytes = 0

    def apply(self, batch: Batch) -> None:
        if batch.base_offset != self.applied_offset:
            raise ValueError(f"batch at {batch.base_offset} applied at {self.applied_offset}")
        if not batch.is_control:
            digest = self.digest
            for record in batch.records:
                digest = crc32c.crc32c(record, digest)
                self.bytes += len(record)
            self.digest = digest
            self.records += len(batch.records)
        self.applied_offset = batch.end_offset

    def snapshot_records(self) -> Sequence[bytes]:
        state = {"records": self.records, "digest": self.digest, "bytes": self.bytes}
        return [json.dumps(state, sort_keys=True).encode()]

    def load_snapshot(self, end_offset: Offset, records: Sequence[bytes]) -> None:
        if not records:
            # A snapshot without data records: KIP-853's bootstrap checkpoint (storage format
            # --standalone / --initial-controllers) holds only the voter set.
            self.records = self.digest = self.bytes = 0
            self.applied_offset = end_offset
            return
        if len(records) != 1:
            raise ValueError(f"digest snapshot has {len(records)} records, expected 1")
        state = json.loads(records[0])
        self.records = int(state["records"])
        self.digest = int(state["digest"])
        self.bytes = int(state["bytes"])
        self.applied_offset = end_offset
