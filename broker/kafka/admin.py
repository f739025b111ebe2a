"""The admin apis a client sends to any broker, forwarded to the active controller.

CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs and
ElectLeaders. The request is decoded here first with the controller's own codec
(`quorum.wire.admin_codec`), so a malformed one is answered (or its connection closed)
by this broker and never reaches the controller; a well-formed one is relayed as the raw
frame (`BrokerServices.forward_to_controller`) and the controller's answer returned as
it is. No controller answering within
`ListenerConfig.forward_timeout_ms` answers every item REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import logging

from broker.kafka.context import RequestContext
from broker.kafka.services import BrokerServices, ListenerConfig
from broker.kafka.wire import MalformedRequest
from quorum.kafka_errors import ErrorCode
from quorum.wire.admin_codec import (
    AdminRequestError,
    admin_error_response_for,
    decode_admin_request,
    encode_admin_error,
)
from quorum.wire.codec import WireError
from quorum.wire.transport import CloseConnection

__all__ = ["handle_forwarded"]

log = logging.getLogger(__name__)


async def handle_forwarded(ctx: RequestContext, services: BrokerServices, config: ListenerConfig) -> bytes:
    try:
        decoded = decode_admin_request(ctx.frame)
    except AdminRequestError as exc:
        answer = admin_error_response_for(exc)
        if answer is None:
            raise CloseConnection(str(exc)) from exc
        return answer
    except WireError as exc:
        raise MalformedRequest(f"admin api {ctx.api_key} v{ctx.version}: {exc.message}") from exc
    frame = len(ctx.frame).to_bytes(4, "big") + bytes(ctx.frame)
    try:
        body = await services.forward_to_controller(frame, ctx.api_key, ctx.version, config.forward_timeout_ms)
    except TimeoutError as exc:
        log.warning("admin api %d not forwarded: %s", ctx.api_key, exc)
        return encode_admin_error(decoded, int(ErrorCode.REQUEST_TIMED_OUT), "no active controller answered")
    return len(body).to_bytes(4, "big") + body
