"""`pykraft broker --config F`: one broker node in the foreground.

The broker observes the metadata log (a Raft observer: it fetches from the
quorum leader and never votes), keeps its own metadata image, registers and
heartbeats with the active controller, hosts partition replicas (`LogManager` over
`log.dirs`, `ReplicaManager`, one replica fetcher per source broker, `IsrSender`),
serves Kafka clients on its broker listener and the REST API. On SIGTERM it runs a
controlled shutdown (its leaderships move away), then flushes and checkpoints every
partition log (a clean shutdown needs no recovery at the next start) and exits.

When a log dir goes offline (a storage error: `broker.log.dir_failure`) the broker asks
the controller to fence it at once (every leadership moves away, it leaves every ISR),
waits for that up to `LOG_DIR_FAILURE_TIMEOUT_S`, then stops and exits with status 1
without a clean close of the failed dir (its next start recovers it). An operator fixes
the disk and starts the broker again; it catches up from the other replicas and rejoins
the ISRs.

Combined mode (`process.roles=broker,controller`, Kafka's quick-start set-up for small and
development clusters): the same process is also a voter of the quorum on its controller
listener and, while it leads, the active controller. Both roles share one metadata state
machine and one event loop; at SIGTERM the broker side shuts down first (controlled
shutdown), then the controller resigns its leadership.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from broker.dataplane import DataPlane
from broker.fd_limit import raise_soft_limit
from broker.lifecycle import BrokerLifecycle
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.gc_policy import tune_collector
from quorum.metadata.image import MetadataImage
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import QuorumController
from quorum.node.config import ConfigError, load_config
from quorum.node.controller import build_controller, setup_logging
from quorum.node.controller_client import ControllerClient
from quorum.node.events import EventLog
from quorum.node.heap_policy import tune_allocator
from quorum.node.meta_properties import StorageError, check_storage, directory_uuid
from quorum.node.node_context import LocalNodeContext
from quorum.node.raft_node import RaftNode
from quorum.raft.roles import Role
from quorum.raft.types import Epoch

log = logging.getLogger("pykraft.broker")

# Kafka's log.dir.failure.timeout.ms default: how long a broker with an offline log dir
# waits for the controller to take it out of leaderships and ISRs before it stops anyway
# (then its session expires and the controller fences it).
LOG_DIR_FAILURE_TIMEOUT_S = 30.0


async def serve_broker(config_path: str, *, events_file: Path | None = None) -> int:
    config = load_config(config_path)
    if not config.is_broker:
        raise ConfigError(f"process.roles={','.join(sorted(config.process_roles))} has no broker role")
    combined = config.is_controller
    meta = check_storage(config)
    nofile = raise_soft_limit()
    log.info(
        "broker %d: open file descriptor limit (RLIMIT_NOFILE) %s %d (hard limit %d)",
        config.node_id, f"raised from {nofile.before} to" if nofile.soft != nofile.before else "is", nofile.soft,
        nofile.hard,
    )  # fmt: skip
    events = EventLog(events_file, config.node_id)
    sm = MetadataStateMachine()
    controller: QuorumController | None = None

    def on_role(role: Role, epoch: Epoch) -> None:
        events.emit("role", role=role.value, epoch=epoch)
        if controller is not None:
            controller.on_role_change(role, epoch)

    def on_first_commit(epoch: Epoch) -> None:
        events.emit("first_commit", epoch=epoch)
        if controller is not None:
            controller.on_first_commit(epoch)

    node = RaftNode(
        config,
        cluster_id=meta.cluster_id,
        directory_id=directory_uuid(meta),  # KIP-853: a combined node's voter key; an observer's in DescribeQuorum
        state_machine=sm,
        serve_raft=combined,
        on_role_change=on_role,
        on_first_commit=on_first_commit if combined else None,
    )
    if combined:
        controller = build_controller(config, node, sm, meta.cluster_id)
    client = ControllerClient(node, client_id=f"broker-{config.node_id}")
    # The data plane listens to metadata from the first record on (snapshot loads included).
    dataplane = DataPlane(config, meta.cluster_id, image=lambda: sm.image, client=client)
    sm.add_listener(dataplane.on_metadata)
    await node.start()

    def metadata_offset() -> int:
        return sm.image.offset

    lifecycle = BrokerLifecycle(
        config,
        cluster_id=meta.cluster_id,
        client=client,
        metadata_offset=metadata_offset,
        on_event=lambda e: events.emit("lifecycle", state=e),
    )

    def on_metadata(delta: MetadataDelta | None, image: MetadataImage) -> None:
        if delta is None:
            return
        b = image.cluster.brokers.get(config.node_id)
        if b is not None and config.node_id in delta.changed_brokers:
            events.emit("registration", fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown)

    sm.add_listener(on_metadata)
    dir_failed = asyncio.Event()

    def on_log_dir_failure(log_dir: Path, why: str) -> None:
        events.emit("log_dir_failure", log_dir=str(log_dir), error=why)
        lifecycle.report_log_dir_failure(str(log_dir))
        dir_failed.set()

    dataplane.on_log_dir_failure = on_log_dir_failure
    lifecycle.start()
    await dataplane.start(broker_epoch=lambda: lifecycle.broker_epoch)
    ctx = LocalNodeContext(
        config, cluster_id=meta.cluster_id, raft=node, state_machine=sm, client=client, controller=controller
    )
    rest = None
    address = config.rest_address
    if address is not None:
        from api.rest.server import serve_rest

        rest = await serve_rest(ctx, address.host, address.port, idle_timeout_s=config.rest_idle_timeout_ms / 1000)
    log.info("broker %d started (cluster %s, rest %s)", config.node_id, meta.cluster_id, address)
    events.emit("started")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    failed = asyncio.create_task(node.failed.wait())
    stopping = asyncio.create_task(stop.wait())
    dir_failing = asyncio.create_task(dir_failed.wait())
    await asyncio.wait({failed, stopping, dir_failing}, return_when=asyncio.FIRST_COMPLETED)
    failed.cancel()
    stopping.cancel()
    dir_failing.cancel()
    if dir_failed.is_set():
        await _step_out_for_log_dir_failure(config.node_id, lifecycle, dataplane)
    elif node.fatal_error is None:
        log.info("broker %d: controlled shutdown", config.node_id)
        await lifecycle.controlled_shutdown(timeout_s=config.broker_session_timeout_ms / 1000 * 2)
    await dataplane.stop()
    await lifecycle.stop()
    if rest is not None:
        with contextlib.suppress(Exception):
            await rest.stop()
    if controller is not None:
        await controller.close()
    await client.close()
    # A combined node resigns its quorum leadership (EndQuorumEpoch) on the way out.
    await node.stop(graceful=combined and node.fatal_error is None)
    events.emit("stopped")
    events.close()
    return 1 if node.fatal_error is not None or dir_failed.is_set() else 0


async def _step_out_for_log_dir_failure(node_id: int, lifecycle: BrokerLifecycle, dataplane: DataPlane) -> None:
    """Wait until the controller fenced this broker (its leaderships moved, it left every ISR),
    at most LOG_DIR_FAILURE_TIMEOUT_S; the caller then stops the broker."""
    offline = ", ".join(f"{d} ({why})" for d, why in dataplane.dir_failures.offline.items())
    try:
        async with asyncio.timeout(LOG_DIR_FAILURE_TIMEOUT_S):
            await lifecycle.fenced_for_log_dir_failure.wait()
        log.error(
            "broker %d: fenced by the controller after the failure of log dir %s: it leads no partition and is in no "
            "ISR. Shutting down; fix the disk and restart the broker (it recovers its logs and catches up)",
            node_id, offline,
        )  # fmt: skip
    except TimeoutError:
        log.error(
            "broker %d: log dir %s failed and the controller did not fence this broker within %.0f s; shutting down "
            "(the controller fences it when its session expires)",
            node_id, offline, LOG_DIR_FAILURE_TIMEOUT_S,
        )  # fmt: skip


def run_broker(config_path: str, *, events_file: str | None = None) -> int:
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
        return uvloop.run(serve_broker(config_path, events_file=Path(events_file) if events_file else None))
    except (ConfigError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(args: argparse.Namespace) -> int:
    """Entry point of `pykraft broker` (parsed arguments from api.cli)."""
    return run_broker(args.config, events_file=getattr(args, "events_file", None))
