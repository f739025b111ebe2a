"""The command-line tools' requests to controllers (quorum/node/tool_requests.py), through
`quorum add-controller/remove-controller` and `features upgrade/describe`, against a scripted
controller on a real loopback socket: an address that does not answer is skipped, a
retriable answer is asked again, a refusal is reported at once with Kafka's message, and a
change that stays retriable is given up at the timeout with the last answer."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from api import cli
from quorum.node import features_cli, quorum_cli
from quorum.node.free_ports import free_ports
from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.errors import ErrorCode
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode
from quorum.wire import codec, features_codec, voter_codec
from quorum.wire.transport import close_server, serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

DIRECTORY = uuid.UUID(int=7)
Answer = Callable[[bytes], bytes]  # request frame (no length prefix) -> response frame


@contextmanager
def controller(port: int, answers: list[Answer]) -> Iterator[list[int]]:
    """A controller on 127.0.0.1:`port` (its own thread and event loop) that answers its n-th
    request with answers[min(n, len - 1)]; yields the api keys of the requests it got."""
    seen: list[int] = []
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def handle(frame: bytes) -> bytes:
        seen.append(int.from_bytes(frame[:2], "big"))
        return answers[min(len(seen), len(answers)) - 1](frame)

    async def main() -> None:
        server = await serve("127.0.0.1", port, handle)
        ready.set()
        await stop.wait()
        await close_server(server)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10), "the scripted controller did not start"
    try:
        yield seen
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def voter_answer(error: ErrorCode, message: str | None = None) -> Answer:
    def answer(frame: bytes) -> bytes:
        head, _ = voter_codec.decode_voter_request(frame)
        return voter_codec.encode_voter_response(head, voter_codec.VoterCallAnswer(error, message))

    return answer


def features_answer(error: ErrorCode) -> Answer:
    def answer(frame: bytes) -> bytes:
        head, call = features_codec.decode_request(frame)
        results = tuple(features_codec.FeatureResult(u.feature, error) for u in call.updates)
        return features_codec.encode_response(head, features_codec.UpdateFeaturesAnswer(ErrorCode.NONE, None, results))

    return answer


def remove_controller(bootstrap: str, timeout_ms: int = 10_000) -> list[str]:
    return [
        "quorum", "remove-controller", "--controller-id", "2", "--controller-directory-id",
        "AAAAAAAAAAAAAAAAAAAABw", "--bootstrap-controller", bootstrap, "--timeout-ms", str(timeout_ms),
    ]  # fmt: skip


def test_a_voter_change_skips_a_dead_address_and_asks_again_after_a_retriable_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead, live = free_ports(2)
    answers = [voter_answer(ErrorCode.REQUEST_TIMED_OUT, "not caught up"), voter_answer(ErrorCode.NONE)]
    with controller(live, answers) as seen:
        assert cli.main(remove_controller(f"127.0.0.1:{dead},127.0.0.1:{live}")) == 0
    assert seen == [voter_codec.REMOVE_RAFT_VOTER] * 2
    assert "Removed KRaft controller 2 with directory id AAAAAAAAAAAAAAAAAAAABw" in capsys.readouterr().out


def test_a_refused_voter_change_is_reported_at_once_with_kafka_s_message() -> None:
    (port,) = free_ports(1)
    refusal = voter_answer(ErrorCode.INVALID_REQUEST, "the voter's directory id is missing")
    with controller(port, [refusal]) as seen:
        call = voter_codec.RemoveRaftVoter(None, ReplicaKey(2, DIRECTORY))
        with pytest.raises(quorum_cli.QuorumCommandError) as info:
            quorum_cli.send_voter_call([("127.0.0.1", port)], call, timeout_s=10)
    assert str(info.value) == "INVALID_REQUEST: the voter's directory id is missing"
    assert len(seen) == 1
    with controller(port, [voter_answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]):
        with pytest.raises(quorum_cli.QuorumCommandError, match="^CLUSTER_AUTHORIZATION_FAILED$"):
            quorum_cli.send_voter_call([("127.0.0.1", port)], call, timeout_s=10)


def test_add_raft_voter_asks_for_no_more_than_the_time_left() -> None:
    """AddRaftVoter's TimeoutMs is the tool's time left at most, as Kafka's admin client caps it."""
    (port,) = free_ports(1)
    sent: list[int] = []

    def answer(frame: bytes) -> bytes:
        head, call = voter_codec.decode_voter_request(frame)
        assert isinstance(call, voter_codec.AddRaftVoter)
        sent.append(call.timeout_ms)
        return voter_codec.encode_voter_response(head, voter_codec.VoterCallAnswer(ErrorCode.NONE))

    node = VoterNode(ReplicaKey(4, DIRECTORY), (Endpoint("CONTROLLER", "127.0.0.1", 1),))
    with controller(port, [answer]):
        quorum_cli.send_voter_call([("127.0.0.1", port)], voter_codec.AddRaftVoter(None, node, 30_000), timeout_s=2)
    assert len(sent) == 1 and 0 < sent[0] <= 2_000, sent


def test_an_update_that_stays_retriable_is_given_up_with_the_last_answer() -> None:
    (port,) = free_ports(1)
    with controller(port, [features_answer(ErrorCode.NOT_CONTROLLER)]) as seen:
        call = features_codec.UpdateFeatures((features_codec.FeatureUpdate("kraft.version", 1),))
        with pytest.raises(features_cli.FeatureCommandError) as info:
            features_cli.update_features([("127.0.0.1", port)], call, timeout_s=1.0)
    assert str(info.value) == "the update did not complete in 1 s: kraft.version: NOT_CONTROLLER"
    assert len(seen) >= 2 and set(seen) == {features_codec.UPDATE_FEATURES}


def test_features_describe_reads_the_first_controller_that_answers(capsys: pytest.CaptureFixture[str]) -> None:
    dead, live = free_ports(2)

    def api_versions(frame: bytes) -> bytes:
        result = codec.ApiVersionsResult(
            supported_features={"kraft.version": (0, 1)}, finalized_features={"kraft.version": 1}, finalized_epoch=5
        )
        return codec.encode_response(codec.decode_request(frame), result)

    with controller(live, [api_versions]) as seen:
        assert cli.main(["features", "describe", "--bootstrap-controller", f"127.0.0.1:{dead},127.0.0.1:{live}"]) == 0
    assert seen == [codec.ApiKey.API_VERSIONS]
    out = capsys.readouterr().out
    assert "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1" in out


def test_a_tool_with_no_controller_to_ask_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    (dead,) = free_ports(1)
    assert cli.main(remove_controller(f"127.0.0.1:{dead}", timeout_ms=300)) == 1
    err = capsys.readouterr().err
    assert f"the voter change did not complete in 0.3 s: 127.0.0.1:{dead}: cannot connect" in err


def described(*voters: ReplicaKey) -> Answer:
    """A DescribeQuorum answer whose voters are `voters` (leader: the first)."""

    def answer(frame: bytes) -> bytes:
        request = codec.decode_request(frame)
        replicas = tuple(ReplicaDescription(v.node_id, 10, directory_id=v.directory_id) for v in voters)
        description = QuorumDescription(voters[0].node_id, 3, 10, replicas, ())
        return codec.encode_response(request, description)

    return answer


def by_api(voter: list[Answer], describe: Answer) -> Answer:
    """Voter-change requests get voter[n] (n-th of them, the last repeated), DescribeQuorum `describe`."""
    seen = [0]

    def answer(frame: bytes) -> bytes:
        if int.from_bytes(frame[:2], "big") == DESCRIBE_QUORUM:
            return describe(frame)
        seen[0] += 1
        return voter[min(seen[0], len(voter)) - 1](frame)

    return answer


DESCRIBE_QUORUM = 55
NEW = ReplicaKey(4, DIRECTORY)
ADD_NEW = voter_codec.AddRaftVoter(None, VoterNode(NEW, (Endpoint("CONTROLLER", "127.0.0.1", 1),)), 30_000)


@pytest.mark.parametrize(
    ("call", "repeated", "shown", "ok"),
    [
        # A try that timed out was committed: the next is refused, and the leader shows the change.
        (ADD_NEW, ErrorCode.DUPLICATE_VOTER, (ReplicaKey(1), NEW), True),
        (voter_codec.RemoveRaftVoter(None, NEW), ErrorCode.VOTER_NOT_FOUND, (ReplicaKey(1),), True),
        # The refusal is not about this change: id 4 is a voter with another directory (an old disk).
        (ADD_NEW, ErrorCode.DUPLICATE_VOTER,
         (ReplicaKey(1), ReplicaKey(4, uuid.UUID(int=8))), False),
        (voter_codec.RemoveRaftVoter(None, NEW), ErrorCode.VOTER_NOT_FOUND, (ReplicaKey(1), NEW), False),
    ],
)  # fmt: skip
def test_a_change_an_earlier_try_made_is_settled_by_the_leader_s_description(
    call: voter_codec.VoterCall, repeated: ErrorCode, shown: tuple[ReplicaKey, ...], ok: bool
) -> None:
    (port,) = free_ports(1)
    made = quorum_cli._has_voter(NEW)
    expected = (repeated, made if isinstance(call, voter_codec.AddRaftVoter) else (lambda d: not made(d)))
    answers = by_api([voter_answer(ErrorCode.REQUEST_TIMED_OUT), voter_answer(repeated)], described(*shown))
    with controller(port, [answers]):
        if ok:
            quorum_cli.send_voter_call([("127.0.0.1", port)], call, timeout_s=10, made=expected)
        else:
            with pytest.raises(quorum_cli.QuorumCommandError, match=repeated.name):
                quorum_cli.send_voter_call([("127.0.0.1", port)], call, timeout_s=10, made=expected)


def test_a_first_try_refused_as_made_already_is_an_error() -> None:
    """Without an earlier try the change was there before the command: Kafka's refusal stands."""
    (port,) = free_ports(1)
    expected = (ErrorCode.DUPLICATE_VOTER, quorum_cli._has_voter(NEW))
    answers = by_api([voter_answer(ErrorCode.DUPLICATE_VOTER, "4 is already a voter")], described(ReplicaKey(1), NEW))
    with controller(port, [answers]) as seen:
        with pytest.raises(quorum_cli.QuorumCommandError, match="DUPLICATE_VOTER: 4 is already a voter"):
            quorum_cli.send_voter_call([("127.0.0.1", port)], ADD_NEW, timeout_s=10, made=expected)
    assert seen == [voter_codec.ADD_RAFT_VOTER]
