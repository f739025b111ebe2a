"""DescribeCluster (60, v0-2), answered from the metadata image (Kafka's brokers answer it
from their metadata cache). Brokers: those with an endpoint on this listener, unfenced
ones only unless `include_fenced_brokers` (v2). `controller_id` is this broker's id, as in
Metadata (KRaft brokers name a live broker; admin requests are forwarded). Asking a
broker for controller endpoints (endpoint_type 2) is UNSUPPORTED_ENDPOINT_TYPE."""

from __future__ import annotations

from datetime import timedelta

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.services import BrokerServices, ListenerConfig
from quorum.kafka_errors import ErrorCode

__all__ = ["handle_describe_cluster"]

_BROKERS_ENDPOINT_TYPE = 1


async def handle_describe_cluster(ctx: RequestContext, services: BrokerServices, config: ListenerConfig) -> bytes:
    body = decode_body(ctx)
    cls = response_type(ctx.api_key, ctx.version)
    endpoint_type = int(getattr(body, "endpoint_type", _BROKERS_ENDPOINT_TYPE))
    include_fenced = bool(getattr(body, "include_fenced_brokers", False))
    error = ErrorCode.NONE
    message = None
    brokers = []
    if endpoint_type != _BROKERS_ENDPOINT_TYPE:
        error = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        message = "brokers only answer DescribeCluster for broker endpoints"
    else:
        bcls = nested(cls, "DescribeClusterBroker")
        image = services.image()
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
            ep = b.endpoint(config.listener_name)
            if ep is None or (b.fenced and not include_fenced):
                continue
            brokers.append(make(bcls, broker_id=b.id, host=ep.host, port=ep.port, rack=b.rack, is_fenced=b.fenced))
    response = make(
        cls,
        throttle_time=timedelta(0),
        error_code=kio_error(error),
        error_message=message,
        endpoint_type=endpoint_type,
        cluster_id=services.cluster_id,
        controller_id=services.node_id,
        brokers=tuple(brokers),
        cluster_authorized_operations=-(2**31),
    )
    return encode_body(ctx, response)
