#!/usr/bin/env python
"""Instructions (callgrind) or CPU per controller write in one process: a single-voter
controller (RaftNode + QuorumController + its Kafka-protocol APIs on a TCP listener, as
`pykraft controller` wires them, real fsync) and `--clients` connections of
`bench_peers.PykraftClient` writing IncrementalAlterConfigs (SET retention.ms of a topic
each) back to back on the same event loop: the leader's write path of
`bench_ctl_writes.py` without followers, a broker or the machine's load.

    PYTHONPATH=. python tests/perf/bench_ctl_cpu.py [--clients 64] [--writes 40] [--warmup 10]
    BENCH_CALLGRIND=1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=F \\
        python tests/perf/bench_ctl_cpu.py ...   # then: callgrind_annotate F | head

Each client makes --warmup writes, then --writes measured ones (callgrind counts those only).
Prints the writes, the process CPU per write (µs) and the wall time. Not a pytest module.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE), str(HERE.parent / "unit" / "controller")]

from bench_peers import PykraftClient  # noqa: E402
from controller_harness import CLUSTER, Harness  # noqa: E402
from in_process_broker import callgrind  # noqa: E402

from quorum.controller.requests import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse  # noqa: E402
from quorum.metadata.snapshot import MetadataStateMachine  # noqa: E402
from quorum.node.active_controller import QuorumController  # noqa: E402
from quorum.node.config import config_from_properties  # noqa: E402
from quorum.node.controller import build_controller  # noqa: E402
from quorum.node.free_ports import free_port  # noqa: E402
from quorum.node.raft_node import RaftNode  # noqa: E402
from quorum.raft.roles import Role  # noqa: E402
from quorum.raft.types import Epoch  # noqa: E402

BROKER = 2  # a registered, unfenced broker that hosts the topics (it only heartbeats)


async def run(args: argparse.Namespace, data: Path) -> dict[str, object]:
    port = free_port()
    config = config_from_properties(
        {
            "process.roles": "controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "log.dirs": str(data),
            "controller.quorum.election.timeout.ms": "50",
            "broker.session.timeout.ms": "600000",  # no heartbeats needed while callgrind is slow
        }
    )
    sm = MetadataStateMachine()
    holder: list[QuorumController] = []

    def on_role(role: Role, epoch: Epoch) -> None:
        holder[0].on_role_change(role, epoch)

    def on_first_commit(epoch: Epoch) -> None:
        holder[0].on_first_commit(epoch)

    node = RaftNode(
        config, cluster_id=CLUSTER, state_machine=sm, on_role_change=on_role, on_first_commit=on_first_commit
    )
    controller = build_controller(config, node, sm, CLUSTER)
    holder.append(controller)
    await node.start()
    clients: list[PykraftClient] = []
    try:
        while not controller.active:  # noqa: ASYNC110 - a single voter elects itself within ms
            await asyncio.sleep(0.01)
        h = Harness(node, sm, controller)
        await h.unfenced_brokers(BROKER)
        topics = tuple(CreatableTopic(f"peer-{i}", assignments={0: (BROKER,)}) for i in range(args.clients))
        resp = await controller.handle(CreateTopicsRequest(topics))
        assert isinstance(resp, CreateTopicsResponse) and all(t.error_code == 0 for t in resp.topics), resp
        clients = [PykraftClient(port, f"peer-{i}", 600.0) for i in range(args.clients)]

        async def writes(first: int, count: int) -> None:
            async def one(i: int, c: PykraftClient) -> None:
                for n in range(first, first + count):
                    await c.write(i * 1_000_000 + n)

            await asyncio.gather(*(one(i, c) for i, c in enumerate(clients)))

        await writes(0, args.warmup)
        cpu0, t0 = time.process_time(), time.perf_counter()
        callgrind("on")
        await writes(args.warmup, args.writes)
        callgrind("off")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        total = args.clients * args.writes
        return {
            "clients": args.clients,
            "writes": total,
            "cpu_us_per_write": round(cpu / total * 1e6, 1),
            "wall_s": round(wall, 2),
            "batches_hint_offset": sm.image.offset,
        }
    finally:
        for c in clients:
            await c.close()
        await controller.close()
        await node.stop(graceful=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--writes", type=int, default=40, help="measured writes per client")
    ap.add_argument("--warmup", type=int, default=10, help="writes per client before the measured ones")
    args = ap.parse_args()
    import uvloop

    with tempfile.TemporaryDirectory(prefix="bench-ctl-cpu-") as tmp:
        out = uvloop.run(run(args, Path(tmp) / "data"))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
