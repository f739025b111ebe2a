"""Timing and sizing configuration of the Raft core, with Kafka's defaults (ms, bytes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms; randomized to [T, 2T)
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms; check-quorum = 1.5x
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # KafkaRaftClient.MAX_FETCH_WAIT_MS (long poll)
    fetch_max_bytes: int = 8 * 1024 * 1024  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES
    snapshot_chunk_bytes: int = 1024 * 1024  # FetchSnapshot MaxBytes
    max_batch_records: int = 4096  # proposals per appended batch
    pre_vote: bool = True  # KIP-996
    # A replica that may be made a voter (a controller) fsyncs what it appends even while it
    # is an observer: once the leader adds it, the leader counts its fetch offset toward the
    # HW, and that offset covers records it appended as an observer (KAFKA-17332). Replicas
    # that never vote (brokers) skip the fsync.
    sync_as_observer: bool = False

    @property
    def check_quorum_timeout_ms(self) -> int:
        """A leader that has not been fetched by a majority for this long resigns."""
        return self.fetch_timeout_ms * 3 // 2

    @property
    def resign_catch_up_ms(self) -> int:
        """How long a resigning leader waits, taking no writes, for a voter to hold its whole log."""
        return self.election_timeout_ms // 2

    @property
    def begin_quorum_resend_ms(self) -> int:
        return self.fetch_timeout_ms // 2
