"""Maps, variants and nested types in targets: updates, the no-op check and the change feed
(outputs.py).

Spark cannot compare maps; the no-op check compares them as key-sorted entries, at any
depth, so a map with the same entries in another order is unchanged. Nor can it compare
variants; the no-op check compares their values and types (outputs.comparable), so a variant
is unchanged only if it holds the same value.
"""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge import ExecutionError, start_history
from tests.engine.helpers import UPSERT, create_table, file_snapshot, merge, rows, source_view, table_state

SCHEMA = (
    "id long, m map<string,int>, s struct<tags: map<string,array<map<string,int>>>, n int>, "
    "a array<map<int,string>>"
)


def _row(i: int, m: dict | None, n: int = 0) -> tuple:
    return (i, m, ({"k": [{"x": i}]}, n), [{i: "v"}])


def test_nested_types_map_columns_update_skip_unchanged_and_feed(spark, db):
    t = f"{db}.t"
    create_table(spark, t, SCHEMA, [[_row(1, {"a": 1, "b": 2}), _row(2, {"a": 1})], [_row(3, None)]])
    start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    src = source_view(
        spark,
        f"{db}_s",
        SCHEMA,
        [
            _row(1, {"b": 2, "a": 1}),  # same entries, other order: a no-op update
            _row(2, {"a": 5}),  # changed map
            _row(3, None, n=7),  # changed field next to a nested map
            _row(4, {"z": 0}),  # insert
        ],
    )
    result = merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetFilesRemoved"]) == (2, 1, 2)
    assert [(r[0], r[1], r[2][1]) for r in rows(spark, t)] == [
        (1, {"a": 1, "b": 2}, 0),
        (2, {"a": 5}, 0),
        (3, None, 7),
        (4, {"z": 0}, 0),
    ]
    feed = sorted((r["id"], r["_change_type"]) for r in spark.table(f"{t}__changes").collect())
    assert feed == [
        (2, "update_postimage"),
        (2, "update_preimage"),
        (3, "update_postimage"),
        (3, "update_preimage"),
        (4, "insert"),
    ]


def test_nested_types_map_no_op_updates_with_skip_unchanged_on_and_off(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, m map<string,int>", [[(1, {"a": 1}), (2, {"a": 2})]])
    src = source_view(spark, f"{db}_s", "id long, m map<string,int>", [(1, {"a": 1}), (2, {"a": 3})])
    clauses = [{"when": "matched", "action": "update", "set": {"m": "s.m"}}]
    assert merge(spark, t, src, clauses).metrics["numTargetRowsUpdated"] == 1
    assert merge(spark, t, src, clauses).version == 1  # every update is a no-op now: no version
    assert merge(spark, t, src, clauses, skip_unchanged_updates=False).metrics["numTargetRowsUpdated"] == 2
    assert rows(spark, t) == [(1, {"a": 1}), (2, {"a": 3})]


def test_nested_types_runtime_error_in_a_value_is_a_clear_error(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, m map<string,int>", [[(1, {"a": 1}), (2, {"a": 2})]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_s", "id long, m map<string,int>", [(1, {"a": 1})])
    clauses = [{"when": "matched", "action": "update", "set": {"m": "map_concat(t.m, s.m)"}}]
    with pytest.raises(ExecutionError) as info:
        merge(spark, t, src, clauses)
    assert str(info.value) == (
        f"MERGE into {t} failed while Spark evaluated it: [DUPLICATED_MAP_KEY] Duplicate map key a was "
        "found, please check the input data. Nothing was changed. If the error comes from a condition or "
        "value of the merge config (or the model SQL), fix it there; otherwise run the model again."
    )
    assert table_state(spark, t) == before


# -- VARIANT columns: Spark cannot compare them; the no-op check compares their values --------


def _variant_table(spark, name: str, ddl: str, values: list[str]) -> None:
    """``name`` with the rows ``values`` (SQL row tuples: VARIANT values need SQL to build)."""
    spark.sql(f"CREATE TABLE {name} ({ddl}) USING parquet")
    spark.sql(f"INSERT INTO {name} VALUES {', '.join(values)}")


def _variant_view(spark, name: str, columns: str, values: list[str]) -> str:
    spark.sql(f"SELECT * FROM VALUES {', '.join(values)} AS v({columns})").createOrReplaceTempView(name)
    return name


def _json(spark, name: str, *columns: str) -> list[tuple]:
    """Rows of ``name`` with every VARIANT (at any depth) as its JSON text, sorted."""
    spark.catalog.refreshTable(name)
    data = spark.table(name).selectExpr(*[f"to_json({c})" if c != "id" else c for c in columns]).collect()
    return sorted(tuple(r) for r in data)


def test_nested_types_variant_column_update_no_op_insert_and_feed(spark, db):
    t = f"{db}.t"
    _variant_table(
        spark,
        t,
        "id BIGINT, j VARIANT",
        [
            """(1, parse_json('{"a": 1, "b": [1, {"c": "x"}]}'))""",
            """(2, parse_json('{"a": 1}'))""",
            """(3, parse_json('"x"'))""",
        ],
    )
    start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    src = _variant_view(
        spark,
        f"{db}_s",
        "id, j",
        [
            """(1L, parse_json('{"b": [1, {"c": "x"}], "a": 1}'))""",  # the same value, keys in another order
            """(2L, parse_json('{"a": 2}'))""",
            """(3L, parse_json('"x"'))""",
            """(4L, parse_json('[1, null, {"d": 1.5}]'))""",
        ],
    )
    result = merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 1)
    assert _json(spark, t, "id", "j") == [
        (1, '{"a":1,"b":[1,{"c":"x"}]}'),
        (2, '{"a":2}'),
        (3, '"x"'),
        (4, '[1,null,{"d":1.5}]'),
    ]
    spark.catalog.refreshTable(f"{t}__changes")
    feed = spark.table(f"{t}__changes").selectExpr("id", "to_json(j)", "_change_type", "_commit_version")
    assert sorted(tuple(r) for r in feed.collect()) == [
        (2, '{"a":1}', "update_preimage", 1),
        (2, '{"a":2}', "update_postimage", 1),
        (4, '[1,null,{"d":1.5}]', "insert", 1),
    ]
    # Nothing changes on a second run: every update writes an equal variant.
    assert merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"}).version == 1


# (id, the stored value, the value the update writes): equal only where the value is the same.
ALIKE = [
    (1, "parse_json('1')", "cast(1BD AS VARIANT)"),  # an integer and a DECIMAL(1,0), both "1"
    (2, "cast(1.5D AS VARIANT)", "cast(1.5BD AS VARIANT)"),  # a double and a decimal, both "1.5"
    (3, "cast(cast(0.1 AS FLOAT) AS VARIANT)", "cast(0.1D AS VARIANT)"),  # a float and a double, "0.1"
    (4, "cast('2024-01-01' AS VARIANT)", "cast(DATE'2024-01-01' AS VARIANT)"),  # a string and a date
    (5, "cast(X'01' AS VARIANT)", "cast('AQ==' AS VARIANT)"),  # binary and its base64 text
    # The same JSON and the same schema_of_variant (ARRAY<DECIMAL(20,0)>), elements swapped:
    (
        6,
        "cast(array(cast(1L AS VARIANT), cast(1BD AS VARIANT)) AS VARIANT)",
        "cast(array(cast(1BD AS VARIANT), cast(1L AS VARIANT)) AS VARIANT)",
    ),
    (7, "parse_json('null')", "cast(NULL AS VARIANT)"),  # a JSON null and SQL NULL
    (8, "cast(-0.0D AS VARIANT)", "cast(0.0D AS VARIANT)"),
    # Deeper than the levels compared element by element: an array there that mixes types
    # that print alike cannot be compared exactly, so it counts as changed (even if equal).
    (9, "parse_json('[[[[[1, 2.5]]]]]')", "parse_json('[[[[[1, 2.5]]]]]')"),
    # Equal values: integers of any width, objects whose keys come in another order, nested
    # arrays of one type, the same deep value without mixed arrays.
    (10, "cast(1Y AS VARIANT)", "cast(1L AS VARIANT)"),
    (
        11,
        """parse_json('{"a": 1, "b": {"c": [1, 2], "d": null}}')""",
        """parse_json('{"b": {"d": null, "c": [1, 2]}, "a": 1}')""",
    ),
    (12, "parse_json('[[1, 2], [3]]')", "parse_json('[[1, 2], [3]]')"),
    (13, """parse_json('[[[[{"a": [1, 2]}]]]]')""", """parse_json('[[[[{"a": [1, 2]}]]]]')"""),
    (
        14,
        """parse_json('[1, 2.5, "x", {"a": [1.5, 2]}]')""",
        """parse_json('[1, 2.5, "x", {"a": [1.5, 2]}]')""",
    ),
]


def test_nested_types_variant_values_that_print_alike_are_not_equal(spark, db):
    t = f"{db}.t"
    _variant_table(spark, t, "id BIGINT, j VARIANT", [f"({i}, {old})" for i, old, _ in ALIKE])
    src = _variant_view(spark, f"{db}_s", "id, j", [f"({i}L, {new})" for i, _, new in ALIKE])
    clauses = [{"when": "matched", "action": "update", "set": {"j": "s.j"}}]
    result = merge(spark, t, src, clauses, change_data_feed={"table": f"{t}__changes"})
    assert result.metrics["numTargetRowsUpdated"] == 9
    spark.catalog.refreshTable(f"{t}__changes")
    updated = {r["id"] for r in spark.table(f"{t}__changes").collect()}
    assert updated == {1, 2, 3, 4, 5, 6, 7, 8, 9}
    written = spark.table(t).selectExpr("id", "to_json(j)", "schema_of_variant(j)").collect()
    expected = spark.table(src).selectExpr("id", "to_json(j)", "schema_of_variant(j)").collect()
    assert sorted(tuple(r) for r in written if r[0] in updated) == sorted(
        tuple(r) for r in expected if r[0] in updated
    )


def test_nested_types_variant_in_struct_field_array_element_and_map_value(spark, db):
    t = f"{db}.t"
    ddl = "id BIGINT, s STRUCT<v: VARIANT, n: INT>, a ARRAY<VARIANT>, m MAP<STRING, VARIANT>"
    row = "named_struct('v', {v}, 'n', 1), array(parse_json('1'), {a}), map('k', {m})"
    same = """parse_json('{"x": 1, "y": 2}')"""
    other_order = """parse_json('{"y": 2, "x": 1}')"""
    _variant_table(spark, t, ddl, [f"({i}, {row.format(v=same, a=same, m=same)})" for i in (1, 2, 3, 4)])
    src = _variant_view(
        spark,
        f"{db}_s",
        "id, s, a, m",
        [
            f"(1L, {row.format(v=other_order, a=other_order, m=other_order)})",  # equal everywhere
            f"(2L, {row.format(v=same, a=same, m='cast(1BD AS VARIANT)')})",  # a map value differs
            f"(3L, {row.format(v=same, a='cast(1.0D AS VARIANT)', m=same)})",  # an array element differs
            f"(4L, {row.format(v='parse_json(' + chr(39) + 'null' + chr(39) + ')', a=same, m=same)})",
        ],
    )
    result = merge(spark, t, src, [{"when": "matched", "action": "update", "set": "*"}])
    assert result.metrics["numTargetRowsUpdated"] == 3
    assert [r[1:] for r in _json(spark, t, "id", "s", "a", "m")] == [
        ('{"v":{"x":1,"y":2},"n":1}', '[1,{"x":1,"y":2}]', '{"k":{"x":1,"y":2}}'),
        ('{"v":{"x":1,"y":2},"n":1}', '[1,{"x":1,"y":2}]', '{"k":1}'),
        ('{"v":{"x":1,"y":2},"n":1}', "[1,1.0]", '{"k":{"x":1,"y":2}}'),
        ('{"v":null,"n":1}', '[1,{"x":1,"y":2}]', '{"k":{"x":1,"y":2}}'),
    ]


def test_nested_types_variant_with_skip_unchanged_updates_off_updates_every_matched_row(spark, db):
    t = f"{db}.t"
    _variant_table(spark, t, "id BIGINT, j VARIANT", ["(1, parse_json('[1]'))", "(2, parse_json('2'))"])
    src = _variant_view(spark, f"{db}_s", "id, j", ["(1L, parse_json('[1]'))", "(2L, parse_json('3'))"])
    result = merge(
        spark, t, src, UPSERT, skip_unchanged_updates=False, change_data_feed={"table": f"{t}__changes"}
    )
    assert result.metrics["numTargetRowsUpdated"] == 2
    assert _json(spark, t, "id", "j") == [(1, "[1]"), (2, "3")]
    spark.catalog.refreshTable(f"{t}__changes")
    feed = spark.table(f"{t}__changes").selectExpr("id", "to_json(j)", "_change_type").collect()
    assert sorted(tuple(r) for r in feed) == [
        (1, "[1]", "update_postimage"),
        (1, "[1]", "update_preimage"),
        (2, "2", "update_preimage"),
        (2, "3", "update_postimage"),
    ]


def test_nested_types_variant_first_column_keeps_file_skipping_by_key(spark, db):
    # File statistics are kept for the key (id), not for the VARIANT before it: the merge reads
    # only the file its key falls in.
    t = f"{db}.t"
    spark.sql(f"CREATE TABLE {t} (j VARIANT, id BIGINT) USING parquet")
    for i in (1, 2, 3):
        spark.sql(f"INSERT INTO {t} SELECT parse_json('{i}'), {i}L")
    start_history(spark, t)
    before = file_snapshot(spark, t)
    src = _variant_view(spark, f"{db}_s", "j, id", ["(parse_json('[3]'), 3L)"])
    m = merge(spark, t, src, UPSERT).metrics
    assert (m["numTargetFilesBeforeSkipping"], m["numTargetFilesAfterSkipping"]) == (len(before), 1)
    assert m["numTargetFilesRemoved"] == 1 and m["numTargetRowsUpdated"] == 1
    assert _json(spark, t, "id", "j") == [(1, "1"), (2, "2"), (3, "[3]")]
