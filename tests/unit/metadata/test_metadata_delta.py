"""MetadataDelta: replay semantics of every record, strictness, copy-on-write apply, local changes."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest
from immutables import Map
from metadata_helpers import broker_record, replay_all, small_cluster, tid, topic_records

from quorum.metadata.delta import MetadataDelta, replay_batches
from quorum.metadata.errors import MetadataReplayError, RecordDecodeError
from quorum.metadata.image import EMPTY, ConfigResource, PartitionRegistration, TopicIdPartition
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    encode_record,
    is_unclean_election,
)
from quorum.raft.control_records import encode_leader_change
from quorum.raft.types import Batch, ControlType

A = tid(1)
B = tid(2)


def change(image, *records):
    return replay_all(image, list(records))


# --------------------------------------------------------------------------- topics and partitions


def test_small_cluster_image() -> None:
    img = small_cluster()
    assert img.metadata_version == 20
    assert sorted(img.cluster.brokers) == [0, 1, 2]
    a = img.topic_by_name("a")
    assert a is not None and a.id == A and a is img.topic_by_id(A)
    assert sorted(a.partitions) == [0, 1, 2]
    assert a.partitions[1] == PartitionRegistration((1, 2, 0), (1, 2, 0), 1, 0, 0)
    assert a.replication_factor == 3
    assert img.offset == 9 and img.epoch == 1  # ten records at offsets 0..9
    assert img.topics.partition_count() == 4


def test_leader_change_bumps_leader_and_partition_epoch() -> None:
    img = small_cluster()
    img2 = change(img, PartitionChangeRecord(0, A, leader=1))
    p = img2.partition(A, 0)
    assert p is not None
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 1, 1)
    assert p.isr == (0, 1, 2) and p.replicas == (0, 1, 2)


def test_isr_change_bumps_only_partition_epoch() -> None:
    img = change(small_cluster(), PartitionChangeRecord(0, A, isr=(0, 1)))
    p = img.partition(A, 0)
    assert p is not None
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (0, 0, 1, (0, 1))


def test_no_leader_and_successive_changes() -> None:
    img = change(
        small_cluster(),
        PartitionChangeRecord(0, A, isr=(1, 2), leader=-1),
        PartitionChangeRecord(0, A, leader=2),
        PartitionChangeRecord(0, A, isr=(2,)),
    )
    p = img.partition(A, 0)
    assert p is not None
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (2, 2, 3, (2,))
    assert not change(small_cluster(), PartitionChangeRecord(0, A, leader=-1)).partition(A, 0).has_leader  # type: ignore[union-attr]


def test_replicas_and_reassignment_fields_replace() -> None:
    img = change(
        small_cluster(),
        PartitionChangeRecord(0, A, replicas=(0, 1, 2, 3), adding_replicas=(3,), removing_replicas=(0,)),
    )
    p = img.partition(A, 0)
    assert p is not None
    assert p.replicas == (0, 1, 2, 3) and p.adding_replicas == (3,) and p.removing_replicas == (0,)
    assert p.isr == (0, 1, 2) and p.leader_epoch == 0 and p.partition_epoch == 1
    img = change(img, PartitionChangeRecord(0, A, replicas=(1, 2, 3), adding_replicas=(), removing_replicas=()))
    p = img.partition(A, 0)
    assert p is not None and p.adding_replicas == () and p.removing_replicas == () and p.partition_epoch == 2


def test_unclean_election_is_recorded_as_recovering() -> None:
    unclean = PartitionChangeRecord(0, A, isr=(2,), leader=2, leader_recovery_state=1)
    assert is_unclean_election(unclean)
    img = change(small_cluster(), PartitionChangeRecord(0, A, isr=(0,)), unclean)
    p = img.partition(A, 0)
    assert p is not None
    assert p.is_recovering and p.leader == 2 and p.isr == (2,) and p.leader_epoch == 1
    img = change(img, PartitionChangeRecord(0, A, leader_recovery_state=0))
    p = img.partition(A, 0)
    assert p is not None and not p.is_recovering and p.leader_epoch == 1 and p.partition_epoch == 3


def test_merge_matches_kafka_rules() -> None:
    reg = PartitionRegistration((1, 2, 3), (1, 2), leader=1, leader_epoch=4, partition_epoch=9)
    same = reg.merge(PartitionChangeRecord(0, A))
    assert same.partition_epoch == 10 and same.leader_epoch == 4 and same.isr == (1, 2)
    moved = reg.merge(PartitionChangeRecord(0, A, leader=1))  # re-electing the same leader still bumps
    assert moved.leader_epoch == 5


def test_strict_partition_replay() -> None:
    img = small_cluster()
    with pytest.raises(MetadataReplayError, match="unknown topic"):
        change(img, PartitionRecord(0, tid(99), (0,), (0,), leader=0))
    with pytest.raises(MetadataReplayError, match="unknown partition a-7"):
        change(img, PartitionChangeRecord(7, A, leader=1))
    with pytest.raises(MetadataReplayError, match="unknown topic"):
        change(img, PartitionChangeRecord(0, tid(99), leader=1))
    with pytest.raises(MetadataReplayError, match="already exists"):
        change(img, PartitionRecord(0, A, (0,), (0,), leader=0))
    with pytest.raises(MetadataReplayError, match="negative partition"):
        change(img, PartitionRecord(-1, A, (0,), (0,), leader=0))
    with pytest.raises(MetadataReplayError, match="bad leader"):
        change(img, PartitionChangeRecord(0, A, leader=-3))
    with pytest.raises(MetadataReplayError, match="recovery state"):
        change(img, PartitionChangeRecord(0, A, leader_recovery_state=2))
    with pytest.raises(MetadataReplayError, match="already exists"):
        change(img, TopicRecord("other", A))
    with pytest.raises(MetadataReplayError, match="named 'a' already exists"):
        change(img, TopicRecord("a", tid(50)))
    with pytest.raises(MetadataReplayError, match="unknown topic"):
        change(img, RemoveTopicRecord(tid(50)))


def test_replay_error_carries_offset_and_leaves_delta_usable() -> None:
    delta = MetadataDelta(small_cluster())
    delta.replay(PartitionChangeRecord(0, A, leader=1), 20, 2)
    with pytest.raises(MetadataReplayError) as info:
        delta.replay(PartitionChangeRecord(9, A, leader=1), 21, 2)
    assert info.value.offset == 21 and "offset 21" in str(info.value)
    img = delta.apply()
    assert img.offset == 20 and img.partition(A, 0).leader == 1  # type: ignore[union-attr]


def test_partition_record_after_change_in_same_delta() -> None:
    img = change(
        small_cluster(),
        PartitionChangeRecord(0, A, leader=2),
        PartitionRecord(3, A, (0, 1, 2), (0, 1, 2), leader=0, leader_epoch=0, partition_epoch=0),
        PartitionChangeRecord(3, A, isr=(0,)),
    )
    a = img.topic_by_name("a")
    assert a is not None and sorted(a.partitions) == [0, 1, 2, 3]
    assert a.partitions[3].isr == (0,) and a.partitions[0].leader == 2


def test_remove_topic_removes_partitions_and_configs() -> None:
    img = change(
        small_cluster(),
        ConfigRecord(2, "a", "retention.ms", "1000"),
        ConfigRecord(2, "a", "cleanup.policy", "compact"),
        ConfigRecord(2, "b", "retention.ms", "5"),
        ConfigRecord(4, "0", "log.retention.ms", "7"),
    )
    assert img.topic_config("a") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    img2 = change(img, RemoveTopicRecord(A))
    assert img2.topic_by_name("a") is None and img2.topic_by_id(A) is None
    assert img2.partition(A, 0) is None
    assert img2.topic_config("a") == {}
    assert ConfigResource(2, "a") not in img2.configs
    assert img2.topic_config("b") == {"retention.ms": "5"}
    assert img2.config((4, "0")) == {"log.retention.ms": "7"}
    assert img2.topics.partition_count() == 1
    # The name can be reused by a new topic, which starts without the old configs.
    img3 = change(img2, *topic_records("a", tid(3), [(2, 1, 0)]))
    assert img3.topic_by_name("a").id == tid(3)  # type: ignore[union-attr]
    assert img3.topic_config("a") == {}


def test_delete_and_recreate_in_one_delta() -> None:
    img = change(
        small_cluster(),
        ConfigRecord(2, "a", "retention.ms", "1"),
    )
    delta = MetadataDelta(img)
    for i, r in enumerate(
        [
            RemoveTopicRecord(A),
            *topic_records("a", tid(7), [(0, 1, 2)]),
            ConfigRecord(2, "a", "retention.ms", "2"),
        ]
    ):
        delta.replay(r, 100 + i)
    new = delta.apply()
    a = new.topic_by_name("a")
    assert a is not None and a.id == tid(7) and list(a.partitions) == [0]
    assert new.topic_by_id(A) is None
    assert new.topic_config("a") == {"retention.ms": "2"}
    local = delta.local_changes(0)
    assert TopicIdPartition(A, "a", 0) in local.deletes and TopicIdPartition(A, "a", 2) in local.deletes
    assert TopicIdPartition(tid(7), "a", 0) in local.leaders


def test_create_then_remove_in_one_delta_leaves_nothing() -> None:
    img = small_cluster()
    delta = MetadataDelta(img)
    for r in [*topic_records("c", tid(5), [(0,)]), RemoveTopicRecord(tid(5))]:
        delta.replay(r)
    new = delta.apply()
    assert new.topics == img.topics
    assert delta.local_changes(0).deletes == frozenset()


# --------------------------------------------------------------------------- brokers


def test_fencing_via_broker_registration_change() -> None:
    img = small_cluster()
    assert img.broker(1).is_active  # type: ignore[union-attr]
    img = change(img, BrokerRegistrationChangeRecord(1, 11, fenced=1))
    b = img.broker(1)
    assert b is not None and b.fenced and not b.is_active
    assert img.cluster.active_broker_ids() == [0, 2]
    img = change(img, BrokerRegistrationChangeRecord(1, 11, fenced=-1))
    assert not img.broker(1).fenced  # type: ignore[union-attr]
    img = change(img, BrokerRegistrationChangeRecord(1, 11, in_controlled_shutdown=1))
    b = img.broker(1)
    assert b is not None and b.in_controlled_shutdown and not b.fenced and not b.is_active
    img = change(img, BrokerRegistrationChangeRecord(1, 11, log_dirs=(uuid.UUID(int=5),)))
    assert img.broker(1).log_dirs == (uuid.UUID(int=5),)  # type: ignore[union-attr]
    unchanged = change(img, BrokerRegistrationChangeRecord(1, 11))
    assert unchanged.cluster is img.cluster


def test_legacy_fence_and_unfence_records() -> None:
    img = change(small_cluster(), FenceBrokerRecord(2, 12))
    assert img.broker(2).fenced  # type: ignore[union-attr]
    img = change(img, UnfenceBrokerRecord(2, 12))
    assert not img.broker(2).fenced  # type: ignore[union-attr]


def test_broker_changes_are_strict() -> None:
    img = small_cluster()
    with pytest.raises(MetadataReplayError, match="not registered"):
        change(img, BrokerRegistrationChangeRecord(9, 1, fenced=1))
    with pytest.raises(MetadataReplayError, match="does not match"):
        change(img, BrokerRegistrationChangeRecord(1, 99, fenced=1))
    with pytest.raises(MetadataReplayError, match="fenced change 2"):
        change(img, BrokerRegistrationChangeRecord(1, 11, fenced=2))
    with pytest.raises(MetadataReplayError, match="in_controlled_shutdown"):
        change(img, BrokerRegistrationChangeRecord(1, 11, in_controlled_shutdown=-1))
    with pytest.raises(MetadataReplayError, match="not registered"):
        change(img, UnregisterBrokerRecord(9, 1))
    with pytest.raises(MetadataReplayError, match="does not match"):
        change(img, UnregisterBrokerRecord(1, 10))
    with pytest.raises(MetadataReplayError):
        change(img, FenceBrokerRecord(1, 10))


def test_register_replaces_and_unregister_removes() -> None:
    img = small_cluster()
    img2 = change(img, broker_record(1, epoch=50, fenced=True, rack="r1"))
    b = img2.broker(1)
    assert b is not None and b.epoch == 50 and b.fenced and b.rack == "r1"
    assert b.endpoint("PLAINTEXT").port == 9093  # type: ignore[union-attr]
    assert b.endpoint("SSL") is None
    img3 = change(img2, UnregisterBrokerRecord(1, 50))
    assert img3.broker(1) is None and sorted(img3.cluster.brokers) == [0, 2]
    # Partitions are not touched by unregistration (the controller moves them first).
    assert img3.topics is img2.topics


# --------------------------------------------------------------------------- features, configs, producer ids


def test_features_level_zero_removes() -> None:
    img = change(EMPTY, FeatureLevelRecord("metadata.version", 20), FeatureLevelRecord("kraft.version", 1))
    assert dict(img.features) == {"metadata.version": 20, "kraft.version": 1}
    img = change(img, FeatureLevelRecord("kraft.version", 0), FeatureLevelRecord("metadata.version", 21))
    assert dict(img.features) == {"metadata.version": 21}
    with pytest.raises(MetadataReplayError):
        change(img, FeatureLevelRecord("x", -1))


def test_config_delete_key_and_resource() -> None:
    img = change(EMPTY, ConfigRecord(4, "", "a", "1"), ConfigRecord(4, "", "b", "2"))
    assert img.config(ConfigResource(4, "")) == {"a": "1", "b": "2"}
    img = change(img, ConfigRecord(4, "", "a", None))
    assert img.config((4, "")) == {"b": "2"}
    img = change(img, ConfigRecord(4, "", "b", None))
    assert (4, "") not in img.configs and not img.configs


def test_producer_ids_must_increase() -> None:
    img = change(EMPTY, ProducerIdsRecord(1, 10, 1000), ProducerIdsRecord(2, 11, 2000))
    assert img.next_producer_id == 2000
    with pytest.raises(MetadataReplayError, match="not above"):
        change(img, ProducerIdsRecord(1, 10, 2000))


def test_noop_moves_only_provenance() -> None:
    img = small_cluster()
    img2 = change(img, NoOpRecord())
    assert img2.offset == img.offset + 1
    assert img2.topics is img.topics and img2.cluster is img.cluster and img2.features is img.features
    assert img2.configs is img.configs


# --------------------------------------------------------------------------- immutability, copy-on-write


def test_old_image_unchanged_and_structure_shared() -> None:
    img = small_cluster()
    before_a = dict(img.topic_by_name("a").partitions)  # type: ignore[union-attr]
    img2 = change(img, PartitionChangeRecord(1, A, leader=2), BrokerRegistrationChangeRecord(0, 10, fenced=1))
    a, a2 = img.topic_by_name("a"), img2.topic_by_name("a")
    assert a is not None and a2 is not None
    assert dict(a.partitions) == before_a and a.partitions[1].leader == 1
    assert a2.partitions[1].leader == 2
    assert not img.broker(0).fenced and img2.broker(0).fenced  # type: ignore[union-attr]
    # Unchanged topic and unchanged partitions of the changed topic are shared.
    assert img2.topic_by_name("b") is img.topic_by_name("b")
    assert a2.partitions[0] is a.partitions[0] and a2.partitions[2] is a.partitions[2]
    assert img2.features is img.features and img2.configs is img.configs
    assert img2.broker(1) is img.broker(1)


def test_image_mappings_are_read_only() -> None:
    img = small_cluster()
    a = img.topic_by_name("a")
    assert a is not None
    for mapping in (img.features, img.cluster.brokers, img.topics.by_id, img.topics.by_name, a.partitions, img.configs):
        assert isinstance(mapping, (MappingProxyType, Map))
        with pytest.raises(TypeError):
            mapping[0] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        img.offset = 5  # type: ignore[misc]


def test_replica_tuples_are_shared() -> None:
    img = small_cluster()
    a = img.topic_by_name("a")
    assert a is not None
    p = a.partitions[0]
    assert p.isr is p.replicas  # ISR equal to replicas: one tuple
    img2 = replay_all(EMPTY, topic_records("x", tid(9), [(0, 1, 2), (0, 1, 2)]))
    x = img2.topic_by_name("x")
    assert x is not None and x.partitions[0].replicas is x.partitions[1].replicas


def test_apply_does_not_consume_the_delta() -> None:
    delta = MetadataDelta(small_cluster())
    delta.replay(PartitionChangeRecord(0, A, leader=1), 12)
    first = delta.apply()
    delta.replay(PartitionChangeRecord(0, A, leader=2), 13)
    second = delta.apply()
    assert first.partition(A, 0).leader == 1 and first.offset == 12  # type: ignore[union-attr]
    assert second.partition(A, 0).leader_epoch == 2 and second.offset == 13  # type: ignore[union-attr]


# --------------------------------------------------------------------------- local changes


def test_local_changes_leaders_followers_deletes() -> None:
    img = small_cluster()
    delta = MetadataDelta(img)
    for r in [
        PartitionChangeRecord(0, A, leader=1),  # broker 1 becomes leader of a-0
        PartitionChangeRecord(1, A, isr=(1, 2)),  # broker 1 still leads a-1, ISR change
        PartitionChangeRecord(2, A, replicas=(2, 0), isr=(2, 0)),  # broker 1 leaves a-2
        RemoveTopicRecord(B),  # b-0 had a replica on every broker
        *topic_records("c", tid(3), [(2, 1), (0, 2)]),
    ]:
        delta.replay(r)
    one = delta.local_changes(1)
    assert set(one.leaders) == {TopicIdPartition(A, "a", 0), TopicIdPartition(A, "a", 1)}
    assert set(one.followers) == {TopicIdPartition(tid(3), "c", 0)}
    assert one.deletes == {TopicIdPartition(A, "a", 2), TopicIdPartition(B, "b", 0)}
    assert one.leaders[TopicIdPartition(A, "a", 0)].leader_epoch == 1
    zero = delta.local_changes(0)
    assert set(zero.leaders) == {TopicIdPartition(tid(3), "c", 1)}
    assert set(zero.followers) == {
        TopicIdPartition(A, "a", 0),
        TopicIdPartition(A, "a", 1),
        TopicIdPartition(A, "a", 2),
    }
    assert zero.deletes == {TopicIdPartition(B, "b", 0)}
    assert not delta.local_changes(7)
    assert len(list(delta.changed_partitions())) == 5


def test_delta_inspection() -> None:
    delta = MetadataDelta(small_cluster())
    delta.replay(BrokerRegistrationChangeRecord(0, 10, fenced=1))
    delta.replay(RemoveTopicRecord(B))
    delta.replay(FeatureLevelRecord("x", 1))
    delta.replay(ConfigRecord(4, "0", "k", "v"))
    assert set(delta.changed_brokers) == {0}
    assert set(delta.deleted_topics) == {B}
    assert delta.topic_id("b") is None and delta.topic_name(B) is None and delta.topic_id("a") == A
    assert dict(delta.changed_features) == {"x": 1}
    assert delta.changed_configs == {ConfigResource(4, "0"), ConfigResource(2, "b")}
    assert delta.broker(0).fenced  # type: ignore[union-attr]
    assert "deleted_topics=1" in repr(delta)


def test_config_key_changed_names_the_keys_a_delta_may_have_changed() -> None:
    delta = MetadataDelta(small_cluster())
    delta.replay(ConfigRecord(2, "a", "retention.ms", "5"))
    delta.replay(ConfigRecord(2, "a", "min.insync.replicas", None))  # a delete changes the key too
    delta.replay(RemoveTopicRecord(B))  # every config of b goes
    assert delta.config_key_changed(ConfigResource(2, "a"), "retention.ms")
    assert delta.config_key_changed(ConfigResource(2, "a"), "min.insync.replicas")
    assert not delta.config_key_changed(ConfigResource(2, "a"), "segment.ms")
    assert delta.config_key_changed(ConfigResource(2, "b"), "segment.ms")
    assert not delta.config_key_changed(ConfigResource(2, "c"), "retention.ms")


# --------------------------------------------------------------------------- diff and replay_batches


def test_diff_apply_equals_target() -> None:
    old = small_cluster()
    new = change(
        old,
        PartitionChangeRecord(0, A, leader=2),
        RemoveTopicRecord(B),
        *topic_records("c", tid(3), [(1,)]),
        BrokerRegistrationChangeRecord(2, 12, fenced=1),
        broker_record(5),
        ConfigRecord(2, "a", "k", "v"),
        FeatureLevelRecord("x", 3),
        ProducerIdsRecord(0, 1, 5000),
    )
    d = MetadataDelta.diff(old, new)
    assert d.apply() == new
    assert set(d.deleted_topics) == {B}
    assert set(d.changed_topics) == {A, tid(3)}
    assert list(d.changed_topics[A].partitions) == [0]
    assert MetadataDelta.diff(EMPTY, new).apply() == new
    assert MetadataDelta.diff(new, EMPTY).apply() == EMPTY
    local = MetadataDelta.diff(EMPTY, new).local_changes(1)
    assert TopicIdPartition(tid(3), "c", 0) in local.leaders


def _batches(records, first_offset=0, epoch=3, per_batch=2):
    out = [Batch(first_offset, epoch, (encode_leader_change(1, [1, 2, 3], [1]),), 0, ControlType.LEADER_CHANGE)]
    offset = first_offset + 1
    encoded = [encode_record(r) for r in records]
    for i in range(0, len(encoded), per_batch):
        chunk = tuple(encoded[i : i + per_batch])
        out.append(Batch(offset, epoch, chunk, 0))
        offset += len(chunk)
    return out


def test_replay_batches_matches_record_replay() -> None:
    records = [FeatureLevelRecord("metadata.version", 20), broker_record(0), *topic_records("a", A, [(0,), (0,)])]
    img = replay_batches(EMPTY, _batches(records))
    assert img.offset == len(records) and img.epoch == 3
    expected = replay_all(EMPTY, records, 1).with_provenance(len(records), 3)
    assert img == expected
    # A trailing control batch moves the provenance only.
    more = [
        *_batches(records),
        Batch(len(records) + 1, 4, (encode_leader_change(2, [1, 2], [2]),), 0, ControlType.LEADER_CHANGE),
    ]
    img2 = replay_batches(EMPTY, more)
    assert img2.offset == len(records) + 1 and img2.epoch == 4 and img2.topics == img.topics


def test_replay_batches_bad_record_notes_offset() -> None:
    batches = [Batch(0, 1, (encode_record(NoOpRecord()), b"\x01\x02"), 0)]
    with pytest.raises(RecordDecodeError) as info:
        replay_batches(EMPTY, batches)
    assert any("offset 1" in note for note in info.value.__notes__)
    with pytest.raises(MetadataReplayError, match="offset 0"):
        replay_batches(EMPTY, [Batch(0, 1, (encode_record(RemoveTopicRecord(A)),), 0)])
