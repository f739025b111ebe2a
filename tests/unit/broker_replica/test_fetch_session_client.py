"""The follower's side of KIP-227 fetch sessions (`FetchSessionHandler`, as Kafka's
FetchSessionHandler): what each request carries and how answers move the session on, alone
and against the broker's own session cache (`broker.kafka.fetch_session`)."""

from __future__ import annotations

from dataclasses import fields, replace

from broker.kafka.fetch_session import FetchContext, FetchSessionCache
from broker.kafka.services import FetchPartition, FetchPartitionResult
from broker.replica.fetch_session_client import FetchSessionHandler, SessionRequest, same_request
from broker.replica.fetch_wire import FetchPartitionRequest
from quorum.kafka_errors import ErrorCode


def part(p: int, offset: int = 0, *, topic: str = "t", epoch: int = 0) -> FetchPartitionRequest:
    return FetchPartitionRequest(topic, p, epoch, offset, epoch if offset else -1, 0, 1 << 20)


def keys(request: SessionRequest) -> list[tuple[str, int]]:
    return [(p.topic, p.partition) for p in request.to_send]


def opened(n: int = 3, session_id: int = 77) -> FetchSessionHandler:
    """A handler whose full fetch of t-0..n-1 opened session `session_id`."""
    h = FetchSessionHandler()
    first = h.build([part(p) for p in range(n)])
    assert h.handle_response(first, ErrorCode.NONE, session_id, keys(first))
    return h


def test_the_first_fetch_is_full_and_asks_for_a_session() -> None:
    h = FetchSessionHandler()
    r = h.build([part(0), part(1), part(2)])
    assert (r.session_id, r.session_epoch, r.full) == (0, 0, True)
    assert keys(r) == [("t", 0), ("t", 1), ("t", 2)] and r.forgotten == ()
    assert h.handle_response(r, ErrorCode.NONE, 77, keys(r))
    assert (h.session_id, h.epoch) == (77, 1)


def test_an_incremental_fetch_names_only_what_changed_and_forgets_what_left() -> None:
    h = opened(4)
    r = h.build([part(0), part(1, 5), part(2), part(3)])  # t-1 appended 5 records
    assert (r.session_id, r.session_epoch, r.full) == (77, 1, False)
    assert keys(r) == [("t", 1)] and r.forgotten == ()
    assert set(r.session) == {("t", 0), ("t", 1), ("t", 2), ("t", 3)} and r.session[("t", 1)].fetch_offset == 5
    assert h.handle_response(r, ErrorCode.NONE, 77, [("t", 1)])
    # Nothing changed: an empty request; its answer may list any session partition.
    r = h.build([part(0), part(1, 5), part(2), part(3)])
    assert (r.session_epoch, keys(r), r.forgotten) == (2, [], ())
    assert h.handle_response(r, ErrorCode.NONE, 77, [("t", 3)])
    # t-2 leaves (backing off), t-9 joins, t-0 has a new leader epoch, t-3 a new log start.
    r = h.build([part(0, epoch=1), part(1, 5), replace(part(3), log_start_offset=2), part(9)])
    assert r.session_epoch == 3
    assert keys(r) == [("t", 0), ("t", 3), ("t", 9)] and r.forgotten == (("t", 2),)
    assert set(r.session) == {("t", 0), ("t", 1), ("t", 3), ("t", 9)}
    assert h.handle_response(r, ErrorCode.NONE, 77, [])
    assert h.epoch == 4


def test_fetch_session_id_not_found_starts_over_with_a_new_session() -> None:
    h = opened()
    r = h.build([part(0, 1), part(1), part(2)])
    assert not h.handle_response(r, ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    r = h.build([part(0, 1), part(1), part(2)])
    assert (r.session_id, r.session_epoch, r.full) == (0, 0, True)
    assert keys(r) == [("t", 0), ("t", 1), ("t", 2)] and r.session[("t", 0)].fetch_offset == 1


def test_invalid_fetch_session_epoch_closes_the_session_in_a_full_fetch() -> None:
    h = opened()
    r = h.build([part(0), part(1), part(2)])
    assert not h.handle_response(r, ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    r = h.build([part(1), part(2)])
    assert (r.session_id, r.session_epoch, r.full) == (77, 0, True)  # closes 77, asks for a new one
    assert keys(r) == [("t", 1), ("t", 2)] and r.forgotten == ()


def test_a_request_without_an_answer_makes_the_next_fetch_full() -> None:
    h = opened()
    h.build([part(0, 3), part(1), part(2)])
    h.handle_error()  # timeout, broken connection, undecodable answer
    r = h.build([part(0, 3), part(1), part(2)])
    assert (r.session_id, r.session_epoch) == (77, 0) and len(r.to_send) == 3


def test_a_leader_without_room_keeps_the_fetcher_sessionless() -> None:
    h = FetchSessionHandler()
    for _ in range(3):
        r = h.build([part(0), part(1)])
        assert (r.session_id, r.session_epoch, len(r.to_send)) == (0, 0, 2)
        assert h.handle_response(r, ErrorCode.NONE, 0, keys(r))


def test_answers_that_do_not_match_the_session_are_not_used() -> None:
    h = FetchSessionHandler()
    r = h.build([part(0), part(1)])
    assert not h.handle_response(r, ErrorCode.NONE, 77, [("t", 0)])  # a full answer omits t-1
    assert (h.session_id, h.epoch) == (0, 0)
    h = opened()
    r = h.build([part(0), part(1), part(2)])
    assert not h.handle_response(r, ErrorCode.NONE, 77, [("t", 5)])  # outside the session
    assert (h.session_id, h.epoch) == (77, 0)
    h = opened()
    r = h.build([part(0), part(1), part(2)])
    assert h.handle_response(r, ErrorCode.NONE, 0, [])  # the leader closed the session
    assert (h.session_id, h.epoch) == (0, 0)


def test_the_epoch_wraps_to_one() -> None:
    h = opened()
    h.epoch = 2**31 - 1
    r = h.build([part(0), part(1), part(2)])
    assert r.session_epoch == 2**31 - 1
    assert h.handle_response(r, ErrorCode.NONE, 77, [])
    assert h.epoch == 1


# ------------------------------------------------------------ against the broker's session cache


def _as_server(p: FetchPartitionRequest) -> FetchPartition:
    return FetchPartition(p.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                          p.last_fetched_epoch, p.log_start_offset)  # fmt: skip


class Leader:
    """The broker's session cache with a toy log per partition: `ends[p]` is its log end, the
    HW is the smallest fetch offset the follower sent (one follower, so its position). A
    produce wakes the sessions' watches, as the replica manager's partitions do."""

    def __init__(self, n: int) -> None:
        self.cache = FetchSessionCache(seed=5)
        self.ends = dict.fromkeys(range(n), 0)
        self.hw = dict.fromkeys(range(n), 0)
        self.read: list[int] = []  # partitions read by the last fetch

    def produce(self, p: int, end: int) -> None:
        self.ends[p] = end
        for session in self.cache._sessions.values():
            if session.watch is not None:
                session.watch.wake(("t", p))

    def serve(self, r: SessionRequest) -> tuple[ErrorCode, int, list[tuple[str, int]]]:
        ctx = self.cache.new_context(
            r.session_id, r.session_epoch, [_as_server(p) for p in r.to_send], r.forgotten, privileged=True, now_ms=0
        )
        if not isinstance(ctx, FetchContext):
            return ctx.error, 0, []
        self.read = [p.partition for p in ctx.partitions]
        results = []
        for p in ctx.partitions:
            self.hw[p.partition] = max(self.hw[p.partition], p.fetch_offset)
            records = b"r" * (self.ends[p.partition] - p.fetch_offset)
            results.append(FetchPartitionResult(ErrorCode.NONE, self.hw[p.partition], self.hw[p.partition], 0, records))
        session_id, pairs = ctx.respond(results)
        return ErrorCode.NONE, session_id, [(q.topic, q.partition) for q, _ in pairs]


def test_a_follower_round_trip_sends_and_receives_only_what_changed() -> None:
    n = 1000
    leader = Leader(n)
    h = FetchSessionHandler()
    offsets = dict.fromkeys(range(n), 0)

    def round_trip() -> tuple[SessionRequest, list[tuple[str, int]]]:
        r = h.build([part(p, o) for p, o in offsets.items()])
        error, session_id, listed = leader.serve(r)
        assert h.handle_response(r, error, session_id, listed)
        for _, p in listed:  # the follower appends what it got
            offsets[p] = leader.ends[p]
        return r, listed

    r, listed = round_trip()
    assert r.full and len(r.to_send) == n and len(listed) == n
    r, listed = round_trip()  # nothing new anywhere
    assert not r.full and r.to_send == () and listed == []
    assert len(leader.read) == n  # the first incremental fetch reads (and watches) the whole session
    r, listed = round_trip()
    assert not r.full and r.to_send == () and listed == [] and leader.read == []  # then only what changed
    leader.produce(7, 3)
    leader.produce(500, 3)
    r, listed = round_trip()
    assert r.to_send == () and listed == [("t", 7), ("t", 500)] and leader.read == [7, 500]
    r, listed = round_trip()  # the follower's new positions move the HW: listed again
    assert keys(r) == [("t", 7), ("t", 500)] and listed == [("t", 7), ("t", 500)]
    assert leader.hw[7] == 3 and leader.read == [7, 500]
    r, listed = round_trip()
    assert r.to_send == () and listed == [] and leader.read == []
    # The leader restarted: its cache is empty; the follower starts over with a full fetch.
    leader.cache = FetchSessionCache(seed=6)
    r = h.build([part(p, o) for p, o in offsets.items()])
    error, session_id, listed = leader.serve(r)
    assert error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and not h.handle_response(r, error, session_id, listed)
    r, listed = round_trip()
    assert r.full and len(r.to_send) == n and len(listed) == n


def test_the_leader_lists_a_partition_again_when_its_error_is_gone() -> None:
    """Kafka's rule: an error sets the cached HW to -1, so the partition is listed once the
    error is gone even when its HW is the same as before the error."""
    cache = FetchSessionCache(seed=7)
    req = [_as_server(part(0)), _as_server(part(1))]
    ctx = cache.new_context(0, 0, req, (), privileged=True, now_ms=0)
    assert isinstance(ctx, FetchContext)
    ok = FetchPartitionResult(ErrorCode.NONE, 5, 5, 0)
    session_id, _ = ctx.respond([ok, ok])

    def incremental(epoch: int, results: dict[int, FetchPartitionResult]) -> tuple[list[int], list[int]]:
        """(partitions read, partitions listed)."""
        ctx = cache.new_context(session_id, epoch, [], (), privileged=True, now_ms=0)
        assert isinstance(ctx, FetchContext)
        read = [q.partition for q in ctx.partitions]
        return read, [q.partition for q, _ in ctx.respond([results[p] for p in read])[1]]

    failed = FetchPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, 5, 5, 0)
    assert incremental(1, {0: failed, 1: ok}) == ([0, 1], [0])  # the first reads the whole session
    assert incremental(2, {0: ok, 1: ok}) == ([0], [0])  # the error is read again; same HW: listed again
    assert incremental(3, {0: ok, 1: ok}) == ([], [])


def test_the_leader_lists_a_partition_once_when_its_leader_epoch_changes() -> None:
    cache = FetchSessionCache(seed=8)
    ctx = cache.new_context(0, 0, [_as_server(part(0)), _as_server(part(1))], (), privileged=True, now_ms=0)
    assert isinstance(ctx, FetchContext)
    ok = FetchPartitionResult(ErrorCode.NONE, 5, 5, 0)
    session_id, _ = ctx.respond([ok, ok])
    ctx = cache.new_context(session_id, 1, [_as_server(part(1, epoch=1))], (), privileged=True, now_ms=0)
    assert isinstance(ctx, FetchContext)
    assert [q.partition for q, _ in ctx.respond([ok, ok])[1]] == [1]
    ctx = cache.new_context(session_id, 2, [], (), privileged=True, now_ms=0)
    assert isinstance(ctx, FetchContext)
    assert ctx.partitions == () and ctx.respond([])[1] == []  # nothing changed: nothing read


def test_same_request_is_equality_field_by_field() -> None:
    """`same_request` (the compiled comparison build/build_changes use) agrees with the
    dataclass's `==` when any one field differs, so a field added later must be compared too."""
    base = FetchPartitionRequest("t", 1, 5, 100, 4, 0, 1 << 20)
    assert same_request(base, base)
    assert same_request(base, replace(base))
    assert not same_request(None, base)
    for f in fields(FetchPartitionRequest):
        value = getattr(base, f.name)
        other = replace(base, **{f.name: value + "x" if isinstance(value, str) else value + 1})
        assert (base == other) is same_request(base, other) is False, f.name
