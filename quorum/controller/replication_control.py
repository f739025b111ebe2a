"""Topic and partition decisions of the active controller, as pure functions.

Each takes the controller's working image and a request, and returns a
`ControllerResult`: the records to append and the answer to give once they
commit. Validation follows Kafka's KRaft controller (names, collisions,
configs, placement, leader election); the rules themselves live in
`topic_rules`, `topic_configs`, `placement` and `partition_change`.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from quorum.controller import partition_change as pc
from quorum.controller.errors import (
    ControllerError,
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    TopicAlreadyExistsError,
)
from quorum.controller.placement import (
    BrokerPlacement,
    assign_new_partitions,
    assign_replicas,
    check_partition_increase,
    initial_isr,
    validate_manual_assignment,
    validate_manual_new_partitions,
)
from quorum.controller.requests import (
    AlterConfigOpType,
    AlterConfigsResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    ConfigResourceType,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.controller.result import ControllerResult
from quorum.controller.topic_configs import config_def, validate_configs
from quorum.controller.topic_rules import check_collision, check_reserved_for_create, validate_topic_name
from quorum.metadata._codec import fast_constructor
from quorum.metadata.image import ConfigResource, MetadataImage, PartitionRegistration, TopicImage, config_resource
from quorum.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    new_config_record,
)

TOPIC = ConfigResourceType.TOPIC
UNCLEAN_CONFIG = "unclean.leader.election.enable"

# One client operation may write at most this many records (Kafka's controller bounds a
# user operation the same way), so that no request can stall the controller's one thread.
MAX_RECORDS_PER_OPERATION = 10_000
TOO_LARGE = "Unable to perform excessively large batch operation."


class OperationTooLargeError(ControllerError):
    code = ErrorCode.POLICY_VIOLATION

    def __init__(self) -> None:
        super().__init__(TOO_LARGE)


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """Broker-level defaults the controller applies (Kafka's config names in `broker_defaults`)."""

    num_partitions: int = 1
    default_replication_factor: int = 1
    broker_defaults: Mapping[str, str] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    @property
    def unclean_default(self) -> bool:
        return self.broker_defaults.get(UNCLEAN_CONFIG, "false").strip().lower() == "true"


# ------------------------------------------------------------------ helpers


def state_of(p: PartitionRegistration) -> pc.PartitionState:
    return pc.PartitionState(p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch, p.leader_recovery_state)


def change_record(topic_id: uuid.UUID, partition_id: int, change: pc.PartitionChange) -> PartitionChangeRecord:
    recovery = change.leader_recovery_state
    return PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        isr=change.isr,
        leader=change.leader,
        leader_recovery_state=-1 if recovery is None else int(recovery),
    )


def acceptable_in(image: MetadataImage) -> Callable[[int], bool]:
    """A broker may lead if it is registered, unfenced and not shutting down."""
    brokers = image.cluster.brokers

    def acceptable(broker_id: int) -> bool:
        b = brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    return acceptable


def unclean_allowed(image: MetadataImage, topic: str, settings: ReplicationSettings) -> bool:
    value = image.configs.get(ConfigResource.topic(topic), {}).get(UNCLEAN_CONFIG)
    if value is None:
        return settings.unclean_default
    return value.strip().lower() == "true"


def placements(image: MetadataImage) -> list[BrokerPlacement]:
    return [
        BrokerPlacement(b.id, b.rack, fenced=b.fenced or b.in_controlled_shutdown)
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.id)
    ]


def iter_partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    for topic in image.topics.by_id.values():
        for partition_id, p in topic.partitions.items():
            yield topic, partition_id, p


def _error(e: ControllerError) -> tuple[int, str]:
    return int(e.code), e.message


# ------------------------------------------------------------------ topics


def create_topics(
    image: MetadataImage, request: CreateTopicsRequest, settings: ReplicationSettings
) -> ControllerResult[CreateTopicsResponse]:
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    names = [t.name for t in request.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    by_name = image.topics.by_name
    created: set[str] = set()  # names this request creates (before its records are replayed)
    registered = [b.id for b in image.cluster.brokers.values()]
    active = [b.id for b in image.cluster.brokers.values() if not b.fenced and not b.in_controlled_shutdown]
    is_active = acceptable_in(image)
    for topic in request.topics:
        if topic.name in duplicates:
            msg = f"Found multiple entries for topic {topic.name}."
            results.append(CreateTopicResult(topic.name, int(ErrorCode.INVALID_REQUEST), msg))
            continue
        try:
            check_reserved_for_create(topic.name)
            validate_topic_name(topic.name)
            if topic.name in by_name or topic.name in created:
                raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.")
            # Only the names sharing the collision key can collide (an index, not a scan).
            check_collision(topic.name, (*image.topics.colliding_names(topic.name), *created))
            configs = validate_configs(dict(topic.configs), broker_defaults=settings.broker_defaults)
            if topic.assignments:
                if topic.num_partitions != -1 or topic.replication_factor != -1:
                    raise InvalidRequestError(
                        "Both numPartitions or replicationFactor and replicasAssignments were set. "
                        "Both cannot be used at the same time."
                    )
                if len(records) + len(topic.assignments) + len(configs) + 1 > MAX_RECORDS_PER_OPERATION:
                    raise OperationTooLargeError()
                assignment = validate_manual_assignment(sorted(topic.assignments.items()), registered, active)
            else:
                partitions = topic.num_partitions if topic.num_partitions != -1 else settings.num_partitions
                rf = topic.replication_factor if topic.replication_factor != -1 else settings.default_replication_factor
                if len(records) + partitions + len(configs) + 1 > MAX_RECORDS_PER_OPERATION:
                    raise OperationTooLargeError()
                assignment = assign_replicas(placements(image), partitions, rf, rng=settings.rng)
        except ControllerError as e:
            code, message = _error(e)
            results.append(CreateTopicResult(topic.name, code, message))
            continue
        topic_id = uuid.uuid4()
        rf = len(next(iter(assignment.values()))) if assignment else 0
        results.append(CreateTopicResult(topic.name, 0, None, topic_id, len(assignment), rf, configs))
        created.add(topic.name)
        if request.validate_only:
            continue
        records.append(TopicRecord(name=topic.name, topic_id=topic_id))
        for key, value in sorted(configs.items()):
            records.append(ConfigRecord(resource_type=int(TOPIC), resource_name=topic.name, name=key, value=value))
        for partition_id, replicas in sorted(assignment.items()):
            isr = initial_isr(replicas, is_active)
            records.append(
                PartitionRecord(
                    partition_id=partition_id,
                    topic_id=topic_id,
                    replicas=tuple(replicas),
                    isr=isr,
                    leader=isr[0] if isr else pc.NO_LEADER,
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
    return ControllerResult(records, CreateTopicsResponse(tuple(results)))


def delete_topics(image: MetadataImage, request: DeleteTopicsRequest) -> ControllerResult[DeleteTopicsResponse]:
    records: list[MetadataRecord] = []
    results: list[DeleteTopicResult] = []
    seen: set[uuid.UUID] = set()
    wanted: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in request.names]
    wanted += [(None, i) for i in request.topic_ids]
    for name, topic_id in wanted:
        topic = image.topics.by_name.get(name) if name is not None else image.topics.by_id.get(topic_id)  # type: ignore[arg-type]
        if topic is None:
            msg = "This server does not host this topic-partition."
            results.append(DeleteTopicResult(name, topic_id, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), msg))
            continue
        results.append(DeleteTopicResult(topic.name, topic.id))
        if topic.id not in seen:
            seen.add(topic.id)
            records.append(RemoveTopicRecord(topic_id=topic.id))
    return ControllerResult(records, DeleteTopicsResponse(tuple(results)))


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest, settings: ReplicationSettings
) -> ControllerResult[CreatePartitionsResponse]:
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsResult] = []
    registered = [b.id for b in image.cluster.brokers.values()]
    active = [b.id for b in image.cluster.brokers.values() if not b.fenced and not b.in_controlled_shutdown]
    is_active = acceptable_in(image)
    for inc in request.topics:
        topic = image.topics.by_name.get(inc.name)
        if topic is None:
            msg = "This server does not host this topic-partition."
            results.append(CreatePartitionsResult(inc.name, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), msg))
            continue
        current = len(topic.partitions)
        try:
            check_partition_increase(inc.name, current, inc.count)
            if len(records) + inc.count - current > MAX_RECORDS_PER_OPERATION:
                raise OperationTooLargeError()
            existing = {pid: p.replicas for pid, p in topic.partitions.items()}
            if inc.assignments is not None:
                new = validate_manual_new_partitions(
                    inc.assignments,
                    topic=inc.name,
                    current_partitions=current,
                    total_partitions=inc.count,
                    replication_factor=topic.replication_factor,
                    registered=registered,
                    active=active,
                )
            else:
                new = assign_new_partitions(placements(image), existing, inc.count, topic=inc.name, rng=settings.rng)
        except ControllerError as e:
            code, message = _error(e)
            results.append(CreatePartitionsResult(inc.name, code, message))
            continue
        results.append(CreatePartitionsResult(inc.name))
        if request.validate_only:
            continue
        for partition_id, replicas in sorted(new.items()):
            isr = initial_isr(replicas, is_active)
            records.append(
                PartitionRecord(
                    partition_id=partition_id,
                    topic_id=topic.id,
                    replicas=tuple(replicas),
                    isr=isr,
                    leader=isr[0] if isr else pc.NO_LEADER,
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
    return ControllerResult(records, CreatePartitionsResponse(tuple(results)))


# ------------------------------------------------------------------ configs


def _apply_op(current: dict[str, str], name: str, op: AlterConfigOpType, value: str | None) -> None:
    if op is AlterConfigOpType.SET:
        if value is None:
            raise InvalidConfigError(name, f"Null value not supported for topic configs: {name}")
        current[name] = value
    elif op is AlterConfigOpType.DELETE:
        current.pop(name, None)
    else:
        definition = config_def(name)  # raises InvalidConfigError for unknown names
        if definition.type.name != "LIST":
            raise InvalidConfigError(name, f"Config value append is not allowed for config key: {name}")
        items = [x.strip() for x in current.get(name, definition.default or "").split(",") if x.strip()]
        extra = [x.strip() for x in (value or "").split(",") if x.strip()]
        if op is AlterConfigOpType.APPEND:
            items += [x for x in extra if x not in items]
        else:
            items = [x for x in items if x not in extra]
        current[name] = ",".join(items)


def incremental_alter_configs(
    image: MetadataImage, request: IncrementalAlterConfigsRequest, settings: ReplicationSettings
) -> ControllerResult[IncrementalAlterConfigsResponse]:
    records: list[MetadataRecord] = []
    results: list[AlterConfigsResult] = []
    topics = image.topics.by_name
    configs = image.configs
    for res in request.resources:
        name = res.resource_name
        if res.resource_type != TOPIC:
            msg = "pykraft supports topic configs only"
            results.append(AlterConfigsResult(res.resource_type, name, int(ErrorCode.INVALID_REQUEST), msg))
            continue
        if name not in topics:
            code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            results.append(AlterConfigsResult(res.resource_type, name, code, f"Topic {name} does not exist."))
            continue
        before = configs.get(config_resource(_TOPIC_TYPE, name), _NO_CONFIGS)
        # A copy to change: the image's maps are MappingProxyType (whose copy() is the dict's
        # own, in C; dict() of a proxy goes key by key).
        after = before.copy() if isinstance(before, MappingProxyType) else dict(before)
        ops = res.ops
        # The ops change only the keys they name: those are the keys to compare, in order.
        keys = sorted({op.name for op in ops}) if len(ops) != 1 else [ops[0].name]
        try:
            if len(keys) != len(ops):
                raise InvalidRequestError("Error due to duplicate config keys")
            for op in ops:
                _apply_op(after, op.name, op.op, op.value)
            validate_configs(after, broker_defaults=settings.broker_defaults)
        except ControllerError as e:
            code, message = _error(e)
            results.append(AlterConfigsResult(res.resource_type, name, code, message))
            continue
        results.append(AlterConfigsResult(res.resource_type, name))
        if request.validate_only:
            continue
        for key in keys:
            value = after.get(key)
            if before.get(key) != value:
                records.append(new_config_record(_TOPIC_TYPE, name, key, value))
    return ControllerResult(records, IncrementalAlterConfigsResponse(tuple(results)))


_NO_CONFIGS: Mapping[str, str] = {}
_TOPIC_TYPE = int(TOPIC)


# ------------------------------------------------------------------ leadership


def elect_leaders(image: MetadataImage, request: ElectLeadersRequest) -> ControllerResult[ElectLeadersResponse]:
    acceptable = acceptable_in(image)
    election = pc.Election.PREFERRED if request.election_type is ElectionType.PREFERRED else pc.Election.UNCLEAN
    targets: list[tuple[str, int]]
    if request.partitions is None:
        targets = [(t.name, pid) for t, pid, _ in iter_partitions(image)]
    else:
        targets = list(request.partitions)
    records: list[MetadataRecord] = []
    results: list[ElectLeaderResult] = []
    for name, partition_id in targets:
        topic = image.topics.by_name.get(name)
        p = topic.partitions.get(partition_id) if topic is not None else None
        if topic is None or p is None:
            code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            results.append(
                ElectLeaderResult(name, partition_id, code, "This server does not host this topic-partition.")
            )
            continue
        code_enum, change = pc.elect_leader(state_of(p), election, acceptable)
        if change is not None:
            records.append(change_record(topic.id, partition_id, change))
        if request.partitions is None and code_enum == ErrorCode.ELECTION_NOT_NEEDED:
            continue  # Kafka leaves partitions that need nothing out of an "all partitions" answer
        results.append(ElectLeaderResult(name, partition_id, int(code_enum), None))
    return ControllerResult(records, ElectLeadersResponse(0, tuple(results)))


def move_leadership_off(image: MetadataImage, broker_id: int, settings: ReplicationSettings) -> list[MetadataRecord]:
    """The broker leaves every ISR; partitions it led get the next eligible leader (Kafka's
    handleBrokerFenced / handleBrokerInControlledShutdown)."""
    acceptable = acceptable_in(image)
    records: list[MetadataRecord] = []
    for topic, partition_id, p in iter_partitions(image):
        if broker_id not in p.isr and p.leader != broker_id:
            continue
        change = pc.remove_broker_from_partition(
            state_of(p), broker_id, acceptable, unclean_allowed=unclean_allowed(image, topic.name, settings)
        )
        if change is not None:
            records.append(change_record(topic.id, partition_id, change))
    return records


_new_change_record: Callable[..., PartitionChangeRecord] = fast_constructor(PartitionChangeRecord)
_RECOVERING = int(pc.LeaderRecoveryState.RECOVERING)


def leave_partitions(
    image: MetadataImage, broker_id: int, settings: ReplicationSettings, topics: Iterable[TopicImage]
) -> list[MetadataRecord]:
    """`move_leadership_off` restricted to `topics`, specialised for speed (it runs for
    every partition of a fenced broker): the same records as
    `pc.remove_broker_from_partition` gives (tests/unit/controller compare the two), built
    without the generic per-partition helpers."""
    brokers = image.cluster.brokers
    acceptable = frozenset(
        b.id for b in brokers.values() if b.id != broker_id and not b.fenced and not b.in_controlled_shutdown
    )
    make = _new_change_record
    no_change = pc.NO_LEADER_CHANGE
    records: list[MetadataRecord] = []
    append = records.append
    for topic in topics:
        unclean: bool | None = None
        topic_id = topic.id
        for partition_id, p in topic.partitions.items():
            isr = p.isr
            leader = p.leader
            if broker_id not in isr and leader != broker_id:
                continue
            target = tuple(r for r in isr if r != broker_id)
            if leader in acceptable and leader in target:
                new_leader = leader
            else:
                new_leader = next((r for r in p.replicas if r in acceptable and r in target), pc.NO_LEADER)
            new_isr: tuple[int, ...] | None = None
            recovery = -1
            if new_leader == pc.NO_LEADER:
                if unclean is None:
                    unclean = unclean_allowed(image, topic.name, settings)
                if unclean:
                    new_leader = next((r for r in p.replicas if r in acceptable), pc.NO_LEADER)
                    if new_leader != pc.NO_LEADER and new_leader != leader:
                        new_isr = (new_leader,)
                        if p.leader_recovery_state != _RECOVERING:
                            recovery = _RECOVERING
            change_leader = new_leader if new_leader != leader else no_change
            if new_isr is None and target and target != isr:
                new_isr = target
            if change_leader == no_change and new_isr is None and recovery == -1:
                continue
            append(make(partition_id, topic_id, new_isr, change_leader, None, None, None, recovery, None, None, None))
    return records


def elect_for_unfenced(image: MetadataImage, broker_id: int, settings: ReplicationSettings) -> list[MetadataRecord]:
    """A broker came back: leaderless partitions it can lead get a leader (Kafka's handleBrokerUnfenced)."""
    acceptable = acceptable_in(image)
    records: list[MetadataRecord] = []
    for topic, partition_id, p in iter_partitions(image):
        if p.leader != pc.NO_LEADER or broker_id not in p.replicas:
            continue
        change = pc.broker_unfenced(
            state_of(p), broker_id, acceptable, unclean_allowed=unclean_allowed(image, topic.name, settings)
        )
        if change is not None:
            records.append(change_record(topic.id, partition_id, change))
    return records


def rebalance_preferred(image: MetadataImage, limit: int = 1000) -> list[MetadataRecord]:
    """Preferred-leader elections for partitions not led by their first replica
    (what auto.leader.rebalance.enable runs), at most `limit` per call."""
    acceptable = acceptable_in(image)
    records: list[MetadataRecord] = []
    for topic, partition_id, p in iter_partitions(image):
        if not p.replicas or p.leader == p.replicas[0]:
            continue
        state = state_of(p)
        if not pc.can_preferred_replica_lead(state, acceptable):
            continue
        change = pc.elect_preferred(state, acceptable)
        if change is not None:
            records.append(change_record(topic.id, partition_id, change))
            if len(records) >= limit:
                break
    return records


def leader_imbalance(image: MetadataImage) -> dict[int, float]:
    return pc.imbalance(((p.replicas, p.leader) for _, _, p in iter_partitions(image)), image.cluster.brokers)


def alter_partition(image: MetadataImage, request: AlterPartitionRequest) -> ControllerResult[AlterPartitionResponse]:
    brokers = image.cluster.brokers
    registrations = {
        b.id: pc.BrokerRegistrationState(b.epoch, b.fenced, b.in_controlled_shutdown) for b in brokers.values()
    }
    sender = brokers.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        return ControllerResult([], AlterPartitionResponse(int(ErrorCode.STALE_BROKER_EPOCH), ()))
    records: list[MetadataRecord] = []
    results: list[AlterPartitionResult] = []
    for item in request.partitions:
        topic = image.topics.by_id.get(item.topic_id)
        p = topic.partitions.get(item.partition) if topic is not None else None
        if topic is None or p is None:
            results.append(
                AlterPartitionResult(item.topic_id, item.partition, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            )
            continue
        state = state_of(p)
        code = pc.validate_alter_partition(state, request, item, registrations)
        if code != ErrorCode.NONE:
            results.append(AlterPartitionResult(item.topic_id, item.partition, int(code)))
            continue
        change = pc.alter_partition_change(state, item, acceptable_in(image))
        after = pc.apply_change(state, change) if change is not None else state
        if change is not None:
            records.append(change_record(topic.id, item.partition, change))
        results.append(
            AlterPartitionResult(
                item.topic_id,
                item.partition,
                0,
                after.leader,
                after.leader_epoch,
                after.isr,
                int(after.leader_recovery_state),
                after.partition_epoch,
            )
        )
    return ControllerResult(records, AlterPartitionResponse(0, tuple(results)))
