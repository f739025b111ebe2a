"""KIP-392: which replica a consumer with a `client.rack` should read from.

Kafka's RackAwareReplicaSelector, applied on the partition leader: candidates are the
leader plus the followers that hold the fetch offset (log start <= offset <= log end).
With a client rack, the candidates in that rack are considered: the leader if it is one
of them, else the one with the highest log end offset, ties broken by the most recent
caught-up time (then the lowest broker id, for determinism). No candidate in the rack, or
no client rack: the leader.
"""

from __future__ import annotations

from broker.kafka.services import PartitionView, ReplicaView

__all__ = ["select_read_replica"]


def select_read_replica(view: PartitionView, client_rack: str, fetch_offset: int) -> int:
    """The broker id the consumer should fetch from (the leader id when no better one)."""
    if not client_rack:
        return view.leader_id
    candidates: list[ReplicaView] = [
        r
        for r in view.replicas
        if r.broker_id == view.leader_id or r.log_start_offset <= fetch_offset <= r.log_end_offset
    ]
    same_rack = [r for r in candidates if r.rack == client_rack]
    if not same_rack:
        return view.leader_id
    if any(r.broker_id == view.leader_id for r in same_rack):
        return view.leader_id
    best = max(same_rack, key=lambda r: (r.log_end_offset, r.last_caught_up_time_ms, -r.broker_id))
    return best.broker_id
