"""Partitioned targets: rows move between partitions, new partitions reach the catalog."""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta
from typing import Any

from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dbt.adapters.rowmerge.merge.table import TargetTable, partitions_of
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


def test_a_rewrite_lists_only_the_partitions_of_the_files_it_reads(spark, db):
    """A merge that rewrites a file of one day of a table of 40 days runs the Spark jobs it runs
    in a table of 2 days: its reads are pruned to the files' partitions. Filtered on the file
    path alone, Spark asked the metastore for every partition and listed every folder, past 32
    in a job of its own (the aging benchmark's hourly shape: 0.5 s a merge at 72 days)."""
    schema = "id long, v string, d date, p int, s string"

    def day(i: int) -> list[tuple[Any, ...]]:
        return [(i, "x", date(2024, 1, 1) + timedelta(days=i), i % 3, "a/b" if i % 2 else None)]

    def updated(name: str, days: int) -> tuple[list[tuple[Any, ...]], int]:
        t = f"{db}.{name}"
        create_table(spark, t, schema, [day(i) for i in range(days)], partition_by=("d", "p", "s"))
        src = source_view(spark, f"{db}_{name}_src", schema, [(1, "new", *day(1)[0][2:])])
        _, jobs = spark_jobs(spark, lambda: merge(spark, t, src, UPSERT, auto_compact=False))
        return rows(spark, t), jobs

    wide, wide_jobs = updated("wide", 40)
    narrow, narrow_jobs = updated("narrow", 2)
    assert wide_jobs == narrow_jobs
    assert wide == sorted([*day(0), (1, "new", *day(1)[0][2:]), *[r for i in range(2, 40) for r in day(i)]])
    assert narrow == sorted([*day(0), (1, "new", *day(1)[0][2:])])


def test_the_partition_filter_keeps_every_partition_of_the_files_and_types_only_exact_values(spark):
    """partitions_of: a folder value goes into the filter only where Spark prints the value so
    (``p=007`` casts to 7, which another folder could hold too: p is left unfiltered), and a
    column of a type whose printing it does not know (a timestamp) is left unfiltered; NULL
    partitions are kept. The filter may keep more partitions than the files', never fewer."""
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("d", DateType()),
            StructField("p", IntegerType()),
            StructField("ts", TimestampType()),
        ]
    )
    target = TargetTable("t", "`t`", "file:/w/t", "parquet", schema, ("d", "p", "ts"))
    ts = "ts=2024-01-01%252010%253A00%253A00"  # as _metadata.file_path gives it: escaped twice
    rows_ = [
        (1, date(2024, 1, 2), 7, datetime(2024, 1, 1, 10)),
        (2, None, 3, datetime(2024, 1, 1, 10)),
        (3, date(2024, 1, 2), 8, datetime(2024, 5, 5)),
        (4, date(2024, 1, 9), 3, datetime(2024, 1, 1, 10)),
    ]
    frame = spark.createDataFrame(rows_, schema)

    def kept(*folders: str) -> list[int] | None:
        cond = partitions_of(target, [f"file:/w/t/{f}/{ts}/part-0.parquet" for f in folders])
        return None if cond is None else sorted(r.id for r in frame.where(cond).collect())

    assert kept("d=2024-01-02/p=7", "d=__HIVE_DEFAULT_PARTITION__/p=3") == [1, 2]
    assert kept("d=2024-01-02/p=007") == [1, 3]  # d only: 007 is not how Spark prints 7
    assert kept("d=2024-1-2/p=007") is None  # nothing it can type exactly
    assert kept("d=2024-01-02/p=3000000000") == [1, 3]  # beyond INT: p left unfiltered
    assert kept("d=0001-01-01/p=7") == []  # a year before 1000 is a date like any other
    assert partitions_of(target, ["file:/w/t/x=1/y=2/z=3/part-0.parquet"]) is None  # not its columns


def test_char_partition_values_are_written_padded_as_spark_writes_them(spark, db):
    """A CHAR(3) partition column: Spark's INSERT stores 'ab' in folder ``c=ab `` (padded), the
    catalog partition reads that folder. The merge's rows go there too: written unpadded, an
    updated row landed in ``c=ab``, a folder no partition reads, and vanished from the table.
    (The rewrite's partition filter leaves CHAR columns out: they compare padded.)"""
    t = f"{db}.t"
    spark.sql(f"CREATE TABLE {t} (id long, v string, c char(3)) USING parquet PARTITIONED BY (c)")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a', 'ab'), (2, 'b', 'xyz')")
    data = [(1, "new", "ab"), (3, "n", "q")]
    src = source_view(spark, f"{db}_src", "id long, v string, c string", data)
    # a check compares the CHAR column padded, as Spark does: 'ab ' is IN ('ab', 'q')
    check = {"type": "check", "expression": "c IN ('ab', 'q')"}
    merge(spark, t, src, UPSERT, auto_compact=False, constraints=[check])
    assert rows(spark, t) == [(1, "new", "ab "), (2, "b", "xyz"), (3, "n", "q  ")]
    assert partitions(spark, t) == ["c=ab ", "c=q  ", "c=xyz"]


def test_the_partition_filter_reads_escapes_in_folder_names_as_spark_does(spark):
    """Hive's escapes are one byte each (``%C3%A9`` is 'Ã©' to Spark, not 'é'), whatever wrote
    the folder; ``%2F`` is '/', and the file path's own URL encoding comes off first."""
    schema = StructType([StructField("id", LongType()), StructField("s", StringType())])
    target = TargetTable("t", "`t`", "file:/w/t", "parquet", schema, ("s",))
    frame = spark.createDataFrame([(1, "Ã©"), (2, "é"), (3, "a/b"), (4, "a b")], schema)

    def kept(folder: str) -> list[int]:
        cond = partitions_of(target, [f"file:/w/t/{folder}/part-0.parquet"])
        assert cond is not None
        return sorted(r.id for r in frame.where(cond).collect())

    assert kept("s=%25C3%25A9") == [1]
    assert kept("s=a%252Fb") == [3]
    assert kept("s=a%20b") == [4]
