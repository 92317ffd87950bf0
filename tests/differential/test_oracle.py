"""The oracle (and the comparison) on hand-written merges worked out by hand: DuckDB only, no Spark."""

from __future__ import annotations

from tests.differential.cases import Case, Clause, sort_rows, sql
from tests.differential.compare import compare
from tests.differential.oracle import apply

UPSERT = [
    Clause("matched", "update", assign="*"),
    Clause("not_matched", "insert", assign="*"),
]


def _case(source_rows, clauses, **extra) -> Case:
    return Case(
        name="hand",
        target_schema=[("id", "INT"), ("v", "STRING")],
        target_files=[[(1, "a"), (2, "b")], [(3, "c"), (None, "n")]],
        source_schema=[("v", "STRING"), ("id", "INT"), ("extra", "INT")],  # reordered, one extra
        source_rows=source_rows,
        on=sql("t.id = s.id"),
        clauses=clauses,
        **extra,
    )


def test_oracle_upsert_with_not_matched_by_source_delete_rows_and_feed():
    case = _case(
        [("A", 1, 0), ("c", 3, 0), ("z", 9, 0), ("q", None, 0)],
        [*UPSERT, Clause("not_matched_by_source", "delete")],
    )
    out = apply(case)
    assert out.error is None
    assert out.columns == ["id", "v"]  # `*` by name; `extra` ignored without schema evolution
    assert sort_rows(out.rows) == sort_rows([(1, "A"), (3, "c"), (9, "z"), (None, "q")])
    # 3 is a no-op update (skipped); NULL keys never match: target NULL deleted, source NULL inserted.
    assert sort_rows(out.changes) == sort_rows(
        [
            (1, "a", "update_preimage"),
            (1, "A", "update_postimage"),
            (9, "z", "insert"),
            (None, "q", "insert"),
            (2, "b", "delete"),
            (None, "n", "delete"),
        ]
    )


def test_oracle_skip_unchanged_off_emits_pairs_for_no_op_updates():
    case = _case([("c", 3, 0)], UPSERT, skip_unchanged_updates=False)
    out = apply(case)
    assert sort_rows(out.changes) == sort_rows([(3, "c", "update_preimage"), (3, "c", "update_postimage")])


def test_oracle_cardinality_follows_spark_rule_even_if_no_clause_acts():
    case = _case(
        [("x", 1, 0), ("y", 1, 0)],
        [Clause("matched", "update", condition=sql("s.v = 'never'"), assign={"v": sql("s.v")})],
    )
    assert apply(case).error == "cardinality"  # DuckDB itself would accept this merge


def test_oracle_lone_unconditional_delete_matched_twice_deletes_once():
    case = _case(
        [("x", 1, 0), ("y", 1, 0), ("new", 7, 0)],
        [Clause("matched", "delete"), Clause("not_matched", "insert", assign="*")],
    )
    out = apply(case)  # DuckDB itself rejects this merge
    assert out.error is None
    assert sort_rows(out.rows) == sort_rows([(2, "b"), (3, "c"), (None, "n"), (7, "new")])
    assert sort_rows(out.changes) == sort_rows([(1, "a", "delete"), (7, "new", "insert")])


def test_oracle_star_missing_column_is_spec_error_without_evolution():
    case = _case([("A", 1, 0)], UPSERT)
    case.source_schema = [("id", "INT")]
    case.source_rows = [(1,)]
    assert apply(case).error == "spec"


def test_oracle_schema_evolution_adds_column_null_in_pre_image():
    case = _case([("a", 1, 5), ("z", 9, 6)], UPSERT, schema_evolution=True)
    out = apply(case)
    assert out.columns == ["id", "v", "extra"]
    assert sort_rows(out.changes) == sort_rows(
        [
            (1, "a", None, "update_preimage"),
            (1, "a", 5, "update_postimage"),
            (9, "z", 6, "insert"),
        ]
    )


def test_oracle_schema_evolution_adds_nothing_when_nothing_changes():
    case = _case([("a", 1, None)], UPSERT, schema_evolution=True)
    out = apply(case)
    assert (out.columns, out.changes) == (["id", "v"], [])


def test_compare_reports_outcome_row_and_feed_differences():
    case = _case([("A", 1, 0), ("z", 9, 0)], UPSERT)
    good = apply(case)
    assert compare(good, apply(case)) == []
    wrong = apply(_case([("a", 1, 0)], UPSERT, skip_unchanged_updates=False))
    problems = compare(good, wrong)
    assert any(p.startswith("rows:") for p in problems)
    assert any(p.startswith("change feed:") for p in problems)
    assert compare(good, apply(_case([("x", 1, 0), ("y", 1, 0)], UPSERT)))[0].startswith("outcome:")
