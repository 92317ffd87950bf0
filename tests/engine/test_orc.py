"""ORC targets: same semantics, ORC files in, ORC files out."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge import CardinalityViolation
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    new_files,
    rows,
    source_view,
    table_state,
)


def _target(spark, db, partition_by=()):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, v string, p int",
        [[(1, "a", 1), (2, "b", 1)], [(3, "c", 2)]],
        partition_by=partition_by,
        fmt="orc",
    )
    return t


def test_orc_upsert_rewrites_only_touched_file(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 3")
    src = source_view(spark, f"{db}_src", "id long, v string, p int", [(1, "A", 1), (9, "z", 3)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A", 1), (2, "b", 1), (3, "c", 2), (9, "z", 3)]
    after = file_snapshot(spark, t)
    assert kept_files(before, after) == untouched
    assert new_files(before, after) and all(p.endswith(".orc") for p in new_files(before, after))
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 1, 1)
    assert m["numTargetFilesRemoved"] == 1


def test_orc_matched_and_not_matched_by_source_delete(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, op string", [(1, "D"), (2, "U")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            {"when": "not_matched_by_source", "action": "delete"},
        ],
    )
    assert rows(spark, t) == [(2, "b", 1)]
    m = result.metrics
    assert (m["numTargetRowsMatchedDeleted"], m["numTargetRowsNotMatchedBySourceDeleted"]) == (1, 1)
    assert (m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (1, 2)


def test_orc_partitioned_upsert_into_new_partition(spark, db):
    t = _target(spark, db, partition_by=("p",))
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "p = 2")
    src = source_view(spark, f"{db}_src", "id long, v string, p int", [(2, "B", 1), (4, "d", 4)])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a", 1), (2, "B", 1), (3, "c", 2), (4, "d", 4)]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {t}").collect()) == ["p=1", "p=2", "p=4"]


def test_orc_cardinality_violation_changes_nothing(spark, db):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, p int", [(2, "x", 1), (2, "y", 1)])
    with pytest.raises(CardinalityViolation) as info:
        merge(spark, t, src, UPSERT)
    assert "id=2 matched 2 source rows" in str(info.value)
    assert table_state(spark, t) == before
