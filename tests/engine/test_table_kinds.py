"""Target kinds dbt-spark creates or users bring: external location, Hive serde.

Rows are inserted with a COALESCE(1) hint so that each INSERT writes exactly one file.
"""

from __future__ import annotations

from tests.engine.helpers import (
    UPSERT,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    partitions,
    rows,
    source_view,
)


def test_table_kind_external_table_with_space_in_location(spark, db, tmp_path):
    t = f"{db}.t"
    location = tmp_path / "with space" / "t"
    spark.sql(f"CREATE TABLE {t} (id bigint, v string) USING parquet LOCATION '{location}'")
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ * FROM VALUES (3, 'c')")
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 3")
    assert len(before) == 2 and len(untouched) == 1
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (4, "d")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (4, "d")]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert result.metrics["numTargetFilesRemoved"] == 1


def test_table_kind_hive_serde_parquet_table(spark, db):
    t = f"{db}.t"
    spark.sql(f"CREATE TABLE {t} (id bigint, v string) STORED AS PARQUET")
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ * FROM VALUES (3, 'c')")
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (4, "d")])
    result = merge(spark, t, src, [*UPSERT, {"when": "not_matched_by_source", "action": "delete"}])
    assert rows(spark, t) == [(1, "A"), (4, "d")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"]) == (1, 1, 2)
    assert m["numTargetFilesRemoved"] == 2


def test_table_kind_hive_serde_orc_partitioned_table(spark, db):
    t = f"{db}.t"
    spark.sql(f"CREATE TABLE {t} (id bigint, v string) PARTITIONED BY (p int) STORED AS ORC")
    spark.sql(f"INSERT INTO {t} PARTITION (p = 1) SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {t} PARTITION (p = 2) SELECT /*+ COALESCE(1) */ * FROM VALUES (3, 'c')")
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "p = 2")
    src = source_view(spark, f"{db}_src", "id long, v string, p int", [(2, "B", 1), (5, "e", 7)])
    merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a", 1), (2, "B", 1), (3, "c", 2), (5, "e", 7)]
    assert partitions(spark, t) == ["p=1", "p=2", "p=7"]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert [r.id for r in spark.sql(f"SELECT id FROM {t} WHERE p = 7").collect()] == [5]


def test_table_kind_hive_serde_parquet_partitioned_table_all_three_clause_kinds(spark, db):
    """A partitioned Hive-serde table: an update, an unchanged update, an insert into a new
    partition and a NOT MATCHED BY SOURCE delete (also run on a standalone cluster by
    tests/cluster, through tests/engine_third.py)."""
    t = f"{db}.h"
    spark.sql(f"CREATE TABLE {t} (id bigint, s string) PARTITIONED BY (p int) STORED AS PARQUET")
    spark.sql(f"INSERT INTO {t} PARTITION (p = 1) SELECT /*+ COALESCE(1) */ * FROM VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {t} PARTITION (p = 2) SELECT /*+ COALESCE(1) */ * FROM VALUES (3, 'c'), (5, 'e')")
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, s string, p int", [(1, "A", 1), (4, "D", 3), (3, "c", 2)])
    nmbs_delete = {"when": "not_matched_by_source", "condition": "t.p = 2", "action": "delete"}
    result = merge(spark, t, src, [*UPSERT, nmbs_delete])
    assert rows(spark, t) == [(1, "A", 1), (2, "b", 1), (3, "c", 2), (4, "D", 3)]
    assert partitions(spark, t) == ["p=1", "p=2", "p=3"]
    # id 1 updated, id 5 deleted (two files rewritten); id 3 is an unchanged update.
    assert result.summary() == f"MERGE 1 updated, 1 inserted, 1 deleted; 2 of {len(before)} files rewritten"
