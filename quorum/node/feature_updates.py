"""UpdateFeatures (api 57) on a controller: `kraft.version` 0 -> 1, KIP-853's upgrade of a
static quorum (`kafka-features.sh --bootstrap-controller H:P upgrade --feature kraft.version=1`).

The leader hands the upgrade to its core as a voter change (`voter_change.decide_upgrade`: it
writes KRaftVersionRecord 1 and a VotersRecord of the static voters with their directory ids
and the endpoints of controller.quorum.voters) and answers once it is committed. A follower
relays the request to its leader once, as it does voter changes; without a leader it answers
NOT_CONTROLLER. Other features are not finalized by pykraft: INVALID_UPDATE_VERSION.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from quorum.raft.errors import ErrorCode
from quorum.raft.voter_change import UpgradeKRaftVersion
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, Endpoint, ReplicaKey, VoterNode, VoterSet
from quorum.wire import codec, features_codec
from quorum.wire.features_codec import FeatureResult, FeatureUpdate, UpdateFeatures, UpdateFeaturesAnswer
from quorum.wire.transport import CloseConnection, PeerUnavailable
from quorum.wire.transport import request as one_shot_request

if TYPE_CHECKING:
    from quorum.node.raft_node import RaftNode

RELAY_CLIENT_ID = "pykraft-features-relay"


def api_versions_result(node: RaftNode) -> codec.ApiVersionsResult:
    """ApiVersions with the kraft.version this controller supports (0..1) and the committed
    one (finalized as of the high watermark, what `pykraft features describe` and
    kafka-features.sh describe print)."""
    core = node.core
    supported = {features_codec.KRAFT_VERSION_FEATURE: (0, KRAFT_VERSION_DYNAMIC)}
    if core is None or core.high_watermark <= 0:
        return codec.ApiVersionsResult(supported_features=supported)
    committed, _ = core.voters_at(core.high_watermark)
    return codec.ApiVersionsResult(
        supported_features=supported,
        finalized_features={features_codec.KRAFT_VERSION_FEATURE: committed},
        finalized_epoch=core.high_watermark - 1,
    )


def static_voters(node: RaftNode) -> VoterSet:
    """controller.quorum.voters with its endpoints (under the first controller listener name)."""
    name = node.config.controller_listener_names[0]
    return VoterSet.of(
        VoterNode(ReplicaKey(nid), (Endpoint(name, hp.host, hp.port),))
        for nid, hp in node.config.controller_quorum_voters.items()
    )


async def handle_update_features(node: RaftNode, frame: bytes | bytearray) -> bytes:
    try:
        head, call = features_codec.decode_request(frame)
    except codec.WireError as exc:
        if exc.header is None:
            raise CloseConnection from exc
        return features_codec.encode_response(exc.header, UpdateFeaturesAnswer(exc.code, exc.message))
    core = node.core
    if core is None or node.closing:
        answer = UpdateFeaturesAnswer(ErrorCode.NOT_CONTROLLER, "the node is stopping")
    elif not core.is_leader:
        relayed = None if head.client_id == RELAY_CLIENT_ID else await _relay(node, call, head.api_version)
        answer = relayed or UpdateFeaturesAnswer(ErrorCode.NOT_CONTROLLER, f"node {node.node_id} is not the leader")
    else:
        results = [await _update_as_leader(node, u, call.validate_only) for u in call.updates]
        answer = UpdateFeaturesAnswer(ErrorCode.NONE, None, tuple(results))
    return features_codec.encode_response(head, answer)


async def _update_as_leader(node: RaftNode, update: FeatureUpdate, validate_only: bool) -> FeatureResult:
    if update.feature != features_codec.KRAFT_VERSION_FEATURE:
        return FeatureResult(update.feature, ErrorCode.INVALID_UPDATE_VERSION, "pykraft finalizes only kraft.version")
    version = max(update.max_version_level, 0)  # a level below 1 deletes the feature: version 0
    fut = node.change_voters(UpgradeKRaftVersion(version, static_voters(node), validate_only))
    try:
        async with asyncio.timeout(node.raft_config.request_timeout_ms / 1000 + 2):
            result = await fut
    except TimeoutError:
        return FeatureResult(update.feature, ErrorCode.REQUEST_TIMED_OUT, "no answer from the quorum in time")
    return FeatureResult(update.feature, result.error, result.message or None)


async def _relay(node: RaftNode, call: UpdateFeatures, version: int) -> UpdateFeaturesAnswer | None:
    core = node.core
    address = node.voters.get(core.leader_id) if core is not None and core.leader_id >= 0 else None
    if address is None:
        return None
    frame, version = features_codec.encode_request(
        call, correlation_id=1, client_id=RELAY_CLIENT_ID, api_version=version
    )
    try:
        async with asyncio.timeout(node.raft_config.request_timeout_ms / 1000 + 4):
            raw = await one_shot_request(address.host, address.port, frame)
        return features_codec.decode_response(version, raw)
    except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
        return None
