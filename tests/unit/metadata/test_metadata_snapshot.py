"""Snapshots of the image, MetadataStateMachine, image queries, and a property test over
random valid record sequences (snapshot round trip, diff, batch-wise replay agree)."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_helpers import broker_record, replay_all, small_cluster, tid, topic_records

from quorum.metadata import MetadataStateMachine, image_from_records, image_records
from quorum.metadata.delta import MetadataDelta, replay_batches
from quorum.metadata.errors import MetadataReplayError, RecordDecodeError
from quorum.metadata.image import EMPTY, BrokerRegistration, PartitionRegistration, TopicIdPartition
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_record,
    encode_record,
)
from quorum.node.state_machine import StateMachine
from quorum.raft.control_records import encode_leader_change
from quorum.raft.types import Batch, ControlType, OffsetAndEpoch
from quorum.storage.snapshots import decode_snapshot, encode_snapshot
from tests.scale import examples

A = tid(1)


def rich_image():
    return replay_all(
        small_cluster(),
        [
            FeatureLevelRecord("kraft.version", 1),
            broker_record(5, epoch=40, rack="r2"),
            BrokerRegistrationChangeRecord(1, 11, fenced=1),
            BrokerRegistrationChangeRecord(2, 12, in_controlled_shutdown=1),
            PartitionChangeRecord(0, A, isr=(0,), leader=0),
            PartitionChangeRecord(1, A, isr=(2,), leader=2, leader_recovery_state=1),
            PartitionChangeRecord(2, A, replicas=(2, 0, 1, 5), adding_replicas=(5,)),
            ConfigRecord(2, "a", "retention.ms", "100"),
            ConfigRecord(4, "", "log.retention.ms", "200"),
            ConfigRecord(4, "5", "log.retention.ms", "300"),
            ProducerIdsRecord(0, 10, 3000),
        ],
    )


# --------------------------------------------------------------------------- snapshot records


def test_snapshot_round_trip() -> None:
    img = rich_image()
    records = list(image_records(img))
    rebuilt = image_from_records(records, img.offset, img.epoch)
    assert rebuilt == img
    # metadata.version comes first (Kafka requires it of a snapshot).
    assert decode_record(records[0]) == FeatureLevelRecord("metadata.version", 20)
    # And through the snapshot file format.
    data = encode_snapshot(OffsetAndEpoch(img.epoch, img.offset + 1), records, last_contained_timestamp_ms=5)
    assert image_from_records(decode_snapshot(data), img.offset, img.epoch) == img


def test_snapshot_record_order_and_content() -> None:
    img = rich_image()
    decoded = [decode_record(r) for r in image_records(img)]
    kinds = [type(r).__name__ for r in decoded]
    assert kinds[:2] == ["FeatureLevelRecord", "FeatureLevelRecord"]
    assert kinds[2:6] == ["RegisterBrokerRecord"] * 4
    assert kinds[6] == "TopicRecord" and decoded[6] == TopicRecord("a", A)
    assert kinds[7:10] == ["PartitionRecord"] * 3 and kinds[10] == "TopicRecord"
    assert kinds[-1] == "ProducerIdsRecord" and decoded[-1] == ProducerIdsRecord(-1, -1, 3000)
    fenced = decoded[3]
    assert fenced.broker_id == 1 and fenced.fenced  # type: ignore[union-attr]
    shutting = decoded[4]
    assert shutting.in_controlled_shutdown and not shutting.fenced  # type: ignore[union-attr]
    recovering = decoded[8]
    assert recovering.leader_recovery_state == 1 and recovering.partition_epoch == 1  # type: ignore[union-attr]


def test_empty_image_has_no_records() -> None:
    assert list(image_records(EMPTY)) == []
    assert image_from_records([], -1, -1) == EMPTY


def test_image_from_bad_records() -> None:
    with pytest.raises(RecordDecodeError) as info:
        image_from_records([encode_record(NoOpRecord()), b"junk"], 5, 1)
    assert "snapshot record #1" in info.value.__notes__
    with pytest.raises(MetadataReplayError):
        image_from_records([encode_record(PartitionChangeRecord(0, A, leader=1))], 5, 1)


# --------------------------------------------------------------------------- image queries


def test_image_queries() -> None:
    img = rich_image()
    assert img.leader_counts() == {0: 1, 1: 1, 2: 2}
    assert set(img.partitions_led_by(2)) == {TopicIdPartition(A, "a", 1), TopicIdPartition(A, "a", 2)}
    assert set(img.partitions_with_isr(1)) == {TopicIdPartition(A, "a", 2), TopicIdPartition(tid(2), "b", 0)}
    assert set(img.partitions_on(5)) == {TopicIdPartition(A, "a", 2)}
    assert img.partitions_led_by(9) == []
    assert sum(1 for _ in img.iter_partitions()) == 4
    assert img.cluster.active_broker_ids() == [0, 5]
    assert img.cluster.unfenced_broker_ids() == [0, 2, 5]
    assert img.end_offset == img.offset + 1
    assert not img.is_empty() and EMPTY.is_empty()
    assert EMPTY.offset == -1 and EMPTY.epoch == -1 and EMPTY.end_offset == 0


def test_hand_built_image_is_frozen() -> None:
    reg = PartitionRegistration((1,), (1,), 1)
    b = BrokerRegistration(1, 5, uuid.UUID(int=1))
    assert b.fenced and not b.is_active and b.with_state() is b
    from quorum.metadata.image import ClusterImage, MetadataImage, TopicImage, TopicsImage

    topic = TopicImage("t", A, {0: reg})
    img = MetadataImage(
        {"metadata.version": 1},
        ClusterImage({1: b}),
        TopicsImage({A: topic}, {"t": topic}),
        {(2, "t"): {"k": "v"}},
    )
    with pytest.raises(TypeError):
        topic.partitions[1] = reg  # type: ignore[index]
    assert img.topic_config("t") == {"k": "v"}
    assert image_from_records(list(image_records(img)), -1, -1) == img


# --------------------------------------------------------------------------- state machine


def data_batch(offset: int, epoch: int, records: list[MetadataRecord]) -> Batch:
    return Batch(offset, epoch, tuple(encode_record(r) for r in records), 1000 + offset)


def control_batch(offset: int, epoch: int) -> Batch:
    return Batch(offset, epoch, (encode_leader_change(1, [1], [1]),), 0, ControlType.LEADER_CHANGE)


def test_state_machine_applies_batches_and_notifies() -> None:
    sm = MetadataStateMachine()
    _: StateMachine = sm  # implements the node's StateMachine protocol
    calls: list[tuple[MetadataDelta | None, int]] = []
    sm.add_listener(lambda delta, image: calls.append((delta, image.offset)))
    assert sm.applied_offset == 0 and sm.image is EMPTY
    sm.apply(control_batch(0, 1))
    assert sm.applied_offset == 1 and sm.image.offset == 0 and sm.image.epoch == 1
    sm.apply(data_batch(1, 1, [FeatureLevelRecord("metadata.version", 20), broker_record(0), broker_record(1)]))
    sm.apply(data_batch(4, 1, topic_records("a", A, [(0, 1), (1, 0)])))
    assert sm.applied_offset == 7 and sm.image.offset == 6
    assert sm.image.partition(A, 1).leader == 1  # type: ignore[union-attr]
    assert calls[0] == (None, 0)
    delta = calls[2][0]
    assert delta is not None and set(delta.local_changes(0).leaders) == {TopicIdPartition(A, "a", 0)}
    assert [offset for _, offset in calls] == [0, 3, 6]
    with pytest.raises(ValueError, match="applied at 7"):
        sm.apply(data_batch(9, 1, [NoOpRecord()]))


def test_state_machine_batch_is_all_or_nothing() -> None:
    sm = MetadataStateMachine(small_cluster())
    before = sm.image
    with pytest.raises(MetadataReplayError):
        sm.apply(data_batch(10, 2, [PartitionChangeRecord(0, A, leader=1), RemoveTopicRecord(tid(77))]))
    assert sm.image is before and sm.applied_offset == 10
    with pytest.raises(RecordDecodeError):
        sm.apply(Batch(10, 2, (encode_record(NoOpRecord()), b"\x01\x99"), 0))
    assert sm.image is before


def test_state_machine_snapshot_and_load() -> None:
    sm = MetadataStateMachine(rich_image())
    records = sm.snapshot_records()
    other = MetadataStateMachine()
    seen: list[MetadataDelta | None] = []
    other.add_listener(lambda delta, image: seen.append(delta))
    other.load_snapshot(sm.applied_offset, records, epoch=sm.image.epoch)
    assert other.image == sm.image and other.applied_offset == sm.applied_offset
    assert seen and seen[0] is not None
    assert TopicIdPartition(A, "a", 0) in seen[0].local_changes(0).leaders
    # Loading an older snapshot over a newer image: the delta deletes what vanished.
    older = MetadataStateMachine()
    older.load_snapshot(1, list(image_records(replay_all(EMPTY, [FeatureLevelRecord("metadata.version", 20)], 0))))
    assert older.image.epoch == -1 and older.applied_offset == 1
    seen.clear()
    other.load_snapshot(older.applied_offset, older.snapshot_records())
    assert other.image == older.image
    assert seen[0] is not None and TopicIdPartition(A, "a", 0) in seen[0].local_changes(0).deletes


def test_state_machine_snapshot_records_encode_as_the_node_writes_them() -> None:
    """The node encodes `snapshot_records()` in chunks (slices of the lazy sequence): the
    snapshot decodes to the same records. A compiled build once refused the slices."""
    sm = MetadataStateMachine(rich_image())
    records = sm.snapshot_records()
    assert records[0:2] == list(records)[0:2] and records[-1] == list(records)[-1]
    data = encode_snapshot(OffsetAndEpoch(3, sm.applied_offset), records, last_contained_timestamp_ms=0)
    assert decode_snapshot(data) == list(records)


def test_listener_errors_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def bad(delta, image):
        raise RuntimeError("boom")

    good: list[int] = []
    sm = MetadataStateMachine(listeners=[bad, lambda d, i: good.append(i.offset)])
    with caplog.at_level(logging.ERROR):
        sm.apply(data_batch(0, 1, [NoOpRecord()]))
    assert good == [0] and sm.applied_offset == 1
    assert "metadata listener" in caplog.text
    sm.remove_listener(bad)
    sm.apply(data_batch(1, 1, [NoOpRecord()]))
    assert good == [0, 1]


# --------------------------------------------------------------------------- property test


@st.composite
def record_sequences(draw) -> list[MetadataRecord]:
    """A random valid record sequence, generated against a tiny model of the state."""
    records: list[MetadataRecord] = [FeatureLevelRecord("metadata.version", 20)]
    brokers: dict[int, int] = {}  # id -> epoch
    topics: dict[uuid.UUID, tuple[str, int]] = {}  # id -> (name, partitions)
    next_topic = 0
    next_pid = 0
    for _ in range(draw(st.integers(1, 40))):
        op = draw(st.sampled_from(["broker", "fence", "unregister", "topic", "change", "remove", "config", "pid"]))
        offset = len(records)
        if op == "broker" or not brokers:
            b = draw(st.integers(0, 4))
            records.append(broker_record(b, epoch=offset, fenced=draw(st.booleans())))
            brokers[b] = offset
        elif op == "fence":
            b = draw(st.sampled_from(sorted(brokers)))
            records.append(BrokerRegistrationChangeRecord(b, brokers[b], fenced=draw(st.sampled_from([-1, 0, 1]))))
        elif op == "unregister":
            b = draw(st.sampled_from(sorted(brokers)))
            records.append(UnregisterBrokerRecord(b, brokers.pop(b)))
        elif op == "topic" or not topics:
            topic_id = uuid.UUID(int=draw(st.integers(1, 2**64)))
            if topic_id in topics:
                continue
            name = f"t{next_topic}"
            next_topic += 1
            count = draw(st.integers(1, 4))
            assignment = [tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))) for _ in range(count)]
            records.extend(topic_records(name, topic_id, assignment))
            topics[topic_id] = (name, count)
        elif op == "change":
            topic_id = draw(st.sampled_from(sorted(topics)))
            pid = draw(st.integers(0, topics[topic_id][1] - 1))
            isr = draw(st.none() | st.lists(st.integers(0, 4), max_size=3).map(tuple))
            leader = draw(st.sampled_from([-2, -1, 0, 1, 2, 3, 4]))
            recovery = draw(st.sampled_from([-1, 0, 1]))
            records.append(PartitionChangeRecord(pid, topic_id, isr=isr, leader=leader, leader_recovery_state=recovery))
        elif op == "remove":
            topic_id = draw(st.sampled_from(sorted(topics)))
            del topics[topic_id]
            records.append(RemoveTopicRecord(topic_id))
        elif op == "config":
            name = f"t{draw(st.integers(0, max(0, next_topic - 1)))}"
            records.append(ConfigRecord(2, name, draw(st.sampled_from(["a", "b"])), draw(st.none() | st.just("v"))))
        else:
            next_pid += 1000
            records.append(ProducerIdsRecord(0, 0, next_pid))
    return records


@settings(max_examples=examples(60))
@given(record_sequences(), st.integers(1, 7))
def test_replay_snapshot_diff_agree(records: list[MetadataRecord], per_batch: int) -> None:
    whole = replay_all(EMPTY, records, 0)
    # Batch-wise replay through the state machine gives the same image.
    sm = MetadataStateMachine()
    offset = 0
    for i in range(0, len(records), per_batch):
        chunk = records[i : i + per_batch]
        sm.apply(data_batch(offset, 1, chunk))
        offset += len(chunk)
    assert sm.image == whole
    # replay_batches over encoded batches agrees too.
    batches = [data_batch(i, 1, records[i : i + per_batch]) for i in range(0, len(records), per_batch)]
    assert replay_batches(EMPTY, batches) == whole
    # A snapshot rebuilds it.
    assert image_from_records(list(image_records(whole)), whole.offset, whole.epoch) == whole
    # And diff(old, new).apply() == new from a midpoint.
    mid = replay_all(EMPTY, records[: len(records) // 2], 0)
    assert MetadataDelta.diff(mid, whole).apply() == whole
    # Invariants that replay keeps on its own: epochs never negative after creation.
    for _topic, _pid, reg in whole.iter_partitions():
        assert reg.leader_epoch >= 0 and reg.partition_epoch >= 0
