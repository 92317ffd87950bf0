"""initial.py: the rows a first run creates the table from are exactly what a merge into an
empty table with the source's columns inserts; constraints are checked before the table exists."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import ConstraintViolation, MergeSpecError, initial_rows, parse_spec
from tests.engine.helpers import create_table, merge, rows, sorted_rows, source_view


def _spec(target: str, source: str, clauses: list[dict[str, Any]], **extra: Any):
    return parse_spec(
        {
            "target": target,
            "source": source,
            "target_alias": "t",
            "source_alias": "s",
            "on": "t.id = s.id",
            "clauses": clauses,
            **extra,
        }
    )


CLAUSES = [
    {"when": "matched", "action": "update", "set": "*"},
    {"when": "not_matched", "condition": "s.v = 'skip'", "action": "insert", "values": {"id": "-s.id"}},
    {
        "when": "not_matched",
        "condition": "s.n > 0",
        "action": "insert",
        "values": {"id": "s.id", "v": "upper(s.v)", "n": "s.n * 10"},
    },
    {"when": "not_matched_by_source", "action": "delete"},
]
SOURCE = [(1, "a", 1), (2, "skip", 5), (3, "c", 0), (4, None, 2), (4, "dup", 3)]


def test_initial_rows_equal_a_merge_into_an_empty_table(spark, db):
    src = source_view(spark, f"{db}_src", "id long, v string, n int", SOURCE)
    got = sorted_rows(tuple(r) for r in initial_rows(spark, _spec(f"{db}.new", src, CLAUSES)).collect())
    # The same merge into an existing empty table with those columns (the oracle).
    create_table(spark, f"{db}.empty", "id long, v string, n int", [[]])
    merge(spark, f"{db}.empty", src, CLAUSES, allow_empty_source=True)
    assert got == rows(spark, f"{db}.empty")
    assert got == [(-2, None, None), (1, "A", 10), (4, None, 20), (4, "DUP", 30)]


def test_a_cluster_by_column_the_model_lacks_is_refused_before_the_table_exists(spark, db):
    src = source_view(spark, f"{db}_src", "id long, v string, n int", SOURCE)
    with pytest.raises(
        MergeSpecError, match=r"`cluster_by` column 'nope' is not a column of .*new \(its columns: id, v, n\)"
    ):
        initial_rows(spark, _spec(f"{db}.new", src, CLAUSES, cluster_by=["n", "nope"]))
    assert initial_rows(spark, _spec(f"{db}.new", src, CLAUSES, cluster_by=["n"])).count() == 4


def test_unknown_column_in_a_matched_clause_waits_for_the_merge(spark, db):
    src = source_view(spark, f"{db}_src", "id long, v string, n int", SOURCE)
    clauses = [{"when": "matched", "condition": "s.later > 0", "action": "delete"}, *CLAUSES[2:3]]
    assert initial_rows(spark, _spec(f"{db}.new", src, clauses)).count() == 4
    # ... but a parse error fails at once, in any clause
    bad = [
        {"when": "matched", "condition": "s.n = = 1", "action": "delete"},
        {"when": "not_matched", "condition": "s.later > 0", "action": "insert", "values": "*"},
    ]
    with pytest.raises(MergeSpecError) as err:
        initial_rows(spark, _spec(f"{db}.new", src, bad))
    assert [p.split(": [")[0] for p in err.value.problems] == [
        "clauses[0] (when: matched, action: delete) condition (s.n = = 1) cannot be resolved",
    ]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_an_insert_clause_reading_a_later_column_keeps_every_row_with_a_warning(spark, db):
    """The model selects `op` only on incremental runs: the first run cannot evaluate the
    insert clause, so it creates the table from every row (as dbt does) and says why."""
    src = source_view(spark, f"{db}_src", "id long, v string, n int", SOURCE)
    clauses = [
        {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
        {
            "when": "not_matched",
            "condition": "s.n > 0 AND NOT (s.op = 'D')",
            "action": "insert",
            "values": "*",
        },
    ]
    seen = _Collect()
    engine_log = logging.getLogger("rowmerge")
    engine_log.addHandler(seen)
    try:
        got = sorted_rows(tuple(r) for r in initial_rows(spark, _spec(f"{db}.new", src, clauses)).collect())
    finally:
        engine_log.removeHandler(seen)
    assert got == sorted_rows(SOURCE)
    assert seen.messages == [
        f"rowmerge: first run of {db}.new: the table is created from every row of the model, because "
        "clauses[1] (when: not_matched, action: insert) condition (s.n > 0 AND NOT (s.op = 'D')) reads "
        "`s`.`op`, which the model does not select on this run. Later runs apply the clause; select the "
        "column on every run (e.g. a constant in the first-run branch) to apply it on the first run too."
    ]


def test_constraints_are_checked_before_the_table_exists(spark, db):
    src = source_view(spark, f"{db}_src", "id long, v string, n int", SOURCE)
    spec = _spec(
        f"{db}.new",
        src,
        [{"when": "not_matched", "action": "insert", "values": "*"}],
        constraints=[
            {"type": "check", "expression": "n < 4", "name": "small"},
            {"type": "not_null", "column": "v"},
        ],
    )
    with pytest.raises(ConstraintViolation) as err:
        initial_rows(spark, spec)
    assert str(err.value) == (
        f"{db}.new was not created: 1 row(s) of the model violates constraint check small (n < 4) (first: "
        "id=2). Nothing was changed. Fix the rows in the model SQL, or change the model's contract."
    )
