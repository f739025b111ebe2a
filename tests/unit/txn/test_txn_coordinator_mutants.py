"""The state machine of `test_txn_coordinator_model` catches single-rule mutants of the
coordinator: each breaks one rule (patched in for the test only) and the model must fail.
Opt-in (`-m slow`): seconds per mutant."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from broker.txn.coordinator import Outcome, TxnCoordinator
from broker.txn.messages import TxnResult
from broker.txn.metadata import TxnState
from quorum.kafka_errors import ErrorCode
from tests.unit.txn import test_txn_coordinator_model as model

pytestmark = [pytest.mark.slow, pytest.mark.pure_python]  # mutants replace functions (conftest.py)
C = TxnCoordinator


def applied_before_commit(orig: Callable[..., None]) -> Callable[..., None]:
    def begin(self: C, m: Any, transit: Any, *args: Any) -> None:
        orig(self, m, transit, *args)
        if transit.state != TxnState.DEAD:
            m.apply(transit)

    return begin


def fence_bumped_in_memory(orig: Callable[..., None]) -> Callable[..., None]:
    """Kafka's order: the fence's epoch is taken before its record is committed, and kept."""

    def begin(self: C, m: Any, transit: Any, *args: Any) -> None:
        if transit.state == TxnState.PREPARE_ABORT and transit.producer_epoch != m.producer_epoch:
            m.producer_epoch = transit.producer_epoch
        orig(self, m, transit, *args)

    return begin


def repeat_is_always_none(orig: Callable[..., ErrorCode]) -> Callable[..., ErrorCode]:
    def end_in_state(state: TxnState, result: TxnResult) -> ErrorCode:
        return ErrorCode.NONE if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) else orig(state, result)

    return staticmethod(end_in_state)


def markers_say_commit(orig: Callable[..., Outcome]) -> Callable[..., Outcome]:
    def start_markers(self: C, m: Any, now: int) -> Outcome:
        out = orig(self, m, now)
        out.markers = [dataclasses.replace(r, result=TxnResult.COMMIT) for r in out.markers]
        return out

    return start_markers


def markers_not_resumed(orig: Callable[..., Outcome]) -> Callable[..., Outcome]:
    def loaded(self: C, now: int) -> Outcome:
        orig(self, now)
        return Outcome()

    return loaded


def epoch_not_checked(orig: Callable[..., Any]) -> Callable[..., Any]:
    def check_producer(self: C, tid: str, producer_id: int, producer_epoch: int) -> Any:
        m = self.txns.get(tid)
        return orig(self, tid, producer_id, producer_epoch if m is None else m.producer_epoch)

    return check_producer


def completes_before_its_markers(orig: Callable[..., Outcome]) -> Callable[..., Outcome]:
    def maybe_complete(self: C, tid: str) -> Outcome:
        markers = self._markers.get(tid)
        if markers is not None:
            markers.remaining.clear()
        return orig(self, tid)

    return maybe_complete


MUTANTS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "state applied before its record commits": ("_begin", applied_before_commit),
    "the fence's epoch bumped in memory before its record": ("_begin", fence_bumped_in_memory),
    "EndTxn repeated answers NONE whatever the result": ("_end_in_state", repeat_is_always_none),
    "the markers say COMMIT": ("_start_markers", markers_say_commit),
    "markers not resumed after a reload": ("loaded", markers_not_resumed),
    "the producer epoch is not checked": ("_check_producer", epoch_not_checked),
    "completion written before every marker": ("_maybe_complete", completes_before_its_markers),
}


@pytest.fixture(params=sorted(MUTANTS))
def mutant(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name, wrap = MUTANTS[request.param]
    monkeypatch.setattr(TxnCoordinator, name, wrap(TxnCoordinator.__dict__[name].__get__(None, TxnCoordinator)))
    yield request.param


def test_the_model_catches(mutant: str) -> None:
    found = settings(
        model.TestTxnCoordinatorModel.settings,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: finding it is enough
        report_multiple_bugs=False,
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(model.TxnCoordinatorModel, settings=found)


def test_the_model_passes_without_a_mutant() -> None:
    run_state_machine_as_test(
        model.TxnCoordinatorModel, settings=settings(model.TestTxnCoordinatorModel.settings, database=None)
    )
