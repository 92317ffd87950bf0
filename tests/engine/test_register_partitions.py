"""Partitions a commit registers (table.register_partitions): added through the session's
external catalog, they must be exactly what ``ALTER TABLE ... ADD PARTITION`` leaves, for
Spark and for every reader of the metastore (location, format, serde), whatever the values'
types and the characters a folder name escapes."""

from __future__ import annotations

import datetime
import os

import pytest
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import calls, table
from tests.engine.helpers import table_dir

ROWS = [
    (1, datetime.date(2024, 1, 5), "plain"),
    (2, datetime.date(2024, 1, 5), "a/b c"),
    (3, datetime.date(2024, 2, 29), "x=y%z"),
    (4, datetime.date(2024, 2, 29), "plain"),
]
SCHEMA = "id long, d date, s string"


def _table_with_unregistered_partitions(spark: SparkSession, name: str) -> list[str]:
    """A table partitioned by (d, s) whose partition folders Spark wrote but the catalog does
    not know yet (what a commit's moves leave); their paths relative to the table's folder."""
    spark.sql(f"CREATE TABLE {name} ({SCHEMA}) USING parquet PARTITIONED BY (d, s)")
    root = table_dir(spark, name)
    spark.createDataFrame(ROWS, SCHEMA).write.partitionBy("d", "s").mode("append").parquet(root)
    rels = []
    for d in sorted(os.listdir(root)):
        if d.startswith("d="):
            rels += [f"{d}/{s}" for s in sorted(os.listdir(os.path.join(root, d))) if s.startswith("s=")]
    assert len(rels) == 4, rels
    assert spark.table(name).count() == 0  # not registered: no reader sees them
    return rels


def _described(spark: SparkSession, name: str, spec: str) -> dict[str, str]:
    rows = spark.sql(f"DESCRIBE FORMATTED {name} PARTITION ({spec})").collect()
    keep = ("Location", "Serde Library", "InputFormat", "OutputFormat", "Partition Values")
    return {r[0]: r[1].replace(table_dir(spark, name), "<root>") for r in rows if r[0] in keep}


def test_partitions_added_through_the_catalog_are_what_the_statement_adds(spark, db, monkeypatch) -> None:
    fast, plain = f"{db}.fast", f"{db}.plain"
    rels = _table_with_unregistered_partitions(spark, fast)
    assert _table_with_unregistered_partitions(spark, plain) == rels

    with calls.counting(spark) as counted:
        table.register_partitions(spark, f"`{db}`.`fast`", rels)
    # The catalog's two requests (the table, then the partitions), not the statement's one.
    assert counted.catalog == 2
    monkeypatch.setattr(table, "_add_in_catalog", lambda *a: False)
    table.register_partitions(spark, f"`{db}`.`plain`", rels)
    monkeypatch.undo()

    shown = [r[0] for r in spark.sql(f"SHOW PARTITIONS {fast}").collect()]
    assert shown == [r[0] for r in spark.sql(f"SHOW PARTITIONS {plain}").collect()]
    assert shown == [
        "d=2024-01-05/s=a%2Fb c",
        "d=2024-01-05/s=plain",
        "d=2024-02-29/s=plain",
        "d=2024-02-29/s=x%3Dy%25z",
    ]
    for spec in ("d = '2024-01-05', s = 'a/b c'", "d = '2024-02-29', s = 'x=y%z'"):
        assert _described(spark, fast, spec) == _described(spark, plain, spec)
    # Every row, in the partition its folder names; in this session (no refresh) too.
    expected = sorted(ROWS)
    assert sorted(tuple(r) for r in spark.table(fast).collect()) == expected
    assert sorted(tuple(r) for r in spark.table(plain).collect()) == expected
    assert spark.table(fast).where("s = 'a/b c'").collect()[0]["id"] == 2

    # Again (a recovery replaying the commit): nothing changes.
    table.register_partitions(spark, f"`{db}`.`fast`", rels)
    assert [r[0] for r in spark.sql(f"SHOW PARTITIONS {fast}").collect()] == shown
    assert spark.table(fast).count() == len(ROWS)


@pytest.mark.parametrize("folder", ["d=2024-01-05", "d=2024-01-05/s=plain/extra=1", "D=2024-01-05/s=plain"])
def test_folders_that_are_not_the_tables_partition_columns_go_to_the_statement(spark, db, folder) -> None:
    """The catalog's call does not check a spec against the table: a folder that names other
    columns (or not all of them) is left to ALTER TABLE, which refuses it or adds it as Spark
    would (a partition column's name in another case is the same column)."""
    name = f"{db}.t"
    spark.sql(f"CREATE TABLE {name} ({SCHEMA}) USING parquet PARTITIONED BY (d, s)")
    values = [table.partition_values(folder)]
    if folder.startswith("D="):
        assert table._add_in_catalog(spark, f"`{db}`.`t`", values)
        assert [r[0] for r in spark.sql(f"SHOW PARTITIONS {name}").collect()] == ["d=2024-01-05/s=plain"]
    else:
        assert not table._add_in_catalog(spark, f"`{db}`.`t`", values)
        with pytest.raises(Exception, match="(?i)partition"):
            table.register_partitions(spark, f"`{db}`.`t`", [folder])
        assert spark.sql(f"SHOW PARTITIONS {name}").count() == 0
