"""Named differential cases: every mismatch the fuzzer found, plus one case per oracle translation.

Each case runs through the engine and the DuckDB oracle exactly like a generated one (see
test_differential.py); a failure prints the full reproduction. Cases found by ``make fuzz``
are pasted from its output (``Case(...)``) and keep the seed and index in their docstring.
"""

from __future__ import annotations

import datetime
from decimal import Decimal  # noqa: F401  (pasted Case reprs use Decimal)

from tests.differential.cases import Case, Clause, Sql, sql
from tests.differential.compare import check, reproduction

KV = [("id", "INT"), ("v", "STRING")]


def _agree(spark, db: str, case: Case) -> None:
    problems, expected, actual = check(spark, case, db, case.name)
    assert not problems, reproduction(case, problems, expected, actual)


# -- one case per translation in oracle.py ---------------------------------------------------


def test_regression_lone_unconditional_delete_matched_twice_deletes_once(spark, diff_db):
    """Translation 3: DuckDB rejects this merge; ours deletes the row once and inserts the new key."""
    case = Case(
        "lone_delete_dup",
        KV,
        [[(1, "a"), (2, "b")]],
        KV,
        [(1, "x"), (1, "y"), (7, "n")],
        sql("t.id = s.id"),
        [Clause("matched", "delete"), Clause("not_matched", "insert", assign="*")],
    )
    _agree(spark, diff_db, case)


def test_regression_cardinality_although_no_matched_clause_acts(spark, diff_db):
    """Translation 3: DuckDB accepts this merge (no clause acts on the duplicates); ours rejects it."""
    case = Case(
        "card_no_act",
        KV,
        [[(1, "a"), (2, "b")]],
        KV,
        [(1, "x"), (1, "y")],
        sql("t.id = s.id"),
        [Clause("matched", "update", sql("s.v = 'never'"), {"v": sql("s.v")})],
    )
    _agree(spark, diff_db, case)


def test_regression_star_by_name_with_reordered_source_and_null_safe_on(spark, diff_db):
    """Translations 1 and 5: `*` by name (DuckDB's is positional) and `<=>` as IS NOT DISTINCT FROM."""
    case = Case(
        "star_by_name",
        [("id", "INT"), ("v", "STRING"), ("n", "BIGINT")],
        [[(1, "a", 1), (None, "b", 2)]],
        [("n", "INT"), ("v", "STRING"), ("id", "INT")],
        [(10, "A", 1), (20, "B", None), (30, "C", 5)],
        Sql("t.id <=> s.id", "t.id IS NOT DISTINCT FROM s.id"),
        [Clause("matched", "update", assign="*"), Clause("not_matched", "insert", assign="*")],
    )
    _agree(spark, diff_db, case)


def test_regression_schema_evolution_without_changes_adds_no_column(spark, diff_db):
    """Translation 2: a merge that changes nothing commits nothing, so it adds no column."""
    case = Case(
        "evolve_noop",
        KV,
        [[(1, "a")]],
        [*KV, ("extra", "INT")],
        [(1, "a", None)],
        sql("t.id = s.id"),
        [Clause("matched", "update", assign="*")],
        schema_evolution=True,
    )
    _agree(spark, diff_db, case)


def test_regression_skip_unchanged_off_no_op_update_on_partitioned_target(spark, diff_db):
    """Translation 6: with skip_unchanged_updates off a no-op update still emits its pair."""
    case = Case(
        "noop_pairs",
        [("id", "INT"), ("v", "STRING"), ("p", "INT")],
        [[(1, "a", 1), (2, "b", 2)]],
        [("id", "INT"), ("v", "STRING"), ("p", "INT")],
        [(1, "a", 1), (2, "c", 1)],
        sql("t.id = s.id"),
        [Clause("matched", "update", assign="*")],
        partition_by=["p"],
        skip_unchanged_updates=False,
    )
    _agree(spark, diff_db, case)


# -- mismatches found by make fuzz -------------------------------------------------------------


def test_regression_empty_string_partition_value_reads_null_in_table_and_feed(spark, diff_db):
    """Seed 20261123, case 84 (shrunk): the feed's insert row must show the NULL readers see.

    Cause: on the scanning path (here forced by the not_matched_by_source clause) the feed's
    insert rows were computed from the clause's values, while the table's file went to the
    default partition; the insert-only path read the written rows back and agreed. Fix: a
    value for a STRING partition column is ``''``-as-NULL wherever the merge computes it
    (``outputs.as_stored``).
    """
    case = Case(
        "empty_partition_value",
        [("k1", "DATE"), ("c_string", "STRING"), ("p", "STRING")],
        [[]],
        [("k1", "DATE"), ("c_string", "STRING"), ("p", "STRING")],
        [(datetime.date(2024, 1, 3), "b", "a")],
        sql("t.k1 = s.k1"),
        [
            Clause("not_matched", "insert", assign={"k1": sql("s.k1"), "p": sql("lower('')")}),
            Clause("not_matched_by_source", "delete"),
        ],
        partition_by=["p"],
    )
    _agree(spark, diff_db, case)


def test_regression_setting_empty_string_partition_value_on_a_null_partition_is_a_no_op(spark, diff_db):
    """Same cause: with skip_unchanged_updates, p = '' on a row in the default partition changes nothing
    a reader sees, so it writes no change rows (and moving p = 'a' to '' is a real update to NULL)."""
    case = Case(
        "empty_partition_update",
        [("id", "INT"), ("v", "STRING"), ("p", "STRING")],
        [[(1, "a", None), (2, "b", "a")]],
        [("id", "INT"), ("v", "STRING")],
        [(1, "a"), (2, "b")],
        sql("t.id = s.id"),
        [Clause("matched", "update", assign={"p": sql("''")})],
        partition_by=["p"],
    )
    _agree(spark, diff_db, case)
