"""Images as snapshot records, and `MetadataStateMachine`, the metadata log's state machine.

`image_records(image)` yields the encoded records that rebuild `image` from
nothing, in Kafka's order (MetadataImage.write): features (`metadata.version`
first, as Kafka requires of a snapshot), brokers, then each topic (sorted by
name) as a TopicRecord followed by its PartitionRecords (by index), configs
(by resource, then key), and the producer-id state. Replaying them with
`image_from_records` gives back an equal image (snapshots do not hold JBOD
directories or ELR, which images do not keep either).

`MetadataStateMachine` implements quorum.node.state_machine.StateMachine for
the metadata log: it replays each committed batch into a new image and tells
its listeners (brokers, the controller) about every update.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

from quorum.metadata.delta import MetadataDelta
from quorum.metadata.errors import MetadataReplayError, RecordDecodeError
from quorum.metadata.gc_policy import large_change, partitions_changed
from quorum.metadata.image import EMPTY, METADATA_VERSION, MetadataImage
from quorum.metadata.records import (
    ConfigRecord,
    FeatureLevelRecord,
    ProducerIdsRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from quorum.raft.types import Batch, Offset

__all__ = [
    "MetadataListener",
    "MetadataStateMachine",
    "image_from_records",
    "image_records",
]

log = logging.getLogger(__name__)

MetadataListener = Callable[[MetadataDelta | None, MetadataImage], None]


def image_records(image: MetadataImage) -> Iterator[bytes]:
    """The encoded records that rebuild `image` (see the module docstring)."""
    features = image.features
    if METADATA_VERSION in features:
        yield encode_record(FeatureLevelRecord(METADATA_VERSION, features[METADATA_VERSION]))
    for name in sorted(features):
        if name != METADATA_VERSION:
            yield encode_record(FeatureLevelRecord(name, features[name]))
    brokers = image.cluster.brokers
    for broker_id in sorted(brokers):
        yield encode_record(brokers[broker_id].to_record())
    by_name = image.topics.by_name
    for name in sorted(by_name):
        topic = by_name[name]
        topic_id = topic.id
        yield encode_record(TopicRecord(name, topic_id))
        partitions = topic.partitions
        for pid in sorted(partitions):
            yield encode_record(partitions[pid].to_record(topic_id, pid))
    configs = image.configs
    for resource in sorted(configs):
        keys = configs[resource]
        for key in sorted(keys):
            yield encode_record(ConfigRecord(resource.type, resource.name, key, keys[key]))
    if image.next_producer_id >= 0:
        yield encode_record(ProducerIdsRecord(-1, -1, image.next_producer_id))


def image_from_records(records: Iterable[bytes], offset: int, epoch: int) -> MetadataImage:
    """The image that `records` (e.g. a snapshot's) build from nothing, with
    provenance (`offset`, `epoch`): the last log offset and epoch they cover.

    Raises RecordDecodeError or MetadataReplayError (with a note giving the
    record's index) on a bad record.
    """
    delta = MetadataDelta(EMPTY)
    replay = delta.replay
    with large_change(collect=True):
        for index, raw in enumerate(records):
            try:
                replay(decode_record(raw))
            except (RecordDecodeError, MetadataReplayError) as exc:
                exc.add_note(f"snapshot record #{index}")
                raise
        delta.set_provenance(offset, epoch)
        return delta.apply()


class MetadataStateMachine:
    """The metadata image as a replicated state machine (quorum.node.state_machine).

    `image` is the current image; `applied_offset == image.offset + 1`. Each
    committed data batch is replayed into a `MetadataDelta` (all or nothing: a
    record that fails to decode or apply raises and leaves the state as it was),
    and listeners are called with `(delta, new_image)`. A control batch only
    moves the provenance; listeners get `(None, new_image)`. Loading a snapshot
    calls them with the delta from the old image to the loaded one
    (`MetadataDelta.diff`), so a broker sees what it has to create and delete.

    Listeners run on the applying thread after the state is updated. An exception
    in one is logged and does not stop the others or the state machine.
    """

    def __init__(self, image: MetadataImage = EMPTY, listeners: Iterable[MetadataListener] = ()) -> None:
        self._image = image
        self._listeners: list[MetadataListener] = list(listeners)
        # The active controller's own replay of the batches it appended, oldest first:
        # (batch base offset, last offset, epoch, delta, image after). See `expect`.
        self._expected: collections.deque[tuple[Offset, Offset, int, MetadataDelta, MetadataImage]] = (
            collections.deque()
        )
        self.replayed_batches = 0  # data batches decoded and replayed here (not taken from `expect`)

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def applied_offset(self) -> Offset:
        return self._image.offset + 1

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: MetadataListener) -> None:
        self._listeners.remove(listener)

    def on_update(self, delta: MetadataDelta | None, image: MetadataImage) -> None:
        """Called after every applied batch and loaded snapshot; calls the listeners.
        Subclasses may override it (calling super to keep the listeners)."""
        for listener in list(self._listeners):
            try:
                listener(delta, image)
            except Exception:
                log.exception("metadata listener %r failed at offset %d", listener, image.offset)

    def expect(self, base_offset: Offset, epoch: int, delta: MetadataDelta, image: MetadataImage) -> None:
        """The leader appended a batch at `base_offset` in `epoch` holding the records it
        replayed into `delta` (whose `apply()` is `image`). When that very batch commits
        on top of `delta.image`, it is applied as `image` without decoding and replaying
        it a second time. A batch at the same offset in the same epoch is the same batch
        (Raft's log matching); anything else is replayed as usual."""
        self._expected.append((base_offset, image.offset, epoch, delta, image))

    def forget_expected(self) -> None:
        """Drop every `expect`ed batch (the node is no longer the leader)."""
        self._expected.clear()

    def _take_expected(self, batch: Batch) -> tuple[MetadataDelta, MetadataImage] | None:
        expected = self._expected
        while expected and expected[0][1] < batch.base_offset:
            expected.popleft()
        if not expected:
            return None
        base, last, epoch, delta, image = expected[0]
        if base != batch.base_offset:
            return None
        expected.popleft()
        if last != batch.last_offset or epoch != batch.epoch or delta.image is not self._image:
            return None
        return delta, image

    def apply(self, batch: Batch) -> None:
        if batch.base_offset != self.applied_offset:
            raise ValueError(f"batch at {batch.base_offset} applied at {self.applied_offset}")
        if batch.control_type is not None:
            self._image = self._image.with_provenance(batch.last_offset, batch.epoch)
            self.on_update(None, self._image)
            return
        replayed = self._take_expected(batch) if self._expected else None
        if replayed is not None:
            delta, self._image = replayed
            partitions_changed(sum(len(td.partitions) for td in delta.changed_topics.values()))
            self.on_update(delta, self._image)
            return
        self.replayed_batches += 1
        delta = MetadataDelta(self._image)
        offset = batch.base_offset
        epoch = batch.epoch
        for raw in batch.records:
            try:
                record = decode_record(raw)
            except RecordDecodeError as exc:
                exc.add_note(f"record at offset {offset}")
                raise
            delta.replay(record, offset, epoch)
            offset += 1
        self._image = delta.apply()
        partitions_changed(sum(len(td.partitions) for td in delta.changed_topics.values()))
        self.on_update(delta, self._image)

    def snapshot_records(self) -> Sequence[bytes]:
        """The image's records, encoded lazily: iterating later (on another thread)
        still yields the image as it is now, since images are immutable."""
        image = self._image
        return _LazyRecords(image)

    def load_snapshot(self, end_offset: Offset, records: Sequence[bytes], epoch: int = -1) -> None:
        """Replace the image with the snapshot's (covering the log below `end_offset`).

        The snapshot records carry no epoch; pass the snapshot id's `epoch` to keep
        the image's provenance complete.
        """
        self._expected.clear()
        old = self._image
        new = image_from_records(records, end_offset - 1, epoch)
        self._image = new
        self.on_update(MetadataDelta.diff(old, new), new)


class _LazyRecords(Sequence[bytes]):
    """A snapshot's records, produced from one immutable image when first needed."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._records: list[bytes] | None = None

    def _all(self) -> list[bytes]:
        if self._records is None:
            self._records = list(image_records(self._image))
        return self._records

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    # Both forms: the snapshot writer slices the records (compiled, an `int` parameter refused it).
    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        return self._all()[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._all())
