"""Expressions give one value per merge: time functions pinned to the commit (plan.py, sqltext.py).

Scan, rewrite and change feed are separate Spark jobs, and Spark fixes current_timestamp()
once per job. The merge pins it (and its relatives) to its commit timestamp, so the table,
its change feed and the journal agree; expressions that are not row by row (aggregates,
window functions, generators) are rejected before anything runs.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from dbt.adapters.rowmerge.merge import MergeSpecError, history, start_history
from tests.engine.helpers import create_table, merge, rows, source_view, table_state

FEED = "_changes"


@pytest.fixture
def t(spark, db) -> str:
    name = f"{db}.t"
    create_table(
        spark,
        name,
        "id long, v string, at timestamp, d date, secs long",
        [[(1, "a", None, None, None), (2, "b", None, None, None)], [(3, "c", None, None, None)]],
    )
    start_history(spark, name, "CREATE TABLE", name + FEED)
    return name


def _commit_time(spark, t: str) -> datetime:
    stamp = history(spark, t, limit=1)[0]["timestamp"]
    return datetime.fromisoformat(stamp).astimezone(timezone.utc).replace(tzinfo=None)


def test_time_functions_table_feed_and_journal_agree(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "C"), (9, "z")])
    clauses = [
        {
            "when": "matched",
            "action": "update",
            "set": {
                "v": "s.v",
                "at": "current_timestamp()",
                "d": "current_date",
                "secs": "unix_timestamp()",
            },
        },
        {
            "when": "not_matched",
            "action": "insert",
            "values": {
                "id": "s.id",
                "v": "s.v",
                "at": "now()",
                "d": "curdate()",
                "secs": "unix_timestamp( )",
            },
        },
    ]
    merge(spark, t, src, clauses, change_data_feed={"table": t + FEED})
    when = _commit_time(spark, t)  # the journal's timestamp (UTC; the session zone is UTC)
    expected = (when, when.date(), int(when.replace(tzinfo=timezone.utc).timestamp()))
    table = {r[0]: r[2:] for r in rows(spark, t)}
    assert {k: v for k, v in table.items() if k != 2} == {1: expected, 3: expected, 9: expected}
    assert table[2] == (None, None, None)
    feed = spark.table(t + FEED).where("_change_type <> 'update_preimage'").collect()
    assert len(feed) == 3
    assert {(r["at"], r["d"], r["secs"]) for r in feed} == {expected}
    assert {r["_commit_timestamp"] for r in spark.table(t + FEED).collect()} == {when}


def test_time_functions_in_a_condition_decide_the_same_rows_in_every_pass(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string, due timestamp", [(1, "A", None), (2, "B", None)])
    spark.sql("SELECT 1 AS id, 'A' AS v, current_timestamp() - INTERVAL 1 DAY AS due").union(
        spark.sql("SELECT 2 AS id, 'B' AS v, current_timestamp() + INTERVAL 1 DAY AS due")
    ).createOrReplaceTempView(src)
    clauses = [
        {
            "when": "matched",
            "condition": "s.due < current_timestamp()",
            "action": "update",
            "set": {"v": "s.v"},
        }
    ]
    result = merge(spark, t, src, clauses, change_data_feed={"table": t + FEED})
    assert result.metrics["numTargetRowsUpdated"] == 1
    assert [(r[0], r[1]) for r in rows(spark, t)] == [(1, "A"), (2, "b"), (3, "c")]
    assert sorted(r["_change_type"] for r in spark.table(t + FEED).collect()) == [
        "update_postimage",
        "update_preimage",
    ]


@pytest.mark.parametrize(
    "value, kind",
    [
        ("count(*) over ()", "a window function"),
        ("row_number() over (order by s.id)", "a window function"),
        ("sum(s.id)", "an aggregate function"),
        ("explode(array(s.v, s.v))", "a generator (explode and the like)"),
    ],
)
@pytest.mark.parametrize("feed", [False, True], ids=["no-feed", "feed"])
def test_time_functions_values_that_are_not_row_by_row_are_rejected(spark, db, t, value, kind, feed):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "C")])
    before = table_state(spark, t), table_state(spark, t + FEED)
    extra = {"change_data_feed": {"table": t + FEED}} if feed else {}
    with pytest.raises(MergeSpecError) as info:
        merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"v": value}}], **extra)
    assert info.value.problems == [
        f"clauses[0] (when: matched, action: update) `set` for 'v' ({value}) uses {kind}, which a merge "
        "cannot evaluate row by row; compute it in the model SQL and refer to that source column"
    ]
    assert (table_state(spark, t), table_state(spark, t + FEED)) == before


def test_time_functions_current_time_cannot_be_pinned(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    with pytest.raises(MergeSpecError) as info:
        merge(
            spark, t, src, [{"when": "matched", "condition": "current_time() > '00:00'", "action": "delete"}]
        )
    assert info.value.problems == [
        "clauses[0] (when: matched, action: delete) condition (current_time() > '00:00'): current_time() "
        "would take a different value in each pass of the merge; select it in the model SQL and assign "
        "that column instead"
    ]
