"""Source-level rules of the log layer: `broker/log/` knows nothing of replication or of
the client listener (DESIGN.md: "no knowledge of replication")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_log_layer_imports_nothing_of_replication_or_the_listener() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "broker" / "log").glob("*.py"))
        for name in imported_modules(path)
        if name.startswith(("broker.replica", "broker.kafka", "broker.node", "broker.dataplane"))
    }
    assert not offenders, sorted(offenders)
