"""Names that need quoting, and names that are not names (sqltext.py, table.py, the commit).

Every statement the engine builds as SQL text back-quotes its identifiers, so odd column,
field and partition names merge like any other; a "name" that carries SQL (a comment, a
second statement) is rejected before anything runs instead of failing after the commit.
"""

from __future__ import annotations

import os

import pytest

from dbt.adapters.rowmerge.merge import MergeSpecError, UnsupportedTableError, history, start_history
from tests.engine.helpers import (
    UPSERT,
    create_table,
    merge,
    partitions,
    rows,
    source_view,
    table_dir,
    table_state,
)


def _feed_rows(spark, name: str) -> list[tuple]:
    return rows(spark, name)


def test_identifiers_backquote_in_an_evolved_column_name(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    src = source_view(spark, f"{db}_s", "id long, v string, `x``y` int", [(1, "A", 7), (3, "c", 9)])
    result = merge(spark, t, src, UPSERT, schema_evolution=True)
    assert [f.name for f in spark.table(t).schema.fields] == ["id", "v", "x`y"]
    assert rows(spark, t) == [(1, "A", 7), (2, "b", None), (3, "c", 9)]
    assert history(spark, t)[0]["applied"] is True and result.version == 1


def test_identifiers_evolved_struct_with_a_space_in_a_field_name(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    src = source_view(spark, f"{db}_s", "id long, v string, s struct<`a b`: int>", [(1, "A", (5,))])
    merge(spark, t, src, UPSERT, schema_evolution=True)
    assert rows(spark, t) == [(1, "A", (5,)), (2, "b", None)]
    assert spark.table(t).schema["s"].dataType.simpleString() == "struct<a b:int>"
    assert history(spark, t)[0]["applied"] is True


def test_identifiers_nested_field_the_catalog_refuses_fails_before_the_commit(spark, db):
    """A Hive metastore keeps a Parquet table in Hive's format and refuses `c,d` inside a struct."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    before = table_state(spark, t), table_state(spark, f"{t}__changes")
    src = source_view(spark, f"{db}_s", "id long, v string, s struct<`c,d`: int>", [(1, "A", (5,))])
    with pytest.raises(UnsupportedTableError) as info:
        merge(spark, t, src, UPSERT, schema_evolution=True, change_data_feed={"table": f"{t}__changes"})
    message = str(info.value)
    assert message.startswith(f"MERGE into {t} cannot add column(s) s to ")
    assert "the catalog refused (" in message and "Nothing was changed." in message
    assert (table_state(spark, t), table_state(spark, f"{t}__changes")) == before
    assert [f.name for f in spark.table(t).schema.fields] == ["id", "v"]
    assert [h["version"] for h in history(spark, t)] == [0]


def test_identifiers_struct_field_names_needing_quotes_when_the_table_accepts_them(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, s struct<`a b`: int, `c,d`: string>", [[(1, (1, "x")), (2, (2, "y"))]])
    src = source_view(
        spark, f"{db}_s", "id long, s struct<`a b`: int, `c,d`: string>, `n``m` string", [(1, (10, "X"), "q")]
    )
    merge(spark, t, src, UPSERT, schema_evolution=True)
    assert rows(spark, t) == [(1, (10, "X"), "q"), (2, (2, "y"), None)]


def test_identifiers_column_named_like_a_describe_section(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "`# Partition Information` long, `# col_name` string, p int",
        [[(1, "a", 1)], [(2, "b", 2)]],
        partition_by=("p",),
    )
    src = source_view(spark, f"{db}_s", "`# Partition Information` long, `# col_name` string, p int",
                      [(1, "A", 1), (3, "c", 3)])  # fmt: skip
    merge(spark, t, src, UPSERT, on="t.`# Partition Information` = s.`# Partition Information`")
    assert partitions(spark, t) == ["p=1", "p=2", "p=3"]
    assert rows(spark, t) == [(1, "A", 1), (2, "b", 2), (3, "c", 3)]


def test_identifiers_partition_values_and_names_needing_quotes(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, `p q` string", [[(1, "plain")]], partition_by=("p q",))
    values = ["it's", "back\\slash", "a/b", "k=v", "50%", "--x", "semi;colon"]
    src = source_view(spark, f"{db}_s", "id long, `p q` string", [(i + 2, v) for i, v in enumerate(values)])
    merge(spark, t, src, UPSERT, on="t.id = s.id")
    assert rows(spark, t) == sorted([(1, "plain")] + [(i + 2, v) for i, v in enumerate(values)])
    assert len(partitions(spark, t)) == len(values) + 1


@pytest.mark.parametrize(
    "key, name",
    [
        ("target", "{db}.p -- nightly"),
        ("target", "{db}.p; DROP TABLE {db}.p"),
        ("change_data_feed", "{db}.c -- feed"),
        ("change_data_feed", "{db}.`../escaped`"),
        ("change_data_feed", "{db}.`c feed`"),
    ],
)
def test_identifiers_name_carrying_sql_or_a_path_is_rejected_before_anything_runs(spark, db, key, name):
    t = f"{db}.p"
    create_table(spark, t, "id long, v string, d int", [[(1, "a", 1)], [(2, "b", 2)]], partition_by=("d",))
    start_history(spark, t, "CREATE TABLE", f"{db}.c")
    before = (
        table_state(spark, t),
        table_state(spark, f"{db}.c"),
        os.listdir(os.path.dirname(table_dir(spark, t))),
    )
    src = source_view(spark, f"{db}_s", "id long, v string, d int", [(1, "A", 1), (3, "c", 3)])
    text = name.format(db=db)
    target = text if key == "target" else t
    feed = {"table": text if key == "change_data_feed" else f"{db}.c"}
    with pytest.raises(MergeSpecError) as info:
        merge(spark, target, src, UPSERT, change_data_feed=feed)
    shown = f"`target` ({text!r}) is not a valid table name: it is not a table name (unexpected "
    if key == "change_data_feed":
        shown = f"`change_data_feed` table {text!r} is not a valid name for a new table: "
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(shown), info.value.problems
    after = (
        table_state(spark, t),
        table_state(spark, f"{db}.c"),
        os.listdir(os.path.dirname(table_dir(spark, t))),
    )
    assert after == before
    assert not os.path.exists(os.path.join(os.path.dirname(table_dir(spark, t)), "..", "escaped"))


def test_identifiers_back_quoted_names_merge_like_plain_ones(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "c")])
    result = merge(spark, f"`{db}`.`t`", src, UPSERT, change_data_feed={"table": f"`{db}`.`t_changes`"})
    assert result.metrics["numTargetRowsUpdated"] == 1 and result.metrics["numTargetRowsInserted"] == 1
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c")]
    assert sorted(r[2] for r in _feed_rows(spark, f"{db}.t_changes")) == [
        "insert",
        "update_postimage",
        "update_preimage",
    ]
