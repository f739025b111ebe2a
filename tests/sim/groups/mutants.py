"""Deliberately broken rules of the group coordinator: the group simulation must catch each.

A mutant is a small edit of one method's source (`old` -> `new`, each occurring once in it),
compiled in the method's own module and patched onto its class for the duration of a run
(`tests.sim.core_mutants.Mutant`, the quorum simulation's mechanism). Most break one rule of
`GroupShard`; three break the runtime's answer-ordering rule (`WriteOrder`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from broker.group.shard import GroupShard, _OffsetWrites
from broker.group.write_order import WriteOrder
from tests.sim.core_mutants import Mutant

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "join_before_all_rejoined",
        "a rebalance completes only once every known member has rejoined",
        GroupShard,
        "_maybe_complete_join",
        "group.all_joined()",
        "any(m.join_token is not None for m in group.members.values())",
    ),
    Mutant(
        "commit_without_generation_check",
        "a commit carries the group's current generation",
        GroupShard,
        "_commit_error",
        "if req.generation != group.generation:\n        return ErrorCode.ILLEGAL_GENERATION",
        "",
    ),
    Mutant(
        "no_fenced_instance_id",
        "a member id that is not its group.instance.id's current one is FENCED_INSTANCE_ID",
        GroupShard,
        "_check_member",
        "if instance is not None and group.static_members.get(instance, member_id) != member_id:\n"
        "        return None, ErrorCode.FENCED_INSTANCE_ID",
        "pass",
    ),
    Mutant(
        "sync_without_group_record",
        "the leader's SyncGroup writes the group (answers wait for that record to commit)",
        GroupShard,
        "sync",
        "out.records.append(self._group_record(group, now_ms))",
        "pass",
    ),
    Mutant(
        "answers_before_commit",
        "answers go only after their records and every earlier one committed",
        WriteOrder,
        "submit",
        "done=not out.records",
        "done=True",
    ),
    Mutant(
        "replay_ignores_group_tombstones",
        "replaying a group tombstone removes the group",
        GroupShard,
        "replay",
        "if value is None:\n        self.groups.pop(key.group, None)\n        return",
        "if value is None:\n        return",
    ),
    Mutant(
        "replay_ignores_offset_tombstones",
        "replaying an offset tombstone removes the offset",
        GroupShard,
        "replay",
        "group_offsets = self.offsets.get(key.group)",
        "group_offsets = None",
    ),
    Mutant(
        "no_generation_bump",
        "each completed join starts a new generation",
        GroupShard,
        "_complete_join",
        "group.generation += 1",
        "group.generation += 0",
    ),
    Mutant(
        "sessions_never_expire",
        "a member silent for session.timeout.ms is removed",
        GroupShard,
        "tick",
        "if member is not None and member.join_token is None and member.sync_token is None:",
        "if False:",
    ),
    Mutant(
        "static_replacement_keeps_old_id",
        "a static replacement retires the old member id",
        GroupShard,
        "_replace_static_member",
        "del group.members[old_id]",
        "pass",
    ),
    Mutant(
        "heartbeat_without_generation_check",
        "a heartbeat of an older generation is ILLEGAL_GENERATION (the member rejoins)",
        GroupShard,
        "heartbeat",
        "if req.generation != group.generation:\n        return ErrorCode.ILLEGAL_GENERATION",
        "",
    ),
    Mutant(
        "offset_undo_over_later_writes",
        "a failed offset write puts back the value before it only if no later write is pending",
        _OffsetWrites,
        "settle",
        "if committed or not last:\n        return None\n    return (writes[-1][1] if writes else base,)",
        "if committed:\n        return None\n    return (base,)",
    ),
    Mutant(
        "reads_behind_failed_append_succeed",
        "answers without records queued behind a failed append fail with it",
        WriteOrder,
        "completed",
        "if later.number > number and not later.outcome.records and later.code == ErrorCode.NONE:",
        "if False:",
    ),
    Mutant(
        "delete_group_without_undo",
        "a refused DeleteGroups puts the group and its offsets back",
        GroupShard,
        "delete_group",
        "self._undo_deletes(out, self._drop_group(group, out), group)",
        "self._drop_group(group, out)",
    ),
    Mutant(
        "group_tombstones_only_for_offsets_in_memory",
        "deleting a group tombstones every offset written since loading (an undone one may be in the log)",
        GroupShard,
        "_deletable_partitions",
        "| self._offset_writes.touched.get(group_id, set())",
        "",
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}

# Broken rules of transactional offsets: the transactional simulation
# (`tests.sim.groups.txn_world`) must catch each.
TXN_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "abort_applies_offsets",
        "an ABORT marker drops the transaction's pending offsets",
        GroupShard,
        "complete_transaction",
        "if not committed:",
        "if False:",
    ),
    Mutant(
        "replay_ignores_markers",
        "loading applies the transaction markers of the log",
        GroupShard,
        "replay_marker",
        "self.complete_transaction(producer_id, committed)",
        "pass",
    ),
    Mutant(
        "replay_txn_records_as_committed",
        "loading puts a transactional batch's offsets in its producer's pending set",
        GroupShard,
        "replay",
        "if producer_id != NO_PRODUCER_ID:",
        "if False:",
    ),
    Mutant(
        "txn_offsets_visible_at_once",
        "a transaction's offsets stay pending until its marker",
        GroupShard,
        "txn_commit",
        "pending[key] = value",
        "pending[key] = value\n        self.offsets.setdefault(req.group_id, {})[key[1]] = value",
    ),
    Mutant(
        "commit_ignores_record_order",
        "a committed transaction's offset replaces only an older committed one (by log position)",
        GroupShard,
        "complete_transaction",
        "if existing is None or value.position > existing.position:",
        "if True:",
    ),
    Mutant(
        "completion_ignores_outstanding_plain_writes",
        "a committed transaction's offset is what a refused later plain commit's undo puts back",
        GroupShard,
        "complete_transaction",
        "if self._offset_writes.rebase(group_id, tp, value):",
        "if False:",
    ),
    Mutant(
        "refused_tombstone_keeps_pending_dropped",
        "a refused tombstone puts back the pending offsets it removed",
        GroupShard,
        "_settle_offsets",
        "self._settle_pending(producer_id, pending, [removal], committed)",
        "pass",
    ),
    Mutant(
        "completion_ignores_outstanding_tombstones",
        "a transaction committed while a tombstone of its offset is written keeps it should that fail",
        GroupShard,
        "complete_transaction",
        "self._offset_writes.rebase(group_id, tp, before)",
        "pass",
    ),
    Mutant(
        "no_unstable_offsets",
        "require_stable answers UNSTABLE_OFFSET_COMMIT for a partition with pending offsets",
        GroupShard,
        "fetch_offsets",
        "unstable = self._pending_partitions(group_id) if require_stable else set()",
        "unstable = set()",
    ),
)


@contextmanager
def applied(mutant: Mutant) -> Iterator[Mutant]:
    """Patch the mutant in for the duration of the block."""
    original = mutant.cls.__dict__[mutant.method]
    setattr(mutant.cls, mutant.method, mutant.build())
    try:
        yield mutant
    finally:
        setattr(mutant.cls, mutant.method, original)
