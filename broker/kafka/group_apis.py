"""The group apis: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9),
TxnOffsetCommit (28), DeleteGroups (42), OffsetDelete (47).

These only translate between the wire (kio's schemas) and the group coordinator
(`broker.group.runtime.GroupCoordinator`); the rules are the coordinator's. Every broker
answers FindCoordinator from its metadata image (the coordinator of a group is the leader
of its `__consumer_offsets` partition); the first FindCoordinator of a cluster creates that
topic (`offsets.topic.num.partitions`, `offsets.topic.replication.factor` capped by the live
brokers) and is answered COORDINATOR_NOT_AVAILABLE meanwhile, as Kafka does. The other apis
are answered NOT_COORDINATOR by a broker that does not lead the group's partition, and
COORDINATOR_LOAD_IN_PROGRESS while it loads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Final

from broker.coordinator.internal_topic import (
    COORDINATOR_NOT_AVAILABLE,
    CoordinatorAddress,
    compacted_topic_creator,
)
from broker.group.messages import (
    CommitPartition,
    CommitRequest,
    ConsumerGroupDescription,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    GroupDescription,
    GroupListing,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveResult,
    LeavingMember,
    SyncRequest,
    SyncResult,
    TxnCommitRequest,
)
from broker.group.records import coordinator_partition
from broker.group.runtime import OFFSETS_TOPIC, GroupCoordinator
from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.offset_commit_wire import (
    OffsetCommitPartitionBody,
    decode_offset_commit,
    encode_offset_commit_response,
)
from broker.kafka.services import BrokerServices, ListenerConfig
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import PEER_HOST

__all__ = ["GroupApis"]

log = logging.getLogger(__name__)

GROUP_KEY: Final = 0
TRANSACTION_KEY: Final = 1
_NO_THROTTLE: Final = timedelta(0)


def _ms(value: Any) -> int:
    return int(value // timedelta(milliseconds=1)) if isinstance(value, timedelta) else int(value)


class GroupApis:
    """The group apis of one listener, over the broker's coordinator (None: this node has none,
    every group request is answered COORDINATOR_NOT_AVAILABLE)."""

    def __init__(self, services: BrokerServices, config: ListenerConfig, groups: GroupCoordinator | None) -> None:
        self.services = services
        self.config = config
        self.groups = groups
        # FindCoordinator for transactional ids (key type 1): `broker.kafka.txn_apis`'s.
        self.transaction_coordinator: Callable[[str], CoordinatorAddress] | None = None
        self._offsets_topic = compacted_topic_creator(
            services, config, OFFSETS_TOPIC, config.offsets_topic_num_partitions,
            (config.offsets_topic_replication_factor, "offsets.topic.replication.factor"),
            config.offsets_topic_segment_bytes, {"compression.type": "producer"}, client_id="group-coordinator",
        )  # fmt: skip

    # ------------------------------------------------------------------ FindCoordinator

    async def find_coordinator(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        keys: tuple[str, ...] = tuple(body.coordinator_keys) if ctx.version >= 4 else (body.key,)
        key_type = int(getattr(body, "key_type", GROUP_KEY))
        answers = [self._coordinator(key, key_type) for key in keys]
        cls = response_type(ctx.api_key, ctx.version)
        if ctx.version >= 4:
            ccls = nested(cls, "Coordinator")
            coordinators = tuple(
                make(ccls, key=k, node_id=n, host=h, port=p, error_code=kio_error(e), error_message=None)
                for k, (e, n, h, p) in zip(keys, answers, strict=True)
            )
            return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, coordinators=coordinators))
        error, node, host, port = answers[0]
        return encode_body(
            ctx,
            make(
                cls,
                throttle_time=_NO_THROTTLE,
                error_code=kio_error(error),
                error_message=None,
                node_id=node,
                host=host,
                port=port,
            ),  # fmt: skip
        )

    def _coordinator(self, key: str, key_type: int) -> CoordinatorAddress:
        if key_type == TRANSACTION_KEY:
            if self.transaction_coordinator is None:
                return COORDINATOR_NOT_AVAILABLE
            return self.transaction_coordinator(key)
        if key_type != GROUP_KEY:
            return (ErrorCode.INVALID_REQUEST, -1, "", -1)
        if self.groups is None:
            return COORDINATOR_NOT_AVAILABLE
        return self._offsets_topic.coordinator(key, coordinator_partition, self.config.listener_name)

    # ------------------------------------------------------------------ membership

    async def join_group(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        session = _ms(body.session_timeout)
        rebalance = _ms(body.rebalance_timeout) if ctx.version >= 1 else session
        req = JoinRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol_type=body.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            client_id=ctx.header.client_id or "",
            client_host="/" + PEER_HOST.get(),
            version=ctx.version,
        )
        if self.groups is None:
            result = JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id)
        else:
            result = await self.groups.join(req)
        cls = response_type(ctx.api_key, ctx.version)
        mcls = nested(cls, "JoinGroupResponseMember")
        members = tuple(
            make(mcls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in result.members
        )
        return encode_body(
            ctx,
            make(
                cls, throttle_time=_NO_THROTTLE, error_code=kio_error(result.error), generation_id=result.generation,
                protocol_type=result.protocol_type,
                protocol_name=result.protocol_name or ("" if ctx.version < 7 else None),
                leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
                members=members,
            ),
        )  # fmt: skip

    async def sync_group(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        req = SyncRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            generation=int(body.generation_id),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            assignments=tuple((a.member_id, bytes(a.assignment)) for a in body.assignments),
        )
        if self.groups is None:
            result = SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            result = await self.groups.sync(req)
        cls = response_type(ctx.api_key, ctx.version)
        return encode_body(
            ctx,
            make(
                cls,
                throttle_time=_NO_THROTTLE,
                error_code=kio_error(result.error),
                protocol_type=result.protocol_type,
                protocol_name=result.protocol_name,
                assignment=result.assignment,
            ),  # fmt: skip
        )

    async def heartbeat(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        req = HeartbeatRequest(
            body.group_id, body.member_id, getattr(body, "group_instance_id", None), int(body.generation_id)
        )
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE if self.groups is None else await self.groups.heartbeat(req)
        cls = response_type(ctx.api_key, ctx.version)
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, error_code=kio_error(error)))

    async def leave_group(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        if ctx.version >= 3:
            leaving = tuple(LeavingMember(m.member_id, m.group_instance_id) for m in body.members)
        else:
            leaving = (LeavingMember(body.member_id),)
        if self.groups is None:
            result = LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            result = await self.groups.leave(body.group_id, leaving)
        cls = response_type(ctx.api_key, ctx.version)
        error = result.error
        if ctx.version < 3 and error == ErrorCode.NONE and result.members:
            error = result.members[0][1]  # one member: its error is the request's
        members: tuple[Any, ...] = ()
        if ctx.version >= 3:
            rcls = nested(cls, "MemberResponse")
            members = tuple(
                make(rcls, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=kio_error(e))
                for m, e in result.members
            )
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, error_code=kio_error(error), members=members))

    # ------------------------------------------------------------------ offsets

    async def offset_commit(self, ctx: RequestContext) -> bytes | bytearray:
        body = decode_offset_commit(ctx)  # by hand: the hot request (`offset_commit_wire`)
        errors, accepted = self._known_partitions(body.topics)
        retention = body.retention_time_ms
        req = CommitRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            generation=body.generation_id_or_member_epoch,
            retention_ms=retention if retention >= 0 else -1,
            partitions=tuple(accepted),
            version=ctx.version,
        )
        if self.groups is None:
            results = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(accepted)
        elif not accepted:
            code = self.groups.is_coordinator(req.group_id)
            results = []
            if code != ErrorCode.NONE:
                errors = [code for _ in errors]
        else:
            results = await self.groups.commit(req)
        # Per partition asked, in request order: its own error, else the coordinator's next result.
        answer: list[tuple[str, list[tuple[int, int]]]] = []
        asked = 0  # into `errors`
        done = 0  # into `results`
        for name, parts in body.topics:
            codes: list[tuple[int, int]] = []
            for p in parts:
                error = errors[asked]
                asked += 1
                if error is None:
                    error = results[done]
                    done += 1
                codes.append((p[0], error))
            answer.append((name, codes))
        return encode_offset_commit_response(ctx, answer)

    async def txn_offset_commit(self, ctx: RequestContext) -> bytes:
        """TxnOffsetCommit v0-4: unknown topics and partitions are answered
        UNKNOWN_TOPIC_OR_PARTITION here (KafkaApis' check), the rest by the coordinator; v0-1
        see COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (clients before 2.0
        did not know that error), as Kafka answers them."""
        body = decode_body(ctx)
        errors, accepted = self._known_partitions(
            (t.name, [(int(p.partition_index), int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                       p.committed_metadata) for p in t.partitions])
            for t in body.topics
        )  # fmt: skip
        req = TxnCommitRequest(
            group_id=body.group_id,
            producer_id=int(body.producer_id),
            producer_epoch=int(body.producer_epoch),
            partitions=tuple(accepted),
            member_id=getattr(body, "member_id", ""),
            group_instance_id=getattr(body, "group_instance_id", None),
            generation=int(getattr(body, "generation_id", -1)),
            transactional_id=body.transactional_id,
        )
        if self.groups is None:
            results = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(accepted)
        elif not accepted:
            results = []
        else:
            results = await self.groups.txn_commit(req)
        it = iter(results)
        final = [e if e is not None else next(it) for e in errors]
        if ctx.version < 4:  # KIP-890: TRANSACTION_ABORTABLE is known from v4 on
            final = [ErrorCode.INVALID_TXN_STATE if e == ErrorCode.TRANSACTION_ABORTABLE else e for e in final]
        if ctx.version < 2:
            final = [ErrorCode.COORDINATOR_NOT_AVAILABLE if e == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else e
                     for e in final]  # fmt: skip
        cls = response_type(ctx.api_key, ctx.version)
        pcls = nested(cls, "TxnOffsetCommitResponsePartition")
        tcls = nested(cls, "TxnOffsetCommitResponseTopic")
        topics = []
        i = 0
        for t in body.topics:
            parts = []
            for p in t.partitions:
                parts.append(make(pcls, partition_index=p.partition_index, error_code=kio_error(final[i])))
                i += 1
            topics.append(make(tcls, name=t.name, partitions=tuple(parts)))
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, topics=tuple(topics)))

    def _known_partitions(
        self, topics: Iterable[tuple[str, Iterable[OffsetCommitPartitionBody]]]
    ) -> tuple[list[ErrorCode | None], list[CommitPartition]]:
        """Per partition asked, in order, UNKNOWN_TOPIC_OR_PARTITION or None (then it is in
        the second list, for the coordinator)."""
        by_name = self.services.image().topics.by_name
        errors: list[ErrorCode | None] = []
        accepted: list[CommitPartition] = []
        for name, parts in topics:
            topic = by_name.get(name)
            for index, offset, epoch, metadata in parts:
                if topic is None or index not in topic.partitions:
                    errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                errors.append(None)
                accepted.append(CommitPartition(name, index, offset, epoch, metadata))
        return errors, accepted

    async def offset_fetch(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        stable = bool(getattr(body, "require_stable", False))  # v7+
        cls = response_type(ctx.api_key, ctx.version)
        if ctx.version >= 8:
            gcls = nested(cls, "OffsetFetchResponseGroup")
            tcls = nested(cls, "OffsetFetchResponseTopics")
            pcls = nested(cls, "OffsetFetchResponsePartitions")
            groups = []
            for g in body.groups:
                member_error = ErrorCode.NONE
                if ctx.version >= 9 and self.groups is not None:
                    member_error = self.groups.check_fetch_member(g.group_id, g.member_id, int(g.member_epoch))
                if member_error != ErrorCode.NONE:
                    groups.append(make(gcls, group_id=g.group_id, topics=(), error_code=kio_error(member_error)))
                    continue
                error, topics = await self._fetch_group(g.group_id, g.topics, tcls, pcls, stable)
                groups.append(make(gcls, group_id=g.group_id, topics=topics, error_code=kio_error(error)))
            return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, groups=tuple(groups)))
        tcls = nested(cls, "OffsetFetchResponseTopic")
        pcls = nested(cls, "OffsetFetchResponsePartition")
        error, topics = await self._fetch_group(body.group_id, body.topics, tcls, pcls, stable)
        if ctx.version < 2 and error != ErrorCode.NONE:
            # v0-1 have no top-level error: every partition carries it.
            topics = tuple(
                make(tcls, name=t.name, partitions=tuple(
                    make(pcls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                         error_code=kio_error(error)) for p in t.partition_indexes))
                for t in body.topics or ()
            )  # fmt: skip
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, topics=topics, error_code=kio_error(error)))

    async def _fetch_group(
        self, group_id: str, wanted: Any, tcls: type[Any], pcls: type[Any], require_stable: bool
    ) -> tuple[ErrorCode, tuple[Any, ...]]:
        asked = None if wanted is None else [(t.name, int(p)) for t in wanted for p in t.partition_indexes]
        if self.groups is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, ()
        error, offsets = await self.groups.fetch_offsets(group_id, asked, require_stable=require_stable)
        if error != ErrorCode.NONE:
            return error, ()
        by_topic: dict[str, list[Any]] = {}
        for o in offsets:
            by_topic.setdefault(o.topic, []).append(
                make(
                    pcls,
                    partition_index=o.partition,
                    committed_offset=o.offset,
                    committed_leader_epoch=o.leader_epoch,
                    metadata=o.metadata,
                    error_code=kio_error(o.error),
                )  # fmt: skip
            )
        return ErrorCode.NONE, tuple(make(tcls, name=n, partitions=tuple(ps)) for n, ps in by_topic.items())

    # ------------------------------------------------------------------ administration

    async def describe_groups(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        cls = response_type(ctx.api_key, ctx.version)
        gcls = nested(cls, "DescribedGroup")
        mcls = nested(cls, "DescribedGroupMember")
        groups = []
        for gid in body.groups:
            if self.groups is None:
                d = GroupDescription(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE, "", "", "")
            else:
                d = self.groups.describe(gid)
            members = tuple(
                make(mcls, member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                     client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in d.members
            )  # fmt: skip
            groups.append(
                make(
                    gcls,
                    error_code=kio_error(d.error),
                    group_id=gid,
                    group_state=d.state,
                    protocol_type=d.protocol_type,
                    protocol_data=d.protocol,
                    members=members,
                    authorized_operations=-(2**31),
                )  # fmt: skip
            )
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, groups=tuple(groups)))

    async def list_groups(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        states = set(getattr(body, "states_filter", ()) or ())
        types = {t.lower() for t in (getattr(body, "types_filter", ()) or ())}
        if self.groups is None:
            error, listings = ErrorCode.COORDINATOR_NOT_AVAILABLE, list[GroupListing]()
        else:
            error, listings = self.groups.list_groups(states or None)
        if types:
            listings = [g for g in listings if g.group_type in types]
        cls = response_type(ctx.api_key, ctx.version)
        lcls = nested(cls, "ListedGroup")
        groups = tuple(
            make(lcls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type)
            for g in listings
        )
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, error_code=kio_error(error), groups=groups))

    async def delete_groups(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        names = list(body.groups_names)
        if self.groups is None:
            errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(names)
        else:
            errors = await self.groups.delete_groups(names)
        cls = response_type(ctx.api_key, ctx.version)
        rcls = nested(cls, "DeletableGroupResult")
        results = tuple(make(rcls, group_id=n, error_code=kio_error(e)) for n, e in zip(names, errors, strict=True))
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, results=results))

    async def offset_delete(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        asked = [(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions]
        if self.groups is None:
            top, errors = ErrorCode.COORDINATOR_NOT_AVAILABLE, list[ErrorCode]()
        else:
            top, errors = await self.groups.delete_offsets(body.group_id, asked)
        cls = response_type(ctx.api_key, ctx.version)
        pcls = nested(cls, "OffsetDeleteResponsePartition")
        tcls = nested(cls, "OffsetDeleteResponseTopic")
        topics = []
        if top == ErrorCode.NONE:
            it = iter(errors)
            for t in body.topics:
                parts = tuple(
                    make(pcls, partition_index=p.partition_index, error_code=kio_error(next(it))) for p in t.partitions
                )
                topics.append(make(tcls, name=t.name, partitions=parts))
        return encode_body(ctx, make(cls, error_code=kio_error(top), throttle_time=_NO_THROTTLE, topics=tuple(topics)))

    # ------------------------------------------------------------------ KIP-848

    async def consumer_group_heartbeat(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        owned = None
        if body.topic_partitions is not None:
            owned = tuple((tp.topic_id, int(p)) for tp in body.topic_partitions for p in tp.partitions)
        req = ConsumerHeartbeatRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            member_epoch=int(body.member_epoch),
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=_ms(body.rebalance_timeout),
            subscribed=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
            server_assignor=body.server_assignor,
            owned=owned,
            client_id=ctx.header.client_id or "",
            client_host="/" + PEER_HOST.get(),
            subscribed_regex=getattr(body, "subscribed_topic_regex", None),  # v1+
        )
        if self.groups is None:
            result = ConsumerHeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            result = await self.groups.consumer_heartbeat(req)
        cls = response_type(ctx.api_key, ctx.version)
        assignment = None
        if result.assignment is not None:
            tcls = nested(cls, "TopicPartitions")
            by_topic: dict[Any, list[int]] = {}
            for topic_id, p in result.assignment:
                by_topic.setdefault(topic_id, []).append(p)
            assignment = make(
                nested(cls, "Assignment"),
                topic_partitions=tuple(make(tcls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
        return encode_body(
            ctx,
            make(cls, throttle_time=_NO_THROTTLE, error_code=kio_error(result.error), error_message=result.message,
                 member_id=result.member_id, member_epoch=result.member_epoch,
                 heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms), assignment=assignment),
        )  # fmt: skip

    async def consumer_group_describe(self, ctx: RequestContext) -> bytes:
        body = decode_body(ctx)
        cls = response_type(ctx.api_key, ctx.version)
        gcls, mcls, acls, tcls = (nested(cls, n) for n in ("DescribedGroup", "Member", "Assignment", "TopicPartitions"))
        image = self.services.image()

        def assignment(tps: tuple[tuple[Any, int], ...]) -> Any:
            by_topic: dict[Any, list[int]] = {}
            for topic_id, p in tps:
                by_topic.setdefault(topic_id, []).append(p)
            parts = []
            for t, ps in by_topic.items():
                topic = image.topics.by_id.get(t)
                parts.append(make(tcls, topic_id=t, topic_name=topic.name if topic else "", partitions=tuple(ps)))
            return make(acls, topic_partitions=tuple(parts))

        groups = []
        for gid in body.group_ids:
            if self.groups is None:
                d = ConsumerGroupDescription(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            else:
                d = self.groups.describe_consumer_group(gid)
            members = tuple(
                make(mcls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                     member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                     subscribed_topic_names=m.subscribed,
                     subscribed_topic_regex=m.subscribed_regex, assignment=assignment(m.assignment),
                     target_assignment=assignment(m.target), member_type=-1)
                for m in d.members
            )  # fmt: skip
            message = f"Group {gid} not found." if d.error == ErrorCode.GROUP_ID_NOT_FOUND else None
            groups.append(
                make(gcls, error_code=kio_error(d.error), error_message=message, group_id=gid, group_state=d.state,
                     group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, assignor_name=d.assignor,
                     members=members, authorized_operations=-(2**31))
            )  # fmt: skip
        return encode_body(ctx, make(cls, throttle_time=_NO_THROTTLE, groups=tuple(groups)))
