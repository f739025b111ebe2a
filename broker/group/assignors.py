"""The server-side assignors of KIP-848 consumer groups: `uniform` and `range` (Kafka's names).

Both are pure functions of the members' subscriptions, the subscribed topics' partition
counts and (for `uniform`) the current assignment; both are deterministic (members and
topics are taken in sorted order).

- `uniform`: every partition of a subscribed topic goes to one subscriber of that topic;
  the counts differ by at most one between members subscribing to the same topics; a
  partition stays with its current owner where that keeps the balance (sticky).
- `range`: per topic, its subscribers in member-id order get contiguous ranges of
  partitions, the first `partitions % members` one more (members with the same
  subscriptions get the same partition numbers of co-partitioned topics).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from uuid import UUID

Assignment = dict[str, set[tuple[UUID, int]]]  # member id -> {(topic id, partition)}
Topics = Mapping[str, tuple[UUID, int]]  # topic name -> (topic id, partition count)

ASSIGNORS = ("uniform", "range")


def assign(
    name: str, subscriptions: Mapping[str, frozenset[str]], topics: Topics, current: Mapping[str, set[tuple[UUID, int]]]
) -> Assignment:
    if name == "range":
        return range_assignment(subscriptions, topics)
    return uniform_assignment(subscriptions, topics, current)


def range_assignment(subscriptions: Mapping[str, frozenset[str]], topics: Topics) -> Assignment:
    out: Assignment = {m: set() for m in subscriptions}
    for topic in sorted(topics):
        topic_id, count = topics[topic]
        members = sorted(m for m, subs in subscriptions.items() if topic in subs)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, m in enumerate(members):
            n = share + (1 if i < extra else 0)
            out[m].update((topic_id, p) for p in range(start, start + n))
            start += n
    return out


def uniform_assignment(
    subscriptions: Mapping[str, frozenset[str]], topics: Topics, current: Mapping[str, set[tuple[UUID, int]]]
) -> Assignment:
    out: Assignment = {m: set() for m in subscriptions}
    # Partitions grouped by the members that may take them: members with the same
    # subscriptions are balanced against each other.
    eligible: dict[tuple[str, ...], list[tuple[UUID, int]]] = {}
    for topic in sorted(topics):
        topic_id, count = topics[topic]
        members = tuple(sorted(m for m, subs in subscriptions.items() if topic in subs))
        if members:
            eligible.setdefault(members, []).extend((topic_id, p) for p in range(count))
    load = dict.fromkeys(subscriptions, 0)
    for members, partitions in sorted(eligible.items(), key=lambda kv: (len(kv[0]), kv[0])):
        quota, extra = divmod(len(partitions) + sum(load[m] for m in members), len(members))
        owner_of = {tp: m for m in members for tp in current.get(m, ())}
        free: list[tuple[UUID, int]] = []
        # Sticky: an owner keeps up to `quota`, and `extra` owners one more.
        for tp in partitions:
            m = owner_of.get(tp)
            if m is not None and (load[m] < quota or (load[m] == quota and extra > 0)):
                if load[m] == quota:
                    extra -= 1
                out[m].add(tp)
                load[m] += 1
            else:
                free.append(tp)
        # The rest to the least loaded (a heap of (load, member)), so that no two members
        # differ by more than one.
        heap = [(load[m], m) for m in members]
        heapq.heapify(heap)
        for tp in free:
            n, m = heapq.heappop(heap)
            out[m].add(tp)
            load[m] = n + 1
            heapq.heappush(heap, (n + 1, m))
    return out
