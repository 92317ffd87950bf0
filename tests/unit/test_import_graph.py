"""The engine's import graph: the journal sits below the data phases, its parts build on one
another in one direction, and modules share only public names (a private ``_name`` may change
without its module's callers being looked at)."""

from __future__ import annotations

import ast
import pathlib

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "dbt" / "adapters" / "rowmerge" / "merge"
JOURNAL = ENGINE / "journal"
# The journal's parts, lowest first: each may import only the parts before it.
JOURNAL_PARTS = [
    "layout",
    "retention",
    "entry",
    "base",
    "log",
    "checkpoint",
    "snapshots",
    "checks",
    "commit",
    "apply",
]


def _relative_imports(path: pathlib.Path, level: int) -> list[tuple[str, str]]:
    """(module, name) for every ``from <level dots>module import name`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == level:
            out += [(node.module or "", a.name) for a in node.names]
    return out


def test_no_engine_module_imports_a_private_name() -> None:
    offenders = [
        f"{path.relative_to(ENGINE)}: from {module} import {name}"
        for path in sorted(ENGINE.rglob("*.py"))
        for level in (1, 2)
        for module, name in _relative_imports(path, level)
        if name.startswith("_")
    ]
    assert offenders == []


def test_journal_imports_only_storage_and_table_helpers() -> None:
    # Never cdf, plan, scan, rewrite, source or run: the data phases hand it plain values.
    modules = {module or name for path in JOURNAL.glob("*.py") for module, name in _relative_imports(path, 2)}
    allowed = {"calls", "errors", "faults", "filestats", "lock", "sqltext", "storage", "table"}
    assert modules <= allowed, modules


def test_journal_parts_build_on_one_another_in_one_direction() -> None:
    assert sorted(p.stem for p in JOURNAL.glob("*.py")) == sorted([*JOURNAL_PARTS, "__init__"])
    for i, part in enumerate(JOURNAL_PARTS):
        used = {module for module, _ in _relative_imports(JOURNAL / f"{part}.py", 1)}
        assert used <= set(JOURNAL_PARTS[:i]), (part, used - set(JOURNAL_PARTS[:i]))
