"""Source-level rules of the log layer: `broker/log/` knows nothing of replication or of
the client listener (DESIGN.md: "no knowledge of replication")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name `path` imports, at any depth (function-local imports too);
    `from a import b` counts as both `a` and `a.b` (b may be a submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_log_layer_imports_nothing_of_replication_or_the_listener() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "broker" / "log").glob("*.py"))
        for name in imported_modules(path)
        if name.startswith(("broker.replica", "broker.kafka", "broker.node", "broker.dataplane"))
    }
    assert not offenders, sorted(offenders)


# Names (without leading underscores) that modules used to give their own copies of the
# batch header's layout; they live in quorum/storage/batch_layout.py alone.
_LAYOUT_NAMES = {
    "MAGIC", "LOG_OVERHEAD", "BATCH_HEADER_SIZE", "BATCH_HEADER_BYTES", "BATCH_LENGTH_AT", "MAGIC_AT", "CRC_AT",
    "CRC_FROM", "CRC_START", "ATTRS_AT", "ATTRIBUTES_AT", "MAX_TS_AT", "MAX_TIMESTAMP_AT", "ATTR_COMPRESSION_MASK",
    "ATTR_TIMESTAMP_TYPE", "ATTR_LOG_APPEND_TIME", "ATTR_TRANSACTIONAL", "ATTR_CONTROL", "CODECS", "CODEC_NAMES",
    "LOG_HEADER",
}  # fmt: skip
_HEADER_FORMAT = ">qiibIhiqqqhii"


def layout_definitions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name) and target.id.lstrip("_") in _LAYOUT_NAMES:
                found.append(target.id)
    found += [
        f"struct {_HEADER_FORMAT!r}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value == _HEADER_FORMAT
    ]
    return found


def test_the_batch_header_layout_is_defined_once() -> None:
    home = ROOT / "quorum" / "storage" / "batch_layout.py"
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for package in ("broker", "quorum", "api")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != home
        for name in layout_definitions(path)
    }
    assert not offenders, sorted(offenders)
    assert layout_definitions(home)
