"""InitProducerId (22, v0-5) for idempotent producers.

Without a transactional id (an idempotent producer, kafka-python's and the Java client's
default, librdkafka's `enable.idempotence=true`) the answer is a new producer id, never handed
out before in this cluster (`broker.producer_ids`), with epoch 0, as Kafka's transaction
coordinator answers it: a client that sends its current id and epoch (v3+, KIP-360, after
OUT_OF_ORDER_SEQUENCE_NUMBER or an expired producer) gets a fresh id too. While this broker
waits for a block of ids from the controller: COORDINATOR_LOAD_IN_PROGRESS (retriable).

An empty transactional id is INVALID_REQUEST (Kafka's coordinator rule). With a
transactional id: COORDINATOR_NOT_AVAILABLE. Transactions (issue 21, item 3) need a
transaction coordinator, which this broker does not run yet; Kafka answers so while its
coordinator is not available, and clients retry (FindCoordinator is not served either).
"""

from __future__ import annotations

from datetime import timedelta

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, response_type
from broker.kafka.services import BrokerServices
from quorum.kafka_errors import ErrorCode

__all__ = ["handle_init_producer_id"]


async def handle_init_producer_id(ctx: RequestContext, services: BrokerServices) -> bytes:
    body = decode_body(ctx)
    if body.transactional_id == "":
        error, producer_id, epoch = ErrorCode.INVALID_REQUEST, -1, -1
    elif body.transactional_id is not None:
        error, producer_id, epoch = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
    else:
        error, producer_id = await services.new_producer_id()
        epoch = 0 if error == ErrorCode.NONE else -1
    cls = response_type(ctx.api_key, ctx.version)
    response = make(
        cls, throttle_time=timedelta(0), error_code=kio_error(error), producer_id=producer_id, producer_epoch=epoch
    )
    return encode_body(ctx, response)
