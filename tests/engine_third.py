"""A representative third of the engine suite, rerun away from local mode, half on a
standalone cluster (tests/cluster) and half through Spark Connect (tests/connect): 170 engine
tests. Every
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
# The suite's time budget runs each module of the third once away from local mode, each where
# it tells most: through Spark Connect what crosses the client (the `on` tokenizer of
# plan_connect.py and the skipping it feeds, config and cast errors as the server reports
# them, quoted names; connect_checks.py adds every clause kind, the change feed and recovery),
# on the cluster what runs in executor JVMs (the rewrite and its clause decisions, NULL
# semantics, the change feed's rows, partitions, the one-pass write, cardinality, Hive-serde
# tables, which Connect refuses anyway).
CONNECT_MODULES = [
    "tests/engine/test_on_condition.py",
    "tests/engine/test_file_skipping.py",
    "tests/engine/test_validation_errors.py",
    "tests/engine/test_schema_and_casts.py",
    "tests/engine/test_identifiers.py",
]
CLUSTER_MODULES = [m for m in MODULES if m not in CONNECT_MODULES]


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
