"""`RaftLog`: the leader-epoch cache, fetch validation, divergence, prefix deletion
and reads; example tests plus model-based properties against brute-force scans."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from raft_helpers import batch, log_of  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path

from quorum.raft.log import RaftLog, Validity, batch_size_estimate
from quorum.raft.types import Batch, OffsetAndEpoch

OE = OffsetAndEpoch


def snapshot_log() -> RaftLog:
    """Snapshot (end 10, epoch 2), then e2 [10, 12) and e4 [12, 15)."""
    log = RaftLog([batch(10, 2, 2), batch(12, 4, 3)], start_offset=10, snapshot_id=OE(epoch=2, offset=10))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 15, 4)
    return log


# ------------------------------------------------------- end_offset_for_epoch


def test_end_offset_for_epoch_examples() -> None:
    log = log_of((1, 3), (3, 2), (3, 1), (5, 4))  # e1 [0,3) e3 [3,6) e5 [6,10)
    assert log.epoch_starts == [(1, 0), (3, 3), (5, 6)]
    assert log.end_offset_for_epoch(1) == OE(epoch=1, offset=3)
    assert log.end_offset_for_epoch(2) == OE(epoch=1, offset=3)  # largest epoch <= 2
    assert log.end_offset_for_epoch(3) == OE(epoch=3, offset=6)
    assert log.end_offset_for_epoch(4) == OE(epoch=3, offset=6)
    assert log.end_offset_for_epoch(5) == OE(epoch=5, offset=10)
    assert log.end_offset_for_epoch(9) == OE(epoch=5, offset=10)
    assert log.end_offset_for_epoch(0) == OE(epoch=0, offset=0)
    assert RaftLog().end_offset_for_epoch(7) == OE(epoch=0, offset=0)


def test_end_offset_for_epoch_below_the_log_falls_back_to_the_snapshot() -> None:
    log = snapshot_log()
    assert log.end_offset_for_epoch(1) == OE(epoch=1, offset=10)  # never an epoch above the one asked
    assert log.end_offset_for_epoch(2) == OE(epoch=2, offset=12)
    assert log.end_offset_for_epoch(3) == OE(epoch=2, offset=12)
    assert log.end_offset_for_epoch(4) == OE(epoch=4, offset=15)


# ------------------------------------------------- validate_offset_and_epoch


@pytest.mark.parametrize(
    ("offset", "epoch", "kind", "position"),
    [
        (5, 3, Validity.VALID, None),
        (4, 3, Validity.VALID, None),  # a prefix of epoch 3
        (3, 1, Validity.VALID, None),
        (0, 0, Validity.VALID, None),
        (6, 3, Validity.DIVERGING, OE(epoch=3, offset=5)),  # beyond the end of epoch 3 here
        (4, 2, Validity.DIVERGING, OE(epoch=1, offset=3)),  # epoch 2 never existed here
        (4, 1, Validity.DIVERGING, OE(epoch=1, offset=3)),
        (9, 7, Validity.DIVERGING, OE(epoch=3, offset=5)),
        (2, 0, Validity.DIVERGING, OE(epoch=0, offset=0)),
    ],
)
def test_validate_offset_and_epoch(offset: int, epoch: int, kind: Validity, position: OE | None) -> None:
    log = log_of((1, 3), (3, 2))
    verdict = log.validate_offset_and_epoch(offset, epoch)
    assert (verdict.kind, verdict.position) == (kind, position)


@pytest.mark.parametrize(
    ("offset", "epoch", "kind", "position"),
    [
        (5, 1, Validity.SNAPSHOT, OE(epoch=2, offset=10)),  # below the log start
        (0, 0, Validity.SNAPSHOT, OE(epoch=2, offset=10)),  # an empty replica
        (10, 1, Validity.SNAPSHOT, OE(epoch=2, offset=10)),  # at the start, other epoch
        (12, 1, Validity.SNAPSHOT, OE(epoch=2, offset=10)),  # older than the snapshot
        (10, 2, Validity.VALID, None),  # exactly the snapshot
        (12, 2, Validity.VALID, None),
        (15, 4, Validity.VALID, None),
        (12, 3, Validity.DIVERGING, OE(epoch=2, offset=12)),
        (16, 4, Validity.DIVERGING, OE(epoch=4, offset=15)),
    ],
)
def test_validate_offset_and_epoch_with_a_snapshot(
    offset: int, epoch: int, kind: Validity, position: OE | None
) -> None:
    verdict = snapshot_log().validate_offset_and_epoch(offset, epoch)
    assert (verdict.kind, verdict.position) == (kind, position)


# --------------------------------------------------------- truncation_offset_for


def test_truncation_offset_for() -> None:
    log = RaftLog([batch(0, 1, 3), batch(3, 2, 2), batch(5, 2, 2)])  # e1 [0,3) e2 [3,5) [5,7)
    assert log.truncation_offset_for(OE(epoch=2, offset=5)) == 5
    assert log.truncation_offset_for(OE(epoch=2, offset=9)) == 7  # we hold less than the leader
    assert log.truncation_offset_for(OE(epoch=2, offset=4)) == 3  # floored to a batch boundary
    assert log.truncation_offset_for(OE(epoch=1, offset=3)) == 3
    assert log.truncation_offset_for(OE(epoch=1, offset=1)) == 0
    assert log.truncation_offset_for(OE(epoch=3, offset=9)) == 7  # epoch 3 unknown here: end of epoch 2
    assert log.truncation_offset_for(OE(epoch=0, offset=0)) == 0


def test_truncation_offset_never_below_the_log_start() -> None:
    log = snapshot_log()
    assert log.truncation_offset_for(OE(epoch=1, offset=4)) == 10
    assert log.truncation_offset_for(OE(epoch=2, offset=11)) == 10
    assert log.truncation_offset_for(OE(epoch=3, offset=14)) == 12


def test_truncate_to_rebuilds_the_epoch_cache() -> None:
    log = log_of((1, 3), (3, 2), (5, 4))
    log.truncate_to(5)
    assert (log.end_offset, log.last_epoch, list(log.epoch_starts)) == (5, 3, [(1, 0), (3, 3)])
    log.truncate_to(3)
    assert (log.end_offset, log.last_epoch, list(log.epoch_starts)) == (3, 1, [(1, 0)])
    log.truncate_to(9)  # beyond the end: nothing to do
    assert log.end_offset == 3
    with pytest.raises(ValueError):
        log.truncate_to(1)  # not a batch boundary
    log.append(batch(3, 4, 1))
    assert log.end_offset_for_epoch(3) == OE(epoch=1, offset=3)


# ------------------------------------------------------------------ delete_before


def test_delete_before_keeps_the_suffix_and_trims_the_epoch_cache() -> None:
    log = RaftLog([batch(0, 1, 3), batch(3, 2, 2), batch(5, 2, 3)])
    log.delete_before(OE(epoch=2, offset=5))
    assert (log.start_offset, log.end_offset, log.snapshot_id) == (5, 8, OE(epoch=2, offset=5))
    assert [b.base_offset for b in log.batches] == [5]
    assert list(log.epoch_starts) == [(2, 5)]
    assert log.end_offset_for_epoch(1) == OE(epoch=1, offset=5)
    assert log.epoch_at(4) == 2  # the snapshot's last record
    with pytest.raises(IndexError):
        log.epoch_at(3)
    assert log.validate_offset_and_epoch(3, 2).kind is Validity.SNAPSHOT
    assert log.validate_offset_and_epoch(5, 2).kind is Validity.VALID


def test_delete_before_the_end_of_the_log_empties_it() -> None:
    log = log_of((1, 3), (2, 2))
    log.delete_before(OE(epoch=2, offset=5))
    assert (log.start_offset, log.end_offset, len(log), log.last_epoch) == (5, 5, 0, 2)
    log.append(batch(5, 3, 1))
    assert log.end_offset_for_epoch(2) == OE(epoch=2, offset=5)
    assert log.end_offset_for_epoch(3) == OE(epoch=3, offset=6)


def test_delete_before_an_older_offset_is_a_no_op_on_the_batches() -> None:
    log = RaftLog([batch(0, 1, 3), batch(3, 2, 2)])
    log.delete_before(OE(epoch=2, offset=5))
    log.append(batch(5, 2, 1))
    log.delete_before(OE(epoch=2, offset=5))
    assert (log.start_offset, log.end_offset) == (5, 6)


def test_reset_to_snapshot() -> None:
    log = log_of((1, 3))
    log.reset_to_snapshot(OE(epoch=4, offset=40))
    assert (log.start_offset, log.end_offset, log.last_epoch, len(log)) == (40, 40, 4, 0)
    assert log.validate_offset_and_epoch(40, 4).kind is Validity.VALID


# -------------------------------------------------------------------------- read


def test_read_respects_max_bytes_but_returns_at_least_one_batch() -> None:
    batches = [Batch(i * 2, 1, (b"x" * 100, b"y" * 100)) for i in range(5)]
    log = RaftLog(batches)
    size = batch_size_estimate(batches[0])
    assert size == 61 + 200 + 16
    assert log.read(0, 0) == (batches[0],)  # one batch even over the limit
    assert log.read(0, size) == (batches[0],)
    assert log.read(0, 2 * size) == tuple(batches[:2])
    assert log.read(0, 2 * size + size - 1) == tuple(batches[:2])
    assert log.read(3, 10 * size) == tuple(batches[1:])  # from the batch holding offset 3
    assert log.read(10, 1000) == ()  # at the end
    assert log.read(99, 1000) == ()
    log.delete_before(OE(epoch=1, offset=4))
    assert log.read(2, 1000) == ()  # below the start


def test_batches_between() -> None:
    log = log_of((1, 3), (2, 2), (2, 1), (4, 4))
    assert [b.base_offset for b in log.batches_between(0, 10)] == [0, 3, 5, 6]
    assert [b.base_offset for b in log.batches_between(3, 6)] == [3, 5]
    assert log.batches_between(6, 6) == ()


def test_append_rejects_gaps_empty_batches_and_older_epochs() -> None:
    log = log_of((2, 2))
    with pytest.raises(ValueError):
        log.append(batch(3, 2, 1))
    with pytest.raises(ValueError):
        log.append(Batch(2, 2, ()))
    with pytest.raises(ValueError):
        log.append(batch(2, 1, 1))


# --------------------------------------------------------------- model tests

runs = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=0, max_size=12)


def build(epoch_steps: list[tuple[int, int]], first_epoch: int = 1) -> tuple[RaftLog, list[int]]:
    """A log whose batches have the given (epoch increment, size); returns it and the
    epoch of every record (index = offset) for the naive model."""
    log = RaftLog()
    epochs: list[int] = []
    epoch = first_epoch
    for step, size in epoch_steps:
        epoch += step
        log.append(batch(len(epochs), epoch, size))
        epochs.extend([epoch] * size)
    return log, epochs


def naive_end_offset_for_epoch(epochs: list[int], start: int, snapshot_epoch: int, epoch: int) -> OE:
    """Brute force: scan every record in [start, end)."""
    present = [(offset, e) for offset, e in enumerate(epochs) if offset >= start and e <= epoch]
    if not present:
        return OE(epoch=min(snapshot_epoch, epoch), offset=start)
    best = max(e for _, e in present)
    return OE(epoch=best, offset=max(offset for offset, e in present if e == best) + 1)


@given(runs, st.integers(0, 30), st.data())
def test_end_offset_for_epoch_matches_a_brute_force_scan(
    steps: list[tuple[int, int]], probe: int, data: st.DataObject
) -> None:
    log, epochs = build(steps)
    start, snapshot_epoch = 0, 0
    # Optionally drop a suffix, then a prefix (as truncation and snapshots do).
    boundaries = [b.base_offset for b in log.batches] + [log.end_offset]
    cut = data.draw(st.sampled_from(boundaries), label="truncate_to")
    log.truncate_to(cut)
    del epochs[cut:]
    boundaries = [b for b in boundaries if b <= cut]
    start = data.draw(st.sampled_from(boundaries), label="delete_before")
    if start > 0:
        snapshot_epoch = epochs[start - 1]
        log.delete_before(OE(epoch=snapshot_epoch, offset=start))
    for epoch in {probe, *epochs, *(e + 1 for e in epochs), *(max(e - 1, 0) for e in epochs)}:
        assert log.end_offset_for_epoch(epoch) == naive_end_offset_for_epoch(epochs, start, snapshot_epoch, epoch)


@given(runs.filter(bool), st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), max_size=6), st.data())
def test_divergence_resolution_truncates_exactly_to_the_common_prefix(
    common: list[tuple[int, int]], mine: list[tuple[int, int]], data: st.DataObject
) -> None:
    """A follower repeatedly fetching from a leader whose log differs after a common prefix
    ends up, after DivergingEpoch rounds, with exactly that common prefix (never less)."""
    prefix, epochs = build(common)
    last = epochs[-1]
    top = last + 3 * (len(mine) + 6)
    # Epochs after the prefix: disjoint sets for the two logs (one leader per epoch), either
    # may continue the prefix's last epoch, and the leader's log ends in its own, newest epoch.
    pool = list(range(last + 1, top))
    follower_epochs = sorted(data.draw(st.sets(st.sampled_from(pool), max_size=len(mine)), label="follower epochs"))
    leader_epochs = sorted(
        data.draw(
            st.sets(st.sampled_from([e for e in pool if e not in follower_epochs]), max_size=4), label="leader epochs"
        )
    )
    continues = data.draw(st.sampled_from(["none", "leader", "follower"]), label="continues last epoch")
    follower_epochs = ([last] if continues == "follower" else []) + follower_epochs
    leader_epochs = ([last] if continues == "leader" else []) + leader_epochs + [top]

    def extend(epochs_after: list[int], tag: str) -> RaftLog:
        log = RaftLog(prefix.batches)
        for e in epochs_after:
            log.append(batch(log.end_offset, e, data.draw(st.integers(1, 3), label="size"), tag))
        return log

    leader = extend(leader_epochs, "L")
    follower = extend(follower_epochs, "F")
    common_end = prefix.end_offset
    for _ in range(2 * len(follower) + 2):
        verdict = leader.validate_offset_and_epoch(follower.end_offset, follower.last_epoch)
        if verdict.kind is Validity.VALID:
            break
        assert verdict.kind is Validity.DIVERGING and verdict.position is not None
        target = follower.truncation_offset_for(verdict.position)
        assert common_end <= target < follower.end_offset, (verdict, target)
        follower.truncate_to(target)
    else:
        raise AssertionError("divergence never resolved")
    assert follower.end_offset == common_end
    assert list(follower.batches) == list(leader.batches)[: len(follower)]
