"""UpdateFeatures (api 57) as the controllers serve it: between plain values and framed Kafka
bytes (kio's schemas, read through `quorum.wire._reader` as the other codecs do).

`kafka-features.sh --bootstrap-controller H:P upgrade --feature kraft.version=1` sends it to
a controller; pykraft serves only `kraft.version` (KIP-853's upgrade of a static quorum).
Served versions: 0..1, as Kafka 3.9 (v0 says `AllowDowngrade`, v1 `UpgradeType` and
`ValidateOnly`; v2 drops the per-feature results and is not served).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from quorum.raft.errors import ErrorCode
from quorum.wire import api_frames
from quorum.wire.codec import (
    _ZERO_MS,
    FEATURE_API_VERSIONS,
    RequestHeaderInfo,
    WireError,
    _kio_error,
    _make,
    _nested,
    error_from_wire,
)

UPDATE_FEATURES: Final = 57
KRAFT_VERSION_FEATURE: Final = "kraft.version"

# FeatureUpdateKey.UpgradeType (v1): what a level below the finalized one may do.
UPGRADE: Final = 1
SAFE_DOWNGRADE: Final = 2
UNSAFE_DOWNGRADE: Final = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    max_version_level: int  # < 1: delete the feature (a downgrade)
    upgrade_type: int = UPGRADE  # v0's AllowDowngrade=true reads as SAFE_DOWNGRADE


@dataclass(frozen=True, slots=True)
class UpdateFeatures:
    updates: tuple[FeatureUpdate, ...]
    validate_only: bool = False
    timeout_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class FeatureResult:
    feature: str
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateFeaturesAnswer:
    error: ErrorCode
    message: str | None = None
    results: tuple[FeatureResult, ...] = ()


def encode_request(
    call: UpdateFeatures, *, correlation_id: int, client_id: str | None, api_version: int | None = None
) -> tuple[bytes, int]:
    """(frame, version) of an UpdateFeatures request; version defaults to the highest served."""
    cls, version = api_frames.request_schema(FEATURE_API_VERSIONS, UPDATE_FEATURES, api_version)
    key = _nested(cls, "FeatureUpdateKey")
    updates = tuple(
        _make(
            key,
            feature=u.feature,
            max_version_level=u.max_version_level,
            upgrade_type=u.upgrade_type,
            allow_downgrade=u.upgrade_type != UPGRADE,
        )
        for u in call.updates
    )
    body = _make(
        cls,
        timeout=timedelta(milliseconds=call.timeout_ms),
        feature_updates=updates,
        validate_only=call.validate_only,
    )
    frame = api_frames.request_frame(
        cls, body, api_key=UPDATE_FEATURES, version=version, correlation_id=correlation_id, client_id=client_id
    )
    return frame, version


def decode_request(frame: bytes | bytearray) -> tuple[RequestHeaderInfo, UpdateFeatures]:
    """Decode an UpdateFeatures request (frame without its length prefix). Raises WireError
    (with the header once it parsed: the caller answers it)."""
    head, body = api_frames.read_request(bytes(frame), FEATURE_API_VERSIONS, "UpdateFeatures")
    updates: list[FeatureUpdate] = []
    for u in body.feature_updates:
        if head.api_version == 0:
            kind = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
        else:
            kind = int(u.upgrade_type)
        if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise WireError(ErrorCode.INVALID_REQUEST, f"unknown upgrade type {kind}", header=head)
        updates.append(FeatureUpdate(str(u.feature), int(u.max_version_level), kind))
    names = [u.feature for u in updates]
    if len(set(names)) != len(names):
        raise WireError(ErrorCode.INVALID_REQUEST, f"a feature is named twice: {names}", header=head)
    call = UpdateFeatures(
        tuple(updates), bool(getattr(body, "validate_only", False)), int(body.timeout // timedelta(milliseconds=1))
    )
    return head, call


def encode_response(head: RequestHeaderInfo, answer: UpdateFeaturesAnswer) -> bytes:
    """The response frame answering `head`'s request at its version."""
    cls = api_frames.response_schema(head)
    result = _nested(cls, "UpdatableFeatureResult")
    body = _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_kio_error(answer.error),
        error_message=answer.message,
        results=tuple(
            result(feature=r.feature, error_code=_kio_error(r.error), error_message=r.message) for r in answer.results
        ),
    )
    return api_frames.response_frame(cls, head, body)


def decode_response(api_version: int, frame: bytes) -> UpdateFeaturesAnswer:
    """Decode an UpdateFeatures response (frame without its length prefix). Raises WireError."""
    body = api_frames.read_response(UPDATE_FEATURES, api_version, bytes(frame))
    results: Any = getattr(body, "results", ())
    return UpdateFeaturesAnswer(
        error_from_wire(int(body.error_code)),
        body.error_message,
        tuple(FeatureResult(str(r.feature), error_from_wire(int(r.error_code)), r.error_message) for r in results),
    )
