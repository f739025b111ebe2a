"""Fetch answers whose records are segment file ranges (`SplicedResponse`): the frame is
byte for byte the one the former path encoded from whole batches read into memory,
clients decode a range that ends inside a batch as they decode Kafka's; over real
loopback sockets (asyncio's loop and uvloop) the bytes arrive whole through a socket that
fills up, also when the segment is deleted while the answer is being sent, and a
segment truncated meanwhile closes the connection instead of sending other bytes."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.kafka.apis import ApiKey, is_flexible
from broker.kafka.context import RequestContext
from broker.kafka.fetch import encode_fetch_response
from broker.kafka.services import FetchPartition, FetchPartitionResult
from broker.kafka.spliced import SplicedResponse
from broker.kafka.wire import parse_request_header
from broker.log import LogConfig, PartitionLog
from broker.log.file_range import FileRange
from quorum.kafka_errors import ErrorCode
from quorum.storage.record_batch import scan_frames
from quorum.wire.transport import close_server, serve

Run = Callable[[Coroutine[Any, Any, Any]], Any]
NOW = 1_700_000_000_000


def batch(n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=NOW + i, key=None, value=bytes([65 + i % 26]) * size, headers=[])
    return bytes(b.build())


def open_log(path: Path, **cfg: int) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), topic_id=uuid.uuid4())


def former_read(plog: PartitionLog, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
    """What the fetch path sent before file ranges (main at ee47978): whole batches from the
    one holding `offset`, below `max_offset`, within `max_bytes` (the first even above it
    when `min_one`), from one segment, read into memory."""
    if offset >= max_offset or offset == plog.log_end_offset:
        return b""
    for seg in plog.segments:
        data = os.pread(seg.fd, seg.size, 0)
        frames = [f for f in scan_frames(data).frames if f.last_offset >= offset]
        if not frames:
            continue
        start, take = frames[0].position, 0
        for f in frames:
            end = f.position + f.size - start
            if f.last_offset >= max_offset or (end > max_bytes and take):
                break
            take = end
        if take > max_bytes and not min_one:
            return b""
        return data[start : start + take]
    return b""


def context(version: int, parts: list[tuple[str, int, int]]) -> RequestContext:
    request = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, rack_id="",
        topics=[
            FetchRequest.FetchTopic(topic=t, partitions=[
                FetchRequest.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                                       last_fetched_epoch=-1, log_start_offset=-1,
                                                       partition_max_bytes=1 << 20)])
            for t, p, o in parts
        ],
        forgotten_topics_data=[],
    )  # fmt: skip
    request.with_header(correlation_id=11, client_id="spliced")
    frame = bytes(request.encode(version=version, header=True))
    flexible = is_flexible(ApiKey.FETCH, version)
    view = memoryview(frame)
    return RequestContext(parse_request_header(view, flexible), view, flexible)


def answer(version: int, plog: PartitionLog, offset: int, records: bytes | FileRange | None) -> bytes | SplicedResponse:
    ctx = context(version, [("t", 0, offset)])
    hw = plog.log_end_offset
    res = FetchPartitionResult(ErrorCode.NONE, hw, hw, plog.log_start_offset, records=records or b"")
    return encode_fetch_response(ctx, ErrorCode.NONE, 0, [(FetchPartition("t", 0, offset, 1 << 20), res)], 0)


def decoded_offsets(version: int, frame: bytes) -> list[int]:
    resp = FetchResponse.decode(io.BytesIO(frame[4:]), version=version, header=True)
    [topic] = resp.responses
    [part] = topic.partitions
    records = MemoryRecords(bytes(part.records or b""))
    out: list[int] = []
    while (b := records.next_batch()) is not None:
        out.extend(r.offset for r in b)
    return out


def test_the_spliced_frame_is_the_former_frame_and_clients_drop_a_partial_trailing_batch(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=20_000, index_interval_bytes=1000)
    for i in range(40):
        plog.append_as_leader(batch(1 + i % 5, 50 + 37 * i), 1, NOW)
    end = plog.log_end_offset
    compared = cut = 0
    for version in (4, 11, 12):
        for offset in range(0, end, 3):
            for max_bytes in (100, 2000, 7000, 1 << 20):
                for min_one in (True, False):
                    before = former_read(plog, offset, max_bytes, end, min_one)
                    r = plog.read_range(offset, max_bytes, max_offset=end, min_one_batch=min_one)
                    now = answer(version, plog, offset, r)
                    frame = now.to_bytes() if isinstance(now, SplicedResponse) else bytes(now)
                    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
                    assert isinstance(now, SplicedResponse) == (r is not None)
                    old_frame = bytes(answer(version, plog, offset, before))  # type: ignore[arg-type]
                    if r is None or r.length == len(before):
                        assert frame == old_frame, (version, offset, max_bytes, min_one)
                        compared += 1
                    else:
                        cut += 1  # the range ends inside a batch the former path left out
                    # kafka-python reads the same records from both (the partial batch dropped).
                    assert decoded_offsets(version, frame) == decoded_offsets(version, old_frame)
    assert compared > 400 and cut > 100


# ------------------------------------------------------------------ over real sockets


async def serve_one(
    response: Callable[[], SplicedResponse], *, while_sending: Callable[[], None] | None = None
) -> tuple[bytes, int]:
    """A listener answering one request with `response()`; a client whose small receive
    buffer fills at once reads nothing for a while (`while_sending` runs then), then reads
    the frame or until the connection ends. Returns (bytes read, the frame's announced size)."""

    async def handler(_frame: bytes) -> Any:
        return response()

    server = await serve("127.0.0.1", 0, handler)
    port = server.sockets[0].getsockname()[1]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"\0\0\0\x08" + b"\0" * 8)
    await writer.drain()
    await asyncio.sleep(0.3)  # the server's socket is full: its sender waits
    if while_sending is not None:
        while_sending()
    data = await asyncio.wait_for(_read_all(reader), 30)
    writer.close()
    await close_server(server)
    return data, int.from_bytes(data[:4], "big") + 4 if len(data) >= 4 else -1


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    """The response frame, or what came of it before the server closed the connection."""
    out = bytearray()
    while len(out) < 4 or len(out) < int.from_bytes(out[:4], "big") + 4:
        chunk = await reader.read(256 * 1024)
        if not chunk:
            break
        out += chunk
        await asyncio.sleep(0.001)  # a slow client: the server's socket fills up again
    return bytes(out)


def big_log(path: Path) -> PartitionLog:
    plog = open_log(path, segment_bytes=64 << 20)
    for _ in range(24):
        plog.append_as_leader(batch(64, 4000), 1, NOW)  # ~6 MB
    return plog


def spliced_over(plog: PartitionLog) -> SplicedResponse:
    r = plog.read_range(0, 64 << 20, max_offset=plog.log_end_offset, min_one_batch=True)
    now = answer(12, plog, 0, r)
    assert isinstance(now, SplicedResponse)
    return now


def test_a_spliced_answer_arrives_whole_through_a_full_socket(tmp_path: Path, run: Run) -> None:
    plog = big_log(tmp_path / "t-0")
    expected = spliced_over(plog).to_bytes()
    assert len(expected) > 5 << 20
    data, announced = run(serve_one(lambda: spliced_over(plog)))
    assert announced == len(expected) and data == expected
    assert decoded_offsets(12, data) == list(range(plog.log_end_offset))


def test_a_segment_deleted_under_an_answer_in_flight_does_not_change_its_bytes(tmp_path: Path, run: Run) -> None:
    plog = big_log(tmp_path / "t-0")
    expected = spliced_over(plog).to_bytes()
    seg = plog.segments[0]

    def delete() -> None:
        plog.append_as_leader(batch(1, 10), 1, NOW)
        plog.roll()
        plog.delete_records_before(plog.log_end_offset)  # the first segment closed, renamed, unlinked
        assert plog.segments[0] is not seg and not seg.path.exists()

    data, announced = run(serve_one(lambda: spliced_over(plog), while_sending=delete))
    assert announced == len(expected) and data == expected


def test_a_segment_truncated_under_an_answer_in_flight_closes_the_connection(tmp_path: Path, run: Run) -> None:
    plog = big_log(tmp_path / "t-0")
    expected = spliced_over(plog).to_bytes()

    def truncate_and_rewrite() -> None:
        plog.truncate_to(64)  # a follower cutting a diverged tail...
        for _ in range(23):
            plog.append_as_leader(batch(64, 4000), 2, NOW)  # ...and writing the leader's batches there

    data, announced = run(serve_one(lambda: spliced_over(plog), while_sending=truncate_and_rewrite))
    assert announced == len(expected)
    # Cut: the client sees a torn frame and drops it, never other bytes as a whole answer.
    # (Bytes already handed to the kernel may show the rewrite: sendfile's skbs hold the
    # page cache's pages, not copies.)
    assert len(data) < announced


# ------------------------------------------------------------------ small ranges


def small_ranges_answer(tmp_path: Path) -> tuple[SplicedResponse, list[PartitionLog]]:
    """An answer of three partitions of one small batch each (as a round of markers), the
    second of each log's two batches."""
    logs = [open_log(tmp_path / f"t-{p}") for p in range(3)]
    pairs = []
    for p, plog in enumerate(logs):
        plog.append_as_leader(batch(1, 60), 1, NOW)
        plog.append_as_leader(batch(1, 60), 1, NOW)
        r = plog.read_range(1, 1 << 20, max_offset=plog.log_end_offset, min_one_batch=True)
        assert r is not None and r.length < 200
        res = FetchPartitionResult(ErrorCode.NONE, 2, 2, 0, records=r)
        pairs.append((FetchPartition("t", p, 1, 1 << 20), res))
    ctx = context(12, [("t", p, 1) for p in range(3)])
    now = encode_fetch_response(ctx, ErrorCode.NONE, 0, pairs, 0)
    assert isinstance(now, SplicedResponse)
    return now, logs


async def send_counted(response: SplicedResponse, monkeypatch: Any) -> tuple[bytes, int, int]:
    """Send `response` over a socket pair: (bytes received, writes, sendfile calls)."""
    import broker.kafka.spliced as spliced

    sendfiles = [0]
    real_sendfile = os.sendfile

    def counting_sendfile(*args: Any) -> int:
        sendfiles[0] += 1
        return real_sendfile(*args)

    monkeypatch.setattr(spliced.os, "sendfile", counting_sendfile)
    a, b = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=a)
    writes = [0]
    write = writer.write

    def counting_write(data: Any) -> None:
        writes[0] += 1
        write(data)

    writer.write = counting_write  # type: ignore[method-assign]
    try:
        await response.send(writer)
        await writer.drain()
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        received = bytearray()
        while len(received) < len(response):
            received += await loop.sock_recv(b, 1 << 16)
    finally:
        writer.close()
        b.close()
    return bytes(received), writes[0], sendfiles[0]


def test_an_answer_of_small_ranges_is_one_write(tmp_path: Path, run: Run, monkeypatch: Any) -> None:
    response, _logs = small_ranges_answer(tmp_path)
    expected = response.to_bytes()
    received, writes, sendfiles = run(send_counted(response, monkeypatch))
    assert received == expected
    assert (writes, sendfiles) == (1, 0)


def test_a_small_range_truncated_before_it_is_sent_closes_the_connection(tmp_path: Path, run: Run,
                                                                         monkeypatch: Any) -> None:  # fmt: skip
    import pytest

    from broker.kafka.spliced import TruncatedRange

    response, logs = small_ranges_answer(tmp_path)
    logs[1].truncate_to(1)  # the file cut where the range starts...
    logs[1].append_as_leader(batch(1, 60), 2, NOW)  # ...and other bytes written there
    with pytest.raises(TruncatedRange):
        run(send_counted(response, monkeypatch))


def test_a_small_answer_of_small_ranges_is_read_whole_and_a_large_one_sends_itself(tmp_path: Path) -> None:
    import pytest

    from broker.kafka.spliced import TruncatedRange

    response, logs = small_ranges_answer(tmp_path)
    assert response.inlined() == response.to_bytes()
    assert spliced_over(big_log(tmp_path / "big-0")).inlined() is None
    logs[2].truncate_to(1)
    with pytest.raises(TruncatedRange):
        response.inlined()
