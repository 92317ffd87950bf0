"""Constraints in the spec: every row an update or insert writes is checked in the write job;
a violation fails the merge naming the constraint and the row's key, the table unchanged."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge import ConstraintViolation, MergeSpecError
from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view, table_state

NOT_NULL_V = {"type": "not_null", "column": "v"}
POSITIVE = {"type": "check", "expression": "n > 0", "name": "positive"}


def _target(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, n int", [[(1, "a", 1), (2, "b", 2)], [(3, "c", 3)]])
    return t


@pytest.mark.parametrize(
    ("source", "clauses", "label", "key"),
    [
        ([(9, None, 1)], UPSERT, "not_null(v)", 9),  # an insert
        ([(2, None, 1)], UPSERT, "not_null(v)", 2),  # an update
        ([(2, "b", 0)], UPSERT, "check positive (n > 0)", 2),
        (
            [(1, "a", 1)],
            [
                {
                    "when": "not_matched_by_source",
                    "condition": "t.id = 3",
                    "action": "update",
                    "set": {"n": "-1"},
                }
            ],
            "check positive (n > 0)",
            3,
        ),
    ],
    ids=["insert_null", "update_null", "update_check", "nmbs_update_check"],
)
def test_violation_fails_and_changes_nothing(spark, db, source, clauses, label, key):
    t = _target(spark, db)
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, n int", source)
    with pytest.raises(ConstraintViolation) as err:
        merge(spark, t, src, clauses, constraints=[NOT_NULL_V, POSITIVE])
    assert str(err.value) == (
        f"MERGE into {t} failed: a row it writes violates constraint {label} (first: id={key}). Nothing "
        "was changed. Fix the rows in the model SQL, or change the model's contract."
    )
    assert table_state(spark, t) == before


def test_rows_that_satisfy_them_merge_and_deleted_or_copied_rows_are_not_checked(spark, db):
    t = _target(spark, db)
    spark.sql(f"insert into {t} values (4, null, -4)")  # predates the constraints, in its own file
    src = source_view(
        spark, f"{db}_src", "id long, v string, n int", [(1, "A", 5), (4, "x", -1), (7, "g", 7)]
    )
    clauses = [{"when": "matched", "condition": "s.n < 0", "action": "delete"}, *UPSERT]
    result = merge(spark, t, src, clauses, constraints=[NOT_NULL_V, POSITIVE])
    assert result.summary().startswith("MERGE 1 updated, 1 inserted, 1 deleted")
    assert rows(spark, t) == [(1, "A", 5), (2, "b", 2), (3, "c", 3), (7, "g", 7)]


def test_constraints_must_resolve_over_the_target(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string, n int", [(1, "a", 1)])
    bad = [{"type": "not_null", "column": "nope"}, {"type": "check", "expression": "n + 1"}]
    with pytest.raises(MergeSpecError) as err:
        merge(spark, t, src, UPSERT, constraints=bad)
    assert err.value.problems == [
        f"constraint not_null(nope) names column 'nope', which {t} does not have (columns: id, v, n)",
        "constraint check (n + 1) must be a boolean expression, got int",
    ]
