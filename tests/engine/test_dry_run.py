"""dry_run: the report of what a merge would do equals what the merge then does, and nothing
is written — no data file, no journal entry, no lock, no change table."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import CardinalityViolation, DeleteLimitError, EmptySourceError, dry_run
from tests.engine.helpers import create_table, merge, source_view, table_dir, table_state

SCHEMA = "id long, v string, n int"
FILES = [[(1, "a", 1), (2, "b", 2)], [(3, "c", 3), (4, "d", 4)], [(5, "e", 5), (6, "f", 6)]]
CLAUSES: list[dict[str, Any]] = [
    {"when": "matched", "condition": "s.v = 'gone'", "action": "delete"},
    {"when": "matched", "condition": "s.n > t.n", "action": "update", "set": "*"},
    {"when": "not_matched", "condition": "s.n > 0", "action": "insert", "values": "*"},
    {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "v": "'negative'"}},
]
# 1: deleted; 3: updated; 4: matched, n not larger (no clause acts); 7, 8: inserted by
# the first and the second insert clause. Files 1 and 2 are touched, file 3 is not.
SOURCE = [(1, "gone", 0), (3, "C", 9), (4, "D", 1), (7, "g", 7), (8, "h", -1)]


def src_of(spark: Any, db: str) -> str:
    return source_view(spark, f"{db}_src", SCHEMA, SOURCE)


def _everything_under(path: str) -> dict[str, int]:
    """Every file under the table's folder, hidden ones (journal, lock) included."""
    out = {}
    for dirpath, _, filenames in os.walk(path):
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[p] = os.stat(p).st_mtime_ns
    return out


def _spec(target: str, source: str, clauses: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "target": target,
        "source": source,
        "target_alias": "t",
        "source_alias": "s",
        "on": "t.id = s.id",
        "clauses": clauses,
        **extra,
    }


@pytest.mark.parametrize("journal", [False, True], ids=["no_journal_yet", "after_a_merge"])
def test_report_matches_the_merge_and_nothing_is_written(spark, db, journal):
    target = f"{db}.t"
    create_table(spark, target, SCHEMA, FILES)
    if journal:  # a table whose journal already has a version (statistics recorded)
        merge(spark, target, source_view(spark, f"{db}_first", SCHEMA, [(6, "F", 7)]), CLAUSES[1:2])
    src = source_view(spark, f"{db}_src", SCHEMA, SOURCE)
    before, files_before = table_state(spark, target), _everything_under(table_dir(spark, target))

    report = dry_run(spark, _spec(target, src, CLAUSES, change_data_feed={"table": f"{db}.t_changes"}))

    assert table_state(spark, target) == before
    assert _everything_under(table_dir(spark, target)) == files_before
    assert not spark.catalog.tableExists(f"{db}.t_changes")
    assert report.clauses == [
        ("clauses[0] (when: matched, action: delete)", "delete", 1),
        ("clauses[1] (when: matched, action: update)", "update", 1),
        ("clauses[2] (when: not_matched, action: insert)", "insert", 1),
        ("clauses[3] (when: not_matched, action: insert)", "insert", 1),
    ]
    assert (report.files, report.files_rewritten, report.source_rows) == (3, 2, 5)

    # The merge then does exactly what the report said.
    done = merge(spark, target, src, CLAUSES).metrics
    assert (done["numTargetRowsDeleted"], done["numTargetRowsUpdated"], done["numTargetRowsInserted"]) == (
        report.rows("delete"),
        report.rows("update"),
        report.rows("insert"),
    )
    assert done["numTargetFilesRemoved"] == report.files_rewritten
    assert done["numTargetBytesRemoved"] == report.bytes_rewritten
    assert done["numTargetFilesAfterSkipping"] == report.files_read
    line = report.summary()
    assert line.startswith(
        f"MERGE dry run: {target} would update 1, insert 2, delete 1 rows; rewrite 2 of 3 files ("
    )
    assert line.endswith("); nothing written"), line


def test_not_matched_by_source_and_a_row_matched_twice_by_a_lone_delete(spark, db):
    target = f"{db}.t"
    create_table(spark, target, SCHEMA, FILES)
    # 2 is matched twice (one delete), 5 and 6 are not in the source: NMBS updates them
    src = source_view(spark, f"{db}_src", SCHEMA, [(2, "x", 0), (2, "y", 0)])
    clauses = [
        {"when": "matched", "action": "delete"},
        {"when": "not_matched_by_source", "condition": "t.n >= 5", "action": "update", "set": {"v": "'old'"}},
    ]
    report = dry_run(spark, _spec(target, src, clauses))
    assert [n for _, _, n in report.clauses] == [1, 2]
    assert report.files_rewritten == 2
    done = merge(spark, target, src, clauses).metrics
    assert (done["numTargetRowsDeleted"], done["numTargetRowsUpdated"], done["numTargetFilesRemoved"]) == (
        1,
        2,
        2,
    )


def test_insert_only_reads_no_file_to_rewrite(spark, db):
    target = f"{db}.t"
    create_table(spark, target, SCHEMA, FILES)
    src = source_view(spark, f"{db}_src", SCHEMA, [(1, "a", 1), (9, "i", 9)])
    report = dry_run(spark, _spec(target, src, CLAUSES[2:3]))
    assert report.clauses == [("clauses[0] (when: not_matched, action: insert)", "insert", 1)]
    assert (report.files_rewritten, report.bytes_rewritten) == (0, 0)


def test_errors_a_merge_would_raise_are_raised(spark, db):
    target = f"{db}.t"
    create_table(spark, target, SCHEMA, FILES)
    before = table_state(spark, target)
    dup = source_view(spark, f"{db}_dup", SCHEMA, [(1, "x", 9), (1, "y", 9)])
    with pytest.raises(CardinalityViolation):
        dry_run(spark, _spec(target, dup, CLAUSES))
    with pytest.raises(DeleteLimitError):  # 1 of 6 rows deleted, more than 10%
        dry_run(spark, _spec(target, src_of(spark, db), CLAUSES, max_delete_fraction=0.1))
    empty = source_view(spark, f"{db}_empty", SCHEMA, [])
    with pytest.raises(EmptySourceError):
        dry_run(spark, _spec(target, empty, [{"when": "not_matched_by_source", "action": "delete"}]))
    assert table_state(spark, target) == before
