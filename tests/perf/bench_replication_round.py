"""CPU per acks=all produce round of the broker's replication code, in one process, no sockets.

Broker 1 leads --partitions partitions of topic `t` (RF 3); brokers 2 and 3 follow them with
the product's `ReplicaFetcher`, whose Fetch frames go through broker 1's real Kafka listener
(`KafkaRequestHandler`: session cache, `handle_fetch`, the long poll, `encode_fetch_response`)
and come back as bytes (`SplicedResponse.to_bytes`: the file ranges read with pread, where the
broker would sendfile them). A producer sends acks=all Produce frames (v9, one batch per
partition) through the same listener, one request in flight, as a client with one connection.
Every log is a real `PartitionLog` on a temp dir. What is left out: sockets, the transport's
framing, and the send and receive system calls; what is in: every Python step of a produce
round (decode, append, wake, follower read, encode, follower decode and append, the next
fetch that moves the high watermark, the answer).

Prints, per round, the process's CPU (`time.process_time`) per produce request; `--markers`
makes each request a transaction's end on this leader instead (`write_txn_markers`: a COMMIT
marker to every partition, acks=all); `--profile` prints a cProfile of the last round.

    PYTHONPATH=. .venv/bin/python tests/perf/bench_replication_round.py [--partitions 3] [--records 10]
        [--value-bytes 100] [--requests 2000] [--rounds 3] [--markers] [--profile]

Run it from two checkouts at the same time to compare code (each checkout's copy from its
own directory with PYTHONPATH=.), or count instructions, which the machine's load does not
move: `BENCH_CALLGRIND=1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=F
python tests/perf/bench_replication_round.py --requests 200 --rounds 1`, then
`callgrind_annotate F | head` (the total over the measured rounds).
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
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from in_process_broker import InProcessBroker, callgrind  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kio.index import load_request_schema  # noqa: E402
from kio.serial import entity_writer  # noqa: E402

from broker.kafka.context import make, nested  # noqa: E402
from broker.kafka.server import KafkaRequestHandler  # noqa: E402
from broker.kafka.services import BrokerServices, ListenerConfig  # noqa: E402
from broker.kafka.spliced import SplicedResponse  # noqa: E402
from broker.replica.fetcher import ReplicaFetcher  # noqa: E402
from broker.replica.requests import TxnMarker  # noqa: E402
from quorum.metadata.image import MetadataImage  # noqa: E402
from quorum.wire.transport import RequestPeer  # noqa: E402

TOPIC_ID = uuid.UUID(int=7)
PRODUCE = 0  # api key


class LeaderServices:
    """What broker 1's listener needs of `BrokerServices` here: produce, fetch, markers."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.manager = broker.manager
        self.node_id = 1

    def image(self) -> MetadataImage:
        return self.manager.image()

    async def produce(self, params: Any) -> Any:
        return await self.manager.produce(params)

    async def fetch(self, params: Any) -> Any:
        return await self.manager.fetch(params)

    async def write_txn_markers(self, markers: Any, timeout_ms: int) -> Any:
        return await self.manager.write_txn_markers(markers, timeout_ms)

    def partition_view(self, topic: str, partition: int) -> None:
        return None


class Wire:
    """A fetcher's connection to broker 1: each frame through the listener, the answer as
    the bytes the follower would read (without the length prefix)."""

    def __init__(self, handler: KafkaRequestHandler) -> None:
        self.handler = handler

    async def send(self, frame: bytes, correlation_id: int, api_key: int, version: int) -> bytes:
        raw = await self.handler(frame[4:])
        assert raw is not None
        data = raw.to_bytes() if isinstance(raw, SplicedResponse) else bytes(raw)
        return data[4:]


def batch(records: int, value: bytes, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, pid >= 0, pid, epoch, seq, batch_size=1 << 22)
    for i in range(records):
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(b.build())


def produce_frame(correlation: int, partitions: int, data: list[bytes], transactional_id: str | None) -> bytes:
    """A Produce v9 request frame without its length prefix."""
    cls = load_request_schema(PRODUCE, 9)
    tcls, pcls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    body = make(cls, transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(
        make(tcls, name="t", partition_data=tuple(make(pcls, index=p, records=data[p]) for p in range(partitions))),
    ))  # fmt: skip
    header = cls.__header_schema__(request_api_key=PRODUCE, request_api_version=9, correlation_id=correlation,
                                   client_id="bench")  # fmt: skip
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


async def scenario(args: argparse.Namespace, root: Path) -> list[float]:
    leader = InProcessBroker(root / "broker-1", 1, args.partitions)
    followers = [InProcessBroker(root / f"broker-{b}", b, args.partitions) for b in (2, 3)]
    handler = KafkaRequestHandler(
        cast(BrokerServices, LeaderServices(leader)), ListenerConfig(listener_name="PLAINTEXT", num_partitions=1)
    )
    wire = cast(RequestPeer, Wire(handler))
    fetchers = []
    for f in followers:
        fetcher = ReplicaFetcher(f.manager, f.config, 1, lambda broker: None)
        for p in range(args.partitions):
            fetcher.add(f.manager.partitions[("t", p)])
        fetchers.append(fetcher)

    async def follow(fetcher: ReplicaFetcher) -> None:
        while True:
            await fetcher._fetch_round(wire)

    tasks = [asyncio.create_task(follow(f)) for f in fetchers]
    # One request frame for all: the listener copies the batches it appends (the client's cost is not measured).
    frame = produce_frame(1, args.partitions, [batch(args.records, b"v" * args.value_bytes)] * args.partitions, None)
    pid = 1000
    per_request: list[float] = []
    correlation = 0  # requests sent
    profile = cProfile.Profile() if args.profile else None
    try:
        for rnd in range(args.rounds + 1):  # round 0 warms up
            if profile is not None and rnd == args.rounds:
                profile.enable()
            if rnd:
                callgrind("on")
            t0 = time.process_time()
            for _ in range(args.requests):
                correlation += 1
                if args.markers:
                    # A transaction's end on this leader: one COMMIT marker per partition (no data).
                    results = await leader.manager.write_txn_markers(
                        [TxnMarker(pid, 0, True, 0, tuple(("t", p) for p in range(args.partitions)))], 30_000
                    )
                    assert all(e == 0 for r in results for e in r.errors), results
                    continue
                raw = await handler(frame)
                assert raw is not None, "no answer"
            took = time.process_time() - t0
            if rnd:
                callgrind("off")
            if profile is not None and rnd == args.rounds:
                profile.disable()
            if rnd:
                per_request.append(took / args.requests)
                print(f"round {rnd}: {took / args.requests * 1e6:7.1f} µs of CPU per produce request "
                      f"({args.partitions} partitions x {args.records} records of {args.value_bytes} B"
                      "" if not args.markers else " (--markers: COMMIT markers instead)", flush=True)  # fmt: skip
        ends = {b.config.node_id: [b.manager.partitions[("t", p)].log.log_end_offset for p in range(args.partitions)]
                for b in (leader, *followers)}  # fmt: skip
        print(f"log end offsets by broker: {ends}; follower fetches: {[f.requests_sent for f in fetchers]}")
        each = 1 if args.markers else args.records
        assert all(e == [correlation * each] * args.partitions for e in ends.values()), "not every request appended"
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for b in (leader, *followers):
            b.logs.close()
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(args.sort).print_stats(args.top)
        print(out.getvalue())
    return per_request


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markers", action="store_true", help="each request: COMMIT markers to every partition, no data")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sort", default="tottime", help="cProfile order (tottime, cumulative)")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pykraft-round-"))
    try:
        import uvloop

        per = uvloop.run(scenario(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"median {sorted(per)[len(per) // 2] * 1e6:.1f} µs of CPU per produce request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
