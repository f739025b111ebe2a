"""Partition leadership and ISR decisions: Kafka's ``PartitionChangeBuilder`` on plain values.

Also the controller's AlterPartition validation (``ReplicationControlManager.
validateAlterPartitionData``), the ElectLeaders outcome per partition, and the leader
imbalance ratio behind ``auto.leader.rebalance.enable``.

Not modelled: eligible leader replicas (KIP-966, off by default), partition reassignment
(adding/removing replicas) and log directories. With ELR off, an ISR is never shrunk to
empty: when its last member goes, the partition becomes leaderless (leader -1) and that
member stays in the ISR, so that it can lead again cleanly when it comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum, IntEnum

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import AlterPartitionItem, AlterPartitionRequest
from quorum.controller.requests import IsrMember as IsrMember  # AlterPartition NewIsrWithEpochs entry

NO_LEADER = -1
"""The partition has no leader."""
NO_LEADER_CHANGE = -2
"""In a PartitionChangeRecord: the leader stays as it is."""


class LeaderRecoveryState(IntEnum):
    """KIP-704: RECOVERING after an unclean election, until the new leader has recovered its log."""

    RECOVERED = 0
    RECOVERING = 1


class Election(Enum):
    """Kafka's ``PartitionChangeBuilder.Election``."""

    PREFERRED = "preferred"
    """Prefer replicas[0] if it is in the ISR and acceptable; otherwise as ONLINE (never unclean)."""
    ONLINE = "online"
    """Keep the leader if it is still valid, else the first valid replica; never unclean."""
    UNCLEAN = "unclean"
    """As ONLINE, and if no ISR member can lead, any acceptable replica (unclean election)."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's registration as far as leadership goes."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """What a PartitionChangeRecord would carry; None fields mean "unchanged"."""

    leader: int = NO_LEADER_CHANGE
    """The new leader, NO_LEADER (-1), or NO_LEADER_CHANGE (-2). Any other value bumps the leader epoch."""
    isr: tuple[int, ...] | None = None
    leader_recovery_state: int | None = None
    unclean: bool = False
    """The new leader was elected from outside the ISR (possible data loss): record it as such."""


def _first(candidates: Iterable[int], predicate: Callable[[int], bool]) -> int | None:
    return next((r for r in candidates if predicate(r)), None)


def build_partition_change(
    state: PartitionState,
    is_acceptable: Callable[[int], bool],
    *,
    target_isr: Sequence[int] | None = None,
    election: Election = Election.ONLINE,
    target_leader_recovery_state: int | None = None,
    bump_leader_epoch_on_isr_shrink: bool = False,
) -> PartitionChange | None:
    """The change to ``state`` for a new target ISR and/or an election, or None if nothing changes.

    ``is_acceptable(broker)``: may this broker lead (registered, unfenced, not in controlled
    shutdown)? A valid leader is an acceptable member of the target ISR.

    - The current leader stays if it is still valid (PREFERRED first tries ``replicas[0]``).
    - Otherwise the first valid replica in assignment order leads.
    - Otherwise, with ``Election.UNCLEAN``, the first acceptable replica leads, the ISR becomes
      just that replica and the leader recovery state RECOVERING (unless it already is).
    - Otherwise the leader is NO_LEADER.
    - The ISR is set to the target if it differs (order counts) and is not empty.
    - ``bump_leader_epoch_on_isr_shrink``: metadata versions before 3.6 also bumped the leader
      epoch whenever the ISR lost a member (KAFKA-15021); off by default, as in current Kafka.
    """
    isr = tuple(state.isr if target_isr is None else target_isr)
    recovery_target = (
        state.leader_recovery_state if target_leader_recovery_state is None else target_leader_recovery_state
    )

    def valid(broker: int) -> bool:
        return broker in isr and is_acceptable(broker)

    new_leader: int | None = None
    unclean = False
    if election is Election.PREFERRED and state.replicas and valid(state.replicas[0]):
        new_leader = state.replicas[0]
    elif valid(state.leader):
        new_leader = state.leader
    else:
        candidates = state.replicas[1:] if election is Election.PREFERRED else state.replicas
        new_leader = _first(candidates, valid)
        if new_leader is None and election is Election.UNCLEAN:
            new_leader = _first(state.replicas, is_acceptable)
            unclean = new_leader is not None
    if new_leader is None:
        new_leader = NO_LEADER

    leader = NO_LEADER_CHANGE
    new_isr: tuple[int, ...] | None = None
    recovery: int | None = None
    if new_leader != state.leader:
        leader = new_leader
        if unclean:
            new_isr = (new_leader,)
            if state.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                recovery = LeaderRecoveryState.RECOVERING
    else:
        unclean = False
    if new_isr is None and isr and isr != tuple(state.isr):
        new_isr = isr
    if (
        bump_leader_epoch_on_isr_shrink
        and leader == NO_LEADER_CHANGE
        and new_isr is not None
        and not set(state.isr) <= set(new_isr)
    ):
        leader = state.leader
    if recovery_target != state.leader_recovery_state:
        recovery = recovery_target
    if leader == NO_LEADER_CHANGE and new_isr is None and recovery is None:
        return None
    return PartitionChange(leader=leader, isr=new_isr, leader_recovery_state=recovery, unclean=unclean)


def apply_change(state: PartitionState, change: PartitionChange) -> PartitionState:
    """Replay a change as Kafka's ``PartitionRegistration.merge`` does.

    Setting the leader (any value but NO_LEADER_CHANGE, even the same leader) bumps the leader
    epoch; every change bumps the partition epoch.
    """
    leader, leader_epoch = state.leader, state.leader_epoch
    if change.leader != NO_LEADER_CHANGE:
        leader, leader_epoch = change.leader, state.leader_epoch + 1
    return replace(
        state,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=state.isr if change.isr is None else change.isr,
        leader_recovery_state=(
            state.leader_recovery_state if change.leader_recovery_state is None else change.leader_recovery_state
        ),
        partition_epoch=state.partition_epoch + 1,
    )


# ----------------------------------------------------------------------------- the controller's uses


def _election(unclean_allowed: bool) -> Election:
    return Election.UNCLEAN if unclean_allowed else Election.ONLINE


def remove_broker_from_partition(
    state: PartitionState,
    broker_id: int,
    is_acceptable: Callable[[int], bool],
    *,
    unclean_allowed: bool = False,
) -> PartitionChange | None:
    """A broker is fenced, enters controlled shutdown or unregisters: take it out of the ISR and,
    if it led, elect another leader. The broker is never acceptable here, whatever
    ``is_acceptable`` says (its registration may not show the change yet)."""

    def acceptable(broker: int) -> bool:
        return broker != broker_id and is_acceptable(broker)

    target = tuple(r for r in state.isr if r != broker_id)
    return build_partition_change(state, acceptable, target_isr=target, election=_election(unclean_allowed))


def broker_unfenced(
    state: PartitionState,
    broker_id: int,
    is_acceptable: Callable[[int], bool],
    *,
    unclean_allowed: bool = False,
) -> PartitionChange | None:
    """A broker is unfenced: try to elect a leader for a leaderless partition, counting the
    broker as acceptable even before its registration shows it unfenced."""

    def acceptable(broker: int) -> bool:
        return broker == broker_id or is_acceptable(broker)

    return build_partition_change(state, acceptable, election=_election(unclean_allowed))


def elect_preferred(state: PartitionState, is_acceptable: Callable[[int], bool]) -> PartitionChange | None:
    """A preferred-leader election (also what auto leader rebalancing runs)."""
    return build_partition_change(state, is_acceptable, election=Election.PREFERRED)


def can_preferred_replica_lead(state: PartitionState, is_acceptable: Callable[[int], bool]) -> bool:
    """replicas[0] is in the ISR and acceptable."""
    return bool(state.replicas) and state.replicas[0] in state.isr and is_acceptable(state.replicas[0])


def elect_leader(
    state: PartitionState,
    election_type: Election,
    is_acceptable: Callable[[int], bool],
) -> tuple[ErrorCode, PartitionChange | None]:
    """One partition of an ElectLeaders request (``election_type`` PREFERRED or UNCLEAN).

    ELECTION_NOT_NEEDED if the preferred replica already leads (PREFERRED) or there is a
    leader (UNCLEAN); PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE if no
    change is possible; otherwise NONE and the change. An UNCLEAN request elects uncleanly
    whatever the topic's ``unclean.leader.election.enable`` says, as in Kafka.
    """
    if election_type is Election.ONLINE:
        raise ValueError("ElectLeaders takes PREFERRED or UNCLEAN")
    if election_type is Election.PREFERRED and state.replicas and state.leader == state.replicas[0]:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    if election_type is Election.UNCLEAN and state.leader != NO_LEADER:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    change = build_partition_change(state, is_acceptable, election=election_type)
    if change is None:
        if election_type is Election.PREFERRED:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return ErrorCode.NONE, change


# ----------------------------------------------------------------------------- AlterPartition


@dataclass(frozen=True, slots=True)
class BrokerRegistrationState:
    """What AlterPartition validation needs of a broker's registration."""

    epoch: int
    fenced: bool = False
    in_controlled_shutdown: bool = False


def _isr_is_valid(replicas: Sequence[int], isr: Sequence[int]) -> bool:
    """Kafka's ``Replicas.validateIsr``: no negative ids, no duplicates, all within the replicas."""
    return all(b >= 0 for b in isr) and len(set(isr)) == len(isr) and set(isr) <= set(replicas)


def ineligible_replicas(
    new_isr: Iterable[IsrMember], registrations: Mapping[int, BrokerRegistrationState]
) -> list[tuple[int, str]]:
    """ISR members that may not be in the ISR (KIP-841/KIP-903), with Kafka's reasons."""
    result: list[tuple[int, str]] = []
    for member in new_isr:
        registration = registrations.get(member.broker_id)
        if registration is None:
            result.append((member.broker_id, "not registered"))
        elif registration.in_controlled_shutdown:
            result.append((member.broker_id, "shutting down"))
        elif registration.fenced:
            result.append((member.broker_id, "fenced"))
        elif member.broker_epoch != -1 and member.broker_epoch != registration.epoch:
            result.append(
                (
                    member.broker_id,
                    f"broker epoch mismatch: requested={member.broker_epoch} VS expected={registration.epoch}",
                )
            )
    return result


def validate_alter_partition(
    state: PartitionState | None,
    request: AlterPartitionRequest,
    item: AlterPartitionItem,
    registrations: Mapping[int, BrokerRegistrationState],
    *,
    request_version: int = 3,
) -> ErrorCode:
    """Validate one partition (`item`) of an AlterPartition `request` (whose sender
    fields are used), in the KRaft controller's order.

    1. the sender is not registered or its broker epoch is stale → STALE_BROKER_EPOCH (Kafka
       fails the whole request with it, before looking at any partition);
    2. unknown partition (``state`` None) → UNKNOWN_TOPIC_OR_PARTITION;
    3. request leader epoch > current → NOT_CONTROLLER (this controller is behind);
    4. request partition epoch > current → NOT_CONTROLLER;
    5. request leader epoch < current → FENCED_LEADER_EPOCH;
    6. sender is not the leader → INVALID_REQUEST;
    7. request partition epoch < current → INVALID_UPDATE_VERSION;
    8. new ISR has a negative id, a duplicate or a non-replica → INVALID_REQUEST;
    9. new ISR lacks the leader → INVALID_REQUEST;
    10. RECOVERING with more than one ISR member → INVALID_REQUEST;
    11. RECOVERED → RECOVERING → INVALID_REQUEST;
    12. an ISR member unregistered, in controlled shutdown, fenced or with another broker
        epoch → INELIGIBLE_REPLICA (OPERATION_NOT_ATTEMPTED for request versions 0 and 1).
    """
    sender = registrations.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    if state is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if item.leader_epoch > state.leader_epoch:
        return ErrorCode.NOT_CONTROLLER
    if item.partition_epoch > state.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if item.leader_epoch < state.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if request.broker_id != state.leader:
        return ErrorCode.INVALID_REQUEST
    if item.partition_epoch < state.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    new_isr = [m.broker_id for m in item.new_isr]
    if not _isr_is_valid(state.replicas, new_isr):
        return ErrorCode.INVALID_REQUEST
    if state.leader not in new_isr:
        return ErrorCode.INVALID_REQUEST
    if item.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
        return ErrorCode.INVALID_REQUEST
    if (
        state.leader_recovery_state == LeaderRecoveryState.RECOVERED
        and item.leader_recovery_state == LeaderRecoveryState.RECOVERING
    ):
        return ErrorCode.INVALID_REQUEST
    if ineligible_replicas(item.new_isr, registrations):
        return ErrorCode.INELIGIBLE_REPLICA if request_version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
    return ErrorCode.NONE


def alter_partition_change(
    state: PartitionState,
    item: AlterPartitionItem,
    is_acceptable: Callable[[int], bool],
    *,
    unclean_allowed: bool = False,
) -> PartitionChange | None:
    """The change a validated AlterPartition makes: the requested ISR and leader recovery state."""
    return build_partition_change(
        state,
        is_acceptable,
        target_isr=[m.broker_id for m in item.new_isr],
        election=_election(unclean_allowed),
        target_leader_recovery_state=item.leader_recovery_state,
    )


# ----------------------------------------------------------------------------- leader imbalance


def is_imbalanced(replicas: Sequence[int], leader: int) -> bool:
    """The partition is not led by its preferred replica (KRaft's trigger for rebalancing)."""
    return bool(replicas) and leader != replicas[0]


def imbalance(partitions: Iterable[tuple[Sequence[int], int]], brokers: Iterable[int] = ()) -> dict[int, float]:
    """Kafka's leader imbalance ratio per broker, from ``(replicas, leader)`` pairs.

    For each broker that is the preferred replica (replicas[0]) of some partitions: the share
    of those partitions it does not lead (a leaderless one counts as not led). Brokers listed
    in ``brokers`` that prefer no partition get 0.0. The ZooKeeper-era controller ran
    preferred elections for a broker's partitions once its ratio exceeded
    ``leader.imbalance.per.broker.percentage`` / 100 (see :func:`brokers_over_threshold`).
    """
    preferred: dict[int, int] = {}
    not_led: dict[int, int] = {}
    for replicas, leader in partitions:
        if not replicas:
            continue
        broker = replicas[0]
        preferred[broker] = preferred.get(broker, 0) + 1
        if leader != broker:
            not_led[broker] = not_led.get(broker, 0) + 1
    result = {b: 0.0 for b in brokers}
    for broker, count in preferred.items():
        result[broker] = not_led.get(broker, 0) / count
    return result


def brokers_over_threshold(ratios: Mapping[int, float], percentage: int = 10) -> list[int]:
    """Brokers whose imbalance ratio is above ``leader.imbalance.per.broker.percentage`` (default 10)."""
    return sorted(b for b, ratio in ratios.items() if ratio > percentage / 100)
