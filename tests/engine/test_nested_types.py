"""Maps and nested types in targets: updates, the no-op check and the change feed (outputs.py).

Spark cannot compare maps; the no-op check compares them as key-sorted entries, at any
depth, so a map with the same entries in another order is unchanged.
"""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge import ExecutionError, start_history
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view, table_state

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
