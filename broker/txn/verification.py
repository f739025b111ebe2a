"""KIP-890 part 1: a partition leader asks the transaction coordinator whether a transactional
batch's partitions are in its producer's transaction before appending it (Kafka's
AddPartitionsToTxnManager, `transaction.partition.verification.enable`).

`TxnVerifier.verify` sends AddPartitionsToTxn v4 with VerifyOnly to the coordinator of the
transactional id: the leader of its `__transaction_state` partition, found in this broker's
metadata image (the image is the cache of the coordinator's location; it moves when the
metadata says so), over one inter-broker connection per coordinator. When this broker is
the coordinator, the local `TxnRuntime` answers without a round trip.

Each partition's answer is the coordinator's: NONE when it is in the transaction,
TRANSACTION_ABORTABLE when not, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
CONCURRENT_TRANSACTIONS, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
COORDINATOR_NOT_AVAILABLE (also when the coordinator cannot be reached or has no leader).
How Produce answers each of these is the caller's rule.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable

from broker.replica.fetch_wire import FetchWireError
from broker.txn.messages import AddPartitionsRequest, TopicPartition
from broker.txn.peers import PeerPool
from broker.txn.txn_wire import (
    ADD_PARTITIONS_TO_TXN_API_KEY,
    VERIFY_VERSION,
    decode_verify_response,
    encode_verify_request,
)
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import PeerUnavailable

__all__ = ["LocalVerifier", "TxnVerifier"]

log = logging.getLogger(__name__)

LocalVerifier = Callable[[AddPartitionsRequest], dict[TopicPartition, ErrorCode]]


class TxnVerifier:
    def __init__(
        self,
        node_id: int,
        coordinator_of: Callable[[str], int | None],
        endpoint: Callable[[int], tuple[str, int] | None],
        local: LocalVerifier | None = None,
        *,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.node_id = node_id
        self.coordinator_of = coordinator_of  # the broker leading the id's __transaction_state partition
        self.local = local  # this broker's coordinator (`TxnRuntime.verify`)
        self._peers = PeerPool(endpoint, request_timeout_s=request_timeout_s)
        self._correlation = itertools.count(1)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        wanted = frozenset(partitions)
        coordinator = self.coordinator_of(transactional_id)
        if coordinator is None:
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if coordinator == self.node_id and self.local is not None:
            return self.local(AddPartitionsRequest(transactional_id, producer_id, producer_epoch, wanted))
        peer = self._peers.peer(coordinator)
        if peer is None:
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        correlation = next(self._correlation)
        frame = encode_verify_request(transactional_id, producer_id, producer_epoch, wanted, correlation,
                                      f"txn-verify-{self.node_id}")  # fmt: skip
        try:
            raw = await peer.send(frame, correlation, ADD_PARTITIONS_TO_TXN_API_KEY, VERIFY_VERSION)
            top, results = decode_verify_response(raw, transactional_id)
        except (PeerUnavailable, FetchWireError, TimeoutError, OSError) as exc:
            log.info("broker %d: verifying %r with broker %d failed: %s", self.node_id, transactional_id,
                     coordinator, exc)  # fmt: skip
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if top != ErrorCode.NONE:
            return dict.fromkeys(wanted, top)
        # A partition the answer leaves out was not verified: the caller must not append it.
        return {tp: results.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in wanted}

    async def close(self) -> None:
        await self._peers.close()
