"""What ``pykraft consumer-groups`` prints: kafka-consumer-groups.sh's tables and messages,
with its columns, order, widths and streams.

Each function appends to an `Output` (the text for stdout and for stderr) instead of printing,
so that the tables are checked without a cluster. Like Kafka's tool, most tables start each
line with a newline (Java's ``printf("\\n%-15s ...")``) and end with one more; a missing value
is ``-``; a column is as wide as its longest value, and at least its minimum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from api.group_admin import TP, GroupAdminError, GroupDescription, GroupListing
from api.group_lag import PartitionRow

MISSING = "-"
REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})

# Kafka's exception class for the error codes a group deletion meets (else KafkaException).
_EXCEPTIONS = {
    15: "CoordinatorNotAvailableException",
    14: "CoordinatorLoadInProgressException",
    16: "NotCoordinatorException",
    24: "InvalidGroupIdException",
    30: "GroupAuthorizationException",
    68: "GroupNotEmptyException",
    69: "GroupIdNotFoundException",
}


@dataclass(slots=True)
class Output:
    """Text for stdout and stderr, in the order it was written to each."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def println(self, text: str = "") -> None:
        self.out.append(text + "\n")

    def error(self, message: str) -> None:
        """Kafka's printError: a blank line, then ``Error: <message>`` on stdout."""
        self.println(f"\nError: {message}")


def _cells(widths: Sequence[int], values: Sequence[object]) -> str:
    """Java's ``%-Ns`` for each column (width 0: ``%s``, as is), one space between."""
    return " ".join(f"{value!s:<{width}}" for width, value in zip(widths, values, strict=True))


def _show(value: object | None) -> str:
    return MISSING if value is None else str(value)


def java_exception(error: GroupAdminError) -> str:
    """How Kafka's tool shows a failed future: the exception's class and message."""
    name = _EXCEPTIONS.get(error.code, "KafkaException")
    return f"java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.{name}: {error.message}"


# ---------------------------------------------------------------- describe


def should_print(o: Output, group: str, state: str | None, rows: int | None) -> bool:
    """The note on a group that is not stable, and whether it has rows to show."""
    if rows is None or state is None:
        o.error(f"The consumer group '{group}' does not exist.")
        return False
    if state == "Dead":
        o.error(f"Consumer group '{group}' does not exist.")
    elif state == "Empty":
        o.err.append(f"\nConsumer group '{group}' has no active members.\n")
    elif state in REBALANCING:
        o.err.append(f"\nWarning: Consumer group '{group}' is rebalancing.\n")
    return state != "Dead" and rows > 0


def offsets_table(o: Output, description: GroupDescription, rows: Sequence[PartitionRow]) -> None:
    """``--describe [--offsets]``: one row per partition with its committed offset and lag."""
    group = description.group_id
    if not should_print(o, group, description.state, len(rows)):
        return
    cells = [
        (
            r.group,
            r.tp.topic,
            r.tp.partition,
            _show(r.offset),
            _show(r.log_end),
            _show(r.lag),
            MISSING if r.member is None else r.member.member_id,
            MISSING if r.member is None else r.member.host,
            MISSING if r.member is None else r.member.client_id,
        )
        for r in rows
    ]
    widths = [
        max([15, *(len(c[0]) for c in cells)]),
        max([15, *(len(c[1]) for c in cells)]),
        10,
        15,
        15,
        15,
        max([15, *(len(c[6]) for c in cells)]),
        max([15, *(len(c[7]) for c in cells)]),
        0,
    ]
    header = (
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    o.out.append("\n" + _cells(widths, header))
    for c in cells:
        o.out.append("\n" + _cells(widths, c))
    o.println()


def _assignment_text(assignment: Iterable[TP]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return MISSING
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in by_topic.items()))


def members_table(o: Output, description: GroupDescription, verbose: bool) -> None:
    """``--describe --members [--verbose]``: one row per member (the header is printed even
    when the group has none, as Kafka's tool does)."""
    group = description.group_id
    members = description.members
    widths = [15, 15, 17, 15, 15]  # group, consumer id, group instance id, host, client id
    with_instance = False
    if should_print(o, group, description.state, len(members)):
        for m in members:
            widths = [
                max(widths[0], len(group)),
                max(widths[1], len(m.member_id)),
                max(widths[2], len(m.instance_id or "")),
                max(widths[3], len(m.host)),
                max(widths[4], len(m.client_id)),
            ]
            with_instance = with_instance or bool(m.instance_id)
    columns = [0, 1, 2, 3, 4] if with_instance else [0, 1, 3, 4]
    header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID"]

    def line(values: Sequence[str], partitions: str) -> str:
        # Kafka's format ends "%-15s " (#PARTITIONS, then a space) with the assignment after it.
        cells = "".join(f"{values[i]:<{widths[i]}} " for i in columns)
        return cells + f"{partitions:<15} "

    o.out.append("\n" + line(header, "#PARTITIONS") + ("ASSIGNMENT" if verbose else ""))
    o.println()
    for m in members:
        values = [group, m.member_id, m.instance_id or "", m.host, m.client_id]
        o.out.append(line(values, str(len(m.assignment))) + (_assignment_text(m.assignment) if verbose else ""))
        o.println()


def state_table(o: Output, description: GroupDescription) -> None:
    """``--describe --state``: the coordinator, the assignor, the state and the member count."""
    if not should_print(o, description.group_id, description.state, 1):
        return
    c = description.coordinator
    coordinator = f"{c.host}:{c.port}  ({c.id})"
    widths = [max(25, len(coordinator)), 25, 20, 15, 0]
    header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    values = (description.group_id, coordinator, description.assignor, description.state, len(description.members))
    o.out.append("\n" + _cells(widths, header))
    o.out.append("\n" + _cells(widths, values))
    o.println()


# ---------------------------------------------------------------- list


def list_table(o: Output, listings: Sequence[GroupListing], with_state: bool) -> None:
    """``--list``: one group id a line; with ``--state``, a GROUP and STATE table."""
    if not with_state:
        for g in listings:
            o.println(g.group_id)
        return
    width = max([15, *(len(g.group_id) for g in listings)]) + 10
    o.println(f"{'GROUP':<{width}} {'STATE':<20}")
    for g in listings:
        o.println(f"{g.group_id:<{width}} {g.state:<20}")


# ---------------------------------------------------------------- reset, delete


def reset_plan_table(o: Output, plans: Mapping[str, Mapping[TP, int]]) -> None:
    """``--reset-offsets``: the new offset of each partition (planned, or set with --execute)."""
    widths = [30, 30, 10, 15]
    if plans:
        o.out.append("\n" + _cells(widths, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")))
    for group, plan in plans.items():
        for tp, offset in sorted(plan.items()):
            o.out.append("\n" + _cells(widths, (group, tp.topic, tp.partition, offset)))
    o.println()


def delete_table(o: Output, results: Mapping[str, GroupAdminError | None]) -> None:
    """``--delete``: Kafka's success line, or the groups that could not be deleted and why."""
    deleted = [g for g, e in results.items() if e is None]
    failed = {g: e for g, e in results.items() if e is not None}
    if not failed:
        o.println(f"Deletion of requested consumer groups ('{', '.join(deleted)}') was successful.")
        return
    o.error("Deletion of some consumer groups failed:")
    for group, error in failed.items():
        o.println(f"* Group '{group}' could not be deleted due to: {java_exception(error)}")
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        o.println(f"\nThese consumer groups were deleted successfully: {names}")


def delete_offsets_table(
    o: Output,
    group: str,
    topics: Sequence[str],
    top: GroupAdminError | None,
    results: Mapping[TP, GroupAdminError | None],
) -> None:
    """``--delete-offsets``: the request's outcome, then one STATUS row per partition."""
    if top is None:
        o.println(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    elif top.code == 69:
        o.error(f"'{group}' does not exist.")
    elif top.code == 68:
        o.error(f"Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.")
    elif top.code == 24:
        o.error(f"'{group}' is not valid.")
    elif top.code in (3, 29, 86):  # unknown topic, topic authorization, group subscribed to topic
        o.error("Encounter some partition level error, see the follow-up details:")
    else:
        o.error(f"Encounter some unknown error: {top.message}")
    widths = [30, 15, 15]
    o.out.append("\n" + _cells(widths, ("TOPIC", "PARTITION", "STATUS")))
    for tp, error in sorted(results.items()):
        status = "Successful" if error is None else f"Error: :{error.message}"
        partition = tp.partition if tp.partition >= 0 else "Not Provided"
        o.out.append("\n" + _cells(widths, (tp.topic, partition, status)))
    o.println()
