"""The rewrite pass must never open an untouched file.

Between the scan and the rewrite, every file the scan did not report as touched is replaced
by garbage bytes (with the one-pass rewrite, which has no scan: every file but the candidates
it rewrites). If the rewrite pass opened any of them, Spark would fail to read its
Parquet footer; the merge succeeding with exact rows proves it read only touched files.
The original bytes are restored before the commit, so the end state can be checked.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pytest

from dbt.adapters.rowmerge.merge import run as run_module
from tests.engine.helpers import create_table, file_snapshot, merge, rows, source_view


@pytest.mark.parametrize("partitioned", [False, True])
def test_rewrite_opens_only_touched_files(spark, db, monkeypatch, partitioned: bool) -> None:
    t = f"{db}.events"
    files = [[(1, "a", 1), (2, "b", 1)], [(3, "c", 2), (4, "d", 2)], [(5, "e", 3), (6, "f", 3)]]
    create_table(spark, t, "id long, v string, p int", files, partition_by=("p",) if partitioned else ())
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, p int", [(3, "C", 2), (9, "z", 3)])

    real_write = run_module.write_changes
    seen: dict[str, Any] = {}

    def corrupting_write(spark_, plan, source, target, scan, staging, storage, *one_pass, **feed):
        touched = {urlparse(storage.from_spark_path(f.path)).path for f in scan.touched}
        saved = {}
        for path in before:
            if path not in touched:
                with open(path, "rb") as fh:
                    saved[path] = fh.read()
                with open(path, "wb") as fh:
                    fh.write(b"not a parquet file" * 10)
        seen["corrupted"] = len(saved)
        try:
            return real_write(spark_, plan, source, target, scan, staging, storage, *one_pass, **feed)
        finally:
            for path, data in saved.items():
                with open(path, "wb") as fh:
                    fh.write(data)
                os.utime(path, ns=(before[path][1], before[path][1]))

    monkeypatch.setattr(run_module, "write_changes", corrupting_write)
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": "*"},
            {"when": "not_matched", "action": "insert", "values": "*"},
        ],
    )
    assert seen["corrupted"] == 2
    assert result.metrics["numTargetFilesRemoved"] == 1
    assert rows(spark, t) == [
        (1, "a", 1),
        (2, "b", 1),
        (3, "C", 2),
        (4, "d", 2),
        (5, "e", 3),
        (6, "f", 3),
        (9, "z", 3),
    ]
    after = file_snapshot(spark, t)
    assert sum(1 for p, st in before.items() if after.get(p) == st) == 2
