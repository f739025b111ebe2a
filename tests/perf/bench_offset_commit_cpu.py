"""CPU per OffsetCommit request in the broker's handler, without the network or the log.

`KafkaRequestHandler` over a real `GroupCoordinator` whose partition host appends at the next
event-loop turn (so commits coalesce as they do behind a real acks=all append); N clients
each send OffsetCommit v7 requests of `--partitions` offsets (default 1) in a loop. Prints
the process's CPU time (`time.process_time`, so a busy machine inflates it less than wall
time) per request, per round; `--profile` adds a cProfile of the last round.

    PYTHONPATH=. .venv/bin/python tests/perf/bench_offset_commit_cpu.py [--clients 64] [--requests 300]
        [--rounds 3] [--partitions 1] [--profile] [--node-gc]

`--node-gc` sets the cyclic collector's thresholds as a broker process does
(`quorum.metadata.gc_policy.tune_collector`: 10,000 young objects, not CPython's 700); without
it the collector keeps CPython's defaults, which collect several times per round of commits.

Run it from two checkouts alternately to compare code (the machine is shared and noisy), or
count instructions, which the machine's load does not move: `BENCH_CALLGRIND=1 valgrind
--tool=callgrind --instr-atstart=no --callgrind-out-file=F python
tests/perf/bench_offset_commit_cpu.py --requests 100 --rounds 1`, then `callgrind_annotate F |
head` (the total over the measured rounds' commits).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from in_process_broker import callgrind  # noqa: E402
from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_writer  # noqa: E402

from broker.group.runtime import GroupCoordinator  # noqa: E402
from broker.group.shard import CoordinatorConfig  # noqa: E402
from broker.kafka.context import make, nested  # noqa: E402
from broker.kafka.server import KafkaRequestHandler  # noqa: E402
from broker.kafka.services import ListenerConfig  # noqa: E402
from quorum.kafka_errors import ErrorCode  # noqa: E402
from quorum.metadata.gc_policy import tune_collector  # noqa: E402
from tests.unit.broker_kafka.fake_services import FakeServices, make_image  # noqa: E402

BROKERS = {1: ("127.0.0.1", 19201, "rack-a")}
TOPICS = {"events": {p: (1, (1,)) for p in range(64)}}


class Host:
    """One `__consumer_offsets` partition led here; an append completes at the next loop turn."""

    def __init__(self) -> None:
        self.appends = 0

    def offsets_partitions(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int | None:
        return 0

    def partition_log(self, partition: int) -> None:
        return None

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        self.appends += 1
        await asyncio.sleep(0)
        return ErrorCode.NONE


def commit_frame(client: int, partitions: int = 1) -> bytes:
    cls = load_request_schema(8, 7)
    tcls, pcls = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")
    parts = tuple(
        make(pcls, partition_index=(client * partitions + j) % 64, committed_offset=client, committed_leader_epoch=-1,
             committed_metadata=None)
        for j in range(partitions)
    )  # fmt: skip
    body = make(cls, group_id="bench-commits", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=(make(tcls, name="events", partitions=parts),))  # fmt: skip
    header = cls.__header_schema__(request_api_key=8, request_api_version=7, correlation_id=1, client_id="bench")
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


async def one_round(
    clients: int, requests: int, profile: cProfile.Profile | None, measured: bool = True, partitions: int = 1
) -> tuple[float, int]:
    host = Host()
    coordinator = GroupCoordinator(1, host, CoordinatorConfig())  # type: ignore[arg-type]
    coordinator.on_metadata()
    for _ in range(10):
        await asyncio.sleep(0)
    handler = KafkaRequestHandler(FakeServices(make_image(BROKERS, TOPICS), node_id=1),
                                  ListenerConfig(listener_name="PLAINTEXT"), groups=coordinator)  # fmt: skip
    frames = [commit_frame(i, partitions) for i in range(clients)]

    async def client(frame: bytes) -> None:
        for _ in range(requests):
            answer = await handler(frame)
            assert answer is not None and bytes(answer)[-2:] == b"\0\0", "a commit was refused"

    if measured:
        callgrind("on")
    start = time.process_time()
    if profile:
        profile.enable()
    await asyncio.gather(*(client(f) for f in frames))
    if profile:
        profile.disable()
    cpu = time.process_time() - start
    if measured:
        callgrind("off")
    await coordinator.close()
    return 1e6 * cpu / (clients * requests), host.appends


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=1, help="offsets per OffsetCommit request")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--node-gc", action="store_true", help="the collector's thresholds of a broker process")
    args = ap.parse_args()
    if args.node_gc:
        tune_collector()
    asyncio.run(one_round(args.clients, 20, None, measured=False))  # warm-up: imports, caches
    for r in range(args.rounds):
        profile = cProfile.Profile() if args.profile and r == args.rounds - 1 else None
        us, appends = asyncio.run(one_round(args.clients, args.requests, profile, partitions=args.partitions))
        print(f"round {r + 1}: {us:.1f} us of CPU per OffsetCommit ({args.clients * args.requests} commits, "
              f"{appends} appends){' (profiled)' if profile else ''}", flush=True)  # fmt: skip
        if profile:
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
