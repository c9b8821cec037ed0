"""The public surface of tidings.coordination is locked, and the package stays pure."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tidings.coordination as coordination_package

EXPECTED = [
    "Break",
    "Continue",
    "Coordination",
    "Orchestration",
    "Step",
    "append",
    "both",
    "coordination",
    "elapsed",
    "emit",
    "emit_from",
    "empty",
    "event",
    "orchestrate",
    "orchestration",
    "retn",
    "zip",
]


def test_the_public_names_are_exactly_these() -> None:
    assert coordination_package.__all__ == EXPECTED
    assert sorted(coordination_package.__all__) == coordination_package.__all__
    for name in EXPECTED:
        assert getattr(coordination_package, name) is not None


def test_the_package_imports_only_the_standard_library_and_itself() -> None:
    # A static check, like the import-linter contract: the root package `tidings` imports
    # the shell for its own exports, so what is loaded at run time proves nothing here.
    package = Path(coordination_package.__file__).parent
    allowed = ("tidings.coordination", "tidings.errors")
    for module in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert name.startswith(allowed) or (
                    top in sys.stdlib_module_names or top == "__future__"
                ), f"{module.name} imports {name}"
