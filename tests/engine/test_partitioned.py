"""Partitioned targets: rows move between partitions, new partitions reach the catalog."""

from __future__ import annotations

import os

from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    new_files,
    partitions,
    rows,
    source_view,
    spark_jobs,
)

SCHEMA = "id long, v string, p int"
FILES = [[(1, "a", 1), (2, "b", 1)], [(3, "c", 2)]]


def test_partitioned_update_moves_row_to_new_partition(spark, db):
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, FILES, partition_by=("p",))
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "p = 2")
    src = source_view(spark, f"{db}_src", "id long, p int", [(1, 3)])
    result = merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"p": "s.p"}}])
    assert rows(spark, t) == [(1, "a", 3), (2, "b", 1), (3, "c", 2)]
    assert partitions(spark, t) == ["p=1", "p=2", "p=3"]
    assert [tuple(r) for r in spark.sql(f"SELECT id, v FROM {t} WHERE p = 3").collect()] == [(1, "a")]
    assert [r.id for r in spark.table(t).where("p = 1").collect()] == [2]
    assert all("/p=3/" in f for f in files_of(spark, t, "p = 3"))
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (1, 1, 1)


def test_partitioned_upsert_registers_new_partition_and_keeps_untouched_partition(spark, db):
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, FILES, partition_by=("p",))
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "p = 2")
    src = source_view(spark, f"{db}_src", SCHEMA, [(2, "B", 1), (4, "d", 5), (5, "e", 5)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a", 1), (2, "B", 1), (3, "c", 2), (4, "d", 5), (5, "e", 5)]
    assert partitions(spark, t) == ["p=1", "p=2", "p=5"]
    assert spark.sql(f"SELECT count(*) FROM {t} WHERE p = 5").collect()[0][0] == 2
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetFilesRemoved"]) == (1, 2, 1)


def test_partitioned_on_with_partition_key_matches_within_partition(spark, db):
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, FILES, partition_by=("p",))
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "p = 2")
    src = source_view(spark, f"{db}_src", SCHEMA, [(1, "A", 1), (3, "Z", 1)])
    result = merge(spark, t, src, UPSERT, on="t.id = s.id AND t.p = s.p")
    # Source (3, p=1) does not match target (3, p=2): it is a new row.
    assert rows(spark, t) == [(1, "A", 1), (2, "b", 1), (3, "Z", 1), (3, "c", 2)]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetFilesRemoved"]) == (1, 1, 1)


def test_partitioned_not_matched_by_source_delete_limited_to_one_partition(spark, db):
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, FILES, partition_by=("p",))
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "p = 2")
    src = source_view(spark, f"{db}_src", SCHEMA, [(1, "A", 1)])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": "*"},
            {"when": "not_matched_by_source", "condition": "t.p = 1", "action": "delete"},
        ],
    )
    assert rows(spark, t) == [(1, "A", 1), (3, "c", 2)]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], m["numTargetFilesRemoved"]) == (1, 1, 1)


def test_partitioned_insert_null_partition_value(spark, db):
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, FILES, partition_by=("p",))
    src = source_view(spark, f"{db}_src", SCHEMA, [(7, "g", None)])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a", 1), (2, "b", 1), (3, "c", 2), (7, "g", None)]
    assert partitions(spark, t) == ["p=1", "p=2", "p=__HIVE_DEFAULT_PARTITION__"]
    assert [r.id for r in spark.sql(f"SELECT id FROM {t} WHERE p IS NULL").collect()] == [7]


def test_partitioned_string_partition_value_needing_escaping(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, region string", [[(1, "a", "eu")]], partition_by=("region",))
    src = source_view(spark, f"{db}_src", "id long, v string, region string", [(2, "b", "us/west=1 x")])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a", "eu"), (2, "b", "us/west=1 x")]
    assert len(partitions(spark, t)) == 2
    found = spark.sql(f"SELECT id FROM {t} WHERE region = 'us/west=1 x'").collect()
    assert [r.id for r in found] == [2]


def test_partitioned_two_level_partitions_move_and_insert(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, v string, y int, m int",
        [[(1, "a", 2024, 1), (2, "b", 2024, 1)], [(3, "c", 2024, 2)]],
        partition_by=("y", "m"),
    )
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "m = 2")
    src = source_view(
        spark, f"{db}_src", "id long, v string, y int, m int", [(1, "a", 2025, 1), (4, "d", 2025, 3)]
    )
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a", 2025, 1), (2, "b", 2024, 1), (3, "c", 2024, 2), (4, "d", 2025, 3)]
    assert partitions(spark, t) == ["y=2024/m=1", "y=2024/m=2", "y=2025/m=1", "y=2025/m=3"]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert [r.id for r in spark.sql(f"SELECT id FROM {t} WHERE y = 2025 ORDER BY id").collect()] == [1, 4]


def test_small_insert_into_partitions_is_two_jobs_and_one_file_per_partition(spark, db):
    """New keys into two existing partitions and a new one: one task writes them (no shuffle,
    so two Spark jobs with the source's), one new file per partition value."""
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, FILES, partition_by=("p",))
    before = file_snapshot(spark, t)
    data = [(10 + i, f"n{i}", 1 + i % 3) for i in range(9)]
    src = source_view(spark, f"{db}_src", SCHEMA, data)
    insert = [{"when": "not_matched", "action": "insert", "values": "*"}]
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, insert, auto_compact=False))
    assert jobs == 2
    assert rows(spark, t) == sorted([r for f in FILES for r in f] + data)
    assert partitions(spark, t) == ["p=1", "p=2", "p=3"]
    added = new_files(before, file_snapshot(spark, t))
    assert sorted(os.path.basename(os.path.dirname(f)) for f in added) == ["p=1", "p=2", "p=3"]
    assert result.metrics["numTargetFilesAdded"] == 3
