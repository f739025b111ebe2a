"""The consumer side of the classic protocol's payloads, as the clients write them.

The coordinator relays subscriptions and assignments untouched; the simulated members
encode them as Kafka's clients do: ConsumerProtocolSubscription v0 (int16 version, topics:
[string], user data: nullable bytes) and ConsumerProtocolAssignment v0 (int16 version,
[topic: string, partitions: [int32]], user data: nullable bytes). The leader assigns with
Kafka's range assignor (members sorted by group.instance.id when they have one, else by
member id; per topic, each gets len // n partitions and the first len % n one more).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from broker.group.classic import consumer_subscription_topics


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_subscription(topics: Sequence[str]) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def decode_subscription(data: bytes) -> set[str]:
    topics = consumer_subscription_topics(data)
    if topics is None:
        raise ValueError(f"unreadable subscription {data!r}")
    return topics


def encode_assignment(partitions: Iterable[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    out = struct.pack(">hi", 0, len(by_topic))
    for t, ps in by_topic.items():
        out += _string(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def decode_assignment(data: bytes) -> frozenset[tuple[str, int]]:
    if not data:
        return frozenset()
    (count,) = struct.unpack_from(">i", data, 2)
    pos = 6
    out: set[tuple[str, int]] = set()
    for _ in range(count):
        (n,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2 : pos + 2 + n].decode()
        pos += 2 + n
        (k,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(k):
            out.add((topic, struct.unpack_from(">i", data, pos)[0]))
            pos += 4
    return frozenset(out)


def range_assign(members: Sequence[tuple[str, str | None, bytes]], partitions_of: dict[str, int]) -> dict[str, bytes]:
    """The leader's range assignment: member id -> encoded assignment, for every member
    listed in its JoinGroup answer (id, group.instance.id, subscription)."""
    ordered = sorted(members, key=lambda m: (m[1] is None, m[1] or m[0], m[0]))
    mine: dict[str, list[tuple[str, int]]] = {m[0]: [] for m in ordered}
    for topic in sorted(partitions_of):
        takers = [m[0] for m in ordered if topic in decode_subscription(m[2])]
        if not takers:
            continue
        count = partitions_of[topic]
        per, extra = divmod(count, len(takers))
        start = 0
        for i, member_id in enumerate(takers):
            n = per + (1 if i < extra else 0)
            mine[member_id].extend((topic, p) for p in range(start, start + n))
            start += n
    return {member_id: encode_assignment(tps) for member_id, tps in mine.items()}
