"""A hypothesis state machine drives a PartitionLog through appends (as leader and as
follower), truncations, rolls, clean and unclean reopenings, DeleteRecords and reads, and
compares it after every step with a plain in-memory model: offsets contiguous, the same
batches (bytes included) in the same order, the same log end and log start."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import uuid
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogConfig, LogError, PartitionLog
from quorum.kafka_errors import ErrorCode
from quorum.storage.record_batch import scan_frames
from tests.scale import examples

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200, segment_index_bytes=96)


def make_batch(n: int, size: int, seed: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + seed + i, key=None, value=bytes([seed % 251]) * size, headers=[])
    return bytes(b.build())


def patched(data: bytes, base: int, epoch: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(">q", out, 0, base)
    struct.pack_into(">i", out, 12, epoch)
    return bytes(out)


class PartitionLogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="plog-model-"))
        self.dir = self.root / "m-0"
        self.log = PartitionLog.open(self.dir, CONFIG, topic_id=uuid.uuid4())
        self.batches: list[tuple[int, int, bytes]] = []  # (base, last, bytes) as stored
        self.start = 0
        self.epoch = 0
        self.seed = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def end(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.start

    @rule(n=st.integers(1, 6), size=st.integers(1, 120), bump=st.booleans())
    def append_as_leader(self, n: int, size: int, bump: bool) -> None:
        if bump:
            self.epoch += 1
            self.log.assign_epoch_start_offset(self.epoch, self.log.log_end_offset)
        self.seed += 1
        data = make_batch(n, size, self.seed)
        info = self.log.append_as_leader(data, self.epoch, 0)
        assert info.first_offset == self.end and info.last_offset == self.end + n - 1
        self.batches.append((info.first_offset, info.last_offset, patched(data, info.first_offset, self.epoch)))

    @rule(n=st.integers(1, 6), count=st.integers(1, 3))
    def append_as_follower(self, n: int, count: int) -> None:
        chunk = b""
        base = self.end
        for _ in range(count):
            self.seed += 1
            data = patched(make_batch(n, 30, self.seed), base, self.epoch)
            chunk += data
            self.batches.append((base, base + n - 1, data))
            base += n
        self.log.append_as_follower(chunk)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(target)
        # Whole batches: one that holds an offset >= target goes, so the log may end below
        # target (at that batch's base); the log start never passes the end.
        removed = [b for b in self.batches if b[1] >= target]
        self.batches = [b for b in self.batches if b[1] < target]
        if removed:
            self.start = min(self.start, removed[0][0])

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        recovery_point = self.log.recovery_point
        if clean:
            self.log.flush()
        self.log.close()
        self.log = PartitionLog.open(
            self.dir, CONFIG, topic_id=None, recovery_point=recovery_point if clean else 0,
            log_start_offset=self.start, clean=clean,
        )  # fmt: skip
        assert self.log.recovery is not None and self.log.recovery.bytes_cut == 0

    @precondition(lambda self: len(self.batches) > 2)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.start, self.end))
        assert self.log.delete_records_before(target) == max(self.start, target)
        self.start = max(self.start, target)

    @rule(data=st.data(), max_bytes=st.integers(1, 3000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(max(self.start - 2, 0), self.end + 2))
        try:
            got = bytes(self.log.read(offset, max_bytes, max_offset=self.end, min_one_batch=True))
        except LogError as exc:
            assert exc.code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert offset < self.start or offset > self.end
            return
        assert self.start <= offset <= self.end
        frames = scan_frames(got).frames
        if offset == self.end:
            assert got == b""
            return
        first = next(i for i, b in enumerate(self.batches) if b[1] >= offset)
        assert frames, "a read below the end returns at least one batch"
        expected = self.batches[first : first + len(frames)]
        assert got == b"".join(b[2] for b in expected)
        assert len(got) <= max_bytes or len(frames) == 1

    @invariant()
    def agrees(self) -> None:
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start


TestPartitionLogModel = PartitionLogModel.TestCase
# The CI profile runs 60 histories of 40 steps; PLOG_MODEL_EXAMPLES=N runs more (500 pass).
TestPartitionLogModel.settings = settings(
    max_examples=examples(int(os.environ.get("PLOG_MODEL_EXAMPLES", "60"))), stateful_step_count=40, deadline=None
)
