"""A group's partitions, their committed offsets, log end offsets and lag: the rows of
``consumer-groups --describe`` and of the REST API's ``lags`` and ``lag-summary``.

The rule is kafka-consumer-groups.sh's: first each member that holds partitions (the members
with the most partitions first) with one row per partition it was assigned, whether or not
the group committed an offset for it; then one row per partition with a committed offset
that no member holds (consumer, host and client shown as missing). The lag is the log end
offset (the high watermark) minus the committed offset, when both are known; it is negative
when an offset was committed beyond the log end. The REST Proxy reports only the partitions
with a committed offset and a known log end, and never a negative lag (`rest_lag`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api.group_admin import TP, GroupDescription, Member


@dataclass(frozen=True, slots=True)
class PartitionRow:
    group: str
    tp: TP
    offset: int | None  # the committed offset, None when there is none
    log_end: int | None  # the high watermark, None when its leader did not answer
    member: Member | None  # the member that holds the partition, None when no member does

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end is None:
            return None
        return self.log_end - self.offset

    @property
    def rest_lag(self) -> int:
        """The REST Proxy's lag: never negative (only asked of rows with both offsets)."""
        return max(0, (self.log_end or 0) - (self.offset or 0))


def partitions_to_look_up(description: GroupDescription, committed: Mapping[TP, int]) -> set[TP]:
    """The partitions whose log end offsets the rows need."""
    return {tp for m in description.members for tp in m.assignment} | set(committed)


def offset_rows(
    description: GroupDescription, committed: Mapping[TP, int], log_end: Mapping[TP, int]
) -> list[PartitionRow]:
    """The rows of ``--describe --offsets`` (see the module's docstring), in print order."""
    group = description.group_id
    holders = sorted((m for m in description.members if m.assignment), key=lambda m: -len(m.assignment))
    rows: list[PartitionRow] = []
    held: set[TP] = set()
    for member in holders:
        for tp in sorted(member.assignment):
            held.add(tp)
            rows.append(PartitionRow(group, tp, committed.get(tp), log_end.get(tp), member))
    for tp in sorted(set(committed) - held):
        rows.append(PartitionRow(group, tp, committed[tp], log_end.get(tp), None))
    return rows


def rest_lag_rows(rows: Iterable[PartitionRow]) -> list[PartitionRow]:
    """The rows the REST Proxy reports a lag for: a committed offset and a known log end."""
    return [r for r in rows if r.offset is not None and r.log_end is not None]
