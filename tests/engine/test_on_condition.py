"""The `on` condition: SQL precedence and operators, fan-out, key types, join strategy.

The scan prunes the target with what `on` implies (key ranges, target-only conjuncts);
pruning must never change which rows match.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.engine.helpers import UPSERT, create_table, merge, rows, session_conf, source_view


def test_on_or_without_parentheses_follows_sql_precedence_for_delete(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a int, b int", [[(1, 1, 0), (2, 0, 0)], [(50, 0, 2)]])
    src = source_view(spark, f"{db}_src", "id long", [(1,)])
    # AND binds tighter than OR: (t.id = s.id AND t.a = 1) OR t.b = 2 — row 50 matches too.
    result = merge(
        spark, t, src, [{"when": "matched", "action": "delete"}], on="t.id = s.id AND t.a = 1 OR t.b = 2"
    )
    assert rows(spark, t) == [(2, 0, 0)]
    assert result.metrics["numTargetRowsDeleted"] == 2


def test_on_or_without_parentheses_follows_sql_precedence_for_insert(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, a int, b int", [[(1, 1, 0), (50, 0, 2)]])
    src = source_view(spark, f"{db}_src", "id long, a int, b int", [(7, 7, 7)])
    # Source row 7 matches target row 50 through `t.b = 2`: it is matched, not inserted.
    result = merge(
        spark,
        t,
        src,
        [{"when": "not_matched", "action": "insert", "values": "*"}],
        on="t.id = s.id AND t.a = 1 OR t.b = 2",
    )
    assert rows(spark, t) == [(1, 1, 0), (50, 0, 2)]
    assert result.metrics["numTargetRowsInserted"] == 0


def test_on_between_predicate_on_target(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int, v string", [[(1, 3, "a"), (2, 9, "b")], [(3, 4, "c")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (2, "B"), (4, "D")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
            {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "v": "s.v"}},
        ],
        on="t.id = s.id AND t.n BETWEEN 1 AND 5",
    )
    # Target row 2 fails the BETWEEN: source row 2 is not matched and is inserted.
    assert rows(spark, t) == [(1, 3, "A"), (2, None, "B"), (2, 9, "b"), (3, 4, "c"), (4, None, "D")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 2)


def test_on_one_source_row_updates_every_matching_target_row(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (1, "b")], [(2, "c")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "X"), (3, "Z")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "X"), (1, "X"), (2, "c"), (3, "Z")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetFilesRemoved"]) == (2, 1, 1)


def test_on_source_key_of_other_numeric_type_matches(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(300, "c")]])
    src = source_view(spark, f"{db}_src", "id int, v string", [(2, "B"), (300, "C"), (5, "e")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a"), (2, "B"), (5, "e"), (300, "C")]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (2, 1)


def test_on_expression_keys_and_aliases_in_upper_case(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "code string, v string", [[("ab", "1"), ("cd", "2")]])
    src = source_view(spark, f"{db}_src", "code string, v string", [("AB", "x"), ("EF", "y")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": {"v": "S.v"}},
            {"when": "not_matched", "action": "insert", "values": {"code": "lower(S.code)", "v": "S.v"}},
        ],
        on="lower(T.code) = lower(S.CODE)",
    )
    assert rows(spark, t) == [("ab", "x"), ("cd", "2"), ("ef", "y")]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 1)


@pytest.fixture
def no_broadcast(spark) -> Iterator[None]:
    """Force shuffle joins: the source is not broadcast (a large source's code path)."""
    with session_conf(spark, {"spark.sql.autoBroadcastJoinThreshold": "-1"}):
        yield


def test_on_shuffle_join_path_gives_same_result(spark, db, no_broadcast):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (3, "c"), (9, "z")])
    result = merge(
        spark,
        t,
        src,
        [*UPSERT, {"when": "not_matched_by_source", "condition": "t.id = 4", "action": "delete"}],
    )
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (9, "z")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"]) == (1, 1, 1)
    assert (m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (1, 2)


@pytest.fixture
def driver_time_zone_tokyo() -> Iterator[None]:
    """The driver's local time zone differs from the session's (UTC), as on many laptops."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_on_timestamp_ntz_key_matches_when_driver_time_zone_differs(spark, db, driver_time_zone_tokyo):
    t = f"{db}.t"
    ts = [datetime(2024, 1, 1, 10, 0), datetime(2024, 1, 2, 10, 0), datetime(2024, 1, 3, 10, 0)]
    create_table(spark, t, "k timestamp_ntz, v string", [[(ts[0], "a"), (ts[1], "b")], [(ts[2], "c")]])
    src = source_view(spark, f"{db}_src", "k timestamp_ntz, v string", [(ts[1], "B")])
    result = merge(spark, t, src, UPSERT, on="t.k = s.k")
    assert rows(spark, t) == [(ts[0], "a"), (ts[1], "B"), (ts[2], "c")]
    assert (result.metrics["numTargetRowsUpdated"], result.metrics["numTargetRowsInserted"]) == (1, 0)
