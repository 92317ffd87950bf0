"""`*` by name, schema evolution and casts to the target column types."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge import ConcurrentMergeError, MergeSpecError, history, run_merge
from dbt.adapters.rowmerge.merge import run as run_module
from dbt.adapters.rowmerge.merge.errors import CastError
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    rows,
    source_view,
    table_state,
)


def test_star_resolves_by_name_with_reordered_and_extra_source_columns(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string, b int", [[(1, "x", 1), (2, "y", 2)]])
    src = source_view(
        spark,
        f"{db}_src",
        "b int, extra string, id long, a string",
        [(10, "junk", 1, "X"), (30, "junk", 3, "Z")],
    )
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "X", 10), (2, "y", 2), (3, "Z", 30)]
    assert spark.table(t).columns == ["id", "a", "b"]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 1)


def test_star_target_column_missing_from_source_raises(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string, b int", [[(1, "x", 1), (2, "y", 2)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, a string", [(1, "X"), (3, "Z")])
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, UPSERT)
    problems = info.value.problems
    assert len(problems) == 2  # update * and insert * both need `b`
    assert all("needs source column 'b'" in p for p in problems)
    assert problems[0].startswith("clauses[0] (when: matched, action: update)")
    assert problems[1].startswith("clauses[1] (when: not_matched, action: insert)")
    assert table_state(spark, t) == before
    assert history(spark, t) == []


def test_star_missing_column_with_schema_evolution_kept_on_update_null_on_insert(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string, b int", [[(1, "x", 1), (2, "y", 2)]])
    src = source_view(spark, f"{db}_src", "id long, a string", [(1, "X"), (3, "Z")])
    result = merge(spark, t, src, UPSERT, schema_evolution=True)
    assert rows(spark, t) == [(1, "X", 1), (2, "y", 2), (3, "Z", None)]
    assert spark.table(t).columns == ["id", "a", "b"]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 1)


def test_schema_evolution_adds_source_only_columns(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string", [[(1, "x"), (2, "y")], [(4, "w")]])
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 4")
    src = source_view(spark, f"{db}_src", "id long, a string, c int", [(1, "X", 100), (3, "Z", 300)])
    result = merge(spark, t, src, UPSERT, schema_evolution=True)
    assert spark.table(t).columns == ["id", "a", "c"]
    assert rows(spark, t) == [(1, "X", 100), (2, "y", None), (3, "Z", 300), (4, "w", None)]
    assert dict(spark.table(t).dtypes)["c"] == "int"
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 1)


def test_schema_evolution_off_ignores_source_only_columns(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string", [[(1, "x")]])
    src = source_view(spark, f"{db}_src", "id long, a string, c int", [(1, "X", 100), (3, "Z", 300)])
    merge(spark, t, src, UPSERT)
    assert spark.table(t).columns == ["id", "a"]
    assert rows(spark, t) == [(1, "X"), (3, "Z")]


def test_schema_evolution_with_explicit_columns_adds_nothing(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string", [[(1, "x")]])
    src = source_view(spark, f"{db}_src", "id long, a string, c int", [(1, "X", 100), (3, "Z", 300)])
    merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"a": "s.a"}},
            {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "a": "s.a"}},
        ],
        schema_evolution=True,
    )
    assert spark.table(t).columns == ["id", "a"]
    assert rows(spark, t) == [(1, "X"), (3, "Z")]


def test_cast_int_expression_into_string_column(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, s string", [[(1, "a")]])
    src = source_view(spark, f"{db}_src", "id long, n int", [(1, 5), (2, 7)])
    merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"s": "s.n * 2"}},
            {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "s": "s.n + 1"}},
        ],
    )
    assert rows(spark, t) == [(1, "10"), (2, "8")]
    assert dict(spark.table(t).dtypes) == {"id": "bigint", "s": "string"}


def test_cast_string_into_int_column_by_mapping_and_star(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 1), (2, 2)]])
    src = source_view(spark, f"{db}_src", "id long, n string", [(1, "12"), (3, "-3"), (4, None)])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, 12), (2, 2), (3, -3), (4, None)]
    src2 = source_view(spark, f"{db}_src2", "id long, txt string", [(2, "7")])
    merge(spark, t, src2, [{"when": "matched", "action": "update", "set": {"n": "s.txt"}}])
    assert rows(spark, t) == [(1, 12), (2, 7), (3, -3), (4, None)]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 2)


def test_cast_failure_in_update_raises_cast_error_and_changes_nothing(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 1), (2, 2)], [(3, 3)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, txt string", [(1, "5"), (3, "abc")])
    with pytest.raises(CastError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"n": "s.txt"}}])
    msg = str(info.value)
    assert f"MERGE into {t} failed" in msg
    assert "column 'n' (int)" in msg and "'abc'" in msg
    assert table_state(spark, t) == before
    assert history(spark, t) == []


def test_cast_failure_in_insert_raises_cast_error_and_changes_nothing(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 1), (2, 2)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, n string", [(1, "10"), (5, "abc")])
    with pytest.raises(CastError) as info:
        merge(spark, t, src, UPSERT)
    assert "'abc'" in str(info.value)
    assert table_state(spark, t) == before
    assert history(spark, t) == []


def test_cast_between_incompatible_types_raises_spec_error(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 1)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, n string", [(1, "10")])
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"n": "array(1, 2)"}}])
    assert "cannot be cast to column 'n' of type int" in str(info.value)
    assert table_state(spark, t) == before


def test_cast_overflow_raises_cast_error(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int, d decimal(4,2)", [[(1, 1, None)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, n long", [(1, 3_000_000_000)])
    with pytest.raises(CastError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"n": "s.n"}}])
    assert "column 'n' (int)" in str(info.value)
    with pytest.raises(CastError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"d": "123.456"}}])
    assert "column 'd' (decimal(4,2))" in str(info.value)
    assert table_state(spark, t) == before


def test_cast_failure_in_assignment_that_does_not_act_is_not_an_error(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 1), (2, 2)]])
    src = source_view(
        spark,
        f"{db}_src",
        "id long, txt string, op string",
        [(1, "abc", "D"), (2, "7", "U"), (5, "xyz", "D")],
    )
    result = merge(
        spark,
        t,
        src,
        [
            # Row 1 is deleted by the first clause: the update's bad value is never assigned.
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            {"when": "matched", "action": "update", "set": {"n": "s.txt"}},
            # Source row 5 is not inserted: its bad value is never assigned either.
            {
                "when": "not_matched",
                "condition": "s.op <> 'D'",
                "action": "insert",
                "values": {"id": "s.id", "n": "s.txt"},
            },
        ],
    )
    assert rows(spark, t) == [(2, 7)]
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 1, 0)


def test_schema_evolution_on_partitioned_table(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a string, p int", [[(1, "x", 1)], [(2, "y", 2)]], partition_by=("p",))
    src = source_view(
        spark, f"{db}_src", "id long, a string, c string, p int", [(1, "X", "new", 1), (3, "Z", "z", 3)]
    )
    merge(spark, t, src, UPSERT, schema_evolution=True)
    assert spark.table(t).columns == ["id", "a", "c", "p"]
    assert rows(spark, t) == [(1, "X", "new", 1), (2, "y", None, 2), (3, "Z", "z", 3)]
    assert sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {t}").collect()) == ["p=1", "p=2", "p=3"]


def test_cast_string_longer_than_varchar_column_raises_cast_error(spark, db):
    t = f"{db}.t"
    spark.sql(f"CREATE TABLE {t} (id bigint, code varchar(3)) USING parquet")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'abc')")
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, code string", [(1, "abcdef"), (2, "xy")])
    # Spark's own INSERT rejects it (EXCEED_LIMIT_LENGTH); the merge must not write it either.
    with pytest.raises(CastError) as info:
        merge(spark, t, src, UPSERT)
    assert "'abcdef'" in str(info.value)
    assert table_state(spark, t) == before


def test_schema_read_fresh_when_another_session_added_a_column(spark, db):
    """A session that read the table before another session added a column must not drop it."""
    t = f"{db}.fresh"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])  # one file for both rows
    spark.table(t).collect()  # this session now caches the relation, schema included
    other = spark.newSession()  # same catalog, its own relation cache
    other.createDataFrame([(1, "a", "x1")], "id long, v string, x string").createOrReplaceTempView("evolve")
    run_merge(
        other,
        {
            "target": t,
            "source": "evolve",
            "target_alias": "t",
            "source_alias": "s",
            "on": "t.id = s.id",
            "clauses": [{"when": "matched", "action": "update", "set": "*"}],
            "schema_evolution": True,
        },
    )
    src = source_view(spark, f"{db}_s", "id long, v string", [(2, "B")])
    merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"v": "s.v"}}])
    assert rows(spark, t) == [(1, "a", "x1"), (2, "B", None)]


def test_schema_column_added_while_the_merge_runs_aborts_it(spark, db, monkeypatch):
    t = f"{db}.racing"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]])
    src = source_view(spark, f"{db}_s", "id long, v string", [(2, "B")])

    def add_column(step: str) -> None:
        if step == "staged_data":  # another session alters the table while files are staged
            spark.newSession().sql(f"ALTER TABLE {t} ADD COLUMNS (x string)")

    monkeypatch.setattr(run_module, "fault_point", add_column)
    before = file_snapshot(spark, t)
    with pytest.raises(ConcurrentMergeError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"v": "s.v"}}])
    assert str(info.value) == (
        f"MERGE into {t} aborted: column(s) x were added to the table while the merge ran, and the "
        "rewritten files would not have them. Nothing was changed; run the model again."
    )
    assert file_snapshot(spark, t) == before
    assert rows(spark, t) == [(1, "a", None), (2, "b", None)]
