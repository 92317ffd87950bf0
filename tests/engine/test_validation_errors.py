"""Invalid merges fail before anything runs and leave the target exactly as it was (and what
looks invalid but is not: a source that is itself non-deterministic)."""

from __future__ import annotations

from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import (
    MergeSpecError,
    UnsupportedTableError,
    history,
    optimize,
    run_merge,
    start_history,
)
from tests.engine.helpers import create_table, merge, session_conf, source_view, table_state

STAR_UPDATE = {"when": "matched", "action": "update", "set": "*"}
STAR_INSERT = {"when": "not_matched", "action": "insert", "values": "*"}


def _rejected(spark, db, clauses: list[dict[str, Any]], on: str = "t.id = s.id") -> MergeSpecError:
    """Run a merge that must fail with MergeSpecError; check that nothing changed."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, n int", [[(1, "a", 1), (2, "b", 2)], [(3, "c", 3)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, n int", [(1, "A", 10), (4, "D", 40)])
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, clauses, on=on)
    assert table_state(spark, t) == before
    assert history(spark, t) == []
    return info.value


def test_spec_not_matched_condition_referencing_target_raises(spark, db):
    err = _rejected(
        spark,
        db,
        [STAR_UPDATE, {"when": "not_matched", "condition": "t.n > 0", "action": "insert", "values": "*"}],
    )
    assert err.problems == [
        "clauses[1] (when: not_matched, action: insert) condition (t.n > 0) may reference only the "
        "source (s); a not_matched row has no target row"
    ]


def test_spec_not_matched_values_referencing_target_raises(spark, db):
    err = _rejected(
        spark,
        db,
        [{"when": "not_matched", "action": "insert", "values": {"id": "s.id", "v": "t.v", "n": "s.n"}}],
    )
    assert len(err.problems) == 1
    assert "(t.v) may reference only the source (s)" in err.problems[0]
    assert "clauses[0] (when: not_matched, action: insert)" in err.problems[0]


def test_spec_not_matched_by_source_condition_referencing_source_raises(spark, db):
    err = _rejected(
        spark, db, [{"when": "not_matched_by_source", "condition": "s.n > 0", "action": "delete"}]
    )
    assert err.problems == [
        "clauses[0] (when: not_matched_by_source, action: delete) condition (s.n > 0) may reference "
        "only the target (t); such a row has no source row"
    ]


def test_spec_not_matched_by_source_set_referencing_source_raises(spark, db):
    err = _rejected(
        spark, db, [{"when": "not_matched_by_source", "action": "update", "set": {"v": "concat(t.v, s.v)"}}]
    )
    assert len(err.problems) == 1
    assert "may reference only the target (t)" in err.problems[0]


def test_spec_not_matched_by_source_set_star_raises(spark, db):
    err = _rejected(spark, db, [{"when": "not_matched_by_source", "action": "update", "set": "*"}])
    assert any("`set: *` needs a source row" in p for p in err.problems)


def test_spec_non_deterministic_condition_raises(spark, db):
    err = _rejected(
        spark, db, [{"when": "matched", "condition": "rand() > 0.5", "action": "update", "set": "*"}]
    )
    assert len(err.problems) == 1
    assert "(rand() > 0.5) is non-deterministic" in err.problems[0]


def test_spec_non_deterministic_on_raises(spark, db):
    err = _rejected(spark, db, [STAR_UPDATE], on="t.id = s.id AND rand() < 2")
    assert len(err.problems) == 1
    assert err.problems[0].startswith("`on` (t.id = s.id AND rand() < 2)")
    assert "deterministic" in err.problems[0].lower()


def test_spec_only_last_matched_clause_may_omit_condition(spark, db):
    err = _rejected(spark, db, [STAR_UPDATE, {"when": "matched", "condition": "s.n > 5", "action": "delete"}])
    assert len(err.problems) == 1
    assert err.problems[0].startswith(
        "clauses[0] (when: matched): only the last matched clause may omit `condition`"
    )


def test_spec_only_last_not_matched_clause_may_omit_condition(spark, db):
    err = _rejected(
        spark,
        db,
        [STAR_INSERT, {"when": "not_matched", "condition": "s.n > 5", "action": "insert", "values": "*"}],
    )
    assert len(err.problems) == 1
    assert "only the last not_matched clause may omit `condition`" in err.problems[0]


def test_spec_only_last_not_matched_by_source_clause_may_omit_condition(spark, db):
    err = _rejected(
        spark,
        db,
        [
            {"when": "not_matched_by_source", "action": "delete"},
            {"when": "not_matched_by_source", "condition": "t.n > 1", "action": "delete"},
        ],
    )
    assert len(err.problems) == 1
    assert "only the last not_matched_by_source clause may omit `condition`" in err.problems[0]


def test_spec_unknown_column_in_set_raises(spark, db):
    err = _rejected(spark, db, [{"when": "matched", "action": "update", "set": {"nope": "s.v"}}])
    assert len(err.problems) == 1
    assert f"`set` names column 'nope', which the target {db}.t does not have" in err.problems[0]


def test_spec_unknown_column_in_values_raises(spark, db):
    err = _rejected(
        spark, db, [{"when": "not_matched", "action": "insert", "values": {"id": "s.id", "zz": "1"}}]
    )
    assert len(err.problems) == 1
    assert "`values` names column 'zz'" in err.problems[0]


def test_spec_unresolvable_condition_raises(spark, db):
    err = _rejected(
        spark, db, [{"when": "matched", "condition": "s.missing = 1", "action": "update", "set": "*"}]
    )
    assert len(err.problems) == 1
    assert "condition (s.missing = 1) cannot be resolved" in err.problems[0]


def test_spec_non_boolean_condition_raises(spark, db):
    err = _rejected(spark, db, [{"when": "matched", "condition": "s.n + 1", "action": "delete"}])
    assert len(err.problems) == 1
    assert "condition (s.n + 1) must be a boolean expression, got int" in err.problems[0]


def test_spec_unresolvable_on_raises(spark, db):
    err = _rejected(spark, db, [STAR_UPDATE], on="t.id = s.nope")
    assert len(err.problems) == 1
    assert err.problems[0].startswith("`on` (t.id = s.nope) cannot be resolved")


def test_spec_unresolvable_on_says_which_side_lacks_the_column_and_where_on_came_from(spark, db):
    """The dbt macros say which config `on` came from (`on_origin`): the message names it, and
    which side lacks the key column, with that side's columns."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "cust long, v string", [(1, "A")])
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, [STAR_UPDATE], on="t.`id` = s.`id`", on_origin="`unique_key` (id)")
    assert info.value.problems == [
        "`unique_key` (id) (merge condition t.`id` = s.`id`) cannot be resolved: "
        + info.value.problems[0].split("cannot be resolved: ", 1)[1].split("; the source", 1)[0]
        + f"; the source ({db}_src) has no column 'id' (it has: cust, v): name key columns that the "
        "model's SQL and the table both have"
    ]
    assert "UNRESOLVED_COLUMN" in info.value.problems[0]
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, [STAR_UPDATE], on="t.`cust` = s.`cust`", on_origin="`unique_key` (cust)")
    assert info.value.problems[0].endswith(
        f"; the target {t} has no column 'cust' (it has: id, v): name key columns that the model's SQL "
        "and the table both have"
    )
    assert table_state(spark, t) == before


def test_spec_insert_under_matched_raises(spark, db):
    err = _rejected(spark, db, [{"when": "matched", "action": "insert", "values": "*"}])
    assert err.problems == [
        "clauses[0] (when: matched): action 'insert' is not allowed here; when: matched allows "
        "update or delete (insert is only for when: not_matched)"
    ]


def test_spec_every_problem_reported_at_once(spark, db):
    err = _rejected(
        spark,
        db,
        [
            {"when": "matched", "condition": "rand() > 0.5", "action": "update", "set": {"nope": "1"}},
            {"when": "not_matched", "condition": "t.n > 0", "action": "insert", "values": "*"},
        ],
    )
    assert len(err.problems) == 3
    assert str(err).startswith("Invalid row_level_merge configuration (3 problems):")


def test_spec_missing_target_table_raises_unsupported_table(spark, db):
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a")])
    with pytest.raises(UnsupportedTableError) as info:
        merge(spark, f"{db}.nope", src, [STAR_UPDATE])
    assert f"MERGE target {db}.nope does not exist" in str(info.value)


def test_spec_missing_source_raises_and_changes_nothing(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    before = table_state(spark, t)
    with pytest.raises(UnsupportedTableError) as info:
        merge(spark, t, f"{db}_no_such_view", [STAR_UPDATE])
    assert f"MERGE source {db}_no_such_view cannot be read" in str(info.value)
    assert table_state(spark, t) == before


def test_spec_view_target_raises_unsupported_table(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    spark.sql(f"CREATE VIEW {db}.vw AS SELECT * FROM {t}")
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "b")])
    with pytest.raises(UnsupportedTableError) as info:
        run_merge(
            spark,
            {
                "target": f"{db}.vw",
                "source": src,
                "on": "DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id",
                "clauses": [{"when": "matched", "action": "delete"}],
            },
        )
    assert "is a view" in str(info.value)
    assert table_state(spark, t)[0] == [(1, "a")]


def test_spec_reserved_prefix_source_column_raises(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, __rowmerge_src int", [(1, "b", 1)])
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, [STAR_UPDATE])
    assert "source column(s) __rowmerge_src use the reserved prefix __rowmerge_" in str(info.value)
    assert table_state(spark, t) == before


def _uuid_source(spark, db) -> str:
    """A source view whose `v` is uuid(): every evaluation of the view gives other values."""
    name = f"{db}_uuid_src"
    spark.range(1, 5).selectExpr("id", "uuid() AS v", "CAST(id AS INT) AS n").createOrReplaceTempView(name)
    return name


def test_spec_non_deterministic_source_merges_its_rows_once_into_table_and_feed(spark, db):
    # Only `on` and the clauses must be repeatable: the source is materialized once, so the
    # rows written and the change rows carry the very same uuid() values.
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, n int", [[(1, "a", 1), (2, "b", 2)], [(3, "c", 3)]])
    start_history(spark, t, "CREATE TABLE", f"{t}__changes")
    src = _uuid_source(spark, db)
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.n > 1", "action": "update", "set": {"v": "s.v"}},
            STAR_INSERT,
        ],
        change_data_feed={"table": f"{t}__changes"},
    )
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (2, 1)
    table = {r["id"]: r["v"] for r in spark.table(t).collect()}
    assert table[1] == "a" and all(len(table[i]) == 36 for i in (2, 3, 4)) and len(set(table.values())) == 4
    spark.catalog.refreshTable(f"{t}__changes")
    feed = sorted((r["id"], r["_change_type"], r["v"]) for r in spark.table(f"{t}__changes").collect())
    assert feed == [
        (2, "update_postimage", table[2]),
        (2, "update_preimage", "b"),
        (3, "update_postimage", table[3]),
        (3, "update_preimage", "c"),
        (4, "insert", table[4]),
    ]


def test_spec_non_deterministic_condition_over_non_deterministic_source_names_the_condition(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, n int", [[(1, "a", 1)]])
    before = table_state(spark, t)
    src = _uuid_source(spark, db)
    with pytest.raises(MergeSpecError) as info:
        merge(
            spark,
            t,
            src,
            [{"when": "matched", "condition": "rand() > 0.5", "action": "update", "set": {"v": "s.v"}}],
        )
    assert info.value.problems == [
        "clauses[0] (when: matched, action: update) condition (rand() > 0.5) is non-deterministic; "
        "conditions and values must be repeatable"
    ]
    assert table_state(spark, t) == before


def test_spec_value_named_with_as_is_refused_before_anything_runs(spark, db):
    """A value or condition is an expression, as in SQL's MERGE; ``s.v AS v`` is a SELECT
    column, which Spark parses alone but not inside the CASE a merge builds from it."""
    err = _rejected(
        spark,
        db,
        [
            {"when": "matched", "action": "update", "set": {"v": "s.v AS v", "n": "CAST(s.n AS int)"}},
            {"when": "not_matched", "condition": "s.n > 0 as positive", "action": "insert", "values": "*"},
        ],
    )
    assert err.problems == [
        "clauses[0] (when: matched): `set` value for column 'v' names its result with AS, as a SELECT "
        "column would; write the expression alone",
        "clauses[1] (when: not_matched): `condition` names its result with AS, as a SELECT column "
        "would; write the expression alone",
    ]


def test_spec_value_listing_several_expressions_is_refused_before_anything_runs(spark, db):
    """``s.a, s.b`` is a SELECT list, not a value: inside the parentheses the merge puts around
    a value it would be one struct, so it is refused by its key."""
    err = _rejected(
        spark,
        db,
        [
            {"when": "matched", "action": "update", "set": {"v": "s.v, s.n", "n": "greatest(s.n, 1)"}},
            {"when": "not_matched", "condition": "s.n > 0, s.n < 9", "action": "insert", "values": "*"},
        ],
    )
    assert err.problems == [
        "clauses[0] (when: matched): `set` value for column 'v' lists several expressions (a comma "
        "outside parentheses), as a SELECT list would; write one expression",
        "clauses[1] (when: not_matched): `condition` lists several expressions (a comma outside "
        "parentheses), as a SELECT list would; write one expression",
    ]


def test_spec_value_named_without_as_is_refused_by_its_key(spark, db):
    """``s.v v`` names its result too (SQL's AS is optional); Spark's parser finds it."""
    err = _rejected(spark, db, [{"when": "matched", "action": "update", "set": {"v": "s.v v"}}])
    assert len(err.problems) == 1
    assert err.problems[0].startswith(
        "clauses[0] (when: matched, action: update) `set` for 'v' (s.v v) cannot be resolved: "
    )
    assert "PARSE_SYNTAX_ERROR" in err.problems[0]


def test_spec_session_reading_string_literals_as_spark_1_6_is_refused(spark, db):
    """Under spark.sql.parser.escapedStringLiterals the literals the engine writes ('O\\'Brien'
    for a key range, a partition value, a location) would mean other values (O\\'Brien): a
    merge, and every other operation on the table, is refused before anything is written."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, n int", [[(1, "a", 1), (2, "b", 2)], [(3, "c", 3)]])
    before = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, n int", [(1, "A", 10), (4, "D", 40)])
    with session_conf(spark, {"spark.sql.parser.escapedStringLiterals": "true"}):
        with pytest.raises(MergeSpecError) as merged:
            merge(spark, t, src, [STAR_UPDATE])
        with pytest.raises(MergeSpecError) as optimized:
            optimize(spark, t)
    problem = (
        "the session sets spark.sql.parser.escapedStringLiterals=true (string literals read as Spark 1.6 "
        "did, backslashes kept), under which the string literals row_level_merge writes would mean other "
        "values; unset it for this session"
    )
    assert merged.value.problems == optimized.value.problems == [problem]
    assert table_state(spark, t) == before
    assert history(spark, t) == []
