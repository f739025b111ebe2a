"""AlterConfigs (33, v0-2): the legacy, whole-set config api, served as an
IncrementalAlterConfigs sent to the active controller.

AlterConfigs replaces a resource's dynamic configs by exactly the set given: every
config named is SET, every config currently set on the resource (in this broker's
metadata image) but not named is DELETEd. The controller only serves the incremental
api, so the broker translates. Like Kafka's, the replacement is not atomic with respect
to a concurrent change of the same resource (Kafka deprecated this api for that reason).
A null value or a resource type other than TOPIC (2) / BROKER (4) is answered
INVALID_REQUEST for that resource without asking the controller.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.services import BrokerServices, ListenerConfig
from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.kafka_errors import ErrorCode
from quorum.wire.admin_codec import decode_admin_response, encode_admin_request
from quorum.wire.codec import WireError

__all__ = ["handle_alter_configs"]

_TYPES = {int(t) for t in ConfigResourceType}


async def handle_alter_configs(ctx: RequestContext, services: BrokerServices, config: ListenerConfig) -> bytes:
    body = decode_body(ctx)
    image = services.image()
    answers: dict[tuple[int, str], tuple[int, str | None]] = {}
    resources: list[AlterConfigsResource] = []
    for r in body.resources:
        key = (int(r.resource_type), str(r.resource_name))
        if key[0] not in _TYPES:
            answers[key] = (ErrorCode.INVALID_REQUEST, f"unsupported resource type {key[0]}")
            continue
        if any(c.value is None for c in r.configs):
            answers[key] = (ErrorCode.INVALID_REQUEST, "null config values are not supported by AlterConfigs")
            continue
        named = {c.name for c in r.configs}
        ops = [AlterConfigOp(c.name, AlterConfigOpType.SET, c.value) for c in r.configs]
        ops += [AlterConfigOp(n, AlterConfigOpType.DELETE) for n in image.config(key) if n not in named]
        resources.append(AlterConfigsResource(ConfigResourceType(key[0]), key[1], tuple(ops)))
    if resources:
        request = IncrementalAlterConfigsRequest(tuple(resources), validate_only=bool(body.validate_only))
        frame, api_key, api_version = encode_admin_request(request, correlation_id=0, client_id=ctx.header.client_id)
        try:
            raw = await services.forward_to_controller(frame, api_key, api_version, config.forward_timeout_ms)
            reply = decode_admin_response(api_key, api_version, raw, request)
        except (TimeoutError, WireError) as exc:
            for res in resources:
                answers[(int(res.resource_type), res.resource_name)] = (ErrorCode.REQUEST_TIMED_OUT, str(exc))
        else:
            results = reply.resources if isinstance(reply, IncrementalAlterConfigsResponse) else ()
            for result in results:
                answers[(int(result.resource_type), result.resource_name)] = (result.error_code, result.message)
    cls = response_type(ctx.api_key, ctx.version)
    rcls = nested(cls, "AlterConfigsResourceResponse")
    out: list[Any] = []
    for r in body.resources:
        code, message = answers.get(
            (int(r.resource_type), str(r.resource_name)), (ErrorCode.UNKNOWN_SERVER_ERROR, None)
        )
        out.append(
            make(
                rcls,
                error_code=kio_error(code),
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return encode_body(ctx, make(cls, throttle_time=timedelta(0), responses=tuple(out)))
