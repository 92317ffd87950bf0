"""`*` by name, schema evolution and casts to the target column types."""

from __future__ import annotations

from datetime import datetime

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StructField

from dbt.adapters.rowmerge.merge import ConcurrentMergeError, MergeSpecError, faults, history, run_merge
from dbt.adapters.rowmerge.merge.errors import CastError
from dbt.adapters.rowmerge.merge.outputs import checked_cast
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    new_files,
    rows,
    session_conf,
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
    # each says how to fix it in the words of its own clause: an update can keep the value,
    # an insert must get one
    assert "merge_update_columns / merge_exclude_columns" in problems[0]
    assert "keep the table's value in updates with schema evolution" in problems[0]
    assert "(on_schema_change='append_new_columns')" in problems[0]
    assert "`cast(null as int) as b`" in problems[1]
    assert "insert NULL there with schema evolution (on_schema_change='append_new_columns')" in problems[1]
    assert "merge_update_columns" not in problems[1]
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

    monkeypatch.setattr(faults, "fault_point", add_column)
    before = file_snapshot(spark, t)
    with pytest.raises(ConcurrentMergeError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"v": "s.v"}}])
    assert str(info.value) == (
        f"MERGE into {t} aborted: column(s) x were added to the table while the merge ran, and the "
        "rewritten files would not have them. Nothing was changed; run the model again."
    )
    assert file_snapshot(spark, t) == before
    assert rows(spark, t) == [(1, "a", None), (2, "b", None)]


# -- casts inside structs, arrays and maps (outputs.checked_cast, plan._cast_to) --------------

NESTED = "id long, k struct<a:int,b:string>, arr array<int>, m map<int,bigint>"
NESTED_ROW = (1, (1, "x"), [1], {1: 1})


def _set(**values: str) -> list[dict]:
    return [{"when": "matched", "action": "update", "set": values}]


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"k": "named_struct('a', s.v, 'b', 'q')"}, "column 'k' field 'a' (int), value 'zz'"),
        ({"arr": "array(s.v)"}, "column 'arr' element (int), value 'zz'"),
        ({"m": "map(2, s.v)"}, "column 'm' value (bigint), value 'zz'"),
        ({"m": "map(s.v, 2)"}, "column 'm' key (int), value 'zz'"),
        ({"m": "map('1', 1, '01', 2)"}, "column 'm' key (int): two keys cast to the same key"),
    ],
    ids=["struct-field", "array-element", "map-value", "map-key", "map-keys-collide"],
)
def test_cast_nested_value_that_does_not_fit_raises_cast_error_naming_the_path(spark, db, values, fragment):
    t = f"{db}.t"
    create_table(spark, t, NESTED, [[NESTED_ROW, (2, (2, "y"), [2], {2: 2})]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "zz")])
    with pytest.raises(CastError) as info:
        merge(spark, t, src, _set(**values))
    msg = str(info.value)
    assert f"MERGE into {t} failed" in msg and fragment in msg, msg
    assert table_state(spark, t) == before
    assert history(spark, t) == []


def test_cast_nested_value_that_does_not_fit_in_an_insert_raises_cast_error(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, ks array<struct<a:int,b:string>>", [[(1, [(1, "x")])]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "5"), (2, "zz")])
    clauses = [
        {
            "when": "not_matched",
            "action": "insert",
            "values": {"id": "s.id", "ks": "array(named_struct('b', 'q', 'a', s.v))"},
        }
    ]
    with pytest.raises(CastError) as info:
        merge(spark, t, src, clauses)
    assert "column 'ks' element field 'a' (int), value 'zz'" in str(info.value)
    assert table_state(spark, t) == before


def test_cast_nested_values_at_every_depth_and_nulls_stay_null(spark, db):
    t = f"{db}.t"
    schema = "id long, k struct<a:int,b:array<int>>, m map<int,array<bigint>>"
    create_table(spark, t, schema, [[(i, (0, [0]), {0: [0]}) for i in range(1, 6)]])
    src = source_view(
        spark,
        f"{db}_src",
        "id long, k struct<a:string,b:array<string>>, m map<string,array<string>>",
        [
            (1, ("1", ["2", None, "3"]), {"4": ["5", None]}),
            (2, None, None),  # a NULL struct and a NULL map stay NULL
            (3, (None, None), {"6": None}),  # a NULL field, array and map value stay NULL
            (4, ("7", []), {}),
            (6, ("8", ["9"]), {"10": ["11"]}),  # inserted
        ],
    )
    result = merge(spark, t, src, UPSERT)
    assert [(r[0], r[1] and tuple(r[1]), r[2]) for r in rows(spark, t)] == [
        (1, (1, [2, None, 3]), {4: [5, None]}),
        (2, None, None),
        (3, (None, None), {6: None}),
        (4, (7, []), {}),
        (5, (0, [0]), {0: [0]}),
        (6, (8, [9]), {10: [11]}),
    ]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (4, 1)


def test_cast_struct_fields_resolved_by_name_in_any_order_and_letter_case(spark, db):
    t = f"{db}.t"
    create_table(
        spark, t, "id long, k struct<a:int,b:string>", [[(1, (1, "x")), (2, (2, "y")), (3, (3, "z"))]]
    )
    src = source_view(
        spark,
        f"{db}_src",
        "id long, k struct<B:string,a:long>",  # `set *`: the same fields, other order and case
        [(1, ("q", 5)), (4, ("w", 6))],
    )
    merge(spark, t, src, UPSERT)
    # Source row 1 matches target row 2; source row 4 matches none (and nothing is inserted).
    merge(spark, t, src, _set(k="named_struct('b', 'r', 'A', s.id * 10)"), on="t.id = s.id + 1")
    assert {r[0]: r[1].asDict() for r in rows(spark, t)} == {
        1: {"a": 5, "b": "q"},
        2: {"a": 10, "b": "r"},
        3: {"a": 3, "b": "z"},
        4: {"a": 6, "b": "w"},
    }
    # The files hold the column's own field names (readers that match names exactly see them).
    for path in file_snapshot(spark, t):
        k = pq.read_schema(path).field("k").type
        assert [k.field(i).name for i in range(k.num_fields)] == ["a", "b"], path


def test_cast_struct_fields_that_do_not_match_by_name_raise_spec_error(spark, db):
    t = f"{db}.t"
    create_table(
        spark, t, "id long, k struct<a:int,b:string>, ks array<struct<a:int,b:string>>", [[(1, (1, "x"), [])]]
    )
    before = table_state(spark, t)
    src = source_view(
        spark, f"{db}_src", "id long, k struct<a:int,c:string>, ks array<struct<a:int>>", [(1, (1, "y"), [])]
    )
    with pytest.raises(MergeSpecError) as info:
        merge(
            spark,
            t,
            src,
            [
                {
                    "when": "matched",
                    "condition": "s.id > 5",
                    "action": "update",
                    "set": {"k": "named_struct('a', 1)"},
                },
                {
                    "when": "matched",
                    "condition": "s.id > 4",
                    "action": "update",
                    "set": {"k": "named_struct('a', 1, 'b', 'x', 'c', 2)"},
                },
                {
                    "when": "matched",
                    "condition": "s.id > 3",
                    "action": "update",
                    "set": {"k": "named_struct('a', 1, 'B', 'x', 'b', 'y')"},
                },
                {"when": "matched", "action": "update", "set": "*"},
            ],
        )
    hint = "Struct fields are matched by name, in any order"
    assert info.value.problems == [
        "clauses[0] (when: matched, action: update): value (named_struct('a', 1)): column 'k' has struct "
        f"fields (a, b) but the value has (a): missing b. {hint}: give the value's structs exactly the "
        "column's field names (e.g. named_struct('name', value, ...)), or change the column's type",
        "clauses[1] (when: matched, action: update): value (named_struct('a', 1, 'b', 'x', 'c', 2)): column "
        f"'k' has struct fields (a, b) but the value has (a, b, c): not in the column: c. {hint}: give the "
        "value's structs exactly the column's field names (e.g. named_struct('name', value, ...)), or "
        "change the column's type",
        "clauses[2] (when: matched, action: update): value (named_struct('a', 1, 'B', 'x', 'b', 'y')): "
        "column 'k' has struct fields (a, b) but the value has (a, B, b): names that differ only in letter "
        f"case: B, b. {hint}: give the value's structs exactly the column's field names (e.g. "
        "named_struct('name', value, ...)), or change the column's type",
        "clauses[3] (when: matched, action: update): value (s.k): column 'k' has struct fields (a, b) but "
        f"the value has (a, c): missing b; not in the column: c. {hint}: give the value's structs exactly "
        "the column's field names (e.g. named_struct('name', value, ...)), or change the column's type",
        "clauses[3] (when: matched, action: update): value (s.ks): column 'ks' element has struct fields "
        f"(a, b) but the value has (a): missing b. {hint}: give the value's structs exactly the column's "
        "field names (e.g. named_struct('name', value, ...)), or change the column's type",
    ]
    assert table_state(spark, t) == before


def test_cast_struct_field_names_in_other_letter_case_refused_when_case_sensitive(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, k struct<a:int,b:string>", [[(1, (1, "x"))]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long", [(1,)])
    with session_conf(spark, {"spark.sql.caseSensitive": "true"}):
        with pytest.raises(MergeSpecError) as info:
            merge(spark, t, src, _set(k="named_struct('A', 1, 'b', 'x')"))
    assert (
        "column 'k' has struct fields (a, b) but the value has (A, b): missing a; not in the column: A"
        in str(info.value)
    )
    assert table_state(spark, t) == before


STAR_UPSERT = [
    {"when": "matched", "action": "update", "set": "*"},
    {"when": "not_matched", "action": "insert", "values": "*"},
]


def test_star_takes_the_source_column_of_the_exact_name_when_case_sensitive(spark, db):
    """Under spark.sql.caseSensitive a source may hold both v and V: `*` takes v for target
    column v, as Spark's own MERGE does (it once took whichever of the two came last)."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    with session_conf(spark, {"spark.sql.caseSensitive": "true"}):
        src = source_view(
            spark, f"{db}_src", "id long, v string, V string", [(1, "new", "junk"), (2, "ins", "x")]
        )
        merge(spark, t, src, STAR_UPSERT)
    assert rows(spark, t) == [(1, "new"), (2, "ins")]


def test_star_refuses_case_twins_none_of_which_has_the_exact_name_when_case_sensitive(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, val string", [[(1, "a")]])
    before = table_state(spark, t)
    with session_conf(spark, {"spark.sql.caseSensitive": "true"}):
        src = source_view(spark, f"{db}_src", "id long, Val string, VAL string", [(1, "x", "y")])
        with pytest.raises(MergeSpecError) as info:
            merge(spark, t, src, STAR_UPSERT)
    found = (
        "`{}: *` finds source columns Val, VAL for target column 'val' and none of them has its exact name"
    )
    assert info.value.problems == [
        f"clauses[{i}] (when: {w}, action: {a}): {found.format(k)}; rename them in the model SQL or list the "
        "columns to set"
        for i, w, a, k in ((0, "matched", "update", "set"), (1, "not_matched", "insert", "values"))
    ]
    assert table_state(spark, t) == before


def test_cast_nested_part_that_cannot_be_cast_at_all_raises_spec_error_naming_it(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, k struct<a:int,b:string>", [[(1, (1, "x"))]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long", [(1,)])
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, _set(k="named_struct('b', 'x', 'a', array(1))"))
    assert info.value.problems == [
        "clauses[0] (when: matched, action: update): value (named_struct('b', 'x', 'a', array(1))) of type "
        "struct<b:string,a:array<int>> cannot be cast to column 'k' of type struct<a:int,b:string> (column "
        "'k' field 'a': array<int> cannot be cast to int)"
    ]
    assert table_state(spark, t) == before


def test_cast_value_of_the_column_type_is_left_as_it_is(spark):
    """The common path: a value whose type is the column's gets no cast and no check at all."""
    dtype = spark.createDataFrame([], "k struct<a:int,b:array<map<string,int>>>").schema["k"].dataType
    value = F.col("s.k")
    assert checked_cast(value, dtype, StructField("k", dtype), "s.k") is value
    inner = spark.createDataFrame([], "k struct<a:int,b:array<map<string,bigint>>>").schema["k"].dataType
    assert checked_cast(value, inner, StructField("k", dtype), "s.k") is not value


def test_a_session_that_reads_timestamp_as_ntz_keeps_the_tables_timestamp_type(spark, db):
    """With ``spark.sql.timestampType=TIMESTAMP_NTZ`` the SQL word ``timestamp`` means
    TIMESTAMP_NTZ: the NULLs a merge writes for columns a clause leaves out, and a column
    schema evolution adds, must still be the table's (and the source's) local timestamp."""
    t = f"{db}.t"
    at = datetime(2026, 1, 2, 3, 4, 5)
    create_table(spark, t, "id long, v string, at timestamp", [[(1, "a", at), (2, "b", at)]])
    before = file_snapshot(spark, t)
    src = source_view(
        spark, f"{db}_src", "id long, v string, c timestamp", [(1, "A", at), (3, "c", at), (4, "d", at)]
    )
    clauses = [
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {
            "when": "not_matched",
            "condition": "s.id = 3",
            "action": "insert",
            "values": {"id": "s.id", "v": "s.v"},
        },
        {"when": "not_matched", "action": "insert", "values": "*"},
    ]
    with session_conf(spark, {"spark.sql.timestampType": "TIMESTAMP_NTZ"}):
        merge(spark, t, src, clauses, schema_evolution=True)
        types = dict(spark.table(t).dtypes)
        written = {
            path: dict(spark.read.parquet(path).dtypes) for path in new_files(before, file_snapshot(spark, t))
        }
    assert (types["at"], types["c"]) == ("timestamp", "timestamp")
    assert written and all((d["at"], d["c"]) == ("timestamp", "timestamp") for d in written.values()), written
    assert rows(spark, t) == [
        (1, "A", at, None),
        (2, "b", at, None),
        (3, "c", None, None),
        (4, "d", None, at),
    ]
