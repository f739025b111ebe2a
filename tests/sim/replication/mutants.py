"""Deliberately broken replication rules: the simulation must catch each of them."""

from __future__ import annotations

from broker.replica.state import PartitionState, _Follower


class NoDivergenceCheck(PartitionState):
    """The leader ignores ``last_fetched_epoch``: a follower never learns that it diverged."""

    def _diverges(self, epoch: int, end: int, last_fetched_epoch: int, fetch_offset: int) -> bool:
        return False


class HwFromCommittedIsr(PartitionState):
    """The HW counts only the committed ISR (not KIP-497's maximal ISR, nor joining replicas)."""

    def _holds_high_watermark(self, replica_id: int, f: _Follower, leader_end: int, now_ms: int) -> bool:
        return replica_id in self.isr
