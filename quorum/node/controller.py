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

from quorum.node.config import ConfigError, load_config
from quorum.node.events import EventLog
from quorum.node.meta_properties import StorageError, check_storage
from quorum.node.raft_node import RaftNode
from quorum.node.state_machine import DigestStateMachine
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


async def serve_controller(
    config_path: str,
    *,
    load: LoadSpec | None = None,
    load_report: Path | None = None,
    events_file: Path | None = None,
) -> int:
    config = load_config(config_path)
    if not config.is_controller:
        raise ConfigError(f"process.roles={','.join(sorted(config.process_roles))} has no controller role")
    meta = check_storage(config)
    events = EventLog(events_file, config.node_id)

    def on_role(role: Role, epoch: Epoch) -> None:
        events.emit("role", role=role.value, epoch=epoch)

    def on_first_commit(epoch: Epoch) -> None:
        events.emit("first_commit", epoch=epoch)

    node = RaftNode(
        config,
        cluster_id=meta.cluster_id,
        state_machine=DigestStateMachine(),
        on_role_change=on_role,
        on_first_commit=on_first_commit,
    )
    await node.start()
    listener = config.controller_listeners[0]
    log.info("controller %d serving on %s (cluster %s)", config.node_id, listener, meta.cluster_id)
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
    watcher.cancel()
    if load_task is not None:
        load_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await load_task
    log.info("controller %d shutting down", config.node_id)
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
        node_id = load_config(config_path).node_id
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    setup_logging(node_id)
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
