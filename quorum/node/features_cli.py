"""`pykraft features upgrade --feature kraft.version=1 --bootstrap-controller H:P`, as
`kafka-features.sh --bootstrap-controller H:P upgrade --feature kraft.version=1` does it:
UpdateFeatures (api 57) to a controller (a follower relays it to its leader). Unreachable
controllers, NOT_CONTROLLER (no leader yet) and REQUEST_TIMED_OUT (another voter change in
flight, nothing committed in the leader's epoch yet) are retried until `--timeout-ms`; other
refusals (INVALID_UPDATE_VERSION: a downgrade, an unknown version or feature, a voter whose
directory id the leader has not learned yet) are printed with Kafka's message.
"""

from __future__ import annotations

import argparse
import asyncio

from quorum.node.config import ConfigError
from quorum.node.meta_properties import StorageError
from quorum.node.tool_requests import Address, ask_raft_api, ask_until_final, first_answer, parse_bootstrap, same_frame
from quorum.raft.errors import ErrorCode
from quorum.wire import codec, features_codec
from quorum.wire.features_codec import FeatureUpdate, UpdateFeatures, UpdateFeaturesAnswer


class FeatureCommandError(Exception):
    """The update was refused or could not be delivered; the message says why."""


EXPECTED_ERRORS = (ValueError, ConfigError, StorageError, FeatureCommandError)
RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER})
CLIENT_ID = "pykraft-features-cli"


def parse_feature(text: str) -> FeatureUpdate:
    """`name=level`, e.g. kraft.version=1."""
    name, sep, level = text.partition("=")
    if not sep or not name.strip() or not level.strip().lstrip("-").isdigit():
        raise ValueError(f"bad --feature {text!r}: expected NAME=LEVEL, e.g. kraft.version=1")
    return FeatureUpdate(name.strip(), int(level))


def _retriable(answer: UpdateFeaturesAnswer) -> bool:
    if answer.error != ErrorCode.NONE:
        return answer.error in RETRIABLE
    return any(r.error in RETRIABLE for r in answer.results)


def _describe(answer: UpdateFeaturesAnswer) -> str:
    return ", ".join(f"{r.feature}: {r.error.name}" for r in answer.results) or answer.error.name


def update_features(addresses: list[Address], call: UpdateFeatures, timeout_s: float) -> UpdateFeaturesAnswer:
    """The first answer that is not retriable. Raises FeatureCommandError after `timeout_s`."""
    frame, version = features_codec.encode_request(call, correlation_id=1, client_id=CLIENT_ID)
    return asyncio.run(
        ask_until_final(
            addresses,
            same_frame(frame),
            lambda raw: features_codec.decode_response(version, raw),
            timeout_s=timeout_s,
            retriable=_retriable,
            describe=_describe,
            gave_up=lambda why: FeatureCommandError(f"the update {why}"),
        )
    )


def upgrade(args: argparse.Namespace) -> int:
    updates = tuple(parse_feature(f) for f in args.feature)
    call = UpdateFeatures(updates, validate_only=bool(args.dry_run), timeout_ms=int(args.timeout_ms))
    answer = update_features(parse_bootstrap(args.bootstrap_controller), call, args.timeout_ms / 1000)
    if answer.error != ErrorCode.NONE:
        raise FeatureCommandError(f"{answer.error.name}: {answer.message or ''}".rstrip(": "))
    failed = False
    for update, result in zip(updates, answer.results, strict=False):
        if result.error == ErrorCode.NONE:
            verb = "can be upgraded" if args.dry_run else "was upgraded"
            print(f"{update.feature} {verb} to {update.max_version_level}.")
        else:
            failed = True
            why = f"{result.error.name}: {result.message}"
            print(f"Could not upgrade {update.feature} to {update.max_version_level}. {why}")
    return 1 if failed else 0


async def _api_versions(address: Address, timeout_s: float) -> codec.ApiVersionsResult | None:
    call = codec.ApiVersionsCall(CLIENT_ID, "1")
    answer = await ask_raft_api(address, call, version=3, client_id=CLIENT_ID, timeout_s=timeout_s)
    return answer if isinstance(answer, codec.ApiVersionsResult) else None


def describe(args: argparse.Namespace) -> int:
    """`kafka-features.sh --bootstrap-controller H:P describe`: each feature the controller
    supports and its finalized level (from ApiVersions v3; 0 when not finalized)."""
    addresses = parse_bootstrap(args.bootstrap_controller)
    result = asyncio.run(first_answer(addresses, lambda address: _api_versions(address, 5.0)))
    if result is None:
        raise FeatureCommandError("no controller answered ApiVersions")
    for name in sorted({*result.supported_features, *result.finalized_features}):
        low, high = result.supported_features.get(name, (0, 0))
        print(
            f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}\t"
            f"FinalizedVersionLevel: {result.finalized_features.get(name, 0)}\tEpoch: {result.finalized_epoch}"
        )
    return 0
