"""The engine must stay importable without dbt: a PySpark job may call run_merge directly."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "dbt" / "adapters" / "rowmerge" / "merge"


def test_engine_modules_never_import_dbt() -> None:
    offenders = []
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("dbt", "dbt_common")]
    assert offenders == []


def test_engine_import_loads_no_dbt_module() -> None:
    code = (
        "import sys, dbt.adapters.rowmerge.merge as m\n"
        "bad = sorted(k for k in sys.modules if k.startswith(('dbt_common', 'dbt.adapters.base', "
        "'dbt.adapters.spark', 'dbt.adapters.rowmerge.impl')))\n"
        "print(bad)\n"
        "assert callable(m.run_merge) and issubclass(m.MergeSpecError, m.MergeError)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_names() -> None:
    import dbt.adapters.rowmerge.merge as m

    for name in (
        "run_merge",
        "recover",
        "history",
        "MergeResult",
        "MergeError",
        "MergeSpecError",
        "CardinalityViolation",
        "ConcurrentMergeError",
    ):
        assert hasattr(m, name), name
    for err in (m.MergeSpecError, m.CardinalityViolation, m.ConcurrentMergeError):
        assert issubclass(err, m.MergeError)
