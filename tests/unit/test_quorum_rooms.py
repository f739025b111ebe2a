"""Source-level rules of the quorum's rooms (issue 24, item 4): each folder holds what its
docstring says.

- `quorum/raft/` is the sans-IO Raft core: it imports nothing of the quorum but itself and
  the shared leaves, the Kafka error codes and the dataclass constructors (no storage, no
  wire codec, no node process, no asyncio).
- `quorum/controller/` holds the controller's rules, pure functions on plain values: it
  imports neither the node process (`quorum/node/`, which drives a RaftNode), nor the wire
  codec (`quorum/wire/`), nor storage, nor asyncio.
- The shared leaves (`quorum/kafka_errors.py`, `quorum/frozen_init.py`) import nothing of the
  quorum: every room may use them without taking another room along.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.broker_log.test_module_boundaries import imported_modules

ROOT = Path(__file__).resolve().parents[2]


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def offenders(room: str, allowed_quorum: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """`file: module` for every import in quorum/<room>/ of a quorum module outside
    `allowed_quorum` or of a module under `forbidden`."""
    paths = sorted((ROOT / "quorum" / room).rglob("*.py"))
    assert len(paths) > 3, f"quorum/{room}/ not found"
    found = []
    for path in paths:
        for name in sorted(imported_modules(path)):
            outside = _under(name, ("quorum",)) and name != "quorum" and not _under(name, allowed_quorum)
            if outside or _under(name, forbidden):
                found.append(f"{path.relative_to(ROOT)}: {name}")
    return found


LEAVES = ("quorum.kafka_errors", "quorum.frozen_init")


def test_the_raft_core_imports_only_itself_and_the_shared_leaves() -> None:
    found = offenders("raft", ("quorum.raft", *LEAVES), ("asyncio",))
    assert not found, "\n".join(found)


def test_the_shared_leaves_import_nothing_of_the_quorum() -> None:
    for leaf in LEAVES:
        path = ROOT / (leaf.replace(".", "/") + ".py")
        found = [name for name in imported_modules(path) if _under(name, ("quorum",))]
        assert not found, f"{leaf} imports {found}"


def test_the_controller_rules_import_no_node_wire_or_storage() -> None:
    allowed = ("quorum.controller", "quorum.metadata", *LEAVES)
    found = offenders("controller", allowed, ("quorum.node", "quorum.wire", "quorum.storage", "asyncio"))
    assert not found, "\n".join(found)
