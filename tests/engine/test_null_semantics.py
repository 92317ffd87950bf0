"""NULL semantics: `on` uses SQL equality, `<=>` matches NULLs, NULL conditions are false."""

from __future__ import annotations

from tests.engine.helpers import UPSERT, create_table, file_snapshot, kept_files, merge, rows, source_view


def test_on_null_source_key_never_matches_and_is_inserted(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(None, "n"), (1, "a")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(None, "x"), (1, "b")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(None, "n"), (None, "x"), (1, "b")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 1, 1)


def test_on_null_target_key_is_not_matched_by_source(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(None, "n"), (1, "a"), (2, "c")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(None, "x"), (1, "b")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "action": "update", "set": "*"},
            {"when": "not_matched_by_source", "action": "delete"},
        ],
    )
    # The NULL-key target row matches no source row (not even the NULL-key one): deleted.
    assert rows(spark, t) == [(1, "b")]
    m = result.metrics
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 2
    assert m["numTargetRowsMatchedUpdated"] == 1
    assert m["numTargetRowsInserted"] == 0


def test_on_null_safe_equality_matches_null_keys(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(None, "n"), (1, "a")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(None, "x"), (1, "b")])
    result = merge(spark, t, src, UPSERT, on="t.id <=> s.id")
    assert rows(spark, t) == [(None, "x"), (1, "b")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (2, 0)


def test_on_only_null_source_keys_are_all_inserted_without_rewrite(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(None, "n"), (1, "a")]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(None, "x"), (None, "y")])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(None, "n"), (None, "x"), (None, "y"), (1, "a")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetFilesRemoved"]) == (0, 2, 0)
    assert kept_files(before, file_snapshot(spark, t)) == sorted(before)


def test_condition_null_counts_as_false_in_every_clause_kind(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, f int", [[(1, "a", None), (2, "b", 1), (3, "c", None)]])
    src = source_view(
        spark, f"{db}_src", "id long, v string, x int", [(1, "A", None), (5, "E", None), (6, "F", 1)]
    )
    result = merge(
        spark,
        t,
        src,
        [
            # s.x is NULL for row 1: the delete must not act, the next clause does.
            {"when": "matched", "condition": "s.x > 0", "action": "delete"},
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
            # NULL for source row 5: not inserted.
            {
                "when": "not_matched",
                "condition": "s.x > 0",
                "action": "insert",
                "values": {"id": "s.id", "v": "s.v"},
            },
            # NULL for target row 3: kept; 1 for row 2: deleted.
            {"when": "not_matched_by_source", "condition": "t.f > 0", "action": "delete"},
        ],
    )
    assert rows(spark, t) == [(1, "A", None), (3, "c", None), (6, "F", None)]
    m = result.metrics
    assert m["numTargetRowsMatchedUpdated"] == 1
    assert m["numTargetRowsMatchedDeleted"] == 0
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 1
    assert m["numTargetRowsInserted"] == 1
    assert m["numTargetRowsCopied"] == 1
