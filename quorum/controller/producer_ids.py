"""Producer ids (KIP-730): the active controller hands them out in blocks.

A broker asks with AllocateProducerIds (api 67) and gets the next block of
`PRODUCER_ID_BLOCK_SIZE` ids, `[next, next + 1000)`; the controller records the new next id
in a ProducerIdsRecord (broker id, broker epoch, next producer id). The answer goes out only
once that record is committed, and every controller's image replays it, so a block is never
handed out twice, across controller failovers too: a new active controller starts from the
committed next id, and a block answered by the old one was committed first.

Kafka's rules (ProducerIdControlManager): the broker's epoch must be its registered one
(STALE_BROKER_EPOCH otherwise, an unregistered broker too); ids start at 0; a block whose end
would pass 2**63 - 1 is refused (UNKNOWN_SERVER_ERROR, "exhausted").
"""

from __future__ import annotations

from typing import Final

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from quorum.controller.result import ControllerResult
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ProducerIdsRecord

PRODUCER_ID_BLOCK_SIZE: Final = 1000
_LONG_MAX: Final = 2**63 - 1


def allocate_producer_ids(
    image: MetadataImage, request: AllocateProducerIdsRequest
) -> ControllerResult[AllocateProducerIdsResponse]:
    broker = image.cluster.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        return ControllerResult([], AllocateProducerIdsResponse(int(ErrorCode.STALE_BROKER_EPOCH)))
    first = max(image.next_producer_id, 0)
    if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
        return ControllerResult([], AllocateProducerIdsResponse(int(ErrorCode.UNKNOWN_SERVER_ERROR)))
    record = ProducerIdsRecord(request.broker_id, request.broker_epoch, first + PRODUCER_ID_BLOCK_SIZE)
    return ControllerResult([record], AllocateProducerIdsResponse(0, first, PRODUCER_ID_BLOCK_SIZE))
