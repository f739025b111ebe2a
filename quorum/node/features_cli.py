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
import time

from quorum.node.config import ConfigError
from quorum.node.meta_properties import StorageError
from quorum.node.quorum_cli import parse_bootstrap
from quorum.raft.errors import ErrorCode
from quorum.wire import codec, features_codec
from quorum.wire.features_codec import FeatureUpdate, UpdateFeatures, UpdateFeaturesAnswer
from quorum.wire.transport import PeerUnavailable, request


class FeatureCommandError(Exception):
    """The update was refused or could not be delivered; the message says why."""


EXPECTED_ERRORS = (ValueError, ConfigError, StorageError, FeatureCommandError)
RETRIABLE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER})


def parse_feature(text: str) -> FeatureUpdate:
    """`name=level`, e.g. kraft.version=1."""
    name, sep, level = text.partition("=")
    if not sep or not name.strip() or not level.strip().lstrip("-").isdigit():
        raise ValueError(f"bad --feature {text!r}: expected NAME=LEVEL, e.g. kraft.version=1")
    return FeatureUpdate(name.strip(), int(level))


async def _send_once(host: str, port: int, call: UpdateFeatures, timeout_s: float) -> UpdateFeaturesAnswer | str:
    frame, version = features_codec.encode_request(call, correlation_id=1, client_id="pykraft-features-cli")
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request(host, port, frame)
        return features_codec.decode_response(version, raw)
    except (PeerUnavailable, codec.WireError, TimeoutError, OSError) as exc:
        return f"{host}:{port}: {exc or type(exc).__name__}"


def _retriable(answer: UpdateFeaturesAnswer) -> bool:
    if answer.error != ErrorCode.NONE:
        return answer.error in RETRIABLE
    return any(r.error in RETRIABLE for r in answer.results)


def update_features(addresses: list[tuple[str, int]], call: UpdateFeatures, timeout_s: float) -> UpdateFeaturesAnswer:
    """The first answer that is not retriable. Raises FeatureCommandError after `timeout_s`."""

    async def run() -> UpdateFeaturesAnswer:
        deadline = time.monotonic() + timeout_s
        last = "no controller answered"
        while True:
            for host, port in addresses:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FeatureCommandError(f"the update did not complete in {timeout_s:g} s: {last}")
                outcome = await _send_once(host, port, call, min(remaining, 15.0))
                if isinstance(outcome, str):
                    last = outcome
                    continue
                if not _retriable(outcome):
                    return outcome
                last = ", ".join(f"{r.feature}: {r.error.name}" for r in outcome.results) or outcome.error.name
                break  # the quorum answered: ask again after a pause, from the first address
            await asyncio.sleep(0.2)

    return asyncio.run(run())


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


async def _api_versions(host: str, port: int, timeout_s: float) -> codec.ApiVersionsResult | None:
    frame = codec.encode_request(
        codec.ApiVersionsCall("pykraft-features-cli", "1"),
        correlation_id=1,
        client_id="pykraft-features-cli",
        cluster_id=None,
        source_id=-1,
        destination_id=-1,
        api_version=3,
    )
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request(host, port, frame)
        _, answer = codec.decode_response(codec.ApiKey.API_VERSIONS, 3, raw)
    except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
        return None
    return answer if isinstance(answer, codec.ApiVersionsResult) else None


def describe(args: argparse.Namespace) -> int:
    """`kafka-features.sh --bootstrap-controller H:P describe`: each feature the controller
    supports and its finalized level (from ApiVersions v3; 0 when not finalized)."""
    for host, port in parse_bootstrap(args.bootstrap_controller):
        result = asyncio.run(_api_versions(host, port, 5.0))
        if result is not None:
            break
    else:
        raise FeatureCommandError("no controller answered ApiVersions")
    for name in sorted({*result.supported_features, *result.finalized_features}):
        low, high = result.supported_features.get(name, (0, 0))
        print(
            f"Feature: {name}\tSupportedMinVersion: {low}\tSupportedMaxVersion: {high}\t"
            f"FinalizedVersionLevel: {result.finalized_features.get(name, 0)}\tEpoch: {result.finalized_epoch}"
        )
    return 0
