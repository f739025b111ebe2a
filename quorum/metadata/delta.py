"""`MetadataDelta`: replay metadata records on top of an image; `apply()` the result.

The single replay used everywhere (active controller, broker observers, the log
dump, the Spark audit). Semantics follow Kafka's `MetadataDelta` and its
per-area deltas, made strict: a record that cannot apply to the current state
(a partition of an unknown topic, a change to an unknown partition, a second
topic with the same id or name, a broker change with a stale epoch, ...) raises
`MetadataReplayError` and leaves the delta as it was, since a correct log never
holds one.

Record semantics:

* FeatureLevelRecord sets a finalized feature level; level 0 removes it.
* RegisterBrokerRecord adds or replaces the broker's registration.
* UnregisterBrokerRecord removes it (the broker and epoch must match).
* BrokerRegistrationChangeRecord changes fenced (-1 unfence, 0 keep, 1 fence),
  in_controlled_shutdown (1 sets it) and log dirs (empty keeps them); the
  epoch must match. FenceBrokerRecord / UnfenceBrokerRecord are the legacy forms.
* TopicRecord creates a topic; PartitionRecord adds a partition to a topic
  (it must not exist yet); PartitionChangeRecord changes one exactly as
  `PartitionRegistration.merge` (a set leader bumps the leader epoch, every change
  bumps the partition epoch); RemoveTopicRecord removes a topic, all its
  partitions and its topic configs.
* ConfigRecord sets a config key of a resource, or deletes it (value None); a
  resource left without keys disappears.
* ProducerIdsRecord advances the next producer id (it must increase).
* NoOpRecord changes nothing but the provenance.

`apply()` builds the next image copy-on-write: an untouched area (features,
brokers, topics, configs) is the same object as before; with topic changes only
the changed topics get new partition dicts, the others are shared. `apply()`
does not consume the delta: later replays continue from the same base image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from uuid import UUID

from immutables import Map

from quorum.metadata.errors import MetadataReplayError, RecordDecodeError
from quorum.metadata.image import (
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    MetadataImage,
    PartitionRegistration,
    TopicIdPartition,
    TopicImage,
    TopicsImage,
    _copy_map,
    _hamt,
    collision_key,
    config_resource,
)
from quorum.metadata.records import (
    NO_LEADER_CHANGE,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_record,
)
from quorum.raft.types import Batch

__all__ = [
    "LocalChanges",
    "MetadataDelta",
    "TopicDelta",
    "replay_batches",
]

_TOPIC = ConfigResourceType.TOPIC.value


class TopicDelta:
    """Changes to one topic within a delta (read-only for users of the delta).

    `base` is the topic in the delta's base image, or None for a topic created in
    this delta. `partitions` holds the new registration of every partition added
    or changed in this delta (not the unchanged ones).
    """

    __slots__ = ("base", "id", "name", "partitions")

    def __init__(self, topic_id: UUID, name: str, base: TopicImage | None) -> None:
        self.id = topic_id
        self.name = name
        self.base = base
        self.partitions: dict[int, PartitionRegistration] = {}

    @property
    def is_new(self) -> bool:
        return self.base is None

    def partition(self, partition_id: int) -> PartitionRegistration | None:
        """The current registration (changed in this delta, else the base's)."""
        reg = self.partitions.get(partition_id)
        if reg is None and self.base is not None:
            reg = self.base.partitions.get(partition_id)
        return reg

    def __repr__(self) -> str:
        return f"TopicDelta({self.name!r}, {self.id}, new={self.is_new}, changed={sorted(self.partitions)})"


@dataclass(frozen=True, slots=True)
class LocalChanges:
    """What one broker must do after a delta (Kafka's LocalReplicaChanges).

    `leaders`/`followers`: partitions added or changed in the delta that have a
    replica on the broker, split by whether it is now their leader, with their new
    registration. `deletes`: partitions whose replica on the broker must go: those
    of deleted topics, and those it is no longer a replica of. A topic deleted
    and re-created under the same name appears in `deletes` (old id) and in
    `leaders`/`followers` (new id); delete first.
    """

    leaders: Mapping[TopicIdPartition, PartitionRegistration]
    followers: Mapping[TopicIdPartition, PartitionRegistration]
    deletes: frozenset[TopicIdPartition]

    def __bool__(self) -> bool:
        return bool(self.leaders or self.followers or self.deletes)


class _ConfigChange:
    __slots__ = ("cleared", "keys")

    def __init__(self) -> None:
        self.cleared = False  # True: start from no keys rather than the base image's
        self.keys: dict[str, str | None] = {}

    def merged(self, current: Mapping[str, str] | None) -> dict[str, str]:
        """The resource's keys after this change, from its `current` ones (None: none)."""
        keys = {} if self.cleared or current is None else _copy_map(current)
        for key, value in self.keys.items():
            if value is None:
                keys.pop(key, None)
            else:
                keys[key] = value
        return keys


# `MetadataImage.__new__` is `object.__new__` for a Python class; a class compiled by mypyc
# has its own (object.__new__ refuses it).
_alloc_image = MetadataImage.__new__


def _new_image(
    features: Mapping[str, int],
    cluster: ClusterImage,
    topics: TopicsImage,
    configs: Mapping[ConfigResource, Mapping[str, str]],
    next_producer_id: int,
    offset: int,
    epoch: int,
) -> MetadataImage:
    """`MetadataImage(...)` without its `__init__` (and `__post_init__`, whose checks `apply`
    needs not): compiled, `object.__setattr__` is a C call per field (`fast_constructor`'s
    function of the fields runs as Python, about 3k instructions)."""
    image: MetadataImage = _alloc_image(MetadataImage)
    object.__setattr__(image, "features", features)
    object.__setattr__(image, "cluster", cluster)
    object.__setattr__(image, "topics", topics)
    object.__setattr__(image, "configs", configs)
    object.__setattr__(image, "next_producer_id", next_producer_id)
    object.__setattr__(image, "offset", offset)
    object.__setattr__(image, "epoch", epoch)
    return image


_Replayer = Callable[["MetadataDelta", Any, "int | None"], None]


class MetadataDelta:
    """Changes accumulated on top of `image` by `replay`; see the module docstring."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._features: dict[str, int | None] = {}
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._topics: dict[UUID, TopicDelta] = {}
        self._deleted: dict[UUID, TopicImage] = {}
        self._names: dict[str, UUID | None] = {}
        self._configs: dict[ConfigResource, _ConfigChange] = {}
        self._next_producer_id: int | None = None
        self._offset = image.offset
        self._epoch = image.epoch

    # ------------------------------------------------------------------ inspection

    @property
    def image(self) -> MetadataImage:
        """The base image the delta applies to."""
        return self._image

    @property
    def offset(self) -> int:
        """Offset of the last record replayed (or provenance set); the base's if none."""
        return self._offset

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def changed_features(self) -> Mapping[str, int | None]:
        """Features set in this delta (None: removed)."""
        return MappingProxyType(self._features)

    @property
    def changed_brokers(self) -> Mapping[int, BrokerRegistration | None]:
        """Brokers registered or changed in this delta (None: unregistered)."""
        return MappingProxyType(self._brokers)

    @property
    def changed_topics(self) -> Mapping[UUID, TopicDelta]:
        """Topics created or with partitions added/changed in this delta."""
        return MappingProxyType(self._topics)

    @property
    def deleted_topics(self) -> Mapping[UUID, TopicImage]:
        """Topics of the base image removed in this delta (as they were)."""
        return MappingProxyType(self._deleted)

    @property
    def changed_configs(self) -> frozenset[ConfigResource]:
        return frozenset(self._configs)

    def config_key_changed(self, resource: ConfigResource, key: str) -> bool:
        """Whether this delta may have changed `key` of `resource` (set, deleted, or all of
        the resource's keys replaced)."""
        change = self._configs.get(resource)
        return change is not None and (change.cleared or key in change.keys)

    def changed_partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionRegistration]]:
        """Every partition added or changed in this delta, with its new registration."""
        for td in self._topics.values():
            for pid, reg in td.partitions.items():
                yield TopicIdPartition(td.id, td.name, pid), reg

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """The broker's current registration (this delta's, else the base image's)."""
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._image.cluster.brokers.get(broker_id)

    def topic_id(self, name: str) -> UUID | None:
        """The id of the live topic called `name`, or None."""
        if name in self._names:
            return self._names[name]
        topic = self._image.topics.by_name.get(name)
        return None if topic is None else topic.id

    def topic_name(self, topic_id: UUID) -> str | None:
        """The name of the live topic with this id, or None."""
        td = self._topics.get(topic_id)
        if td is not None:
            return td.name
        if topic_id in self._deleted:
            return None
        topic = self._image.topics.by_id.get(topic_id)
        return None if topic is None else topic.name

    def partition(self, topic_id: UUID, partition_id: int) -> PartitionRegistration | None:
        """The current registration of a partition, or None."""
        td = self._topics.get(topic_id)
        if td is not None:
            return td.partition(partition_id)
        if topic_id in self._deleted:
            return None
        return self._image.partition(topic_id, partition_id)

    # ------------------------------------------------------------------ replay

    def replay(self, record: MetadataRecord, offset: int | None = None, epoch: int | None = None) -> None:
        """Apply one record; `offset`/`epoch` (when given) become the provenance.

        Raises MetadataReplayError (leaving the delta unchanged) if the record
        cannot apply.
        """
        if type(record) is ConfigRecord:
            # A config write's record: a direct (compiled) call, not one through the table.
            self._replay_config(record, offset)
        else:
            replayer = _REPLAYERS.get(type(record))
            if replayer is None:
                raise MetadataReplayError(f"cannot replay a {type(record).__name__}", offset)
            replayer(self, record, offset)
        if offset is not None:
            self._offset = offset
        if epoch is not None:
            self._epoch = epoch

    def set_provenance(self, offset: int, epoch: int) -> None:
        """Move the provenance without a record (e.g. past a control batch)."""
        self._offset = offset
        self._epoch = epoch

    # features

    def _replay_feature(self, r: FeatureLevelRecord, offset: int | None) -> None:
        if r.feature_level < 0:
            raise MetadataReplayError(f"negative level {r.feature_level} for feature {r.name!r}", offset)
        self._features[r.name] = r.feature_level if r.feature_level > 0 else None

    # brokers

    def _replay_register_broker(self, r: RegisterBrokerRecord, offset: int | None) -> None:
        self._brokers[r.broker_id] = BrokerRegistration.from_record(r)

    def _broker_or_raise(self, broker_id: int, epoch: int, action: str, offset: int | None) -> BrokerRegistration:
        broker = self.broker(broker_id)
        if broker is None:
            raise MetadataReplayError(f"cannot {action} broker {broker_id}: it is not registered", offset)
        if broker.epoch != epoch:
            raise MetadataReplayError(
                f"cannot {action} broker {broker_id}: epoch {epoch} does not match its epoch {broker.epoch}", offset
            )
        return broker

    def _replay_unregister_broker(self, r: UnregisterBrokerRecord, offset: int | None) -> None:
        self._broker_or_raise(r.broker_id, r.broker_epoch, "unregister", offset)
        self._brokers[r.broker_id] = None

    def _replay_fence(self, r: FenceBrokerRecord, offset: int | None) -> None:
        broker = self._broker_or_raise(r.broker_id, r.broker_epoch, "fence", offset)
        self._brokers[r.broker_id] = broker.with_state(fenced=True)

    def _replay_unfence(self, r: UnfenceBrokerRecord, offset: int | None) -> None:
        broker = self._broker_or_raise(r.broker_id, r.broker_epoch, "unfence", offset)
        self._brokers[r.broker_id] = broker.with_state(fenced=False)

    def _replay_broker_change(self, r: BrokerRegistrationChangeRecord, offset: int | None) -> None:
        broker = self._broker_or_raise(r.broker_id, r.broker_epoch, "change", offset)
        if r.fenced not in (-1, 0, 1):
            raise MetadataReplayError(f"broker {r.broker_id}: unknown fenced change {r.fenced}", offset)
        if r.in_controlled_shutdown not in (0, 1):
            raise MetadataReplayError(
                f"broker {r.broker_id}: unknown in_controlled_shutdown change {r.in_controlled_shutdown}", offset
            )
        new = broker.with_state(
            fenced=None if r.fenced == 0 else r.fenced == 1,
            in_controlled_shutdown=True if r.in_controlled_shutdown == 1 else None,
            log_dirs=r.log_dirs or None,
        )
        if new is not broker:
            self._brokers[r.broker_id] = new

    # topics and partitions

    def _topic_for_write(self, topic_id: UUID, what: str, offset: int | None) -> TopicDelta:
        td = self._topics.get(topic_id)
        if td is not None:
            return td
        base = None if topic_id in self._deleted else self._image.topics.by_id.get(topic_id)
        if base is None:
            raise MetadataReplayError(f"{what} for unknown topic {topic_id}", offset)
        td = self._topics[topic_id] = TopicDelta(topic_id, base.name, base)
        return td

    def _replay_topic(self, r: TopicRecord, offset: int | None) -> None:
        if self.topic_name(r.topic_id) is not None:
            raise MetadataReplayError(f"topic id {r.topic_id} ({r.name!r}) already exists", offset)
        if self.topic_id(r.name) is not None:
            raise MetadataReplayError(f"a topic named {r.name!r} already exists", offset)
        if not r.name:
            raise MetadataReplayError("empty topic name", offset)
        self._topics[r.topic_id] = TopicDelta(r.topic_id, r.name, None)
        self._names[r.name] = r.topic_id

    def _replay_partition(self, r: PartitionRecord, offset: int | None) -> None:
        td = self._topics.get(r.topic_id)
        if td is None:
            td = self._topic_for_write(r.topic_id, f"PartitionRecord {r.partition_id}", offset)
        pid = r.partition_id
        if pid in td.partitions or (td.base is not None and pid in td.base.partitions):
            raise MetadataReplayError(f"partition {td.name}-{pid} already exists", offset)
        if pid < 0:
            raise MetadataReplayError(f"negative partition id {pid} in topic {td.name!r}", offset)
        if r.leader_recovery_state not in (0, 1):
            raise MetadataReplayError(f"{td.name}-{pid}: bad leader recovery state {r.leader_recovery_state}", offset)
        if r.leader < -1:
            raise MetadataReplayError(f"{td.name}-{pid}: bad leader {r.leader}", offset)
        td.partitions[pid] = PartitionRegistration.from_record(r)

    def _replay_partition_change(self, r: PartitionChangeRecord, offset: int | None) -> None:
        td = self._topics.get(r.topic_id)
        if td is None:
            td = self._topic_for_write(r.topic_id, f"PartitionChangeRecord {r.partition_id}", offset)
        pid = r.partition_id
        current = td.partition(pid)
        if current is None:
            raise MetadataReplayError(f"PartitionChangeRecord for unknown partition {td.name}-{pid}", offset)
        if r.leader < NO_LEADER_CHANGE:
            raise MetadataReplayError(f"{td.name}-{pid}: bad leader {r.leader}", offset)
        if r.leader_recovery_state not in (-1, 0, 1):
            raise MetadataReplayError(f"{td.name}-{pid}: bad leader recovery state {r.leader_recovery_state}", offset)
        td.partitions[pid] = current.merge(r)

    def _replay_remove_topic(self, r: RemoveTopicRecord, offset: int | None) -> None:
        name = self.topic_name(r.topic_id)
        if name is None:
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic {r.topic_id}", offset)
        td = self._topics.pop(r.topic_id, None)
        if td is None or td.base is not None:
            base = self._image.topics.by_id[r.topic_id]
            self._deleted[r.topic_id] = base
        self._names[name] = None
        change = self._configs.get(config_resource(_TOPIC, name))
        if change is None:
            change = self._configs[config_resource(_TOPIC, name)] = _ConfigChange()
        change.cleared = True
        change.keys.clear()

    # configs

    def _replay_config(self, r: ConfigRecord, offset: int | None) -> None:
        resource = config_resource(r.resource_type, r.resource_name)
        change = self._configs.get(resource)
        if change is None:
            change = self._configs[resource] = _ConfigChange()
        change.keys[r.name] = r.value

    # producer ids

    def _replay_producer_ids(self, r: ProducerIdsRecord, offset: int | None) -> None:
        current = self._image.next_producer_id if self._next_producer_id is None else self._next_producer_id
        if r.next_producer_id <= current:
            raise MetadataReplayError(
                f"next producer id {r.next_producer_id} is not above the current {current}", offset
            )
        self._next_producer_id = r.next_producer_id

    def _replay_noop(self, r: NoOpRecord, offset: int | None) -> None:
        pass

    # ------------------------------------------------------------------ apply

    def apply(self) -> MetadataImage:
        """The image with every replayed change; unchanged parts are shared with the base."""
        image = self._image
        features = image.features
        if self._features:
            new_features = _copy_map(features)
            for name, level in self._features.items():
                if level is None:
                    new_features.pop(name, None)
                else:
                    new_features[name] = level
            features = MappingProxyType(new_features)
        cluster = image.cluster
        if self._brokers:
            brokers = _copy_map(cluster.brokers)
            for broker_id, reg in self._brokers.items():
                if reg is None:
                    brokers.pop(broker_id, None)
                else:
                    brokers[broker_id] = reg
            cluster = ClusterImage(MappingProxyType(brokers))
        topics = self._apply_topics(image.topics)
        configs = image.configs
        if len(self._configs) == 1 and type(configs) is Map:
            # One resource (a config write's own delta on the controller): one persistent-map
            # set rather than a mutation session.
            ((resource, change),) = self._configs.items()
            keys = change.merged(configs.get(resource))
            if keys:
                configs = configs.set(resource, MappingProxyType(keys))
            elif resource in configs:
                configs = configs.delete(resource)
        elif self._configs:
            with _hamt(configs).mutate() as new_configs:
                for resource, change in self._configs.items():
                    keys = change.merged(new_configs.get(resource))
                    if keys:
                        new_configs[resource] = MappingProxyType(keys)
                    elif resource in new_configs:
                        del new_configs[resource]
                configs = new_configs.finish()
        next_pid = image.next_producer_id if self._next_producer_id is None else self._next_producer_id
        # The base's features and configs are a MappingProxyType and a HAMT (MetadataImage's
        # __post_init__), and so is what replaces them here: its checks are skipped.
        return _new_image(features, cluster, topics, configs, next_pid, self._offset, self._epoch)

    def _apply_topics(self, topics: TopicsImage) -> TopicsImage:
        """The topics with this delta's changes: O(changed topics x log topics), the
        unchanged topics' structure is shared (persistent maps)."""
        if not self._topics and not self._deleted:
            return topics
        collisions = topics.by_collision
        assert collisions is not None
        with _hamt(topics.by_id).mutate() as by_id, _hamt(topics.by_name).mutate() as by_name, _hamt(
            collisions
        ).mutate() as by_collision:
            for topic_id, old in self._deleted.items():
                if topic_id in by_id:
                    del by_id[topic_id]
                if by_name.get(old.name) is old:
                    del by_name[old.name]
                    key = collision_key(old.name)
                    if key is not None:
                        rest = tuple(n for n in by_collision.get(key, ()) if n != old.name)
                        if rest:
                            by_collision[key] = rest
                        elif key in by_collision:
                            del by_collision[key]
            for topic_id, td in self._topics.items():
                base = td.base
                if base is None:
                    partitions = dict(td.partitions)
                    key = collision_key(td.name)
                    if key is not None:
                        names = by_collision.get(key, ())
                        if td.name not in names:
                            by_collision[key] = (*names, td.name)
                elif td.partitions:
                    partitions = _copy_map(base.partitions)
                    partitions.update(td.partitions)
                else:
                    continue
                topic = TopicImage(td.name, topic_id, MappingProxyType(partitions))
                by_id[topic_id] = topic
                by_name[td.name] = topic
            result = TopicsImage(by_id.finish(), by_name.finish(), by_collision.finish())
        return result

    # ------------------------------------------------------------------ broker view

    def local_changes(self, broker_id: int) -> LocalChanges:
        """What `broker_id` must do for its replicas after this delta (see LocalChanges)."""
        leaders: dict[TopicIdPartition, PartitionRegistration] = {}
        followers: dict[TopicIdPartition, PartitionRegistration] = {}
        deletes: set[TopicIdPartition] = set()
        for topic_id, old in self._deleted.items():
            for pid, reg in old.partitions.items():
                if broker_id in reg.replicas:
                    deletes.add(TopicIdPartition(topic_id, old.name, pid))
        for td in self._topics.values():
            base = td.base
            for pid, reg in td.partitions.items():
                key = TopicIdPartition(td.id, td.name, pid)
                if broker_id in reg.replicas:
                    if reg.leader == broker_id:
                        leaders[key] = reg
                    else:
                        followers[key] = reg
                elif base is not None:
                    prev = base.partitions.get(pid)
                    if prev is not None and broker_id in prev.replicas:
                        deletes.add(key)
        return LocalChanges(MappingProxyType(leaders), MappingProxyType(followers), frozenset(deletes))

    # ------------------------------------------------------------------ diff

    @classmethod
    def diff(cls, old: MetadataImage, new: MetadataImage) -> MetadataDelta:
        """A delta on `old` whose `apply()` equals `new` (e.g. after loading a snapshot:
        listeners and `local_changes` then see what the snapshot changed).

        Partitions are compared by value; a topic that lost partitions (impossible
        through records) is presented as deleted and re-created.
        """
        d = cls(old)
        for name in old.features.keys() | new.features.keys():
            level = new.features.get(name)
            if old.features.get(name) != level:
                d._features[name] = level
        for broker_id in old.cluster.brokers.keys() | new.cluster.brokers.keys():
            broker = new.cluster.brokers.get(broker_id)
            if old.cluster.brokers.get(broker_id) != broker:
                d._brokers[broker_id] = broker
        for topic_id, old_topic in old.topics.by_id.items():
            if topic_id not in new.topics.by_id:
                d._deleted[topic_id] = old_topic
                d._names.setdefault(old_topic.name, None)
        for topic_id, topic in new.topics.by_id.items():
            before = old.topics.by_id.get(topic_id)
            if before is topic:
                continue
            if before is not None and (
                before.name != topic.name or not before.partitions.keys() <= topic.partitions.keys()
            ):
                d._deleted[topic_id] = before
                d._names.setdefault(before.name, None)
                before = None
            td = TopicDelta(topic_id, topic.name, before)
            for pid, reg in topic.partitions.items():
                if before is None or before.partitions.get(pid) != reg:
                    td.partitions[pid] = reg
            if before is None or td.partitions:
                d._topics[topic_id] = td
                d._names[topic.name] = topic_id
        for resource in set(old.configs) | set(new.configs):
            keys = new.configs.get(resource)
            if old.configs.get(resource) != keys:
                change = d._configs[resource] = _ConfigChange()
                change.cleared = True
                change.keys.update(keys or {})
        if new.next_producer_id != old.next_producer_id:
            d._next_producer_id = new.next_producer_id
        d._offset = new.offset
        d._epoch = new.epoch
        return d

    def __repr__(self) -> str:
        return (
            f"MetadataDelta(offset={self._offset}, features={len(self._features)}, brokers={len(self._brokers)}, "
            f"topics={len(self._topics)}, deleted_topics={len(self._deleted)}, configs={len(self._configs)})"
        )


_REPLAYERS: dict[type, _Replayer] = {
    FeatureLevelRecord: MetadataDelta._replay_feature,
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_broker_change,
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ConfigRecord: MetadataDelta._replay_config,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    NoOpRecord: MetadataDelta._replay_noop,
}


def replay_batches(image: MetadataImage, batches: Iterable[Batch]) -> MetadataImage:
    """Replay committed batches (in offset order) on `image`; return the new image.

    Data batches' records are decoded and replayed with their offsets and epoch;
    control batches only move the provenance. A record that does not decode or
    cannot apply raises RecordDecodeError / MetadataReplayError with a note
    naming its offset.
    """
    delta = MetadataDelta(image)
    replay = delta.replay
    for batch in batches:
        if batch.control_type is not None:
            delta.set_provenance(batch.last_offset, batch.epoch)
            continue
        offset = batch.base_offset
        epoch = batch.epoch
        for raw in batch.records:
            try:
                record = decode_record(raw)
            except RecordDecodeError as exc:
                exc.add_note(f"record at offset {offset} (batch at {batch.base_offset}, epoch {epoch})")
                raise
            replay(record, offset, epoch)
            offset += 1
    return delta.apply()
