"""The replica fetcher in a KIP-227 session against the broker's own Fetch listener
(`KafkaRequestHandler`, its session cache) in process: broker 1 follows 40 partitions from
leader 2, played by a toy leader behind the listener. An idle round names no partition and
gets none back, a partition with records is the only one in the answer and then the only
one in the next request, and a leader that lost the session gets a full fetch again."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from test_replica_manager import Run, World, _assigned, records

from broker.kafka.fetch_session import FetchSessionCache
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import BrokerServices, FetchParams, FetchPartitionResult, ListenerConfig
from broker.replica.fetch_wire import FETCH_API_KEY, FETCH_VERSION
from broker.replica.fetcher import ReplicaFetcher
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import RequestPeer

N = 40


class ToyLeader:
    """Broker 2's answers: every partition idle at HW 0, except those given records."""

    def __init__(self) -> None:
        self.records: dict[int, bytes] = {}
        self.read: list[FetchParams] = []

    def produce(self, partition: int, data: bytes) -> None:
        """New records: the follower's session watch learns it (as from a `FetchWatchers`)."""
        self.records[partition] = data
        session = self.read[-1].session if self.read else None
        if session is not None:
            session.wake(("t", partition))

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        self.read.append(params)
        out = []
        for p in params.partitions:
            data = self.records.get(p.partition, b"") if p.fetch_offset == 0 else b""
            out.append(FetchPartitionResult(ErrorCode.NONE, 0, 0, 0, data))
        return out


class Wire:
    """The fetcher's connection to broker 2: each frame goes through the listener."""

    def __init__(self, handler: KafkaRequestHandler) -> None:
        self.handler = handler
        self.frames: list[bytes] = []

    async def send(self, frame: bytes, correlation_id: int, api_key: int, version: int) -> bytes:
        assert (api_key, version) == (FETCH_API_KEY, FETCH_VERSION)
        self.frames.append(frame)
        raw = await self.handler(frame[4:])
        assert raw is not None
        return bytes(raw)[4:]


def test_a_replica_fetcher_round_trips_only_what_changed(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path, leader=2, partitions=N)
        leader = ToyLeader()
        handler = KafkaRequestHandler(
            cast(BrokerServices, leader), ListenerConfig(listener_name="PLAINTEXT", num_partitions=1)
        )
        wire = Wire(handler)
        fetcher = ReplicaFetcher(w.manager, w.config, 2, lambda broker: None)
        hosted = [w.manager.partitions[("t", p)] for p in range(N)]
        for h in hosted:
            fetcher.add(h)

        async def round_trip() -> tuple[int, int]:
            """(partitions the request named, partitions the leader read)."""
            sent = fetcher.partitions_sent
            await fetcher._fetch_round(cast(RequestPeer, wire))
            return fetcher.partitions_sent - sent, len(leader.read[-1].partitions)

        assert await round_trip() == (N, N)  # full: opens the session
        assert fetcher.session.session_id != 0 and fetcher.session.epoch == 1
        # Idle: an empty request; the leader reads its session once (to watch it), then nothing.
        assert await round_trip() == (0, N)
        assert await round_trip() == (0, 0)
        full, idle = len(wire.frames[0]), len(wire.frames[1])
        assert idle < 100 < full / 10, (full, idle)
        leader.produce(7, _assigned(records(5), 0))
        assert await round_trip() == (0, 1)  # the leader reads t-7 alone
        assert hosted[7].log.log_end_offset == 5  # appended what the answer carried
        assert all(h.log.log_end_offset == 0 for h in hosted if h.partition != 7)
        assert await round_trip() == (1, 1)  # names t-7 at its new offset only
        params = leader.read[-1]
        assert [p.fetch_offset for p in params.partitions if p.partition == 7] == [5]
        # The leader restarted (its sessions are gone): one refused fetch, then a full one.
        handler.sessions = FetchSessionCache()
        await check_refused(fetcher, wire, leader)
        assert await round_trip() == (N, N)
        assert await round_trip() == (0, N)
        assert await round_trip() == (0, 0)

    run(scenario())


async def check_refused(fetcher: ReplicaFetcher, wire: Wire, leader: ToyLeader) -> None:
    reads = len(leader.read)
    await fetcher._fetch_round(cast(RequestPeer, wire))
    assert len(leader.read) == reads  # FETCH_SESSION_ID_NOT_FOUND: nothing read
    assert (fetcher.session.session_id, fetcher.session.epoch) == (0, 0)
