"""Codecs of KIP-853's two control records (Kafka's exact schemas, version 0, flexible):

KRaftVersionRecord (control type 5): Version int16, KRaftVersion int16, tagged fields.
VotersRecord (control type 6): Version int16, Voters compact array of
  {VoterId int32, VoterDirectoryId uuid (16 bytes), Endpoints compact array of
   {Name compact string, Host compact string, Port uint16, tagged fields},
   KRaftVersionFeature {MinSupportedVersion int16, MaxSupportedVersion int16, tagged fields},
   tagged fields}, tagged fields.
Each is the value of a control record whose key is (version 0, type); one record per batch.
"""

from __future__ import annotations

import struct
import uuid

from quorum.raft.control_records import (
    CorruptRecordError,
    decode_fixed_v0,
    read_uvarint,
    skip_tagged_fields,
    uvarint_bytes,
)
from quorum.raft.types import Batch, ControlType, Epoch, Offset
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode, VoterSet

_HH = struct.Struct(">hh")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_NO_TAGS = b"\x00"


def encode_kraft_version(kraft_version: int) -> bytes:
    return _HH.pack(0, kraft_version) + _NO_TAGS


def decode_kraft_version(data: bytes | bytearray | memoryview) -> int:
    """The kraft.version a KRaftVersionRecord sets. Raises CorruptRecordError."""
    _, kraft_version = decode_fixed_v0(data, _HH, "KRaftVersionRecord")
    if kraft_version < 0:
        raise CorruptRecordError(f"negative kraft.version {kraft_version}")
    return int(kraft_version)


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return uvarint_bytes(len(raw) + 1) + raw


def encode_voters(voters: VoterSet) -> bytes:
    parts = [_I16.pack(0), uvarint_bytes(len(voters.nodes) + 1)]
    for node in voters.nodes:
        parts.append(_I32.pack(node.node_id))
        parts.append(node.key.directory_id.bytes)
        parts.append(uvarint_bytes(len(node.endpoints) + 1))
        for ep in node.endpoints:
            parts += [_compact_string(ep.name), _compact_string(ep.host), _U16.pack(ep.port), _NO_TAGS]
        parts += [_HH.pack(node.min_kraft_version, node.max_kraft_version), _NO_TAGS, _NO_TAGS]
    parts.append(_NO_TAGS)
    return b"".join(parts)


def _read_count(buf: bytes, p: int, element_min: int, what: str) -> tuple[int, int]:
    raw, p = read_uvarint(buf, p, 5)
    if raw == 0:
        raise CorruptRecordError(f"null {what} array")
    n = raw - 1
    if n > (len(buf) - p) // element_min:
        raise CorruptRecordError(f"{what} array longer than the record")
    return n, p


def _read_string(buf: bytes, p: int) -> tuple[str, int]:
    raw, p = read_uvarint(buf, p, 5)
    if raw == 0:
        raise CorruptRecordError("null string")
    end = p + raw - 1
    if end > len(buf):
        raise CorruptRecordError("string runs past the record")
    try:
        return buf[p:end].decode(), end
    except UnicodeDecodeError:
        raise CorruptRecordError("string is not UTF-8") from None


def decode_voters(data: bytes | bytearray | memoryview) -> VoterSet:
    """The voter set a VotersRecord holds. Raises CorruptRecordError on malformed input,
    an empty set or a node id given twice."""
    buf = bytes(data)
    try:
        (version,) = _I16.unpack_from(buf, 0)
        if version != 0:
            raise CorruptRecordError(f"unsupported VotersRecord version {version}")
        # Voter: id 4 + directory 16 + endpoints 1 + feature 4 + 1 + tags 1.
        n, p = _read_count(buf, 2, 27, "voter")
        nodes: list[VoterNode] = []
        for _ in range(n):
            (node_id,) = _I32.unpack_from(buf, p)
            directory = uuid.UUID(bytes=buf[p + 4 : p + 20])
            m, p = _read_count(buf, p + 20, 5, "endpoint")
            endpoints: list[Endpoint] = []
            for _ in range(m):
                name, p = _read_string(buf, p)
                host, p = _read_string(buf, p)
                (port,) = _U16.unpack_from(buf, p)
                p = skip_tagged_fields(buf, p + 2)
                endpoints.append(Endpoint(name, host, port))
            lo, hi = _HH.unpack_from(buf, p)
            p = skip_tagged_fields(buf, p + 4)
            p = skip_tagged_fields(buf, p)
            if node_id < 0 or lo < 0 or hi < lo:
                raise CorruptRecordError(f"bad voter {node_id} (kraft.version range {lo}..{hi})")
            nodes.append(VoterNode(ReplicaKey(node_id, directory), tuple(endpoints), lo, hi))
        p = skip_tagged_fields(buf, p)
    except (IndexError, struct.error, ValueError) as exc:
        if isinstance(exc, CorruptRecordError):
            raise
        raise CorruptRecordError(f"truncated or invalid VotersRecord: {exc}") from None
    if p != len(buf):
        raise CorruptRecordError("trailing bytes after VotersRecord")
    if not nodes:
        raise CorruptRecordError("VotersRecord with no voter")
    try:
        return VoterSet.of(nodes)
    except ValueError as exc:
        raise CorruptRecordError(str(exc)) from None


def kraft_version_batch(offset: Offset, epoch: Epoch, kraft_version: int, timestamp_ms: int) -> Batch:
    return Batch(offset, epoch, (encode_kraft_version(kraft_version),), timestamp_ms, ControlType.KRAFT_VERSION)


def voters_batch(offset: Offset, epoch: Epoch, voters: VoterSet, timestamp_ms: int) -> Batch:
    return Batch(offset, epoch, (encode_voters(voters),), timestamp_ms, ControlType.KRAFT_VOTERS)
