"""UpdateFeatures (57) as controllers serve it (v0-1, as Kafka 3.9): our frames round-trip,
v0's AllowDowngrade reads as a safe downgrade, bad input is a WireError with the header (so
the node answers it, INVALID_REQUEST / UNSUPPORTED_VERSION, instead of dropping the
connection), and controllers advertise the api."""

from __future__ import annotations

import pytest

from quorum.raft.errors import ErrorCode
from quorum.wire import codec, features_codec
from quorum.wire.features_codec import (
    SAFE_DOWNGRADE,
    FeatureResult,
    FeatureUpdate,
    UpdateFeatures,
    UpdateFeaturesAnswer,
)

CALL = UpdateFeatures((FeatureUpdate("kraft.version", 1),), validate_only=True, timeout_ms=5_000)


def test_request_and_response_round_trip_at_v1() -> None:
    frame, version = features_codec.encode_request(CALL, correlation_id=7, client_id="t")
    head, decoded = features_codec.decode_request(frame[4:])
    assert (head.api_key, head.api_version, head.correlation_id, version) == (57, 1, 7, 1)
    assert decoded == CALL
    answer = UpdateFeaturesAnswer(
        ErrorCode.NONE, None, (FeatureResult("kraft.version", ErrorCode.INVALID_UPDATE_VERSION, "no downgrade"),)
    )
    raw = features_codec.encode_response(head, answer)
    assert features_codec.decode_response(1, raw[4:]) == answer


def test_v0_allow_downgrade_is_a_safe_downgrade() -> None:
    call = UpdateFeatures((FeatureUpdate("kraft.version", 0, SAFE_DOWNGRADE),))
    frame, _ = features_codec.encode_request(call, correlation_id=1, client_id=None, api_version=0)
    _, decoded = features_codec.decode_request(frame[4:])
    assert decoded.updates == call.updates and not decoded.validate_only


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda f: f[:-3], ErrorCode.INVALID_REQUEST),  # truncated body
        (lambda f: f[:2] + (9).to_bytes(2, "big") + f[4:], ErrorCode.UNSUPPORTED_VERSION),  # v9
    ],
)
def test_bad_input_is_answered_with_its_header(mangle: object, code: ErrorCode) -> None:
    frame, _ = features_codec.encode_request(CALL, correlation_id=3, client_id="t")
    with pytest.raises(codec.WireError) as err:
        features_codec.decode_request(mangle(frame[4:]))  # type: ignore[operator]
    assert err.value.code == code and err.value.header is not None and err.value.header.correlation_id == 3


def test_the_same_feature_twice_is_invalid() -> None:
    twice = UpdateFeatures((FeatureUpdate("kraft.version", 1), FeatureUpdate("kraft.version", 1)))
    frame, _ = features_codec.encode_request(twice, correlation_id=1, client_id="t")
    with pytest.raises(codec.WireError) as err:
        features_codec.decode_request(frame[4:])
    assert err.value.code == ErrorCode.INVALID_REQUEST


def test_controllers_advertise_update_features() -> None:
    assert codec.advertised_api_versions()[57] == (0, 1)


def test_api_versions_v3_carries_supported_and_finalized_features() -> None:
    call = codec.ApiVersionsCall("t", "1")
    frame = codec.encode_request(
        call, correlation_id=2, client_id="t", cluster_id=None, source_id=-1, destination_id=-1, api_version=3
    )
    request = codec.decode_request(frame[4:])
    result = codec.ApiVersionsResult(
        supported_features={"kraft.version": (0, 1)}, finalized_features={"kraft.version": 1}, finalized_epoch=41
    )
    _, decoded = codec.decode_response(18, 3, codec.encode_response(request, result)[4:])
    assert isinstance(decoded, codec.ApiVersionsResult)
    assert (decoded.supported_features, decoded.finalized_features, decoded.finalized_epoch) == (
        {"kraft.version": (0, 1)},
        {"kraft.version": 1},
        41,
    )
    # Level 0 is "not finalized": left out, as Kafka does.
    unfinalized = codec.ApiVersionsResult(finalized_features={"kraft.version": 0}, finalized_epoch=3)
    _, decoded = codec.decode_response(18, 3, codec.encode_response(request, unfinalized)[4:])
    assert isinstance(decoded, codec.ApiVersionsResult) and decoded.finalized_features == {}
