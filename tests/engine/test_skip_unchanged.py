"""skip_unchanged_updates: an update that writes the old values changes nothing."""

from __future__ import annotations

from dbt.adapters.rowmerge.merge import history
from tests.engine.helpers import create_table, file_snapshot, files_of, kept_files, merge, rows, source_view

UPDATE_STAR = [{"when": "matched", "action": "update", "set": "*"}]


def _target(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    return t


def test_skip_unchanged_default_identical_update_changes_nothing(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a"), (3, "c")])
    result = merge(spark, t, src, UPDATE_STAR)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]
    assert file_snapshot(spark, t) == before
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsMatchedUpdated"], m["numTargetRowsCopied"]) == (
        0,
        0,
        0,
    )
    assert (m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == (0, 0)
    assert result.version == 0
    assert history(spark, t) == []


def test_skip_unchanged_false_counts_and_rewrites_identical_update(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 3")
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a")])
    result = merge(spark, t, src, UPDATE_STAR, skip_unchanged_updates=False)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsMatchedUpdated"], m["numTargetRowsCopied"]) == (
        1,
        1,
        1,
    )
    assert (m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == (1, 1)
    assert result.version == 1


def test_skip_unchanged_only_files_with_real_changes_are_rewritten(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 1")
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a"), (2, "b"), (3, "C")])
    result = merge(spark, t, src, UPDATE_STAR)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "C")]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (1, 0, 1)


def test_skip_unchanged_row_in_rewritten_file_is_copied_not_updated(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a"), (2, "B")])
    result = merge(spark, t, src, UPDATE_STAR)
    assert rows(spark, t) == [(1, "a"), (2, "B"), (3, "c")]
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsCopied"], m["numTargetFilesRemoved"]) == (1, 1, 1)


def test_skip_unchanged_compares_nulls_null_safe(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, None), (2, None)], [(3, "c")]])
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 1")
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, None)])
    result = merge(spark, t, src, UPDATE_STAR)
    assert result.metrics["numTargetRowsUpdated"] == 0
    assert file_snapshot(spark, t) == before
    src2 = source_view(spark, f"{db}_src2", "id long, v string", [(1, None), (2, "x"), (3, None)])
    result = merge(spark, t, src2, UPDATE_STAR)
    assert rows(spark, t) == [(1, None), (2, "x"), (3, None)]
    assert result.metrics["numTargetRowsUpdated"] == 2
    assert result.metrics["numTargetFilesRemoved"] == 2
    assert untouched[0] not in file_snapshot(spark, t)


def test_skip_unchanged_compares_after_cast_to_target_type(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 12), (2, 5)]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, txt string", [(1, "12"), (2, "05")])
    result = merge(spark, t, src, [{"when": "matched", "action": "update", "set": {"n": "s.txt"}}])
    assert rows(spark, t) == [(1, 12), (2, 5)]
    assert result.metrics["numTargetRowsUpdated"] == 0
    assert file_snapshot(spark, t) == before


def test_skip_unchanged_not_matched_by_source_update_to_same_value_is_noop(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, active boolean", [[(1, "a", True)], [(2, "b", False)]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string, active boolean", [(1, "a", True)])
    result = merge(
        spark,
        t,
        src,
        [*UPDATE_STAR, {"when": "not_matched_by_source", "action": "update", "set": {"active": "false"}}],
    )
    assert rows(spark, t) == [(1, "a", True), (2, "b", False)]
    assert file_snapshot(spark, t) == before
    m = result.metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsNotMatchedBySourceUpdated"]) == (0, 0)
    assert result.version == 0


def test_skip_unchanged_compares_collated_strings_as_binary(spark, db):
    """Under UTF8_LCASE 'ABC' and 'abc' are equal, but an update from one to the other
    writes the other value, as SQL's MERGE does: it is no no-op (the row 2 update is)."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string collate UTF8_LCASE", [[(1, "ABC"), (2, "x")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "abc"), (2, "x")])
    feed = f"{t}__changes"
    result = merge(
        spark,
        t,
        src,
        [{"when": "matched", "action": "update", "set": {"v": "s.v"}}],
        change_data_feed={"table": feed},
    )
    assert rows(spark, t) == [(1, "abc"), (2, "x")]
    assert result.metrics["numTargetRowsUpdated"] == 1
    changes = sorted((r.id, r.v, r._change_type) for r in spark.table(feed).collect())
    assert changes == [(1, "ABC", "update_preimage"), (1, "abc", "update_postimage")]
