"""The ``pykraft`` command line.

::

    pykraft storage format --config F --cluster-id ID [--ignore-formatted]
                           [--standalone | --initial-controllers ID@HOST:PORT:DIR,... | --no-initial-controllers]
    pykraft storage random-uuid
    pykraft controller --config F
    pykraft broker --config F
    pykraft cluster up --dir D [--controllers N] [--brokers N | --combined N] [--base-port P] [--static-voters]
    pykraft cluster down --dir D
    pykraft cluster status --dir D [--json]
    pykraft cluster start|stop|restart --dir D --node N
    pykraft quorum describe (--status | --replication) --bootstrap-controller HOST:PORT [--json]
    pykraft quorum add-controller --config F [--bootstrap-controller HOST:PORT,...]
    pykraft quorum remove-controller --controller-id N --controller-directory-id D [--bootstrap-controller ...]
    pykraft features upgrade --feature kraft.version=1 --bootstrap-controller HOST:PORT[,...] [--dry-run]
    pykraft features describe --bootstrap-controller HOST:PORT[,...]

Errors print ``error: ...`` on stderr and exit with status 1; usage errors exit with 2.
Commands that run nodes import their modules only when invoked, so the light commands
(``storage ...``) never pay for, or depend on, the node runtime.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from quorum.node.config import ConfigError, load_config
from quorum.node.meta_properties import StorageError, random_uuid

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """A command failed in a way the user can fix; printed as ``error: <message>``."""


def _version() -> str:
    try:
        return version("pykraft")
    except PackageNotFoundError:
        return "unknown"


def _call(module_name: str, function_name: str, *call_args: Any) -> int:
    """Import ``module_name`` lazily and call ``function_name``; its return value (int or None) is the exit code."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a missing module of our own means "not there yet"; a missing dependency is a real error.
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CommandError(f"this command is not available yet ({module_name} is not implemented)") from None
        raise
    func: Callable[..., Any] | None = getattr(module, function_name, None)
    if func is None:
        raise CommandError(f"this command is not available yet ({module_name}.{function_name} is not implemented)")
    # A module lists the exceptions that are the user's to fix (printed as one `error:` line).
    expected: tuple[type[BaseException], ...] = getattr(module, "EXPECTED_ERRORS", ())
    try:
        result = func(*call_args)
    except expected as exc:
        raise CommandError(str(exc)) from None
    if result is None:
        return EXIT_OK
    if isinstance(result, bool):
        return EXIT_OK if result else EXIT_ERROR
    if isinstance(result, int):
        return result
    return EXIT_OK


# ----------------------------------------------------------------------------- handlers


def _storage_format(args: argparse.Namespace) -> int:
    from quorum.node.bootstrap_voters import format_node, initial_voters

    config = load_config(args.config)
    bootstrap = initial_voters(
        config,
        standalone=args.standalone,
        initial_controllers=args.initial_controllers,
        no_initial_controllers=args.no_initial_controllers,
    )
    result = format_node(config, args.cluster_id, bootstrap, ignore_formatted=args.ignore_formatted)
    for directory in result.skipped:
        print(f"Skipping already formatted log directory {directory}.")
    for directory, meta in result.formatted:
        print(f"Formatting {directory} with cluster.id {meta.cluster_id} for node.id {meta.node_id}.")
        if bootstrap is not None and directory == config.metadata_log_dir:
            nodes = bootstrap.voters.nodes
            voters = ",".join(f"{n.node_id}@{n.endpoints[0].host}:{n.endpoints[0].port}" for n in nodes)
            print(f"Bootstrap checkpoint with kraft.version 1 and voters {voters} in {directory}.")
    if not result.formatted:
        print("All of the log directories are already formatted.")
    return EXIT_OK


def _storage_random_uuid(args: argparse.Namespace) -> int:
    print(random_uuid())
    return EXIT_OK


def _controller(args: argparse.Namespace) -> int:
    # A combined node (process.roles=broker,controller) runs as one process whichever
    # subcommand starts it; its broker side is broker.node's.
    from quorum.node.config import ConfigError, load_config

    try:
        combined = load_config(args.config).is_broker and not getattr(args, "synthetic_load_size", 0)
    except ConfigError:
        combined = False  # the controller's own start reports the error
    if combined:
        return _call("broker.node", "main", args)
    return _call("quorum.node.controller", "main", args)


def _broker(args: argparse.Namespace) -> int:
    return _call("broker.node", "main", args)


def _cluster_up(args: argparse.Namespace) -> int:
    return _call("quorum.node.cluster", "cluster_up", args)


def _cluster_down(args: argparse.Namespace) -> int:
    return _call("quorum.node.cluster", "cluster_down", args)


def _cluster_node(args: argparse.Namespace) -> int:
    return _call("quorum.node.cluster", "cluster_node", args)


def _cluster_status(args: argparse.Namespace) -> int:
    return _call("quorum.node.cluster", "cluster_status", args)


def _quorum_describe(args: argparse.Namespace) -> int:
    return _call("quorum.node.quorum_cli", "describe", args)


def _quorum_add_controller(args: argparse.Namespace) -> int:
    return _call("quorum.node.quorum_cli", "add_controller", args)


def _quorum_remove_controller(args: argparse.Namespace) -> int:
    return _call("quorum.node.quorum_cli", "remove_controller", args)


def _features_upgrade(args: argparse.Namespace) -> int:
    return _call("quorum.node.features_cli", "upgrade", args)


def _features_describe(args: argparse.Namespace) -> int:
    return _call("quorum.node.features_cli", "describe", args)


# ----------------------------------------------------------------------------- parser


def _host_port(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return text


def _host_port_list(text: str) -> str:
    for item in text.split(","):
        _host_port(item.strip())
    return text


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _port(text: str) -> int:
    value = _non_negative(text)
    if not 0 < value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} out of range (1-65535)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pykraft",
        description="pykraft: a KRaft-style Kafka cluster in Python.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # storage
    storage = commands.add_parser("storage", help="format log directories, make cluster ids (kafka-storage.sh)")
    storage_cmds = storage.add_subparsers(dest="storage_command", metavar="SUBCOMMAND", required=True)
    fmt = storage_cmds.add_parser("format", help="write meta.properties into every log directory of a node")
    fmt.add_argument("-c", "--config", required=True, help="the node's .properties file")
    fmt.add_argument("-t", "--cluster-id", required=True, help="the cluster id (pykraft storage random-uuid)")
    fmt.add_argument(
        "-g",
        "--ignore-formatted",
        action="store_true",
        help="skip directories that are already formatted instead of failing",
    )
    initial = fmt.add_mutually_exclusive_group()
    initial.add_argument(
        "-s", "--standalone", action="store_true", help="KIP-853: this controller is the quorum's only voter"
    )
    initial.add_argument(
        "-I",
        "--initial-controllers",
        metavar="ID@HOST:PORT:DIRECTORY-ID,...",
        help="KIP-853: the quorum's first voters; this node's directory id becomes its metadata directory.id",
    )
    initial.add_argument(
        "-N",
        "--no-initial-controllers",
        action="store_true",
        help="KIP-853: a controller that joins an existing dynamic quorum (pykraft quorum add-controller)",
    )
    fmt.set_defaults(handler=_storage_format)
    ruuid = storage_cmds.add_parser("random-uuid", help="print a new random cluster id")
    ruuid.set_defaults(handler=_storage_random_uuid)

    # nodes
    controller = commands.add_parser("controller", help="run one controller node in the foreground")
    controller.add_argument("-c", "--config", required=True, help="the node's .properties file")
    controller.add_argument("--events-file", help="append role changes and first commits as JSON lines here")
    load = controller.add_argument_group(
        "synthetic load", "measure the quorum: while leader, append records (Kafka's TestRaftServer)"
    )
    load.add_argument("--synthetic-load-size", type=_non_negative, default=0, metavar="BYTES", help="record size")
    load.add_argument(
        "--synthetic-load-rate", type=_non_negative, default=0, metavar="N", help="records/s; 0 = saturation"
    )
    load.add_argument("--synthetic-load-duration", type=float, default=10.0, metavar="S", help="measured seconds")
    load.add_argument("--synthetic-load-warmup", type=float, default=2.0, metavar="S", help="warm-up seconds")
    load.add_argument("--synthetic-load-report", metavar="FILE", help="write the JSON report here")
    controller.set_defaults(handler=_controller)
    broker = commands.add_parser("broker", help="run one broker node in the foreground")
    broker.add_argument("-c", "--config", required=True, help="the node's .properties file")
    broker.add_argument("--events-file", help="append lifecycle and role changes as JSON lines here")
    broker.set_defaults(handler=_broker)

    # topics, brokers and log dump (over REST / on files)
    from api.admin_cli import add_commands

    add_commands(commands, _non_negative)

    # kafka-console-producer.sh / kafka-console-consumer.sh
    from api.console import add_commands as add_console_commands

    add_console_commands(commands)

    # kafka-consumer-groups.sh
    from api.consumer_groups_cli import add_commands as add_consumer_groups_command

    add_consumer_groups_command(commands)

    # kafka-transactions.sh
    from api.transactions import add_commands as add_transactions_command

    add_transactions_command(commands)

    # audit and export of the metadata log (PySpark is imported only when they run)
    from quorum.audit.cli import add_audit_commands

    add_audit_commands(commands)

    # cluster
    cluster = commands.add_parser("cluster", help="a local cluster of background processes")
    cluster_cmds = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND", required=True)
    up = cluster_cmds.add_parser("up", help="format and start a local cluster, wait for a leader")
    up.add_argument("--dir", required=True, help="directory for the cluster's configs, data and logs")
    up.add_argument("--controllers", type=_non_negative, default=3, help="number of controllers (default 3)")
    up.add_argument("--brokers", type=_non_negative, default=3, help="number of brokers (default 3)")
    up.add_argument(
        "--combined",
        type=_non_negative,
        default=0,
        metavar="N",
        help="instead: N combined nodes, each a controller and a broker (process.roles=broker,controller)",
    )
    up.add_argument(
        "--base-port",
        type=_port,
        default=None,
        help="first port to use instead of the ports in deploy/local",
    )
    up.add_argument(
        "--static-voters",
        action="store_true",
        help="a static quorum (controller.quorum.voters, kraft.version 0) instead of a dynamic one "
        "(KIP-853: --initial-controllers, controller.quorum.bootstrap.servers)",
    )
    up.set_defaults(handler=_cluster_up)
    down = cluster_cmds.add_parser(
        "down", help="stop a local cluster started by `cluster up` (brokers first, with a controlled shutdown)"
    )
    down.add_argument("--dir", required=True)
    down.set_defaults(handler=_cluster_down)
    status = cluster_cmds.add_parser("status", help="show the processes and the quorum of a local cluster")
    status.add_argument("--dir", required=True)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=_cluster_status)
    for action, text in (
        ("start", "start one stopped node of a local cluster again"),
        ("stop", "stop one node (a broker with a controlled shutdown)"),
        ("restart", "stop one node, then start it again"),
    ):
        one = cluster_cmds.add_parser(action, help=text)
        one.add_argument("--dir", required=True)
        one.add_argument("--node", type=_non_negative, required=True, help="the node id")
        one.set_defaults(handler=_cluster_node)

    # quorum
    quorum = commands.add_parser("quorum", help="inspect the metadata quorum (kafka-metadata-quorum.sh)")
    quorum_cmds = quorum.add_subparsers(dest="quorum_command", metavar="SUBCOMMAND", required=True)
    describe = quorum_cmds.add_parser("describe", help="describe the quorum's status or replication")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="leader, epoch, high watermark, voters, observers")
    what.add_argument("--replication", action="store_true", help="one row per voter and observer")
    describe.add_argument(
        "--bootstrap-controller",
        required=True,
        type=_host_port,
        help="host:port of a controller listener",
    )
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.add_argument("--human-readable", action="store_true", help="times as 'N ms ago'")
    describe.set_defaults(handler=_quorum_describe)
    add = quorum_cmds.add_parser("add-controller", help="KIP-853: add the controller of --config as a voter")
    add.add_argument("-c", "--config", required=True, help="the new controller's .properties file (formatted, running)")
    remove = quorum_cmds.add_parser("remove-controller", help="KIP-853: remove a voter")
    remove.add_argument("--controller-id", type=_non_negative, required=True, help="the voter's node id")
    remove.add_argument(
        "--controller-directory-id", required=True, help="the voter's directory id (describe --replication)"
    )
    remove.add_argument("-c", "--config", help="a node's .properties file (its controller.quorum.bootstrap.servers)")
    for cmd in (add, remove):
        cmd.add_argument(
            "--bootstrap-controller",
            type=_host_port_list,
            help="host:port[,...] of controller listeners (default: the config's controller.quorum.bootstrap.servers)",
        )
        cmd.add_argument("--timeout-ms", type=_non_negative, default=60_000, help="give up after this (default 60000)")
    add.set_defaults(handler=_quorum_add_controller)
    remove.set_defaults(handler=_quorum_remove_controller)

    # features (kafka-features.sh): the kraft.version upgrade of a static quorum (KIP-853)
    features = commands.add_parser("features", help="finalize feature versions (kafka-features.sh)")
    features_cmds = features.add_subparsers(dest="features_command", metavar="SUBCOMMAND", required=True)
    upgrade = features_cmds.add_parser("upgrade", help="upgrade features, e.g. --feature kraft.version=1")
    upgrade.add_argument("--feature", action="append", required=True, help="NAME=LEVEL (repeatable)")
    upgrade.add_argument(
        "--bootstrap-controller", required=True, type=_host_port_list, help="host:port[,...] of controller listeners"
    )
    upgrade.add_argument("--dry-run", action="store_true", help="validate only (UpdateFeatures' ValidateOnly)")
    upgrade.add_argument("--timeout-ms", type=_non_negative, default=60_000, help="give up after this (default 60000)")
    upgrade.set_defaults(handler=_features_upgrade)
    fdescribe = features_cmds.add_parser("describe", help="supported and finalized feature levels")
    fdescribe.add_argument(
        "--bootstrap-controller", required=True, type=_host_port_list, help="host:port[,...] of controller listeners"
    )
    fdescribe.set_defaults(handler=_features_describe)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (ConfigError, StorageError, CommandError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
