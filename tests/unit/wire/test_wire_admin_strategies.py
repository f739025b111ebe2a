"""Hypothesis strategies for the admin codec's typed values (values that fit their wire
types), and `project_*`: what a value becomes after a trip at an older version.

Shared by test_wire_admin_codec.py and test_wire_admin_fuzz.py; it holds no tests.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KioErrorCode

from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IsrMember,
    PartitionsIncrease,
)
from quorum.kafka_errors import default_message
from quorum.wire.admin_codec import (
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)

i8 = st.integers(-(2**7), 2**7 - 1)
i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
u16 = st.integers(0, 2**16 - 1)
node_ids = st.integers(-1, 2**31 - 1)
names = st.text(max_size=12)
opt_names = st.none() | names
error_codes = st.sampled_from(sorted(int(c) for c in KioErrorCode))
messages = st.none() | st.text(max_size=20)
nonzero_uuids = st.uuids().filter(lambda u: u.int != 0)
opt_uuids = st.none() | nonzero_uuids
timeouts = i32


def tuples(elements: st.SearchStrategy[Any], max_size: int = 4) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(elements, max_size=max_size).map(tuple)


def grouped(keys: st.SearchStrategy[Any], items: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    """(key, item) pairs with equal keys adjacent (the order the wire's nesting keeps)."""
    return st.dictionaries(keys, st.lists(items, min_size=1, max_size=3), max_size=3).map(
        lambda d: tuple((k, item) for k, group in d.items() for item in group)
    )


# --------------------------------------------------------------------------- requests

creatable_topics = st.builds(
    CreatableTopic,
    name=names,
    num_partitions=i32,
    replication_factor=i16,
    assignments=st.none() | st.dictionaries(i32, tuples(i32), min_size=1, max_size=3),
    configs=st.dictionaries(names, names, max_size=3),
)
create_topics_requests = st.builds(
    CreateTopicsRequest, topics=tuples(creatable_topics), validate_only=st.booleans(), timeout_ms=timeouts
)
delete_topics_requests = st.builds(
    DeleteTopicsRequest, names=tuples(names), topic_ids=tuples(nonzero_uuids), timeout_ms=timeouts
)
create_partitions_requests = st.builds(
    CreatePartitionsRequest,
    topics=tuples(
        st.builds(PartitionsIncrease, name=names, count=i32, assignments=st.none() | tuples(tuples(i32), max_size=3))
    ),
    validate_only=st.booleans(),
    timeout_ms=timeouts,
)
alter_config_ops = st.builds(
    AlterConfigOp, name=names, op=st.sampled_from(list(AlterConfigOpType)), value=st.none() | names
)
resource_types = st.sampled_from(list(ConfigResourceType))
incremental_alter_configs_requests = st.builds(
    IncrementalAlterConfigsRequest,
    resources=tuples(
        st.builds(AlterConfigsResource, resource_type=resource_types, resource_name=names, ops=tuples(alter_config_ops))
    ),
    validate_only=st.booleans(),
)
describe_configs_requests = st.builds(
    DescribeConfigsRequest,
    resources=tuples(
        st.builds(
            DescribeConfigsResource, resource_type=i8, resource_name=names, config_names=st.none() | tuples(names)
        )
    ),
    include_synonyms=st.booleans(),
    include_documentation=st.booleans(),
)
elect_leaders_requests = st.builds(
    ElectLeadersRequest,
    election_type=st.sampled_from(list(ElectionType)),
    partitions=st.none() | grouped(names, i32),
    timeout_ms=timeouts,
)
broker_registration_requests = st.builds(
    BrokerRegistrationRequest,
    broker_id=i32,
    cluster_id=names,
    incarnation_id=st.uuids(),
    listeners=tuples(st.builds(BrokerEndpoint, name=names, host=names, port=u16, security_protocol=i16)),
    rack=opt_names,
    features=st.dictionaries(names, st.tuples(i16, i16), max_size=3),
    previous_broker_epoch=i64,
)
broker_heartbeat_requests = st.builds(
    BrokerHeartbeatRequest,
    broker_id=i32,
    broker_epoch=i64,
    current_metadata_offset=i64,
    want_fence=st.booleans(),
    want_shut_down=st.booleans(),
)


@st.composite
def alter_partition_requests(draw: st.DrawFn) -> AlterPartitionRequest:
    pairs = draw(grouped(st.uuids(), st.just(None)))
    items = tuple(
        AlterPartitionItem(
            topic_id=topic_id,
            partition=draw(i32),
            leader_epoch=draw(i32),
            new_isr=draw(tuples(st.builds(IsrMember, broker_id=i32, broker_epoch=i64))),
            leader_recovery_state=draw(i8),
            partition_epoch=draw(i32),
        )
        for topic_id, _ in pairs
    )
    return AlterPartitionRequest(draw(i32), draw(i64), items)


unregister_broker_requests = st.builds(UnregisterBrokerRequest, broker_id=i32)
describe_cluster_requests = st.builds(
    DescribeClusterRequest,
    include_cluster_authorized_operations=st.booleans(),
    endpoint_type=i8,
    include_fenced_brokers=st.booleans(),
)

REQUESTS: dict[int, st.SearchStrategy[Any]] = {
    19: create_topics_requests,
    20: delete_topics_requests,
    32: describe_configs_requests,
    37: create_partitions_requests,
    43: elect_leaders_requests,
    44: incremental_alter_configs_requests,
    56: alter_partition_requests(),
    60: describe_cluster_requests,
    62: broker_registration_requests,
    63: broker_heartbeat_requests,
    64: unregister_broker_requests,
    67: st.builds(AllocateProducerIdsRequest, broker_id=i32, broker_epoch=i64),
}

# --------------------------------------------------------------------------- responses

create_topics_responses = st.builds(
    CreateTopicsResponse,
    topics=tuples(
        st.builds(
            CreateTopicResult,
            name=names,
            error_code=error_codes,
            message=messages,
            topic_id=opt_uuids,
            num_partitions=i32,
            replication_factor=i16,
            configs=st.dictionaries(names, names, max_size=3),
        )
    ),
)
delete_topics_responses = st.builds(
    DeleteTopicsResponse,
    topics=tuples(
        st.builds(DeleteTopicResult, name=opt_names, topic_id=opt_uuids, error_code=error_codes, message=messages)
    ),
)
create_partitions_responses = st.builds(
    CreatePartitionsResponse,
    topics=tuples(st.builds(CreatePartitionsResult, name=names, error_code=error_codes, message=messages)),
)
incremental_alter_configs_responses = st.builds(
    IncrementalAlterConfigsResponse,
    resources=tuples(
        st.builds(
            AlterConfigsResult,
            resource_type=resource_types,
            resource_name=names,
            error_code=error_codes,
            message=messages,
        )
    ),
)
config_entries = st.builds(
    ConfigEntry,
    name=names,
    value=st.none() | names,
    is_read_only=st.booleans(),
    source=st.sampled_from(ConfigSource),
    is_sensitive=st.booleans(),
    synonyms=tuples(
        st.builds(ConfigSynonym, name=names, value=st.none() | names, source=st.sampled_from(ConfigSource)), max_size=3
    ),
    documentation=messages,
    config_type=st.sampled_from(ConfigType),
)
describe_configs_responses = st.builds(
    DescribeConfigsResponse,
    results=tuples(
        st.builds(
            DescribeConfigsResult,
            resource_type=i8,
            resource_name=names,
            error_code=error_codes,
            message=messages,
            entries=tuples(config_entries),
        ),
        max_size=3,
    ),
)


@st.composite
def elect_leaders_responses(draw: st.DrawFn) -> ElectLeadersResponse:
    pairs = draw(grouped(names, i32))
    results = tuple(ElectLeaderResult(t, p, draw(error_codes), draw(messages)) for t, p in pairs)
    return ElectLeadersResponse(draw(error_codes), results)


broker_registration_responses = st.builds(
    BrokerRegistrationResponse, error_code=error_codes, broker_epoch=i64, message=st.none()
)
broker_heartbeat_responses = st.builds(
    BrokerHeartbeatResponse,
    error_code=error_codes,
    is_caught_up=st.booleans(),
    is_fenced=st.booleans(),
    should_shut_down=st.booleans(),
)


@st.composite
def alter_partition_responses(draw: st.DrawFn) -> AlterPartitionResponse:
    pairs = draw(grouped(st.uuids(), st.just(None)))
    results = tuple(
        AlterPartitionResult(
            topic_id=topic_id,
            partition=draw(i32),
            error_code=draw(error_codes),
            leader_id=draw(node_ids),
            leader_epoch=draw(i32),
            isr=draw(tuples(i32)),
            leader_recovery_state=draw(i8),
            partition_epoch=draw(i32),
        )
        for topic_id, _ in pairs
    )
    return AlterPartitionResponse(draw(error_codes), results)


unregister_broker_responses = st.builds(UnregisterBrokerResponse, error_code=error_codes, message=messages)
describe_cluster_responses = st.builds(
    DescribeClusterResponse,
    cluster_id=names,
    controller_id=node_ids,
    brokers=tuples(
        st.builds(DescribeClusterBroker, broker_id=i32, host=names, port=i32, rack=opt_names, is_fenced=st.booleans())
    ),
    error_code=error_codes,
    message=messages,
    endpoint_type=i8,
    cluster_authorized_operations=i32,
)

RESPONSES: dict[int, st.SearchStrategy[Any]] = {
    19: create_topics_responses,
    20: delete_topics_responses,
    32: describe_configs_responses,
    37: create_partitions_responses,
    43: elect_leaders_responses(),
    44: incremental_alter_configs_responses,
    56: alter_partition_responses(),
    60: describe_cluster_responses,
    62: broker_registration_responses,
    63: broker_heartbeat_responses,
    64: unregister_broker_responses,
    67: st.builds(AllocateProducerIdsResponse, error_code=error_codes, producer_id_start=i64, producer_id_len=i32),
}

# --------------------------------------------------------------------------- version projections

replace = dataclasses.replace


def fits_version(request: Any, version: int) -> bool:
    """Whether `request` can be sent at `version` at all."""
    if isinstance(request, DeleteTopicsRequest) and version < 6:
        return not request.topic_ids
    if isinstance(request, ElectLeadersRequest) and version == 0:
        return request.election_type == ElectionType.PREFERRED
    return True


def project_request(r: Any, version: int) -> Any:
    """`r` as the server decodes it after the client sent it at `version`."""
    match r:
        case DescribeConfigsRequest() if version < 3:
            return replace(r, include_documentation=False)
        case BrokerRegistrationRequest() if version < 3:
            return replace(r, previous_broker_epoch=-1)
        case AlterPartitionRequest() if version < 3:
            parts = tuple(replace(p, new_isr=tuple(IsrMember(m.broker_id) for m in p.new_isr)) for p in r.partitions)
            return replace(r, partitions=parts)
        case DescribeClusterRequest():
            if version < 1:
                r = replace(r, endpoint_type=1)
            if version < 2:
                r = replace(r, include_fenced_brokers=False)
            return r
    return r


def project_response(r: Any, version: int) -> Any:
    """`r` as the client decodes it after the server answered at `version`."""
    match r:
        case CreateTopicsResponse():
            topics = r.topics
            if version < 7:
                topics = tuple(replace(t, topic_id=None) for t in topics)
            if version < 5:
                topics = tuple(replace(t, num_partitions=-1, replication_factor=-1, configs={}) for t in topics)
            return replace(r, topics=topics)
        case DeleteTopicsResponse():
            topics = r.topics
            if version < 6:
                topics = tuple(replace(t, name=t.name or "", topic_id=None) for t in topics)
            if version < 5:
                topics = tuple(replace(t, message=None) for t in topics)
            return replace(r, topics=topics)
        case DescribeConfigsResponse() if version < 3:
            results = tuple(
                replace(res, entries=tuple(replace(e, documentation=None, config_type=0) for e in res.entries))
                for res in r.results
            )
            return replace(r, results=results)
        case ElectLeadersResponse() if version == 0:
            return replace(r, error_code=0)
        case BrokerRegistrationResponse():
            # No message on the wire: a refusal decodes with Kafka's standard message.
            return replace(r, message=default_message(r.error_code) if r.error_code else None)
        case DescribeClusterResponse():
            if version < 1:
                r = replace(r, endpoint_type=1)
            if version < 2:
                r = replace(r, brokers=tuple(replace(b, is_fenced=False) for b in r.brokers))
            return r
    return r


ZERO_UUID = uuid.UUID(int=0)
