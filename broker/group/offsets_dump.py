"""`--offsets-decoder` of `pykraft log dump`: a `__consumer_offsets` record as the text
`kafka-dump-log.sh --offsets-decoder` prints for it.

`parse_offsets_record(offset, key, value)` returns the (key, payload) texts of one record:

- key `{"type":"<key version>","data":{...}}`, payload `{"version":"<value version>","data":{...}}`,
  compact JSON with Kafka's field names (camelCase) and only the fields of that version;
  bytes as base64; a tombstone's payload is `<DELETE>`;
- in a group whose protocolType is `consumer`, each member's subscription and assignment
  are decoded (ConsumerProtocolSubscription / ConsumerProtocolAssignment, versions 0..3) and
  printed as JSON, or kept as base64 bytes when they do not decode (as Kafka does);
- KIP-848's consumer-group records (key versions 3..8) as Kafka's JsonConverters write them:
  keys `{"groupId":..}` (and `"memberId"`), topic ids as Kafka's Uuid strings (URL-safe
  base64, no padding); the partition metadata's racks and a member's classicMemberMetadata
  are not kept by `broker.group.records`, so they print as pykraft writes them (an empty
  `partitionMetadata`, no `classicMemberMetadata`) even for a record Kafka 3.9 wrote with them;
- a key version no record type has: (`Unknown record type N at offset O, skipping.`, None);
  a record that does not decode: (`Error at offset O, skipping. <why>`, None);
- a record without a key: Kafka's message for it (Kafka stops the dump there; this goes on).
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import fields, is_dataclass
from typing import Any, Final

from kio.schema.consumer_protocol_assignment import v0 as assignment_v0
from kio.schema.consumer_protocol_assignment import v1 as assignment_v1
from kio.schema.consumer_protocol_assignment import v2 as assignment_v2
from kio.schema.consumer_protocol_assignment import v3 as assignment_v3
from kio.schema.consumer_protocol_subscription import v0 as subscription_v0
from kio.schema.consumer_protocol_subscription import v1 as subscription_v1
from kio.schema.consumer_protocol_subscription import v2 as subscription_v2
from kio.schema.consumer_protocol_subscription import v3 as subscription_v3

from broker.group.records import (
    CONSUMER_GROUP_KEY_VERSIONS,
    MEMBER_KEY_TYPES,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    RecordKey,
    RecordSchemaError,
    TopicPartitions,
    decode_key,
    decode_value,
)
from broker.log.checkpoints import kafka_uuid
from quorum.wire._reader import MalformedError, entity_reader

__all__ = ["parse_offsets_record"]

_VERSION: Final = struct.Struct(">h")
CONSUMER_PROTOCOL_TYPE: Final = "consumer"

_SUBSCRIPTIONS: Final = {
    0: subscription_v0.ConsumerProtocolSubscription,
    1: subscription_v1.ConsumerProtocolSubscription,
    2: subscription_v2.ConsumerProtocolSubscription,
    3: subscription_v3.ConsumerProtocolSubscription,
}
_ASSIGNMENTS: Final = {
    0: assignment_v0.ConsumerProtocolAssignment,
    1: assignment_v1.ConsumerProtocolAssignment,
    2: assignment_v2.ConsumerProtocolAssignment,
    3: assignment_v3.ConsumerProtocolAssignment,
}


def _json(node: object) -> str:
    """Compact JSON as Jackson writes it: no spaces, non-ASCII as is."""
    return json.dumps(node, separators=(",", ":"), ensure_ascii=False)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _entity_json(entity: object) -> object:
    """A kio entity as Kafka's JsonConverter writes it (the entity holds only its version's fields)."""
    if is_dataclass(entity) and not isinstance(entity, type):
        return {_camel(f.name): _entity_json(getattr(entity, f.name)) for f in fields(entity)}
    if isinstance(entity, tuple):
        return [_entity_json(item) for item in entity]
    if isinstance(entity, bytes):
        return _b64(entity)
    return entity


def _embedded(data: bytes, schemas: dict[int, Any]) -> object:
    """A member's subscription or assignment: decoded when it does, else its bytes (base64)."""
    try:
        (version,) = _VERSION.unpack_from(data, 0)
        schema = schemas.get(version)
        if schema is not None:
            entity, _ = entity_reader(schema)(data, _VERSION.size)
            return _entity_json(entity)
    except (struct.error, MalformedError):
        pass
    return _b64(data)


def _key_json(key: RecordKey) -> dict[str, object]:
    if isinstance(key, OffsetKey):
        return {"group": key.group, "topic": key.topic, "partition": key.partition}
    if isinstance(key, GroupKey):
        return {"group": key.group}
    if isinstance(key, MEMBER_KEY_TYPES):
        return {"groupId": key.group, "memberId": key.member_id}
    return {"groupId": key.group}


def _offset_value_json(v: OffsetValue, version: int) -> dict[str, object]:
    node: dict[str, object] = {"offset": v.offset}
    if version >= 3:
        node["leaderEpoch"] = v.leader_epoch
    node["metadata"] = v.metadata
    node["commitTimestamp"] = v.commit_timestamp
    if version == 1:
        node["expireTimestamp"] = v.expire_timestamp
    return node


def _group_value_json(v: GroupValue, version: int) -> dict[str, object]:
    consumer = v.protocol_type == CONSUMER_PROTOCOL_TYPE
    node: dict[str, object] = {
        "protocolType": v.protocol_type,
        "generation": v.generation,
        "protocol": v.protocol,
        "leader": v.leader,
    }
    if version >= 2:
        node["currentStateTimestamp"] = v.current_state_timestamp
    members = []
    for m in v.members:
        member: dict[str, object] = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member["clientId"] = m.client_id
        member["clientHost"] = m.client_host
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout_ms
        member["sessionTimeout"] = m.session_timeout_ms
        member["subscription"] = _embedded(m.subscription, _SUBSCRIPTIONS) if consumer else _b64(m.subscription)
        member["assignment"] = _embedded(m.assignment, _ASSIGNMENTS) if consumer else _b64(m.assignment)
        members.append(member)
    node["members"] = members
    return node


def _topic_partitions_json(items: tuple[TopicPartitions, ...]) -> list[object]:
    return [{"topicId": kafka_uuid(tp.topic_id), "partitions": list(tp.partitions)} for tp in items]


def _consumer_group_value_json(v: ConsumerGroupValue) -> dict[str, object]:
    """A consumer-group value (version 0, the only one) with Kafka's field names, in schema order."""
    if isinstance(v, ConsumerGroupMetadataValue):
        return {"epoch": v.epoch}
    if isinstance(v, ConsumerGroupPartitionMetadataValue):
        topics = [
            {
                "topicId": kafka_uuid(t.topic_id),
                "topicName": t.topic_name,
                "numPartitions": t.num_partitions,
                "partitionMetadata": [],
            }
            for t in v.topics
        ]
        return {"topics": topics}
    if isinstance(v, ConsumerGroupMemberMetadataValue):
        return {
            "instanceId": v.instance_id,
            "rackId": v.rack_id,
            "clientId": v.client_id,
            "clientHost": v.client_host,
            "subscribedTopicNames": list(v.subscribed_topic_names),
            "subscribedTopicRegex": v.subscribed_topic_regex,
            "rebalanceTimeoutMs": v.rebalance_timeout_ms,
            "serverAssignor": v.server_assignor,
        }
    if isinstance(v, ConsumerGroupTargetAssignmentMetadataValue):
        return {"assignmentEpoch": v.assignment_epoch}
    if isinstance(v, ConsumerGroupTargetAssignmentMemberValue):
        return {"topicPartitions": _topic_partitions_json(v.topic_partitions)}
    return {
        "memberEpoch": v.member_epoch,
        "previousMemberEpoch": v.previous_member_epoch,
        "state": v.state,
        "assignedPartitions": _topic_partitions_json(v.assigned_partitions),
        "partitionsPendingRevocation": _topic_partitions_json(v.partitions_pending_revocation),
    }


def parse_offsets_record(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """(key text, payload text) of the record at `offset`; None = print nothing for it."""
    if key is None:
        return (
            f"Failed to decode message at offset {offset} using offset topic decoder (message had a missing key)",
            None,
        )
    if len(key) < _VERSION.size:
        return f"Error at offset {offset}, skipping. could not read the version of the key", None
    (key_version,) = _VERSION.unpack_from(key, 0)
    if key_version < 0 or key_version > CONSUMER_GROUP_KEY_VERSIONS[-1]:
        return f"Unknown record type {key_version} at offset {offset}, skipping.", None
    try:
        record_key = decode_key(key)
        record_value = decode_value(record_key, value)
    except RecordSchemaError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    key_text = _json({"type": str(key_version), "data": _key_json(record_key)})
    if value is None or record_value is None:
        return key_text, "<DELETE>"
    (value_version,) = _VERSION.unpack_from(value, 0)
    if isinstance(record_value, OffsetValue):
        data = _offset_value_json(record_value, value_version)
    elif isinstance(record_value, GroupValue):
        data = _group_value_json(record_value, value_version)
    else:
        data = _consumer_group_value_json(record_value)
    return key_text, _json({"version": str(value_version), "data": data})
