"""Durable storage of the metadata quorum: record batches, the segment log, quorum-state, snapshots.

The control records' values (LeaderChange, snapshot header and footer, KIP-853 voters) are
the Raft core's: `quorum.raft.control_records` and `quorum.raft.kraft_control`."""

from quorum.storage.file_log import FileLog, LogRecovery, segment_file_name
from quorum.storage.quorum_state import QUORUM_STATE_FILE, QuorumStateError, QuorumStateStore
from quorum.storage.record_batch import (
    BATCH_HEADER_SIZE,
    MAX_BATCH_SIZE,
    CorruptRecordError,
    ScanResult,
    decode_batches,
    encode_batch,
    encode_batches,
    peek_batch_header,
    scan_batches,
)
from quorum.storage.snapshots import (
    SnapshotStore,
    decode_snapshot,
    decode_snapshot_with_header,
    encode_snapshot,
    snapshot_file_name,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "MAX_BATCH_SIZE",
    "QUORUM_STATE_FILE",
    "CorruptRecordError",
    "FileLog",
    "LogRecovery",
    "QuorumStateError",
    "QuorumStateStore",
    "ScanResult",
    "SnapshotStore",
    "decode_batches",
    "decode_snapshot",
    "decode_snapshot_with_header",
    "encode_batch",
    "encode_batches",
    "encode_snapshot",
    "peek_batch_header",
    "scan_batches",
    "segment_file_name",
    "snapshot_file_name",
]
