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


DESCRIBED = {
    **KINDS,
    "properties and comment": (
        "(id bigint, v string) USING parquet COMMENT 'a \"quoted\", comment' "
        "TBLPROPERTIES ('x' = '1', 'odd, key' = 'a\"b')"
    ),
}


@pytest.mark.parametrize("kind", sorted(DESCRIBED))
def test_describe_reads_the_catalog_entry_as_the_statement_says_it(spark, db, kind, monkeypatch) -> None:
    """A table of the session catalog is described from its catalog entry, one catalog call and
    no statement, with every field the statement gives, however its name was written."""
    spark.sql(f"CREATE TABLE {db}.t {DESCRIBED[kind]}")
    spaced = f"{spark.conf.get('spark.sql.warehouse.dir')}/a dir/{db}"
    spark.sql(f"CREATE TABLE {db}.ext (id bigint) USING parquet LOCATION '{spaced}'")
    for name in (f"{db}.t", f"spark_catalog.{db}.t", f"{db.upper()}.T", f"{db}.ext"):
        ident = table.sql_name(name)
        monkeypatch.setattr(table, "_catalog_entry", lambda *a: None)
        want = table.describe_table(spark, ident)
        monkeypatch.undo()
        monkeypatch.setattr(table, "catalog_sql", lambda *a, n=name: pytest.fail(f"a statement read {n}"))
        with calls.counting(spark) as counted:
            got = table.describe_table(spark, ident)
        monkeypatch.undo()
        assert got == want, name
        assert counted.catalog == 1, name
    assert dict(table.describe_table(spark, table.sql_name(f"{db}.t")).properties).get("x") == (
        "1" if kind == "properties and comment" else None
    )


def test_describe_leaves_views_temporary_views_and_missing_tables_to_the_statement(spark, db, monkeypatch):
    """What the catalog's entry cannot say as the statement does (a view's properties; a
    temporary view shadowing a table; a missing table's error) goes through the statement."""
    spark.sql(f"CREATE TABLE {db}.t (id bigint) USING parquet")
    spark.sql(f"CREATE VIEW {db}.v AS SELECT 1 AS x")
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW rowmerge_shadow AS SELECT 'temp' AS y")
    statements: list[str] = []
    real = table.catalog_sql
    monkeypatch.setattr(table, "catalog_sql", lambda s, text: statements.append(text) or real(s, text))
    assert table.describe_table(spark, f"`{db}`.`v`").table_type == "VIEW"
    assert table.describe_table(spark, "`rowmerge_shadow`").columns == ("y",)
    with pytest.raises(table.AnalysisException):
        table.describe_table(spark, f"`{db}`.`missing`")
    assert [s.split(" AS JSON")[0] for s in statements] == [
        f"DESCRIBE TABLE EXTENDED `{db}`.`v`",
        "DESCRIBE TABLE EXTENDED `rowmerge_shadow`",
        f"DESCRIBE TABLE EXTENDED `{db}`.`missing`",
    ]
    spark.catalog.dropTempView("rowmerge_shadow")
