"""`pykraft controller --config F`: one controller node in the foreground.

It checks its storage (meta.properties, cluster id), opens the metadata log,
joins the quorum on its controller listener, and runs until SIGTERM/SIGINT,
on which a leader resigns (EndQuorumEpoch) before the process exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from quorum.controller.replication_control import ReplicationSettings
from quorum.metadata.gc_policy import tune_collector
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import QuorumController
from quorum.node.config import ConfigError, NodeConfig, load_config
from quorum.node.controller_apis import ControllerApis
from quorum.node.controller_client import ControllerClient
from quorum.node.events import EventLog
from quorum.node.heap_policy import tune_allocator
from quorum.node.meta_properties import StorageError, check_storage, directory_uuid
from quorum.node.node_context import LocalNodeContext, broker_defaults_of
from quorum.node.raft_node import RaftNode
from quorum.node.state_machine import DigestStateMachine, StateMachine
from quorum.node.synthetic_load import LoadSpec, SyntheticLoad
from quorum.raft.roles import Role
from quorum.raft.types import Epoch

log = logging.getLogger("pykraft.controller")


def setup_logging(node_id: int | None = None) -> None:
    prefix = f"[node {node_id}] " if node_id is not None else ""
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s",
        stream=sys.stderr,
    )


def build_controller(config: NodeConfig, node: RaftNode, sm: MetadataStateMachine, cluster_id: str) -> QuorumController:
    """The active-controller machinery of a node with the controller role (a controller, or
    a combined broker+controller): the QuorumController over the node's metadata state
    machine, and its Kafka-protocol APIs on the node's controller listener."""
    defaults = broker_defaults_of(config)
    controller = QuorumController(
        node,
        sm,
        cluster_id=cluster_id,
        settings=ReplicationSettings(
            num_partitions=config.num_partitions,
            default_replication_factor=config.default_replication_factor,
            broker_defaults=defaults,
        ),
        session_timeout_ms=config.broker_session_timeout_ms,
        idle_interval_ms=config.metadata_max_idle_interval_ms,
        auto_rebalance=config.auto_leader_rebalance_enable,
        rebalance_interval_s=config.leader_imbalance_check_interval_seconds,
        imbalance_percentage=config.leader_imbalance_per_broker_percentage,
        append_linger_ms=config.controller_quorum_append_linger_ms,
    )
    apis = ControllerApis(controller, sm, node, cluster_id=cluster_id, broker_defaults=defaults)
    node.extra_api_handler = apis.handle
    return controller


async def serve_controller(
    config_path: str,
    *,
    load: LoadSpec | None = None,
    load_report: Path | None = None,
    events_file: Path | None = None,
) -> int:
    """Run one controller until SIGTERM/SIGINT.

    Normally it replicates the metadata log and, while it leads, is the active
    controller, serving the controller APIs and the REST API. With `load` it is a
    bare Raft test server instead (Kafka's TestRaftServer): its state machine only
    digests records, and while it leads it appends the synthetic load.
    """
    config = load_config(config_path)
    if not config.is_controller:
        raise ConfigError(f"process.roles={','.join(sorted(config.process_roles))} has no controller role")
    if config.is_broker:
        raise ConfigError("process.roles has the broker role too: run it as a combined node (pykraft broker)")
    meta = check_storage(config)
    events = EventLog(events_file, config.node_id)
    controller: QuorumController | None = None

    def on_role(role: Role, epoch: Epoch) -> None:
        events.emit("role", role=role.value, epoch=epoch)
        if controller is not None:
            controller.on_role_change(role, epoch)

    def on_first_commit(epoch: Epoch) -> None:
        events.emit("first_commit", epoch=epoch)
        if controller is not None:
            controller.on_first_commit(epoch)

    sm: StateMachine = DigestStateMachine() if load is not None else MetadataStateMachine()
    node = RaftNode(
        config,
        cluster_id=meta.cluster_id,
        directory_id=directory_uuid(meta),
        state_machine=sm,
        on_role_change=on_role,
        on_first_commit=on_first_commit,
    )
    rest = None
    client = None
    if isinstance(sm, MetadataStateMachine):
        controller = build_controller(config, node, sm, meta.cluster_id)
    await node.start()
    listener = config.controller_listeners[0]
    log.info("controller %d serving on %s (cluster %s)", config.node_id, listener, meta.cluster_id)
    if controller is not None and isinstance(sm, MetadataStateMachine):
        client = ControllerClient(node, client_id=f"controller-{config.node_id}")
        ctx = LocalNodeContext(
            config, cluster_id=meta.cluster_id, raft=node, state_machine=sm, client=client, controller=controller
        )
        address = config.rest_address
        if address is not None:
            from api.rest.server import serve_rest

            rest = await serve_rest(ctx, address.host, address.port, idle_timeout_s=config.rest_idle_timeout_ms / 1000)
    events.emit("started", listener=str(listener))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    load_task = None
    if load is not None:
        load_task = asyncio.create_task(SyntheticLoad(node, load, load_report).run())

    async def watch_fatal() -> None:
        await node.failed.wait()
        stop.set()

    watcher = asyncio.create_task(watch_fatal())
    await stop.wait()
    if node.fatal_error is None:
        node.resign()  # the successor is elected while the rest shuts down
    watcher.cancel()
    if load_task is not None:
        load_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await load_task
    log.info("controller %d shutting down", config.node_id)
    if rest is not None:
        with contextlib.suppress(Exception):
            await rest.stop()
    if controller is not None:
        await controller.close()
    if client is not None:
        await client.close()
    await node.stop(graceful=node.fatal_error is None)
    events.emit("stopped")
    events.close()
    return 1 if node.fatal_error is not None else 0


def run_controller(
    config_path: str,
    *,
    load: LoadSpec | None = None,
    load_report: str | None = None,
    events_file: str | None = None,
) -> int:
    try:
        node_id = load_config(config_path, warn_unknown=False).node_id  # warns once, logged
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    setup_logging(node_id)
    tune_collector()
    tune_allocator()
    import uvloop

    try:
        return uvloop.run(
            serve_controller(
                config_path,
                load=load,
                load_report=Path(load_report) if load_report else None,
                events_file=Path(events_file) if events_file else None,
            )
        )
    except (ConfigError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(args: argparse.Namespace) -> int:
    """Entry point of `pykraft controller` (parsed arguments from api.cli)."""
    load = None
    if getattr(args, "synthetic_load_size", 0):
        load = LoadSpec(
            record_size=args.synthetic_load_size,
            rate=args.synthetic_load_rate,
            duration_s=args.synthetic_load_duration,
            warmup_s=args.synthetic_load_warmup,
        )
    return run_controller(
        args.config,
        load=load,
        load_report=getattr(args, "synthetic_load_report", None),
        events_file=getattr(args, "events_file", None),
    )
