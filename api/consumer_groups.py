"""``pykraft consumer-groups``: kafka-consumer-groups.sh, with its options and its output.

::

    pykraft consumer-groups --bootstrap-server B --list [--state [S,...]]
    pykraft consumer-groups --bootstrap-server B --describe (--group G ... | --all-groups)
                            [--offsets | --members [--verbose] | --state]
    pykraft consumer-groups --bootstrap-server B --reset-offsets (--group G ... | --all-groups)
                            (--topic T[:P,...] ... | --all-topics)
                            (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
                             | --to-datetime YYYY-MM-DDTHH:mm:SS.sss | --by-duration PnDTnHnMnS)
                            [--dry-run | --execute]
    pykraft consumer-groups --bootstrap-server B --delete (--group G ... | --all-groups)
    pykraft consumer-groups --bootstrap-server B --delete-offsets --group G --topic T[:P,...] ...

The tables and messages are Kafka's (`api.group_tables`), the lag rule is Kafka's
(`api.group_lag`), and the requests go through `api.group_admin`. As in Kafka, offsets are
reset only in a group with no active member (Empty, or Dead: a group that does not exist
yet), a plan is only shown unless ``--execute`` is given, and an offset asked for beyond
the log is moved to the log start or end. Where Kafka's tool exits 0 after printing an
error, this one exits 1 (the group is refused, not found, or could not be deleted); usage
errors exit 2.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from api.group_admin import TP, GroupAdmin, GroupAdminError, GroupDescription
from api.group_lag import PartitionRow, offset_rows, partitions_to_look_up
from api.group_tables import (
    Output,
    delete_offsets_table,
    delete_table,
    list_table,
    members_table,
    offsets_table,
    reset_plan_table,
    state_table,
)

INACTIVE: Final = frozenset({"Empty", "Dead"})
STATES: Final = (
    "Unknown",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
)
_SCENARIOS: Final = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration")
_DATETIME = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?$")
_DURATION = re.compile(
    r"^([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d{1,9})?)S)?)?$", re.IGNORECASE
)


class UsageError(Exception):
    """Options Kafka's tool refuses (printed with ``error:``, exit 2)."""


# ---------------------------------------------------------------- parsing values


def parse_datetime(text: str) -> int:
    """``--to-datetime``: ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+01``,
    ``+01:00``; UTC when none), as Kafka's Utils.getDateTime reads it; epoch milliseconds."""
    match = _DATETIME.match(text)
    if match is None:
        raise UsageError(f"Error parsing timestamp {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss[zone]")
    day, clock, millis, zone = match.groups()
    zone = zone or "Z"
    if zone != "Z" and ":" not in zone:
        zone = zone[:3] + ":" + (zone[3:] or "00")
    try:
        moment = datetime.fromisoformat(f"{day}T{clock}.{millis}{'+00:00' if zone == 'Z' else zone}")
    except ValueError as exc:
        raise UsageError(f"Error parsing timestamp {text!r}: {exc}") from None
    return int(moment.timestamp() * 1000)


def parse_duration(text: str) -> timedelta:
    """``--by-duration``: an ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMn.nS)."""
    match = _DURATION.match(text)
    if match is None or not any(match.groups()[1:]) or text.upper().endswith("T"):
        raise UsageError(f"Text cannot be parsed to a Duration: {text}")
    sign, days, hours, minutes, seconds = match.groups()
    value = timedelta(
        days=int(days or 0),
        hours=int(hours or 0),
        minutes=int(minutes or 0),
        seconds=float((seconds or "0").replace(",", ".")),
    )
    return -value if sign == "-" else value


def parse_topic_partitions(arg: str) -> list[TP]:
    """``topic:0,1,2`` as Kafka's tool splits it."""
    parts = arg.split(":")
    if len(parts) != 2:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    out = []
    for p in partitions.split(","):
        try:
            out.append(TP(topic, int(p)))
        except ValueError:
            raise UsageError(f"Invalid partition '{p}' specified in topic arg '{arg}''") from None
    return out


def parse_states(text: str) -> list[str]:
    by_lower = {s.lower(): s for s in STATES}
    states = [by_lower.get(s.strip().lower()) for s in text.split(",")]
    if any(s is None or s == "Unknown" for s in states):
        valid = ", ".join(s for s in STATES if s != "Unknown")
        raise UsageError(f"Invalid state list '{text}'. Valid states are: {valid}")
    return [s for s in states if s is not None]


# ---------------------------------------------------------------- checks (ConsumerGroupCommandOptions)


def check_args(args: argparse.Namespace) -> None:
    groups = bool(args.group) or args.all_groups
    if args.group and args.all_groups:
        raise UsageError("Option --group is not valid with --all-groups")
    if args.describe:
        if not groups:
            raise UsageError("Option --describe takes one of these options: --group, --all-groups")
        if sum(bool(x) for x in (args.members, args.offsets, args.state is not None)) > 1:
            raise UsageError("Option --describe takes at most one of these options: --members, --offsets, --state")
        if args.state:
            raise UsageError("Option --describe does not take a value for --state")
    elif args.members or args.offsets or args.verbose:
        raise UsageError("Options --members, --offsets and --verbose may be used with --describe only")
    if args.state is not None and not (args.describe or args.list):
        raise UsageError("Option --state may be used with --describe or --list only")
    if args.delete:
        if not groups:
            raise UsageError("Option --delete takes one of these options: --group, --all-groups")
        if args.topic:
            raise UsageError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if args.delete_offsets and (len(args.group or ()) != 1 or not args.topic):
        raise UsageError("Option --delete-offsets takes the following options: --group, --topic")
    scenarios = [name for name in _SCENARIOS if getattr(args, name) not in (None, False)]
    if args.reset_offsets:
        if args.dry_run and args.execute:
            raise UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
        if not groups:
            raise UsageError("Option --reset-offsets takes one of these options: --group, --all-groups")
        if len(scenarios) != 1:
            raise UsageError(
                "Option --reset-offsets requires one of the following scenarios: --to-earliest, --to-latest, "
                "--to-current, --to-offset, --shift-by, --to-datetime, --by-duration"
            )
        if not args.topic and not args.all_topics:
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    elif scenarios or args.dry_run or args.execute or args.all_topics:
        raise UsageError("Reset scenarios, --all-topics, --dry-run and --execute may be used with --reset-offsets only")
    if args.topic and not (args.reset_offsets or args.delete_offsets):
        raise UsageError("Option --topic may be used with --reset-offsets or --delete-offsets only")
    if args.group and args.list:
        raise UsageError("Option --group is not valid with --list")


# ---------------------------------------------------------------- actions


def _group_ids(admin: GroupAdmin, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in admin.list_groups()]
    return list(dict.fromkeys(args.group))


def list_groups(admin: GroupAdmin, args: argparse.Namespace, o: Output) -> int:
    states = parse_states(args.state) if args.state else []
    list_table(o, admin.list_groups(states), with_state=args.state is not None)
    return 0


def describe_groups(admin: GroupAdmin, args: argparse.Namespace, o: Output) -> int:
    group_ids = _group_ids(admin, args)
    if not group_ids:
        return 0
    descriptions = admin.describe(group_ids)
    status = 0
    for group_id in sorted(descriptions):
        description = descriptions[group_id]
        if description.state == "Dead":
            status = 1
        if args.members:
            members_table(o, description, args.verbose)
        elif args.state is not None:
            state_table(o, description)
        else:
            offsets_table(o, description, describe_offsets(admin, description))
    return status


def describe_offsets(admin: GroupAdmin, description: GroupDescription) -> list[PartitionRow]:
    """The ``--offsets`` rows of one group: its committed offsets and the log end offsets."""
    committed = {} if description.state == "Dead" else admin.committed(description.group_id)
    log_end = admin.log_offsets(partitions_to_look_up(description, committed), "latest")
    return offset_rows(description, committed, log_end)


def _warn(o: Output, text: str, moved_to: int) -> None:
    o.err.append(f"WARN {text}Value will be set to {moved_to}\n")


def _in_range(admin: GroupAdmin, requested: dict[TP, int], o: Output) -> dict[TP, int]:
    """Offsets beyond the log end or below the log start are moved there (with a warning)."""
    starts = admin.log_offsets(requested, "earliest")
    ends = admin.log_offsets(requested, "latest")
    out: dict[TP, int] = {}
    for tp, offset in requested.items():
        end, start = ends.get(tp), starts.get(tp)
        if end is None:
            raise GroupAdminError(-1, f"Unexpected non-existing offset value for topic partition {tp}")
        if offset > end:
            _warn(o, f"New offset ({offset}) is higher than latest offset for topic partition {tp}. ", end)
            out[tp] = end
        elif start is not None and offset < start:
            _warn(o, f"New offset ({offset}) is lower than earliest offset for topic partition {tp}. ", start)
            out[tp] = start
        else:
            out[tp] = offset
    return out


def _log_offsets(admin: GroupAdmin, partitions: Sequence[TP], spec: str, what: str) -> dict[TP, int]:
    found = admin.log_offsets(partitions, spec)
    for tp in partitions:
        if tp not in found:
            raise UsageError(f"Error getting {what} offset of topic partition: {tp}")
    return found


def _by_time(admin: GroupAdmin, partitions: Sequence[TP], timestamp_ms: int, o: Output) -> dict[TP, int]:
    found = _log_offsets(admin, partitions, str(timestamp_ms), "offset by timestamp of")
    empty = [tp for tp in partitions if found[tp] < 0]
    for tp in empty:
        o.println(
            f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to latest known offset."
        )
    found.update(_log_offsets(admin, empty, "latest", "ending"))
    return found


def plan_reset(admin: GroupAdmin, args: argparse.Namespace, group_id: str, o: Output) -> dict[TP, int]:
    """The new offset of every partition in scope (Kafka's prepareOffsetsToReset)."""
    committed = admin.committed(group_id)
    if args.all_topics:
        partitions = sorted(committed)
    else:
        named = [tp for arg in args.topic if ":" in arg for tp in parse_topic_partitions(arg)]
        whole = [arg for arg in args.topic if ":" not in arg]
        partitions = sorted(set(named) | set(admin.topic_partitions(whole)))
    if args.to_offset is not None:
        return _in_range(admin, dict.fromkeys(partitions, args.to_offset), o)
    if args.to_earliest:
        return _log_offsets(admin, partitions, "earliest", "starting")
    if args.to_latest:
        return _log_offsets(admin, partitions, "latest", "ending")
    if args.shift_by is not None:
        for tp in partitions:
            if tp not in committed:
                raise UsageError(f"Cannot shift offset for partition {tp} since there is no current committed offset")
        return _in_range(admin, {tp: committed[tp] + args.shift_by for tp in partitions}, o)
    if args.to_datetime is not None:
        return _by_time(admin, partitions, parse_datetime(args.to_datetime), o)
    if args.by_duration is not None:
        since = datetime.fromtimestamp(time.time(), UTC) - parse_duration(args.by_duration)
        return _by_time(admin, partitions, int(since.timestamp() * 1000), o)
    # --to-current: the committed offset, else the log end
    without = [tp for tp in partitions if tp not in committed]
    plan = {tp: committed[tp] for tp in partitions if tp in committed}
    plan.update(_log_offsets(admin, without, "latest", "ending"))
    return plan


def reset_offsets(admin: GroupAdmin, args: argparse.Namespace, o: Output) -> int:
    if not args.dry_run and not args.execute:
        o.err.append(
            "WARN: No action will be performed as the --execute option is missing.In a future major release, "
            "the default behavior of this command will be to prompt the user before executing the reset rather "
            "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
            "command and want to keep the current default behavior without prompting.\n"
        )
    group_ids = _group_ids(admin, args)
    descriptions = admin.describe(group_ids) if group_ids else {}
    plans: dict[str, dict[TP, int]] = {}
    status = 0
    for group_id in group_ids:
        state = descriptions[group_id].state
        if state not in INACTIVE:
            o.error(
                f"Assignments can only be reset if the group '{group_id}' is inactive, "
                f"but the current state is {state}."
            )
            plans[group_id] = {}
            status = 1
            continue
        plan = plan_reset(admin, args, group_id, o)
        if args.execute:
            admin.alter_offsets(group_id, plan)
        plans[group_id] = plan
    reset_plan_table(o, plans)
    return status


def delete_groups(admin: GroupAdmin, args: argparse.Namespace, o: Output) -> int:
    group_ids = _group_ids(admin, args)
    results = admin.delete_groups(group_ids) if group_ids else {}
    delete_table(o, results)
    return 1 if any(e is not None for e in results.values()) else 0


def delete_offsets(admin: GroupAdmin, args: argparse.Namespace, o: Output) -> int:
    group_id = args.group[0]
    partitions: set[TP] = set()
    results: dict[TP, GroupAdminError | None] = {}
    for arg in args.topic:
        if ":" in arg:
            partitions.update(parse_topic_partitions(arg))
            continue
        try:
            partitions.update(admin.topic_partitions([arg]))
        except GroupAdminError as exc:
            results[TP(arg, -1)] = exc
    top: GroupAdminError | None = None
    try:
        results.update(admin.delete_offsets(group_id, sorted(partitions)))
    except GroupAdminError as exc:
        top = exc
        results.update(dict.fromkeys(partitions, exc))
    if top is None:
        top = next((e for e in results.values() if e is not None), None)
    delete_offsets_table(o, group_id, args.topic, top, results)
    return 0 if top is None else 1


# ---------------------------------------------------------------- the command


def consumer_groups(args: argparse.Namespace) -> int:
    o = Output()
    status = 0
    admin: GroupAdmin | None = None
    try:
        check_args(args)
        admin = GroupAdmin(args.bootstrap_server, timeout_s=args.timeout / 1000)
        if args.list:
            status = list_groups(admin, args, o)
        elif args.describe:
            status = describe_groups(admin, args, o)
        elif args.reset_offsets:
            status = reset_offsets(admin, args, o)
        elif args.delete:
            status = delete_groups(admin, args, o)
        else:
            status = delete_offsets(admin, args, o)
    except UsageError as exc:
        o.err.append(f"error: {exc}\n")
        status = 2
    except GroupAdminError as exc:
        o.error(f"Executing consumer group command failed due to {exc.message}")
        status = 1
    sys.stdout.write(o.stdout)
    sys.stdout.flush()
    sys.stderr.write(o.stderr)
    return status
