"""Merges with hundreds of clauses (outputs.decide): the clause that acts on a row is decided
once per row, so every expression grows linearly with the number of clauses, and the clause
semantics (first applicable clause wins, a NULL condition is false, an update that changes
nothing is skipped) hold at any count."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from pyspark.sql.readwriter import DataFrameWriter

from dbt.adapters.rowmerge.merge import start_history
from tests.engine.helpers import create_table, merge, rows, source_view

INSERT_ALL = {"when": "not_matched", "action": "insert", "values": "*"}


def _clauses(count: int) -> list[dict[str, Any]]:
    """``count`` conditional updates, five per value of ``s.c`` (the first of the five acts),
    then an insert."""
    updates = [
        {
            "when": "matched",
            "condition": f"s.c = {i // 5}",
            "action": "update",
            "set": {"v": f"s.v * 1000 + {i}", "w": "s.w"},
        }
        for i in range(count)
    ]
    return [*updates, INSERT_ALL]


def _source(spark, db, ids: range) -> str:
    """Source rows: v = id, w = 'y<id>', and c = id except NULL for multiples of 7."""
    data = [(i, i, f"y{i}", None if i % 7 == 0 else i) for i in ids]
    return source_view(spark, f"{db}_src", "id long, v int, w string, c int", data)


def test_many_clauses_500_conditional_updates_give_exact_rows_and_feed(spark, db):
    t = f"{db}.t"
    target = [(i, 0, "x") for i in range(60)]
    target[1] = (1, 1005, "y1")  # what its clause writes already: a no-op update
    create_table(spark, t, "id long, v int, w string", [target[:30], target[30:]])
    start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    src = _source(spark, db, range(65))
    result = merge(spark, t, src, _clauses(500), change_data_feed={"table": f"{t}__changes"})

    def written(i: int) -> tuple[int, int, str]:
        return (i, i * 1000 + 5 * i, f"y{i}")  # clause 5 * c acts: the first of its five

    updated = [i for i in range(2, 60) if i % 7]  # row 1 unchanged, NULL conditions act nowhere
    expected = [written(i) if i in updated or i == 1 else (i, 0, "x") for i in range(60)]
    assert rows(spark, t) == sorted(expected + [(i, i, f"y{i}") for i in range(60, 65)])
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"]) == (
        len(updated),
        5,
        0,
    )
    spark.catalog.refreshTable(f"{t}__changes")
    feed = spark.table(f"{t}__changes").select("id", "v", "w", "_change_type").collect()
    assert sorted(tuple(r) for r in feed) == sorted(
        [(i, 0, "x", "update_preimage") for i in updated]
        + [(*written(i), "update_postimage") for i in updated]
        + [(i, i, f"y{i}", "insert") for i in range(60, 65)]
    )


def test_many_clauses_plans_grow_linearly_with_the_clause_count(spark, db, monkeypatch):
    # The optimized plan of every job a merge runs (scan, rewrite, change feed): with the
    # clause index inlined into each output column's CASE it grew with the square of the
    # clause count (80 clauses: 14 times the plan of 20).
    if not hasattr(spark, "_jsparkSession"):
        pytest.skip("reads the JVM's optimized plans (classic sessions only)")
    sizes: list[int] = []
    collect, save = ClassicDataFrame.collect, DataFrameWriter.save

    def record(df: Any) -> None:
        sizes.append(len(df._jdf.queryExecution().optimizedPlan().toString()))

    def collecting(self: Any) -> Any:
        record(self)
        return collect(self)

    def saving(self: Any, *args: Any, **kwargs: Any) -> Any:
        record(self._df)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(ClassicDataFrame, "collect", collecting)
    monkeypatch.setattr(DataFrameWriter, "save", saving)
    largest = {}
    for count in (20, 80):
        t = f"{db}.t{count}"
        create_table(spark, t, "id long, v int, w string", [[(i, 0, "x") for i in range(20)]])
        src = _source(spark, db, range(25))
        sizes.clear()
        merge(spark, t, src, _clauses(count), change_data_feed={"table": f"{t}__changes"})
        largest[count] = max(sizes)
    # Linear growth (a + b * count) keeps the ratio under 80 / 20 = 4.
    assert largest[80] < 4 * largest[20], largest
