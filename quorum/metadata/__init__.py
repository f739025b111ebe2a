"""The metadata plane: KIP-631 records, the immutable image, the delta that replays
records into it, snapshots of it, and the log dump.

One replay for everything: the active controller, broker observers, the dump
tool and the Spark audit all go through `MetadataDelta.replay`.

    records   typed records; encode_record / decode_record (Kafka's exact bytes)
    image     MetadataImage (EMPTY), PartitionRegistration, BrokerRegistration, ...
    delta     MetadataDelta.replay / apply / local_changes; replay_batches
    snapshot  image_records / image_from_records; MetadataStateMachine
    dump      kafka-dump-log style printing of segments and snapshots
"""

from quorum.metadata.delta import LocalChanges, MetadataDelta, TopicDelta, replay_batches
from quorum.metadata.errors import MetadataReplayError, RecordDecodeError
from quorum.metadata.image import (
    EMPTY,
    BrokerRegistration,
    ClusterImage,
    ConfigResource,
    MetadataImage,
    PartitionRegistration,
    TopicIdPartition,
    TopicImage,
    TopicsImage,
)
from quorum.metadata.records import (
    MetadataRecord,
    decode_record,
    encode_record,
    is_unclean_election,
)
from quorum.metadata.snapshot import MetadataListener, MetadataStateMachine, image_from_records, image_records

__all__ = [
    "EMPTY",
    "BrokerRegistration",
    "ClusterImage",
    "ConfigResource",
    "LocalChanges",
    "MetadataDelta",
    "MetadataImage",
    "MetadataListener",
    "MetadataRecord",
    "MetadataReplayError",
    "MetadataStateMachine",
    "PartitionRegistration",
    "RecordDecodeError",
    "TopicDelta",
    "TopicIdPartition",
    "TopicImage",
    "TopicsImage",
    "decode_record",
    "encode_record",
    "image_from_records",
    "image_records",
    "is_unclean_election",
    "replay_batches",
]
