"""The transaction apis: FindCoordinator key type 1 (TRANSACTION), InitProducerId with a
transactional id (22), AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
DescribeTransactions (65), ListTransactions (66).

These only translate between the wire (kio's schemas) and the transaction coordinator
(`broker.txn.runtime.TxnRuntime`); the rules are the coordinator's. The coordinator of a
transactional id is the leader of its `__transaction_state` partition; the first
FindCoordinator for a transactional id creates that topic (`transaction.state.log.*`) and is
answered COORDINATOR_NOT_AVAILABLE meanwhile, as Kafka does. Kafka's version rules for the
answers: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for the versions before KIP-588
(InitProducerId < 4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn < 2).

AddPartitionsToTxn v4+ is the inter-broker form (KIP-890 part 1: batched, `verify_only`).
Kafka lets only a principal with CLUSTER_ACTION send it; with no authorizer (as here and in a
Kafka cluster without one) every principal has it, so it is served for anyone; the Java
client and librdkafka send v3 at most.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from broker.coordinator.internal_topic import (
    COORDINATOR_NOT_AVAILABLE,
    CoordinatorAddress,
    compacted_topic_creator,
)
from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.init_producer_id import handle_init_producer_id
from broker.kafka.services import BrokerServices, ListenerConfig
from broker.txn.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
    TxnResult,
)
from broker.txn.records import transaction_partition
from broker.txn.runtime import TRANSACTION_STATE_TOPIC, TxnRuntime
from broker.txn.txn_wire import by_topic
from quorum.kafka_errors import ErrorCode

__all__ = ["TxnApis"]

_NO_THROTTLE: Final = timedelta(0)


def _ms(value: Any) -> int:
    return int(value // timedelta(milliseconds=1)) if isinstance(value, timedelta) else int(value)


def _fenced(code: ErrorCode, version: int, first_version: int) -> ErrorCode:
    """PRODUCER_FENCED as versions before `first_version` know it (KIP-588)."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


class TxnApis:
    """The transaction apis of one listener, over the broker's transaction coordinator (None:
    every transactional request is answered COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, services: BrokerServices, config: ListenerConfig, txns: TxnRuntime | None) -> None:
        self.services = services
        self.config = config
        self.txns = txns
        self._state_topic = compacted_topic_creator(
            services, config, TRANSACTION_STATE_TOPIC, config.transaction_state_log_num_partitions,
            (config.transaction_state_log_replication_factor, "transaction.state.log.replication.factor"),
            config.transaction_state_log_segment_bytes,
            {"compression.type": "uncompressed", "unclean.leader.election.enable": "false"},
            client_id="transaction-coordinator", min_insync_replicas=config.transaction_state_log_min_isr,
        )  # fmt: skip

    # ------------------------------------------------------------------ FindCoordinator

    def coordinator(self, transactional_id: str) -> CoordinatorAddress:
        """FindCoordinator key type 1 for one transactional id."""
        if self.txns is None:
            return COORDINATOR_NOT_AVAILABLE
        if not transactional_id:
            return (ErrorCode.INVALID_REQUEST, -1, "", -1)
        return self._state_topic.coordinator(transactional_id, transaction_partition, self.config.listener_name)

    # ------------------------------------------------------------------ InitProducerId

    async def init_producer_id(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        if not body.transactional_id:  # none: an idempotent producer; empty: INVALID_REQUEST
            return await handle_init_producer_id(ctx, self.services)
        if self.txns is None:
            error, producer_id, epoch = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        else:
            req = InitProducerIdRequest(
                body.transactional_id,
                _ms(body.transaction_timeout),
                int(getattr(body, "producer_id", -1)),
                int(getattr(body, "producer_epoch", -1)),
            )
            result = await self.txns.init_producer_id(req)
            error, producer_id, epoch = _fenced(result.error, ctx.version, 4), result.producer_id, result.producer_epoch
        cls = response_type(ctx.api_key, ctx.version)
        response = make(
            cls, throttle_time=_NO_THROTTLE, error_code=kio_error(error), producer_id=producer_id, producer_epoch=epoch
        )
        return encode_body(ctx, response)

    # ------------------------------------------------------------------ AddPartitionsToTxn

    def _unknown_partitions(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        image = self.services.image()
        unknown: set[TopicPartition] = set()
        for topic, p in partitions:
            t = image.topics.by_name.get(topic)
            if t is None or p not in t.partitions:
                unknown.add((topic, p))
        return unknown

    async def _add(
        self, tid: str, pid: int, epoch: int, partitions: frozenset[TopicPartition], verify_only: bool, version: int
    ) -> dict[TopicPartition, ErrorCode]:
        if self.txns is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        req = AddPartitionsRequest(tid, pid, epoch, partitions)
        if verify_only:
            return self.txns.verify(req)
        unknown = self._unknown_partitions(partitions)
        if unknown:  # Kafka's rule: nothing is added, the others are not attempted
            return {
                tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions
            }
        code = _fenced(await self.txns.add_partitions(req), version, 2)
        return dict.fromkeys(partitions, code)

    async def add_partitions_to_txn(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        cls = response_type(ctx.api_key, ctx.version)
        pcls = nested(cls, "AddPartitionsToTxnPartitionResult")
        tcls = nested(cls, "AddPartitionsToTxnTopicResult")

        def topic_results(results: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
            return tuple(
                tcls(name=topic, results_by_partition=tuple(
                    pcls(partition_index=p, partition_error_code=kio_error(results[(topic, p)])) for p in ps))
                for topic, ps in by_topic(results).items()
            )  # fmt: skip

        if ctx.version < 4:
            partitions = frozenset((t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions)
            results = await self._add(
                body.v3_and_below_transactional_id,
                int(body.v3_and_below_producer_id),
                int(body.v3_and_below_producer_epoch),
                partitions,
                False,
                ctx.version,
            )
            return encode_body(
                ctx, make(cls, throttle_time=_NO_THROTTLE, results_by_topic_v3_and_below=topic_results(results))
            )
        rcls = nested(cls, "AddPartitionsToTxnResult")
        answers = []
        for txn in body.transactions:
            partitions = frozenset((t.name, int(p)) for t in txn.topics for p in t.partitions)
            results = await self._add(txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), partitions,
                                      bool(txn.verify_only), ctx.version)  # fmt: skip
            answers.append(rcls(transactional_id=txn.transactional_id, topic_results=topic_results(results)))
        return encode_body(
            ctx,
            make(
                cls,
                throttle_time=_NO_THROTTLE,
                error_code=kio_error(ErrorCode.NONE),
                results_by_transaction=tuple(answers),
            ),  # fmt: skip
        )

    # ------------------------------------------------------------------ AddOffsetsToTxn, EndTxn

    async def _single(self, ctx: RequestContext, call: Callable[[Any], Any], first_fenced_version: int) -> bytes:
        body = decode_body(ctx)
        if self.txns is None:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            code = _fenced(await call(body), ctx.version, first_fenced_version)
        cls = response_type(ctx.api_key, ctx.version)
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, error_code=kio_error(code)))

    async def add_offsets_to_txn(self, ctx: RequestContext) -> bytes:
        async def call(body: Any) -> ErrorCode:
            assert self.txns is not None
            return await self.txns.add_offsets(
                AddOffsetsRequest(
                    body.transactional_id, int(body.producer_id), int(body.producer_epoch), body.group_id
                )  # fmt: skip
            )

        return await self._single(ctx, call, 2)

    async def end_txn(self, ctx: RequestContext) -> bytes:
        async def call(body: Any) -> ErrorCode:
            assert self.txns is not None
            result = TxnResult.COMMIT if body.committed else TxnResult.ABORT
            return await self.txns.end_txn(
                EndTxnRequest(body.transactional_id, int(body.producer_id), int(body.producer_epoch), result)
            )

        return await self._single(ctx, call, 2)

    # ------------------------------------------------------------------ DescribeTransactions, ListTransactions

    async def describe_transactions(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        cls = response_type(ctx.api_key, ctx.version)
        scls = nested(cls, "TransactionState")
        tcls = nested(cls, "TopicData")
        states = []
        for tid in body.transactional_ids:
            if self.txns is None:
                d = TransactionDescription(ErrorCode.COORDINATOR_NOT_AVAILABLE, tid)
            else:
                d = self.txns.describe(tid)
            # An error entry carries Kafka's field defaults (start time 0); an Empty
            # transaction's start time is -1, as Kafka answers it.
            start = d.transaction_start_time_ms if d.error == ErrorCode.NONE else 0
            states.append(
                make(
                    scls,
                    error_code=kio_error(d.error),
                    transactional_id=tid,
                    transaction_state=d.state,
                    transaction_timeout=timedelta(milliseconds=d.transaction_timeout_ms),
                    transaction_start_time=_datetime(start),
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    topics=tuple(tcls(topic=t, partitions=ps) for t, ps in d.topics),
                )  # fmt: skip
            )
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, transaction_states=tuple(states)))

    async def list_transactions(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        cls = response_type(ctx.api_key, ctx.version)
        scls = nested(cls, "TransactionState")
        listings: list[TransactionListing] = []
        unknown: list[str] = []
        if self.txns is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error, listings, unknown = self.txns.list_transactions(
                frozenset(int(p) for p in body.producer_id_filters),
                frozenset(body.state_filters),
                int(getattr(body, "duration_filter", -1)),
            )
        return encode_body(
            ctx,
            make(
                cls,
                throttle_time=_NO_THROTTLE,
                error_code=kio_error(error),
                unknown_state_filters=tuple(unknown),
                transaction_states=tuple(
                    make(
                        scls, transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state
                    )
                    for t in listings
                ),
            ),  # fmt: skip
        )


def _datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
