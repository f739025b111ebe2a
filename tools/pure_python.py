"""Import pykraft's modules from their `.py` sources even where a compiled build put a `.so`
next to them (tools/mypyc_build.py).

Python's path finder prefers an extension module to the source of the same name, so in a
compiled checkout `import broker.log.index` loads the `.so`. A few tests must run the source
instead: mutation tests plant a mutant by replacing a module's function, and spies replace
a method on an instance; compiled code calls its functions directly and its instances have
no `__dict__`, so neither takes effect there. The root conftest installs this finder when
PYKRAFT_PURE=1 (the second, pure pass of a compiled run), before any pykraft module loads.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

# The top-level packages a compiled build may hold extension modules in.
ROOMS: tuple[str, ...] = ("broker", "quorum", "api")


class SourceFirstFinder:
    """A meta-path finder for the submodules of ROOMS that returns the `.py` source's spec.
    Packages (their `__init__.py`) are never compiled and are left to the default finders."""

    @classmethod
    def find_spec(
        cls, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] not in ROOMS or "." not in name:
            return None
        leaf = name.rpartition(".")[2]
        for entry in path or ():
            source = Path(entry) / f"{leaf}.py"
            if source.is_file():
                loader = importlib.machinery.SourceFileLoader(name, str(source))
                return importlib.util.spec_from_file_location(name, source, loader=loader)
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path` (idempotent). Call it before anything imports
    a module of ROOMS: a module already loaded from its `.so` stays loaded."""
    loaded = [name for name in sys.modules if name.partition(".")[0] in ROOMS and "." in name]
    if loaded:
        raise RuntimeError(f"pure_python.install() after pykraft modules were imported: {loaded[:3]}")
    if SourceFirstFinder not in sys.meta_path:
        sys.meta_path.insert(0, SourceFirstFinder)
