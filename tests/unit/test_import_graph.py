"""The engine's import graph: the journal sits below the data phases, and modules share only
public names (a private ``_name`` may change without its module's callers being looked at)."""

from __future__ import annotations

import ast
import pathlib

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "dbt" / "adapters" / "rowmerge" / "merge"


def _sibling_imports(path: pathlib.Path) -> list[tuple[str, str]]:
    """(module, name) for every ``from .module import name`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out += [(node.module, a.name) for a in node.names]
    return out


def test_no_engine_module_imports_a_private_name() -> None:
    offenders = [
        f"{path.name}: from .{module} import {name}"
        for path in sorted(ENGINE.glob("*.py"))
        for module, name in _sibling_imports(path)
        if name.startswith("_")
    ]
    assert offenders == []


def test_journal_imports_only_storage_and_table_helpers() -> None:
    # Never cdf, plan, scan, rewrite, source or run: the data phases hand it plain values.
    modules = {module for module, _ in _sibling_imports(ENGINE / "journal.py")}
    assert modules <= {"errors", "filestats", "lock", "sqltext", "storage", "table"}, modules
