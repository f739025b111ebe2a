"""`--offsets-decoder` of `pykraft log dump`: a `__consumer_offsets` record as the text
`kafka-dump-log.sh --offsets-decoder` prints for it.

`parse_offsets_record(offset, key, value)` returns the (key, payload) texts of one record:

- key `{"type":"<key version>","data":{...}}`, payload `{"version":"<value version>","data":{...}}`,
  compact JSON with Kafka's field names (camelCase) and only the fields of that version;
  bytes as base64; a tombstone's payload is `<DELETE>`;
- in a group whose protocolType is `consumer`, each member's subscription and assignment
  are decoded (ConsumerProtocolSubscription / ConsumerProtocolAssignment, versions 0..3) and
  printed as JSON, or kept as base64 bytes when they do not decode (as Kafka does);
- a key version no record type has: (`Unknown record type N at offset O, skipping.`, None);
  a record that does not decode, or one of KIP-848's consumer-group records (key versions
  3..8, which pykraft does not decode): (`Error at offset O, skipping. <why>`, None);
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
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    RecordSchemaError,
    decode_key,
    decode_value,
)
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


def _key_json(key: OffsetKey | GroupKey) -> dict[str, object]:
    if isinstance(key, OffsetKey):
        return {"group": key.group, "topic": key.topic, "partition": key.partition}
    return {"group": key.group}


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
        if not isinstance(record_key, OffsetKey | GroupKey):
            raise RecordSchemaError(f"key version {key_version} is a consumer-group (KIP-848) record, not decoded")
        record_value = decode_value(record_key, value)
    except RecordSchemaError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    key_text = _json({"type": str(key_version), "data": _key_json(record_key)})
    if value is None or record_value is None:
        return key_text, "<DELETE>"
    (value_version,) = _VERSION.unpack_from(value, 0)
    if isinstance(record_value, OffsetValue):
        data = _offset_value_json(record_value, value_version)
    else:
        data = _group_value_json(record_value, value_version)
    return key_text, _json({"version": str(value_version), "data": data})
