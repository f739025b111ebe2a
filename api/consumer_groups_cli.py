"""The ``consumer-groups`` command's options (kafka-consumer-groups.sh's); the command itself,
`api.consumer_groups`, and its Kafka client are imported only when it runs."""

from __future__ import annotations

import argparse
from typing import Any, Final

DEFAULT_TIMEOUT_MS: Final = 5000  # Kafka's --timeout


def _run(args: argparse.Namespace) -> int:
    from api.consumer_groups import consumer_groups

    return consumer_groups(args)


def add_commands(commands: Any) -> None:
    p = commands.add_parser(
        "consumer-groups",
        help="kafka-consumer-groups.sh: list, describe, reset the offsets of, and delete consumer groups",
    )
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of brokers")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe groups: offsets and lag, members, state")
    action.add_argument("--reset-offsets", action="store_true", help="reset the offsets of inactive groups")
    action.add_argument("--delete", action="store_true", help="delete groups (they must be empty)")
    action.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of topics")
    p.add_argument("--group", action="append", metavar="G", help="a consumer group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group")
    p.add_argument("--topic", action="append", metavar="T[:P,...]", help="a topic, or some of its partitions")
    p.add_argument("--all-topics", action="store_true", help="reset every partition the group committed")
    p.add_argument("--offsets", action="store_true", help="describe: offsets and lag (the default)")
    p.add_argument("--members", action="store_true", help="describe: the members")
    p.add_argument("--verbose", action="store_true", help="describe --members: with each member's partitions")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="S,...",
                   help="describe: the group's state; list: with states (only those given)")  # fmt: skip
    scenario = p.add_argument_group("reset scenarios (one)")
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-current", action="store_true")
    scenario.add_argument("--to-offset", type=int, metavar="N")
    scenario.add_argument("--shift-by", type=int, metavar="N")
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    scenario.add_argument("--by-duration", metavar="PnDTnHnMnS")
    p.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    p.add_argument("--execute", action="store_true", help="set the new offsets")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help="how long each request may take (default 5000)")  # fmt: skip
    p.set_defaults(handler=_run)
