"""CPU per Produce request on the leader's path, in process, without the network.

A real `KafkaRequestHandler` over `LocalBrokerServices`, a real `ReplicaManager` and real
`PartitionLog`s in a temporary directory: broker 1 leads `t-0 .. t-(P-1)` (replicas 1, 2,
3). By default the ISR is broker 1 alone with `min.insync.replicas=1`, so an acks=all
produce takes the whole leader path (decode, checks, validation, offsets, write, producer
state, the acks=all waiter, its wake-up through the loop, the answer) and completes without
a follower fetch (the follower side is measured elsewhere). `--clients` connections each
send produce requests (small batches, as librdkafka at linger.ms=0) naming `--partitions`
partitions in a loop, up to `--depth` in flight each (the transport's pipelining), on uvloop
as the brokers run (`--asyncio`: asyncio's own loop).

Prints the process's CPU time (`time.process_time`) per request and per batch, per round;
`--profile` adds a cProfile of the last round.

    PYTHONPATH=. .venv/bin/python tests/perf/bench_produce_cpu.py [--partitions 1] [--records 1]
        [--value-bytes 100] [--acks -1] [--idempotent] [--version 9] [--rounds 3] [--profile]

Run it from two checkouts alternately to compare code (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import io
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from in_process_broker import InProcessBroker, callgrind  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_writer  # noqa: E402
from kio.static.primitive import i32Timedelta  # noqa: E402

from broker.kafka.context import make, nested  # noqa: E402
from broker.kafka.server import KafkaRequestHandler  # noqa: E402
from broker.kafka.services import ListenerConfig  # noqa: E402
from broker.serving import LocalBrokerServices  # noqa: E402
from quorum.metadata.gc_policy import tune_collector  # noqa: E402

TOPIC_ID = uuid.UUID(int=7)
NOW = 1_700_000_000_000


def batch(records: int, value_bytes: int, producer_id: int, sequence: int) -> bytes:
    idem = producer_id >= 0
    b = DefaultRecordBatchBuilder(2, 0, False, producer_id, 0 if idem else -1, sequence if idem else -1,
                                  batch_size=1 << 24)  # fmt: skip
    for i in range(records):
        b.append(i, timestamp=NOW + i, key=None, value=b"v" * value_bytes, headers=[])
    return bytes(b.build())


def produce_frame(version: int, acks: int, batches: list[tuple[int, bytes]]) -> bytes:
    cls = load_request_schema(0, version)
    tcls, pcls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))
    topic = make(tcls, name="t", partition_data=tuple(make(pcls, index=p, records=r) for p, r in batches))
    body = make(cls, transactional_id=None, acks=acks, timeout=timeout, topic_data=(topic,))
    header = cls.__header_schema__(request_api_key=0, request_api_version=version, correlation_id=1, client_id="bench")
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


class World(InProcessBroker):
    """Broker 1, the leader, and its Kafka listener."""

    def __init__(self, tmp: Path, partitions: int, isr: tuple[int, ...]) -> None:
        super().__init__(tmp, 1, partitions, isr, min_isr=len(isr))
        services = LocalBrokerServices(1, "bench", lambda: self.image, self.manager, None, None)  # type: ignore[arg-type]
        self.handler = KafkaRequestHandler(services, ListenerConfig(listener_name="PLAINTEXT"))

    def close(self) -> None:
        self.manager.close()
        self.logs.close()


async def one_round(
    args: argparse.Namespace, requests: int, profile: cProfile.Profile | None, *, warm_up: bool = False
) -> tuple[float, int]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-produce-"))
    isr = (1,) if args.isr == 1 else (1, 2, 3)[: args.isr]
    world = World(tmp, args.partitions * args.clients, isr)
    handler = world.handler
    sequences = [0] * (args.partitions * args.clients)

    def frame_of(client: int) -> bytes:
        parts = []
        for k in range(args.partitions):
            p = client * args.partitions + k
            pid = 1000 + p if args.idempotent else -1
            parts.append((p, batch(args.records, args.value_bytes, pid, sequences[p])))
            sequences[p] += args.records
        return produce_frame(args.version, args.acks, parts)

    # The frames are built before the clock starts (idempotent ones carry rising sequences).
    frames = [[frame_of(c) for _ in range(requests)] for c in range(args.clients)]

    async def client(mine: list[bytes]) -> None:
        sem = asyncio.Semaphore(args.depth)

        async def one(frame: bytes) -> None:
            try:
                answer = await handler(frame)
                assert answer is not None
            finally:
                sem.release()

        tasks = []
        for frame in mine:
            await sem.acquire()
            tasks.append(asyncio.ensure_future(one(frame)))
        await asyncio.gather(*tasks)

    followers = [r for r in (2, 3) if r in isr]
    follower_cpu = [0.0]
    if followers:
        loop = asyncio.get_running_loop()

        def fetch(key: tuple[str, int]) -> None:
            t0 = time.process_time()
            h = world.manager.partitions[key]
            end = h.log.log_end_offset
            for r in followers:
                h.state.on_follower_fetch(replica_id=r, fetch_offset=end, last_fetched_epoch=-1,
                                          now_ms=int(time.time() * 1000), log=h.log)  # fmt: skip
            world.manager._advance(h)
            follower_cpu[0] += time.process_time() - t0

        class Session:
            """Followers 2 and 3 in one session, woken by each append as a follower's fetch
            session is: they fetch up to the log end at the next loop turn (one fetch per
            append, whatever the code under test; their CPU is not counted)."""

            def wake(self, key: tuple[str, int]) -> None:
                loop.call_soon(fetch, key)

            def note(self, key: tuple[str, int]) -> None:
                pass

        session = Session()
        for p in range(len(sequences)):
            world.manager.partitions[("t", p)].progress.watch_session(session, ("t", p))  # type: ignore[arg-type]
    start = time.process_time()
    if not warm_up:
        callgrind("on")
    if profile:
        profile.enable()
    await asyncio.gather(*(client(f) for f in frames))
    if profile:
        profile.disable()
    cpu = time.process_time() - start - follower_cpu[0]
    if not warm_up:
        callgrind("off")
    # Every batch was written (no error answer went unnoticed).
    written = sum(world.manager.partitions[("t", p)].log.log_end_offset for p in range(len(sequences)))
    expected = args.records * requests * args.partitions * args.clients
    assert written == expected, f"{written} records in the logs, {expected} produced"
    world.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return 1e6 * cpu / (args.clients * requests), args.partitions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1, help="partitions per request")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--depth", type=int, default=5, help="requests in flight per client")
    ap.add_argument("--records", type=int, default=1, help="records per batch")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--acks", type=int, default=-1)
    ap.add_argument(
        "--isr",
        type=int,
        default=1,
        help="1: the leader alone (acks=all completes at once); 3: followers fetch after each append",
    )
    ap.add_argument("--idempotent", action="store_true")
    ap.add_argument("--version", type=int, default=9)
    ap.add_argument("--requests", type=int, default=3000, help="per client")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--asyncio", action="store_true", help="asyncio's own loop (default: uvloop, as the brokers)")
    args = ap.parse_args()
    tune_collector()  # a broker's collector thresholds (broker.node)
    run = asyncio.run
    if not args.asyncio:
        import uvloop

        run = uvloop.run
    run(one_round(args, 50, None, warm_up=True))  # warm-up: imports, caches
    for r in range(args.rounds):
        profile = cProfile.Profile() if args.profile and r == args.rounds - 1 else None
        us, parts = run(one_round(args, args.requests, profile))
        print(f"round {r + 1}: {us:.1f} us of CPU per request, {us / parts:.1f} per batch "
              f"({args.clients * args.requests} requests of {parts} partitions)"
              f"{' (profiled)' if profile else ''}", flush=True)  # fmt: skip
        if profile:
            pstats.Stats(profile).sort_stats("tottime").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
