"""Merge metrics: Delta's names, exact counts for a mixed merge."""

from __future__ import annotations

from dbt.adapters.rowmerge.merge import history
from tests.engine.helpers import (
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    new_files,
    rows,
    source_view,
)

CONTRACT_METRICS = {
    "numSourceRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsCopied",
    "numTargetRowsMatchedUpdated",
    "numTargetRowsMatchedDeleted",
    "numTargetRowsNotMatchedBySourceUpdated",
    "numTargetRowsNotMatchedBySourceDeleted",
    "numTargetFilesBeforeSkipping",
    "numTargetFilesAfterSkipping",
    "numTargetFilesAdded",
    "numTargetFilesRemoved",
    "numTargetBytesAdded",
    "numTargetBytesRemoved",
    "numTargetChangeFilesAdded",
    "executionTimeMs",
    "materializeSourceTimeMs",
    "scanTimeMs",
    "rewriteTimeMs",
    "commitTimeMs",
}


def test_metrics_mixed_merge_exact_counts(spark, db):
    t = f"{db}.t"
    create_table(
        spark,
        t,
        "id long, v string",
        [[(1, "a"), (2, "b")], [(3, "c"), (4, "d")], [(5, "e")], [(6, "f"), (7, "g")]],
    )
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 5")
    src = source_view(
        spark,
        f"{db}_src",
        "id long, v string, op string",
        [(1, "A", "U"), (3, None, "D"), (8, "h", "I"), (9, "i", "D")],
    )
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
            {
                "when": "not_matched",
                "condition": "s.op <> 'D'",
                "action": "insert",
                "values": {"id": "s.id", "v": "s.v"},
            },
            {"when": "not_matched_by_source", "condition": "t.v = 'f'", "action": "delete"},
        ],
    )
    assert rows(spark, t) == [(1, "A"), (2, "b"), (4, "d"), (5, "e"), (7, "g"), (8, "h")]
    after = file_snapshot(spark, t)
    assert kept_files(before, after) == untouched
    removed = [p for p in before if p not in after]
    added = new_files(before, after)
    m = result.metrics
    assert CONTRACT_METRICS <= set(m)
    assert m["numSourceRows"] == 4
    assert m["numTargetRowsInserted"] == 1
    assert m["numTargetRowsUpdated"] == 1
    assert m["numTargetRowsDeleted"] == 2
    assert m["numTargetRowsCopied"] == 3  # rows 2, 4 and 7 share a file with an acted-on row
    assert m["numTargetRowsMatchedUpdated"] == 1
    assert m["numTargetRowsMatchedDeleted"] == 1
    assert m["numTargetRowsNotMatchedBySourceUpdated"] == 0
    assert m["numTargetRowsNotMatchedBySourceDeleted"] == 1
    assert m["numTargetFilesBeforeSkipping"] == 4
    assert m["numTargetFilesRemoved"] == len(removed) == 3
    assert m["numTargetFilesAdded"] == len(added)
    assert m["numTargetBytesRemoved"] == sum(before[p][0] for p in removed)
    assert m["numTargetBytesAdded"] == sum(after[p][0] for p in added)
    assert m["numTargetChangeFilesAdded"] == 0
    assert result.version == 1
    assert result.summary() == "MERGE 1 updated, 1 inserted, 2 deleted; 3 of 4 files rewritten"
    logged = history(spark, t)[0]["metrics"]
    assert {k: logged[k] for k in CONTRACT_METRICS if not k.endswith("TimeMs")} == {
        k: m[k] for k in CONTRACT_METRICS if not k.endswith("TimeMs")
    }


def test_metrics_several_acted_rows_in_one_file_count_one_removed_file(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b"), (3, "c")], [(4, "d")], [(5, "e")]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (2, "B"), (3, "c"), (5, "e")])
    result = merge(spark, t, src, [{"when": "matched", "action": "update", "set": "*"}])
    assert rows(spark, t) == [(1, "A"), (2, "B"), (3, "c"), (4, "d"), (5, "e")]
    m = result.metrics
    # Only the first file has a row whose update changes something.
    assert (m["numTargetFilesRemoved"], m["numTargetRowsUpdated"], m["numTargetRowsCopied"]) == (1, 2, 1)
    assert len(kept_files(before, file_snapshot(spark, t))) == 2
