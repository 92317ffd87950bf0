"""The columns a merge checks just before its commit point (table.catalog_columns): read with
the session catalog's own call, they must be what ``DESCRIBE`` says, for every kind of table
and however its name was written, and a column another session just added must be in them."""

from __future__ import annotations

import dataclasses

import pytest

from dbt.adapters.rowmerge.merge import calls, table

KINDS = {
    "data source, partitioned": "(id bigint, `Mixed Case` string, p int) USING parquet PARTITIONED BY (p)",
    "orc": "(id bigint, v string) USING orc",
    "hive serde": "(id bigint, v string) PARTITIONED BY (q string) STORED AS PARQUET",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_catalog_columns_are_the_described_ones_read_in_one_request(spark, db, kind, monkeypatch) -> None:
    spark.sql(f"CREATE TABLE {db}.t {KINDS[kind]}")
    real = table.describe_table
    for name in (f"{db}.t", f"spark_catalog.{db}.t", f"{db.upper()}.T"):
        target = table.load_target(spark, name)
        want = real(spark, target.ident).columns
        monkeypatch.setattr(table, "describe_table", lambda *a: pytest.fail("described"))
        with calls.counting(spark) as counted:
            got = table.catalog_columns(spark, target)
        monkeypatch.undo()
        assert got == want, name
        assert counted.catalog == 1, name


def test_catalog_columns_see_a_column_another_session_added(spark, db) -> None:
    spark.sql(f"CREATE TABLE {db}.t (id bigint, v string) USING parquet")
    target = table.load_target(spark, f"{db}.t")
    spark.newSession().sql(f"ALTER TABLE {db}.t ADD COLUMNS (x string)")
    assert table.catalog_columns(spark, target) == ("id", "v", "x")


def test_catalog_columns_outside_the_session_catalog_come_from_describe(spark, db, monkeypatch) -> None:
    """A name the catalog's call cannot take (here: a description naming another catalog)
    is described, which reads the same table."""
    spark.sql(f"CREATE TABLE {db}.t (id bigint, v string) USING parquet")
    target = table.load_target(spark, f"{db}.t")
    described: list[str] = []
    real = table.describe_table
    monkeypatch.setattr(table, "describe_table", lambda s, i: described.append(i) or real(s, i))
    elsewhere = dataclasses.replace(target, full_name=("other_catalog", db, "t"))
    assert table.catalog_columns(spark, elsewhere) == ("id", "v")
    assert described == [target.ident]
