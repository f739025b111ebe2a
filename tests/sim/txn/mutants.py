"""Deliberately broken rules of the transaction code: the transactions simulation must catch each.

A mutant is a small edit of one function's source (`old` -> `new`, `old` occurring once in
it), compiled in the function's own module and patched onto its owner (a class, or the
module for a module-level function, which its callers then find by name) for the duration
of a run: the mechanism of the other simulations (`tests.sim.core_mutants`), extended to
module functions and static methods.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from broker.log import producer_state
from broker.log.producer_state import ProducerStateManager
from broker.txn.coordinator import TxnCoordinator


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str  # the rule it breaks, in a few words
    owner: type | types.ModuleType
    attr: str
    old: str
    new: str

    def build(self) -> object:
        original = self.owner.__dict__[self.attr]
        function = original.__func__ if isinstance(original, staticmethod) else original
        source = textwrap.dedent(inspect.getsource(function))
        if source.count(self.old) != 1:
            raise ValueError(f"mutant {self.name}: {self.old!r} occurs {source.count(self.old)} times")
        namespace = dict(vars(sys.modules[function.__module__]))
        exec(compile(source.replace(self.old, self.new), f"<mutant {self.name}>", "exec"), namespace)  # noqa: S102
        mutated = namespace[self.attr]
        return staticmethod(mutated) if isinstance(original, staticmethod) else mutated


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "no_duplicate_detection",
        "a batch equal to one of the producer's last five is answered with its offsets, not appended",
        ProducerStateManager,
        "check_client_append",
        "if duplicate is not None:",
        "if False:",
    ),
    Mutant(
        "no_data_epoch_check",
        "a client's batch with an epoch below its producer's is INVALID_PRODUCER_EPOCH",
        producer_state,
        "check_client_batch",
        "check_producer_epoch(current, batch.producer_epoch, batch.base_offset, where)",
        "pass",
    ),
    Mutant(
        "no_coordinator_epoch_fencing",
        "a marker from a coordinator epoch below the last one seen is TRANSACTION_COORDINATOR_FENCED",
        producer_state,
        "check_marker",
        "if current.coordinator_epoch > marker.coordinator_epoch:",
        "if False:",
    ),
    Mutant(
        "lso_ignores_ongoing",
        "the first unstable offset is that of the oldest open transaction",
        ProducerStateManager,
        "first_unstable_offset",
        "first = next(iter(self.ongoing.values()), None)",
        "first = None",
    ),
    Mutant(
        "aborted_not_recorded",
        "every transaction a marker closes is reported (the aborted ones go to the .txnindex)",
        ProducerStateManager,
        "on_append",
        "completed.append((txn, lso))",
        "pass",
    ),
    Mutant(
        "replay_forgets_prepare_commit",
        "replaying a PrepareCommit record makes the transaction PrepareCommit",
        TxnCoordinator,
        "replay",
        "self.txns[tid] = m",
        "if m.state != TxnState.PREPARE_COMMIT:\n        self.txns[tid] = m",
    ),
    Mutant(
        "fence_without_epoch_bump",
        "the coordinator's own abort (timeout, fence) bumps the producer epoch",
        TxnCoordinator,
        "_fence",
        "epoch = min(m.producer_epoch + 1, EPOCH_MAX)",
        "epoch = m.producer_epoch",
    ),
    Mutant(
        "verification_skipped",
        "KIP-890: a partition not in the producer's transaction is TRANSACTION_ABORTABLE",
        TxnCoordinator,
        "verify_partitions",
        "ErrorCode.NONE if tp in m.partitions else ErrorCode.TRANSACTION_ABORTABLE",
        "ErrorCode.NONE",
    ),
    Mutant(
        "no_producer_epoch_check_at_coordinator",
        "AddPartitionsToTxn / EndTxn with an old producer epoch is PRODUCER_FENCED",
        TxnCoordinator,
        "_check_producer",
        "if m.producer_epoch != producer_epoch:",
        "if False:",
    ),
    Mutant(
        "init_does_not_abort_ongoing",
        "InitProducerId over an Ongoing transaction aborts it (fencing its producer) first",
        TxnCoordinator,
        "_init_producer_id",
        "if m.state == TxnState.ONGOING:",
        "if False:",
    ),
    Mutant(
        "complete_before_every_marker",
        "a transaction completes only once every partition has its marker",
        TxnCoordinator,
        "markers_written",
        "if code in _MARKER_DONE:",
        "if True:",
    ),
    Mutant(
        "load_skips_prepared_markers",
        "a loaded coordinator sends the markers of every prepared transaction",
        TxnCoordinator,
        "loaded",
        "out.extend(self._start_markers(m, now_ms))",
        "pass",
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}


@contextmanager
def applied(mutant: Mutant) -> Iterator[Mutant]:
    """Patch the mutant in for the duration of the block."""
    original = mutant.owner.__dict__[mutant.attr]
    setattr(mutant.owner, mutant.attr, mutant.build())
    try:
        yield mutant
    finally:
        setattr(mutant.owner, mutant.attr, original)
