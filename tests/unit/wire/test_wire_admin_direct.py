"""The direct codecs of `admin_direct` (IncrementalAlterConfigs, the controller's write path)
against the general kio path they stand in for: the same bytes out, the same decoded request
in, or None (the general path decides); through `admin_codec`, the same outcome either way."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import test_wire_admin_strategies as ads  # type: ignore[import-not-found,unused-ignore]  # a sibling module
from hypothesis import example, given, settings
from hypothesis import strategies as st

from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.wire import admin_codec, admin_direct
from quorum.wire.codec import WireError

IAC = 44
VERSIONS = st.sampled_from(range(admin_codec.ADMIN_API_VERSIONS[IAC][0], admin_codec.ADMIN_API_VERSIONS[IAC][1] + 1))


@contextmanager
def general_only() -> Iterator[None]:
    """admin_codec without its direct codecs (the reference)."""
    saved = dict(admin_codec._DIRECT_REQUESTS), dict(admin_codec._DIRECT_RESPONSES)
    admin_codec._DIRECT_REQUESTS.clear()
    admin_codec._DIRECT_RESPONSES.clear()
    try:
        yield
    finally:
        admin_codec._DIRECT_REQUESTS.update(saved[0])
        admin_codec._DIRECT_RESPONSES.update(saved[1])


def outcome(frame: bytes) -> Any:
    """What decode_admin_request makes of `frame`: the decoded request, or the error's shape."""
    try:
        return admin_codec.decode_admin_request(frame)
    except admin_codec.AdminRequestError as exc:
        return ("AdminRequestError", exc.error_code, exc.message, exc.decoded)
    except WireError as exc:
        return ("WireError", exc.code, exc.header)


def request_frame(request: IncrementalAlterConfigsRequest, version: int, client_id: str | None) -> bytes:
    frame, _, _ = admin_codec.encode_admin_request(request, correlation_id=7, client_id=client_id, api_version=version)
    return frame[4:]


THE_BENCH_WRITE = IncrementalAlterConfigsRequest(
    (
        AlterConfigsResource(
            ConfigResourceType.TOPIC, "peer-1", (AlterConfigOp("retention.ms", AlterConfigOpType.SET, "3600001"),)
        ),
    )
)


@settings(max_examples=300, deadline=None)
@given(request=ads.incremental_alter_configs_requests, version=VERSIONS, client_id=st.none() | ads.names)
@example(request=THE_BENCH_WRITE, version=1, client_id="peers")
@example(request=THE_BENCH_WRITE, version=0, client_id=None)
def test_direct_decode_is_the_general_decode(
    request: IncrementalAlterConfigsRequest, version: int, client_id: str | None
) -> None:
    frame = request_frame(request, version, client_id)
    direct = admin_codec._decode_direct(frame)
    assert direct is not None  # every request our encoder writes has the common shape
    assert direct.request == request
    with general_only():
        assert outcome(frame) == direct


@settings(max_examples=300, deadline=None)
@given(request=ads.incremental_alter_configs_requests, version=VERSIONS, data=st.data())
def test_mangled_frames_decode_alike(
    request: IncrementalAlterConfigsRequest, version: int, data: st.DataObject
) -> None:
    """Bytes changed, cut or appended: the direct path gives up or agrees with the general one."""
    frame = bytearray(request_frame(request, version, "c"))
    action = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if action == "flip" and len(frame) > 12:
        at = data.draw(st.integers(12, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    elif action == "cut":
        del frame[data.draw(st.integers(10, len(frame))) :]
    else:
        frame += data.draw(st.binary(min_size=1, max_size=8))
    mine = outcome(bytes(frame))
    with general_only():
        assert outcome(bytes(frame)) == mine


def test_tagged_fields_and_unknown_values_go_the_general_way() -> None:
    frame = bytearray(request_frame(THE_BENCH_WRITE, 1, "peers"))
    assert admin_codec._decode_direct(bytes(frame)) is not None
    at_type = 10 + len("peers") + 1 + 1  # after the header's tagged fields and the resources' count
    unknown_type = bytes(frame[:at_type]) + b"\x09" + bytes(frame[at_type + 1 :])
    assert admin_codec._decode_direct(unknown_type) is None
    with pytest.raises(admin_codec.AdminRequestError):
        admin_codec.decode_admin_request(unknown_type)
    header_tags = bytes(frame[: at_type - 2]) + b"\x01\x00\x00" + bytes(frame[at_type - 1 :])
    assert admin_codec._decode_direct(header_tags) is None


@settings(max_examples=300, deadline=None)
@given(response=ads.incremental_alter_configs_responses, version=VERSIONS, correlation_id=st.integers(0, 2**31 - 1))
@example(
    response=IncrementalAlterConfigsResponse((AlterConfigsResult(ConfigResourceType.TOPIC, "peer-1"),)),
    version=1,
    correlation_id=7,
)
@example(
    response=IncrementalAlterConfigsResponse((AlterConfigsResult(ConfigResourceType.TOPIC, "t", 12345, "x" * 200),)),
    version=1,
    correlation_id=1,
)
@example(  # one resource: the one-pack answer, at and past a one-byte compact name length
    response=IncrementalAlterConfigsResponse((AlterConfigsResult(ConfigResourceType.TOPIC, "n" * 126),)),
    version=1,
    correlation_id=2,
)
@example(
    response=IncrementalAlterConfigsResponse((AlterConfigsResult(ConfigResourceType.BROKER, "\u00e9" * 64),)),
    version=1,
    correlation_id=3,
)
def test_direct_encode_is_the_general_encode(
    response: IncrementalAlterConfigsResponse, version: int, correlation_id: int
) -> None:
    decoded = admin_codec.DecodedAdmin(
        IAC,
        version,
        correlation_id,
        None,
        admin_codec.RequestHeaderInfo(IAC, version, correlation_id, None),
        THE_BENCH_WRITE,
    )
    mine = admin_codec.encode_admin_response(decoded, response)
    with general_only():
        assert admin_codec.encode_admin_response(decoded, response) == mine
    assert struct.unpack_from(">ii", mine) == (len(mine) - 4, correlation_id)
    if all(admin_direct.known_error_code(r.error_code) for r in response.resources):
        assert admin_direct.encode_incremental_alter_configs_response(response, version, correlation_id) == mine
    else:
        assert admin_direct.encode_incremental_alter_configs_response(response, version, correlation_id) is None
