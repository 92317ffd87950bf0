"""A representative third of the engine suite, rerun elsewhere: on a standalone cluster
(tests/cluster) and through Spark Connect (tests/connect): 155 of the 522 engine tests. Every
clause kind, NULL semantics, `on` shapes, file skipping, the one-pass rewrite, unchanged rows,
the change feed, partitioned tables, schema evolution and casts, quoted identifiers,
cardinality errors, configuration errors and Hive-serde tables; run in a subprocess whose
`spark` fixture (tests/conftest.py) points at the cluster (ROWMERGE_TEST_MASTER) or at the
Connect server (ROWMERGE_TEST_REMOTE)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "tests/engine/test_clauses.py",
    "tests/engine/test_null_semantics.py",
    "tests/engine/test_on_condition.py",
    "tests/engine/test_file_skipping.py",
    "tests/engine/test_change_feed.py",
    "tests/engine/test_partitioned.py",
    "tests/engine/test_cardinality.py",
    "tests/engine/test_validation_errors.py",
    "tests/engine/test_schema_and_casts.py",
    "tests/engine/test_one_pass.py",
    "tests/engine/test_skip_unchanged.py",
    "tests/engine/test_identifiers.py",
    "tests/engine/test_table_kinds.py",
]


def run_engine_third(
    env: dict[str, str], tmp: Path, deselect: tuple[str, ...] = (), modules: list[str] = MODULES
) -> tuple[int, str]:
    """(tests passed, output); asserts the run passed with nothing skipped or failed."""
    args = [f"--deselect={t}" for t in deselect]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp), *args]
        + modules,
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=2400,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-15000:]
    last = out.strip().splitlines()[-1]
    assert not re.search(r"\b(failed|skipped|error|errors)\b", last), last
    found = re.search(r"(\d+) passed", last)
    assert found, last
    return int(found.group(1)), out
