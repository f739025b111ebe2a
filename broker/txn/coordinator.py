"""The transaction coordinator of one `__transaction_state` partition: sans-IO and deterministic.

Kafka's transaction coordinator (TransactionCoordinator, TransactionStateManager,
TransactionMetadata and the marker channel, Kafka 3.9) keeps the state of every
transactional id whose `transaction_partition` it leads. This is ours for one partition.
Each operation takes a request, the runtime's token for it and the time, and returns an
`Outcome`: records to append (`Write`: one record of one transactional id each), answers
that may be sent now, and transaction markers to send (`MarkerRequest`).

How a change is made (Kafka's rule): an operation computes the transition (`Transit`), marks
the transactional id as having it pending, and hands out its record; the state changes only
when the runtime reports the record committed (`appended`, with acks=all), which also
releases the operation's answer. While a transition is pending every other operation on
that id is answered CONCURRENT_TRANSACTIONS (a retriable code), so no answer ever shows state
that a failover could lose, and at most one record of an id is in flight. A failed append
leaves the state as it was and answers the append's error as the coordinator maps it
(`broker.group.shard.append_error`: Kafka's transaction-log mapping, plus FENCED_LEADER_EPOCH
and INVALID_FETCH_SIZE, which the group runtime maps too). The runtime must report an append
as failed only when its record cannot commit any more: an append that timed out
(REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) may still commit, and the state would
then lag its log until the partition is loaded again (Kafka has the same gap).

Life of a transaction: InitProducerId (Empty, epoch bumped) -> AddPartitionsToTxn /
AddOffsetsToTxn (Ongoing) -> EndTxn (PrepareCommit or PrepareAbort committed, then answered)
-> markers to every partition (`MarkerRequest`; the runtime reports each partition's result
with `markers_written`) -> CompleteCommit / CompleteAbort written once every partition has
its marker. `tick` aborts transactions open longer than their `transaction.timeout.ms`
(checked every `transaction.abort.timed.out.transaction.cleanup.interval.ms`, with an epoch
bump that fences the producer) and expires transactional ids idle for
`transactional.id.expiration.ms` (Dead, then a tombstone). `replay` rebuilds the state
from the partition's records; `loaded` then resumes the markers of prepared transactions.

Where this differs from Kafka 3.9, on purpose: the epoch bump of a fence (an InitProducerId
that finds a transaction Ongoing, or a timeout) is held in memory only once its
PrepareAbort record is committed (Kafka bumps it in memory before writing and keeps it
after a failed write), so until then the old epoch is answered CONCURRENT_TRANSACTIONS,
not PRODUCER_FENCED, and a PRODUCER_FENCED answer is never taken back by a failover.
The partitions still waiting for markers are kept apart from the transaction's partitions
(Kafka removes them from the metadata), so the state always equals its last record.
An AddPartitionsToTxn / AddOffsetsToTxn that finds its transactional id's previous
transaction prepared (its markers or its completion record under way) is held, not answered
CONCURRENT_TRANSACTIONS at once: clients send it right after EndTxn returns, and would
otherwise back off (librdkafka and the Java client: 20 ms) while the markers take a few ms.
It is answered once the completion commits, as it would be answered then, or when the
completion gives up or `concurrent_transactions_hold_ms` passes, with the answer of that
moment (CONCURRENT_TRANSACTIONS while still prepared): never an answer Kafka could not give.
A request held when the last marker is written starts its transaction in the completion's
own append (its record right behind the completion's, committed together): the log is the
one writing them one after the other gives, one acks=all round trip sooner.

Units: times and durations in milliseconds; producer ids int64, epochs int16.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from broker.group.records import coordinator_partition
from broker.group.shard import append_error
from broker.txn.messages import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
    TxnResult,
)
from broker.txn.metadata import (
    COMPLETED,
    EPOCH_MAX,
    EXPIRABLE,
    PREPARED,
    Transit,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
    metadata_of,
    value_of,
)
from broker.txn.records import TransactionLogKey, TransactionLogValue
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

__all__ = ["OFFSETS_TOPIC", "Outcome", "ProducerIdSource", "TxnConfig", "TxnCoordinator", "Write", "appends_of"]

OFFSETS_TOPIC: Final = "__consumer_offsets"
Token = int  # the runtime's id of a request waiting for its answer
Reply = InitProducerIdResult | ErrorCode
# A producer id never handed out before: (NONE, id), or (an error such as
# COORDINATOR_LOAD_IN_PROGRESS, -1) when none is at hand (the broker's ProducerIdManager).
ProducerIdSource = Callable[[], tuple[ErrorCode, int]]

# Marker results (per partition) and what they mean (Kafka's
# TransactionMarkerRequestCompletionHandler): written, or the partition cannot take markers
# (the producer could not have written to it either): done with the partition.
_MARKER_DONE: Final = frozenset(
    {ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION}
)
# Worth sending again (to the partition's leader of the moment).
_MARKER_RETRY: Final = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
})  # fmt: skip
# Anything else (a newer producer epoch or coordinator epoch at the partition, or an error
# Kafka calls fatal) stops the markers of the transaction: it stays prepared until the
# partition is loaded again, as in Kafka.


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker settings the coordinator applies (Kafka's names and defaults)."""

    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms (7 days)
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    retry_backoff_ms: int = 100  # retry.backoff.ms: before a failed completion record is written again
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn's partition)
    # How long an AddPartitionsToTxn / AddOffsetsToTxn may wait for the previous transaction's
    # completion before it is answered CONCURRENT_TRANSACTIONS (ours; 0: at once, as Kafka).
    concurrent_transactions_hold_ms: int = 1_000


fast_frozen_init(TxnConfig)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class Write:
    """One record to append. The records of one `Outcome` go in its order; those of one
    transactional id (at most two: a completion and the next transaction's first record,
    see `TxnCoordinator.markers_written`) go in one append, all committed or none; report
    that append's result once per id with `TxnCoordinator.appended(key.transactional_id, ...)`."""

    key: TransactionLogKey
    value: TransactionLogValue | None  # None: a tombstone


fast_frozen_init(Write)  # not a decorator: mypyc makes a decorated class a Python class


def appends_of(writes: Iterable[Write]) -> list[list[Write]]:
    """`writes` (an `Outcome`'s) as the appends they need at least: the records of one
    transactional id together, in order (ids in the order of their first record)."""
    by_id: dict[str, list[Write]] = {}
    for w in writes:
        by_id.setdefault(w.key.transactional_id, []).append(w)
    return list(by_id.values())


@dataclass(slots=True, init=False)
class Outcome:
    writes: list[Write]
    replies: dict[Token, Reply]  # may be sent now
    markers: list[MarkerRequest]  # to send now

    # An explicit __init__ (init=False): mypyc compiles it, while the dataclass decorator's runs
    # as interpreted Python in a compiled module, slower there than uncompiled.
    def __init__(
        self,
        writes: list[Write] | None = None,  # None: a new empty list (so for the others)
        replies: dict[Token, Reply] | None = None,
        markers: list[MarkerRequest] | None = None,
    ) -> None:
        self.writes = [] if writes is None else writes
        self.replies = {} if replies is None else replies
        self.markers = [] if markers is None else markers

    def extend(self, other: Outcome) -> None:
        self.writes += other.writes
        self.replies.update(other.replies)
        self.markers += other.markers


@dataclass(slots=True)
class _Pending:
    """A transition computed and not yet committed."""

    target: Transit
    token: Token | None  # who waits for the answer (None: the coordinator's own transition)
    reply: Reply | None  # the answer once the record is committed
    written: bool  # its record is handed out (False while markers are outstanding or before a retry)
    retry_at_ms: int = -1  # a failed completion record: when to write it again
    # A held request whose transition rides in the same append as this completion (its
    # record right after the completion's): applied and answered when the append commits.
    then: _Chained | None = None


@dataclass(frozen=True, slots=True)
class _Chained:
    held: _Held  # back to the held requests if the append fails
    target: Transit


fast_frozen_init(_Chained)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class _Held:
    """An AddPartitionsToTxn waiting for its id's previous transaction to complete."""

    request: AddPartitionsRequest
    token: Token
    deadline_ms: int  # answered at the latest then


fast_frozen_init(_Held)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(slots=True)
class _Markers:
    """A prepared transaction's markers: which partitions still wait for theirs."""

    request: MarkerRequest
    remaining: set[TopicPartition]


class TxnCoordinator:
    def __init__(self, config: TxnConfig, coordinator_epoch: int, producer_ids: ProducerIdSource) -> None:
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        self.producer_ids = producer_ids
        self.txns: dict[str, TxnMetadata] = {}
        self._pending: dict[str, _Pending] = {}
        self._markers: dict[str, _Markers] = {}
        self._held: dict[str, list[_Held]] = {}  # by transactional id
        self._next_abort_check_ms = 0
        self._next_expiration_check_ms = 0

    # ================================================================== loading

    def replay(self, key: TransactionLogKey, value: TransactionLogValue | None) -> None:
        """Apply one record of the partition (in log order). Kafka never writes Dead or
        PrepareEpochFence values; one read anyway is taken as a tombstone (Dead) or as the
        Ongoing transaction it was fencing (PrepareEpochFence, aborted by its timeout)."""
        tid = key.transactional_id
        if value is None or value.transaction_status == TxnState.DEAD:
            self.txns.pop(tid, None)
            return
        m = metadata_of(tid, value)
        if m.state == TxnState.PREPARE_EPOCH_FENCE:
            m.state = TxnState.ONGOING
        self.txns[tid] = m

    def loaded(self, now_ms: int) -> Outcome:
        """Every record is replayed: start the timers and send the markers of every
        prepared transaction (Kafka's load completion)."""
        self._next_abort_check_ms = now_ms + self.config.abort_timed_out_transaction_cleanup_interval_ms
        self._next_expiration_check_ms = now_ms + self.config.remove_expired_transaction_cleanup_interval_ms
        out = Outcome()
        for m in self.txns.values():
            if m.state in PREPARED:
                out.extend(self._start_markers(m, now_ms))
        return out

    # ================================================================== InitProducerId

    def init_producer_id(self, req: InitProducerIdRequest, token: Token, now_ms: int) -> Outcome:
        out = Outcome()
        reply = self._init_producer_id(req, token, now_ms, out)
        if reply is not None:
            out.replies[token] = InitProducerIdResult(reply)
        return out

    def _init_producer_id(self, req: InitProducerIdRequest, token: Token, now: int, out: Outcome) -> ErrorCode | None:
        tid = req.transactional_id
        if not tid or (req.producer_id == NO_PRODUCER_ID) != (req.producer_epoch == NO_PRODUCER_EPOCH):
            return ErrorCode.INVALID_REQUEST
        if not 0 < req.transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT
        m = self.txns.get(tid)
        if m is None:
            code, pid = self.producer_ids()
            if code != ErrorCode.NONE:
                return code
            m = TxnMetadata(tid, pid, NO_PRODUCER_EPOCH, req.transaction_timeout_ms, TxnState.EMPTY, -1, now)
            self.txns[tid] = m
        expected = None if req.producer_id == NO_PRODUCER_ID else (req.producer_id, req.producer_epoch)
        if tid in self._pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None and not (
            m.producer_epoch == NO_PRODUCER_EPOCH  # just created: a producer recovering from UNKNOWN_PRODUCER_ID
            or expected[0] == m.producer_id
            or (expected[0] == m.last_producer_id and epoch_exhausted(expected[1]))  # a retry after a rotation
        ):
            return ErrorCode.PRODUCER_FENCED
        if m.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if m.state == TxnState.ONGOING:
            # Fence the producer and abort its transaction; the client is told to retry, and
            # its retry bumps the epoch once more (or rotates the id if that exhausts it).
            self._begin(m, self._fence(m, now), out, token, InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return None
        transit: Transit
        if epoch_exhausted(m.producer_epoch) and (expected is None or expected[1] == m.producer_epoch):
            code, pid = self.producer_ids()
            if code != ErrorCode.NONE:
                return code
            transit = m.transit(
                TxnState.EMPTY, now_ms=now, producer_id=pid, last_producer_id=m.producer_id, producer_epoch=0,
                last_producer_epoch=m.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                timeout_ms=req.transaction_timeout_ms, partitions=frozenset(), start_ms=-1,
            )  # fmt: skip
        else:
            epochs = self._bumped_epochs(m, None if expected is None else expected[1])
            if epochs is None:
                return ErrorCode.PRODUCER_FENCED
            transit = m.transit(
                TxnState.EMPTY, now_ms=now, last_producer_id=m.producer_id, producer_epoch=epochs[0],
                last_producer_epoch=epochs[1], timeout_ms=req.transaction_timeout_ms, partitions=frozenset(),
                start_ms=-1,
            )  # fmt: skip
        answer = InitProducerIdResult(ErrorCode.NONE, transit.producer_id, transit.producer_epoch)
        self._begin(m, transit, out, token, answer)
        return None

    @staticmethod
    def _bumped_epochs(m: TxnMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
        """(the new epoch, the last epoch) of an InitProducerId, None if the producer is
        fenced (Kafka's prepareIncrementProducerEpoch)."""
        if expected_epoch is None:
            bumped = (m.producer_epoch + 1, NO_PRODUCER_EPOCH)
        elif m.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == m.producer_epoch:
            bumped = (m.producer_epoch + 1, m.producer_epoch)  # continuing after an error
        elif expected_epoch == m.last_producer_epoch:
            return m.producer_epoch, m.last_producer_epoch  # a retry of a bump that succeeded
        else:
            return None
        # The current epoch is exhausted and the producer expects another one: it is a zombie
        # (Kafka fails here with an internal error).
        return None if epoch_exhausted(m.producer_epoch) else bumped

    # ================================================================== AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions(self, req: AddPartitionsRequest, token: Token, now_ms: int) -> Outcome:
        """AddPartitionsToTxn (v0-3, and v4+ without VerifyOnly): one error for all the
        partitions of the transaction."""
        out = Outcome()
        reply = self._add_partitions(req, token, now_ms, out)
        if reply is not None:
            out.replies[token] = reply
        return out

    def add_offsets(self, req: AddOffsetsRequest, token: Token, now_ms: int) -> Outcome:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction
        (TxnOffsetCommit then goes to that group's coordinator)."""
        partition = (OFFSETS_TOPIC, coordinator_partition(req.group_id, self.config.offsets_topic_num_partitions))
        return self.add_partitions(
            AddPartitionsRequest(req.transactional_id, req.producer_id, req.producer_epoch, frozenset({partition})),
            token,
            now_ms,
        )

    def _check_producer(self, tid: str, producer_id: int, producer_epoch: int) -> ErrorCode | TxnMetadata:
        if not tid:
            return ErrorCode.INVALID_REQUEST
        m = self.txns.get(tid)
        # An id whose first InitProducerId is not committed yet has no producer (Kafka would
        # fail with an internal error on a client that made up epoch -1).
        if m is None or m.producer_id != producer_id or m.producer_epoch == NO_PRODUCER_EPOCH:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if m.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return m

    def _add_partitions(self, req: AddPartitionsRequest, token: Token, now: int, out: Outcome, *,
                        hold: bool = True) -> ErrorCode | None:  # fmt: skip
        tid, partitions = req.transactional_id, req.partitions
        m = self._check_producer(tid, req.producer_id, req.producer_epoch)
        if isinstance(m, ErrorCode):
            return m
        if m.state in PREPARED and hold and self.config.concurrent_transactions_hold_ms > 0:
            deadline = now + self.config.concurrent_transactions_hold_ms
            self._held.setdefault(tid, []).append(_Held(req, token, deadline))
            return None  # answered by `_release`
        if tid in self._pending or m.state in PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        transit = self._ongoing(m, partitions, now)
        if transit is None:
            return ErrorCode.NONE  # already in the transaction: nothing to write
        self._begin(m, transit, out, token, ErrorCode.NONE)
        return None

    @staticmethod
    def _ongoing(m: TxnMetadata, partitions: frozenset[TopicPartition], now: int) -> Transit | None:
        """The transition of partitions joining `m`'s transaction (`m` neither prepared nor
        pending); None if they are in it already (nothing to write)."""
        if m.state == TxnState.ONGOING and partitions <= m.partitions:
            return None
        start = now if m.state in EXPIRABLE else m.start_ms  # a new transaction starts now
        return m.transit(TxnState.ONGOING, now_ms=now, partitions=frozenset(m.partitions | partitions), start_ms=start)

    def _release(self, tid: str, now: int, out: Outcome, *, expired_only: bool = False) -> None:
        """Answer the requests held on `tid` (only those past their deadline if
        `expired_only`) as they are answered now, without holding them again."""
        held = self._held.pop(tid, [])
        for h in held:
            if expired_only and h.deadline_ms > now:
                self._held.setdefault(tid, []).append(h)
                continue
            reply = self._add_partitions(h.request, h.token, now, out, hold=False)
            if reply is not None:
                out.replies[h.token] = reply

    def verify_partitions(self, req: AddPartitionsRequest) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ with VerifyOnly (KIP-890 part 1, from a partition leader
        before a transactional write): each partition NONE if it is in the transaction,
        else TRANSACTION_ABORTABLE. Reads only committed state; writes nothing."""
        m = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        if isinstance(m, ErrorCode):
            return dict.fromkeys(req.partitions, m)
        if m.state in PREPARED:
            return dict.fromkeys(req.partitions, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: ErrorCode.NONE if tp in m.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in req.partitions}

    # ================================================================== EndTxn

    def end_txn(self, req: EndTxnRequest, token: Token, now_ms: int) -> Outcome:
        """EndTxn: Ongoing -> PrepareCommit / PrepareAbort, answered once that is committed;
        the markers follow."""
        out = Outcome()
        m = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        if isinstance(m, ErrorCode):
            out.replies[token] = m
        elif req.transactional_id in self._pending:
            out.replies[token] = ErrorCode.CONCURRENT_TRANSACTIONS
        elif m.state == TxnState.ONGOING:
            prepared = TxnState.PREPARE_COMMIT if req.result == TxnResult.COMMIT else TxnState.PREPARE_ABORT
            self._begin(m, m.transit(prepared, now_ms=now_ms), out, token, ErrorCode.NONE)
        else:
            out.replies[token] = self._end_in_state(m.state, req.result)
        return out

    @staticmethod
    def _end_in_state(state: TxnState, result: TxnResult) -> ErrorCode:
        """The answer to an EndTxn that finds no open transaction: the same result again is
        NONE once complete (CONCURRENT_TRANSACTIONS while prepared), another INVALID_TXN_STATE."""
        commit = result == TxnResult.COMMIT
        if state in COMPLETED and commit == (state == TxnState.COMPLETE_COMMIT):
            return ErrorCode.NONE
        if state in PREPARED and commit == (state == TxnState.PREPARE_COMMIT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    def _fence(self, m: TxnMetadata, now: int) -> Transit:
        """Abort `m`'s Ongoing transaction with the epoch bumped (fencing its producer), as
        the coordinator's own EndTxn. At epoch 32767 (only a client that made up its epoch
        gets there; Kafka fails with an internal error) it aborts without a bump: the next
        InitProducerId rotates the producer id, which fences the old one."""
        epoch = min(m.producer_epoch + 1, EPOCH_MAX)
        return m.transit(
            TxnState.PREPARE_ABORT, now_ms=now, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH
        )

    # ================================================================== writes and their results

    def _begin(self, m: TxnMetadata, transit: Transit, out: Outcome, token: Token | None, reply: Reply | None) -> None:
        self._pending[m.transactional_id] = _Pending(transit, token, reply, written=True)
        out.writes.append(self._write(m, transit))

    @staticmethod
    def _write(m: TxnMetadata, transit: Transit) -> Write:
        key = TransactionLogKey(m.transactional_id)
        return Write(key, None if transit.state == TxnState.DEAD else value_of(m, transit))

    def appended(self, transactional_id: str, code: ErrorCode, now_ms: int) -> Outcome:
        """The append of `transactional_id`'s record finished with `code` (NONE: committed)."""
        out = Outcome()
        p = self._pending.get(transactional_id)
        m = self.txns.get(transactional_id)
        if p is None or not p.written or m is None:
            return out  # not ours (a stale report)
        p.written = False
        chained, p.then = p.then, None
        if code != ErrorCode.NONE:
            if chained is not None:  # held again, as it was before the append (its deadline kept)
                self._held.setdefault(transactional_id, []).insert(0, chained.held)
            mapped = append_error(code)
            if p.target.state in COMPLETED and mapped == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                p.retry_at_ms = now_ms + self.config.retry_backoff_ms  # Kafka retries the completion
                return out
            del self._pending[transactional_id]
            if p.token is not None:
                init = isinstance(p.reply, InitProducerIdResult)
                out.replies[p.token] = InitProducerIdResult(mapped) if init else mapped
            self._release(transactional_id, now_ms, out)  # the completion gave up: prepared until a reload
            return out
        del self._pending[transactional_id]
        if p.target.state == TxnState.DEAD:
            del self.txns[transactional_id]
            return out
        m.apply(p.target)
        if p.token is not None and p.reply is not None:
            out.replies[p.token] = p.reply
        if chained is not None:  # the next transaction's first record, committed with the completion
            m.apply(chained.target)
            out.replies[chained.held.token] = ErrorCode.NONE
        if m.state in PREPARED:
            out.extend(self._start_markers(m, now_ms))
        else:
            self._release(transactional_id, now_ms, out)
        return out

    # ================================================================== markers

    def _start_markers(self, m: TxnMetadata, now: int) -> Outcome:
        """`m` is prepared: its completion is pending (blocking other transitions) until every
        partition has its marker."""
        completed = TxnState.COMPLETE_COMMIT if m.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self._pending[m.transactional_id] = _Pending(
            m.transit(completed, now_ms=now, partitions=frozenset()), None, None, written=False
        )
        result = TxnResult.COMMIT if m.state == TxnState.PREPARE_COMMIT else TxnResult.ABORT
        request = MarkerRequest(m.transactional_id, m.producer_id, m.producer_epoch, self.coordinator_epoch, result,
                                frozenset(m.partitions))  # fmt: skip
        self._markers[m.transactional_id] = _Markers(request, set(m.partitions))
        out = Outcome()
        if m.partitions:
            out.markers.append(request)
        else:
            out.extend(self._maybe_complete(m.transactional_id, now))
        return out

    def markers_written(
        self, request: MarkerRequest, results: Mapping[TopicPartition, ErrorCode], now_ms: int | None = None
    ) -> Outcome:
        """The results of `request`'s markers, per partition: written (or not writable there),
        worth sending again (returned as a new request), or the end of this transaction's
        markers until the partition is loaded again. Once every partition has its marker the
        completion record is written, with (given `now_ms`) the first held request's
        transition right behind it in the same append (`_chain_held`)."""
        out = Outcome()
        markers = self._markers.get(request.transactional_id)
        if markers is None or not _same_markers(markers.request, request):
            return out  # stale: another transaction, or markers already cancelled
        retry: set[TopicPartition] = set()
        for tp, code in results.items():
            if tp not in markers.remaining:
                continue
            if code in _MARKER_DONE:
                markers.remaining.discard(tp)
            elif code in _MARKER_RETRY:
                retry.add(tp)
            else:
                del self._markers[request.transactional_id]
                return out  # requests held on it are answered at their deadline
        if retry:
            r = markers.request
            out.markers.append(MarkerRequest(r.transactional_id, r.producer_id, r.producer_epoch, r.coordinator_epoch,
                                             r.result, frozenset(retry)))  # fmt: skip
        out.extend(self._maybe_complete(request.transactional_id, now_ms))
        return out

    def partitions_deleted(
        self, request: MarkerRequest, partitions: Iterable[TopicPartition], now_ms: int | None = None
    ) -> Outcome:
        """Partitions of `request` that have no leader any more (their topic was deleted):
        no marker is needed there (Kafka skips them)."""
        markers = self._markers.get(request.transactional_id)
        if markers is None or not _same_markers(markers.request, request):
            return Outcome()
        markers.remaining.difference_update(partitions)
        return self._maybe_complete(request.transactional_id, now_ms)

    def _maybe_complete(self, tid: str, now: int | None) -> Outcome:
        out = Outcome()
        markers = self._markers.get(tid)
        if markers is None or markers.remaining:
            return out
        del self._markers[tid]
        self._write_completion(tid, now, out)
        return out

    def _write_completion(self, tid: str, now: int | None, out: Outcome) -> None:
        p = self._pending[tid]
        p.written = True
        m = self.txns[tid]
        out.writes.append(self._write(m, p.target))
        if now is not None:
            self._chain_held(m, p, now, out)

    def _chain_held(self, m: TxnMetadata, p: _Pending, now: int, out: Outcome) -> None:
        """The first request held on `m`'s id starts the next transaction in the completion's
        own append: its record right after the completion's, so both commit together (one
        acks=all round trip instead of two, one after the other). The log and every answer
        are what writing the two records one after the other gives: the request is
        answered once both are committed, as `_release` would answer it then; if the append
        fails it is held again. A request the completed state would not start a transition
        for (another producer or epoch; partitions already in) stays held (`_release`)."""
        held = self._held.get(m.transactional_id)
        if not held:
            return
        h = held[0]
        after = copy.copy(m)
        after.apply(p.target)
        req = h.request
        if (req.producer_id, req.producer_epoch) != (after.producer_id, after.producer_epoch):
            return
        transit = self._ongoing(after, req.partitions, now)
        if transit is None:
            return
        del held[0]
        if not held:
            del self._held[m.transactional_id]
        p.then = _Chained(h, transit)
        out.writes.append(self._write(after, transit))

    # ================================================================== timers

    def next_deadline_ms(self) -> int:
        """When `tick` next has something to do."""
        retries = [p.retry_at_ms for p in self._pending.values() if p.retry_at_ms >= 0]
        holds = [h.deadline_ms for held in self._held.values() for h in held]
        return min([self._next_abort_check_ms, self._next_expiration_check_ms, *retries, *holds])

    def tick(self, now_ms: int) -> Outcome:
        out = Outcome()
        for tid in [tid for tid, held in self._held.items() if any(h.deadline_ms <= now_ms for h in held)]:
            self._release(tid, now_ms, out, expired_only=True)
        for tid, p in self._pending.items():
            if 0 <= p.retry_at_ms <= now_ms:
                p.retry_at_ms = -1
                self._write_completion(tid, now_ms, out)
        if now_ms >= self._next_abort_check_ms:
            self._next_abort_check_ms = now_ms + self.config.abort_timed_out_transaction_cleanup_interval_ms
            for m in list(self.txns.values()):
                if (m.state == TxnState.ONGOING and m.transactional_id not in self._pending
                        and m.start_ms + m.timeout_ms < now_ms):  # fmt: skip
                    self._begin(m, self._fence(m, now_ms), out, None, None)
        if now_ms >= self._next_expiration_check_ms:
            self._next_expiration_check_ms = now_ms + self.config.remove_expired_transaction_cleanup_interval_ms
            horizon = now_ms - self.config.transactional_id_expiration_ms
            for m in list(self.txns.values()):
                if m.state in EXPIRABLE and m.transactional_id not in self._pending and m.last_update_ms <= horizon:
                    self._begin(m, m.transit(TxnState.DEAD, now_ms=m.last_update_ms, partitions=frozenset()), out,
                                None, None)  # fmt: skip
        return out

    # ================================================================== reads

    def describe(self, transactional_id: str) -> TransactionDescription:
        """DescribeTransactions for one id (Kafka's handleDescribeTransactions)."""
        if not transactional_id:
            return TransactionDescription(ErrorCode.INVALID_REQUEST, transactional_id)
        m = self.txns.get(transactional_id)
        if m is None:
            return TransactionDescription(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        by_topic: dict[str, list[int]] = {}
        for topic, p in m.partitions:
            by_topic.setdefault(topic, []).append(p)
        return TransactionDescription(
            ErrorCode.NONE, transactional_id, m.state.kafka_name, m.timeout_ms, m.start_ms, m.producer_id,
            m.producer_epoch, tuple((t, tuple(sorted(by_topic[t]))) for t in sorted(by_topic)),
        )  # fmt: skip

    def list_transactions(
        self, producer_ids: frozenset[int], states: frozenset[str], duration_ms: int, now_ms: int
    ) -> tuple[list[TransactionListing], list[str]]:
        """ListTransactions over this partition (Kafka's listTransactionStates): the ids whose
        producer id is in `producer_ids` and state name in `states` (empty: any), running for
        longer than `duration_ms` (-1: any); and the state names that are not states."""
        known = {s.kafka_name for s in TxnState}
        unknown = sorted(states - known)
        listed = [
            TransactionListing(tid, m.producer_id, m.state.kafka_name)
            for tid, m in sorted(self.txns.items())
            if (not producer_ids or m.producer_id in producer_ids)
            and (not states or m.state.kafka_name in states)
            and (duration_ms < 0 or now_ms - m.start_ms > duration_ms)
        ]
        return listed, unknown

    def pending_state(self, transactional_id: str) -> TxnState | None:
        """The state a pending transition of the id leads to (None: no transition pending)."""
        p = self._pending.get(transactional_id)
        return None if p is None else p.target.state

    def durable_state(self) -> dict[str, TransactionLogValue]:
        """Every transactional id as its last committed record says (ids whose first record is
        not committed yet are left out): what a reload of the partition rebuilds."""
        return {tid: value_of(m) for tid, m in self.txns.items() if m.producer_epoch != NO_PRODUCER_EPOCH}


def _same_markers(a: MarkerRequest, b: MarkerRequest) -> bool:
    return (a.producer_id, a.producer_epoch, a.result, a.coordinator_epoch) == (
        b.producer_id, b.producer_epoch, b.result, b.coordinator_epoch,
    )  # fmt: skip
