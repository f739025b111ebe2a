"""Replica placement: Kafka's ``assignReplicasToBrokers``, rack-unaware and rack-aware.

The algorithm is the one in Kafka's ``AdminUtils`` (``server-common``, formerly
``kafka.admin.AdminUtils``):

- Rack-unaware: brokers sorted by id. Partition ``p``'s first replica is broker
  ``(p + start_index) % n``; its other replicas follow at a shift that starts at
  ``next_replica_shift`` and grows by one each time ``p`` passes a multiple of ``n``, so that
  the followers of one broker's partitions spread over all the other brokers.
- Rack-aware: the same round-robin over a rack-alternated broker list (one broker of each
  rack in turn, racks sorted by name, brokers by id); a follower is skipped while its rack
  already has a replica and some rack has none, or while it already has a replica and some
  broker has none.

In production ``start_index`` and ``next_replica_shift`` are random (as in Kafka); tests fix
them. Errors use the wording of the KRaft controller's placer (``StripedReplicaPlacer``) where
it has one; CreateTopics prefixes it with :func:`replication_failure_message`.

KRaft's own placer (``StripedReplicaPlacer``) is a different algorithm; pykraft follows
``assignReplicasToBrokers`` on purpose (its layouts are the documented, reproducible ones).
The KRaft parts kept: the replication factor is checked against every registered broker,
fenced ones included, and placement fails only if every broker is fenced.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from quorum.controller.errors import (
    ControllerError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    RackAwarenessError,
)


@dataclass(frozen=True, slots=True)
class BrokerPlacement:
    """A registered broker as placement sees it."""

    id: int
    rack: str | None = None
    fenced: bool = False
    """Fenced or in controlled shutdown: not a good home for a new replica."""


class RackAwareMode(Enum):
    """Kafka's ``RackAwareMode``: what to do when only some brokers have a rack."""

    ENFORCED = "enforced"
    """Rack-aware if any broker has a rack; an error if only some do (Kafka's default)."""
    SAFE = "safe"
    """Rack-aware only if every broker has a rack; otherwise ignore racks."""
    DISABLED = "disabled"
    """Ignore racks."""


NOT_ALL_BROKERS_HAVE_RACK = "Not all brokers have rack information for replica rack aware assignment."


def replication_failure_message(replication_factor: int, reason: str) -> str:
    """The KRaft controller's CreateTopics message around a placement failure."""
    return f"Unable to replicate the partition {replication_factor} time(s): {reason}"


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: one broker from each rack in turn.

    Racks are taken in name order (Java's UTF-16 order), brokers within a rack in id order;
    a rack that runs out is skipped. ``{0: r1, 1: r3, 2: r3, 3: r2, 4: r2, 5: r1}`` gives
    ``[0, 3, 1, 5, 4, 2]``.
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    racks = sorted(by_rack, key=lambda r: r.encode("utf-16-be"))
    queues = [sorted(by_rack[r]) for r in racks]
    result: list[int] = []
    depth = 0
    while len(result) < len(broker_racks):
        for queue in queues:
            if depth < len(queue):
                result.append(queue[depth])
        depth += 1
    return result


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, n: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n - 1)
    return (first_replica_index + shift) % n


def _check_broker_ids(brokers: Sequence[BrokerPlacement]) -> None:
    ids = [b.id for b in brokers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate broker ids in {sorted(ids)}")


def _check_counts(brokers: Sequence[BrokerPlacement], partitions: int, replication_factor: int) -> None:
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"Invalid replication factor {replication_factor}: the replication factor must be positive."
        )
    if not any(not b.fenced for b in brokers):
        raise InvalidReplicationFactorError("All brokers are currently fenced.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{len(brokers)} broker(s) are registered."
        )


def _placement_pool(brokers: Sequence[BrokerPlacement], replication_factor: int) -> list[BrokerPlacement]:
    """The brokers to place on, sorted by id: the unfenced ones if there are enough, else all."""
    unfenced = [b for b in brokers if not b.fenced]
    pool = unfenced if len(unfenced) >= replication_factor else list(brokers)
    return sorted(pool, key=lambda b: b.id)


def _rack_map(pool: Sequence[BrokerPlacement], mode: RackAwareMode) -> dict[int, str] | None:
    """The broker → rack map for rack-aware placement, or None for rack-unaware."""
    with_rack = {b.id: b.rack for b in pool if b.rack is not None}
    if not with_rack or mode is RackAwareMode.DISABLED:
        return None
    if len(with_rack) < len(pool):
        if mode is RackAwareMode.ENFORCED:
            raise RackAwarenessError(NOT_ALL_BROKERS_HAVE_RACK)
        return None
    return with_rack


def _assign_rack_unaware(
    broker_ids: Sequence[int], partitions: int, replication_factor: int, start_index: int, shift: int, first: int
) -> dict[int, tuple[int, ...]]:
    n = len(broker_ids)
    result: dict[int, tuple[int, ...]] = {}
    partition_id = first
    for _ in range(partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first_index = (partition_id + start_index) % n
        replicas = [broker_ids[first_index]]
        replicas.extend(broker_ids[_replica_index(first_index, shift, j, n)] for j in range(replication_factor - 1))
        result[partition_id] = tuple(replicas)
        partition_id += 1
    return result


def _assign_rack_aware(
    racks: Mapping[int, str], partitions: int, replication_factor: int, start_index: int, shift: int, first: int
) -> dict[int, tuple[int, ...]]:
    arranged = rack_alternated_broker_list(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    result: dict[int, tuple[int, ...]] = {}
    partition_id = first
    for _ in range(partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first_index = (partition_id + start_index) % n
        leader = arranged[first_index]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _j in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first_index, shift * num_racks, k, n)]
                rack = racks[broker]
                k += 1
                rack_ok = rack not in racks_used or len(racks_used) == num_racks
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        result[partition_id] = tuple(replicas)
        partition_id += 1
    return result


def assign_replicas(
    brokers: Sequence[BrokerPlacement],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    next_replica_shift: int | None = None,
    first_partition: int = 0,
    rng: random.Random | None = None,
    rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED,
) -> dict[int, tuple[int, ...]]:
    """Place ``partitions`` partitions of ``replication_factor`` replicas, as Kafka does.

    Returns partition id → replicas (the first is the preferred leader), for partition ids
    ``first_partition .. first_partition + partitions - 1``.

    ``start_index`` / ``next_replica_shift``: Kafka's fixed start index. Unset, each is drawn
    from ``rng`` (a fresh ``random.Random`` if none), start index first; a fixed start index
    with no shift uses the start index as the shift, as Kafka's ``fixedStartIndex`` does.

    Brokers marked fenced are left out when enough unfenced brokers remain for the
    replication factor; otherwise all brokers are used (the replicas on fenced brokers
    start outside the ISR, as in KRaft).

    Raises InvalidPartitionsError, InvalidReplicationFactorError, or RackAwarenessError
    (only some brokers have a rack, under ``RackAwareMode.ENFORCED``).
    """
    _check_broker_ids(brokers)
    _check_counts(brokers, partitions, replication_factor)
    pool = _placement_pool(brokers, replication_factor)
    racks = _rack_map(pool, rack_aware_mode)
    n = len(pool)
    if start_index is None:
        source = rng if rng is not None else random.Random()  # noqa: S311 - placement, not security
        start = source.randrange(n)
        shift = next_replica_shift if next_replica_shift is not None else source.randrange(n)
    else:
        start = start_index
        shift = next_replica_shift if next_replica_shift is not None else start_index
    if start < 0 or shift < 0:
        raise ValueError("start_index and next_replica_shift must be non-negative")
    first = max(0, first_partition)
    if racks is None:
        return _assign_rack_unaware([b.id for b in pool], partitions, replication_factor, start, shift, first)
    return _assign_rack_aware(racks, partitions, replication_factor, start, shift, first)


def check_partition_increase(topic: str, current: int, requested: int) -> int:
    """The number of partitions CreatePartitions adds, or InvalidPartitionsError (KRaft's wording)."""
    if requested == current:
        raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
    if requested < current:
        raise InvalidPartitionsError(
            f"The topic {topic} currently has {current} partition(s); {requested} would not be an increase."
        )
    return requested - current


def assign_new_partitions(
    brokers: Sequence[BrokerPlacement],
    existing: Mapping[int, Sequence[int]],
    total_partitions: int,
    *,
    topic: str,
    rng: random.Random | None = None,
    rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED,
) -> dict[int, tuple[int, ...]]:
    """Replicas for the partitions CreatePartitions adds to a topic (Kafka's expansion rule).

    As Kafka's ``createNewPartitionsAssignment``: the replication factor is partition 0's,
    and the start index (also the replica shift) is the position, in the id-sorted broker
    list, of the first broker whose id is >= partition 0's preferred leader; new partition ids
    continue from the current count, so the round-robin carries on where the topic's own left off.
    Returns only the new partitions.
    """
    if not existing:
        raise ControllerError(f"Invalid state: topic {topic} appears to have no partitions.")
    additional = check_partition_increase(topic, len(existing), total_partitions)
    partition0 = existing[0] if 0 in existing else existing[min(existing)]
    replication_factor = len(partition0)
    _check_broker_ids(brokers)
    _check_counts(brokers, additional, replication_factor)
    pool_ids = [b.id for b in _placement_pool(brokers, replication_factor)]
    start = next((i for i, b in enumerate(pool_ids) if b >= partition0[0]), 0) if partition0 else 0
    return assign_replicas(
        brokers,
        additional,
        replication_factor,
        start_index=start,
        next_replica_shift=start,
        first_partition=len(existing),
        rng=rng,
        rack_aware_mode=rack_aware_mode,
    )


# ----------------------------------------------------------------------------- manual assignments


def _validate_replica_list(
    replicas: Sequence[int], registered: Collection[int], replication_factor: int | None
) -> None:
    """Kafka's ``validateManualPartitionAssignment`` for one partition."""
    if not replicas:
        raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
    previous: int | None = None
    for broker_id in sorted(replicas):
        if broker_id not in registered:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
            )
        if broker_id == previous:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignmentError(
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
            f"is not consistent with previous partitions, which have {replication_factor} replica(s)."
        )


def _all_fenced_message(partition_id: int) -> str:
    return (
        f"All brokers specified in the manual partition assignment for partition {partition_id} "
        "are fenced or in controlled shutdown."
    )


def validate_manual_assignment(
    assignments: Iterable[tuple[int, Sequence[int]]],
    registered: Collection[int],
    active: Collection[int],
    *,
    replication_factor: int = -1,
    num_partitions: int = -1,
) -> dict[int, tuple[int, ...]]:
    """Check a CreateTopics manual assignment in Kafka's order; return partition → replicas.

    ``registered``: broker ids with a registration; ``active``: those unfenced and not in
    controlled shutdown. ``replication_factor`` / ``num_partitions`` are the request's own
    fields, which must be -1 alongside a manual assignment (INVALID_REQUEST otherwise).
    """
    if replication_factor != -1:
        raise InvalidRequestError(
            "A manual partition assignment was specified, but replication factor was not set to -1."
        )
    if num_partitions != -1:
        raise InvalidRequestError("A manual partition assignment was specified, but numPartitions was not set to -1.")
    result: dict[int, tuple[int, ...]] = {}
    rf: int | None = None
    for partition_id, replicas in assignments:
        if partition_id in result:
            raise InvalidReplicaAssignmentError(
                f"Found multiple manual partition assignments for partition {partition_id}"
            )
        _validate_replica_list(replicas, registered, rf)
        rf = len(replicas)
        if not any(b in active for b in replicas):
            raise InvalidReplicaAssignmentError(_all_fenced_message(partition_id))
        result[partition_id] = tuple(replicas)
    for i in range(len(result)):
        if i not in result:
            raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
    return result


def validate_manual_new_partitions(
    assignments: Sequence[Sequence[int]],
    *,
    topic: str,
    current_partitions: int,
    total_partitions: int,
    replication_factor: int,
    registered: Collection[int],
    active: Collection[int],
) -> dict[int, tuple[int, ...]]:
    """Check a CreatePartitions manual assignment (one replica list per new partition), Kafka's order."""
    additional = check_partition_increase(topic, current_partitions, total_partitions)
    if len(assignments) != additional:
        raise InvalidReplicaAssignmentError(
            f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
            "assignment(s) were specified."
        )
    result: dict[int, tuple[int, ...]] = {}
    for i, replicas in enumerate(assignments):
        _validate_replica_list(replicas, registered, replication_factor)
        if not any(b in active for b in replicas):
            raise InvalidReplicaAssignmentError(_all_fenced_message(current_partitions + i))
        result[current_partitions + i] = tuple(replicas)
    return result


def initial_isr(replicas: Sequence[int], is_active: Callable[[int], bool]) -> tuple[int, ...]:
    """A new partition's ISR: its active replicas in assignment order (the first one leads).

    Empty means every replica is fenced or shutting down; CreateTopics then fails with
    INVALID_REPLICATION_FACTOR and :data:`ALL_REPLICAS_FENCED`.
    """
    return tuple(r for r in replicas if is_active(r))


ALL_REPLICAS_FENCED = "All brokers are currently fenced or in controlled shutdown."
