"""restore (restore.py): the table's rows become exactly a version's again, as a RESTORE
version; only the files that differ move; the change feed holds exactly the rows that
differ, and applying it to the state before gives the restored table; a restore can be
undone, merged after, dry-run, and killed at any step."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from dbt.adapters.rowmerge.merge import (
    JournalError,
    MergeSpecError,
    UnsupportedTableError,
    as_of,
    faults,
    history,
    recover,
    restore,
)
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    folder_digest,
    merge,
    rows,
    sorted_rows,
    source_view,
    table_dir,
)
from tests.sampling import long_except

NMBS_DELETE = UPSERT + [{"when": "not_matched_by_source", "action": "delete", "condition": "t.id = 2"}]
FEED_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def _feed(spark, t: str, version: int) -> list[tuple]:
    """The change rows of ``version``: data columns, then _change_type."""
    spark.catalog.refreshTable(f"{t}__changes")
    df = spark.table(f"{t}__changes")
    data = [c for c in df.columns if c not in FEED_COLUMNS]
    picked = df.select(*data, "_change_type", "_commit_version").collect()
    return sorted_rows(tuple(r)[:-1] for r in picked if r["_commit_version"] == version)


def _applied(before: list[tuple], feed: list[tuple]) -> list[tuple]:
    """What a consumer holds after applying ``feed`` (deletes and pre-images first) to ``before``."""
    out = Counter(before)
    for *row, change in feed:
        if change in ("delete", "update_preimage"):
            out[tuple(row)] -= 1
            assert out[tuple(row)] >= 0, row
    for *row, change in feed:
        if change in ("insert", "update_postimage"):
            out[tuple(row)] += 1
    return sorted_rows(out.elements())


def _history(spark, db, t, batches, clauses=UPSERT, **extra):
    saved = [rows(spark, t)]
    for i, batch in enumerate(batches):
        src = source_view(spark, f"{db}_b{i}", "id long, v string", batch)
        merge(
            spark,
            t,
            src,
            clauses,
            auto_compact=False,
            change_data_feed={"table": f"{t}__changes"},
            **extra,
        )
        saved.append(rows(spark, t))
    return saved


def _table(spark, db, name="t"):
    t = f"{db}.{name}"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]])
    return t


def test_restore_brings_back_a_versions_rows_and_its_feed_describes_the_difference(spark, db):
    t = _table(spark, db)
    saved = _history(
        spark, db, t, [[(1, "x"), (5, "e")], [(3, "y")], [(6, "f")]], clauses=NMBS_DELETE, retain_versions=10
    )
    before = file_snapshot(spark, t)
    result = restore(spark, t, version=1)
    assert (result.version, result.restored) == (4, 1)
    assert rows(spark, t) == saved[1]
    # only the files that differ moved: version 3's insert-only file left, version 2's rewrite
    # of (3, 'c') left and the file it replaced came back; the rest stayed where they were
    after = file_snapshot(spark, t)
    assert (result.files_removed, result.files_restored) == (2, 1)
    unchanged = set(before) & set(after)
    assert len(unchanged) == len(before) - 2 and all(before[p] == after[p] for p in unchanged)
    feed = _feed(spark, t, 4)
    assert feed == [(3, "c", "insert"), (3, "y", "delete"), (6, "f", "delete")]
    assert _applied(saved[3], feed) == saved[1]
    assert (result.rows_deleted, result.rows_inserted, result.rows_updated) == (2, 1, 0)
    newest = history(spark, t)[0]
    assert (newest["version"], newest["operation"], newest["metrics"]["restoredVersion"]) == (4, "RESTORE", 1)


def test_with_unique_key_a_changed_row_is_an_update(spark, db):
    t = _table(spark, db)
    saved = _history(spark, db, t, [[(1, "x"), (5, "e")]], retain_versions=3)
    result = restore(spark, t, version=0, unique_key="id")
    assert rows(spark, t) == saved[0]
    feed = _feed(spark, t, 2)
    assert feed == [(1, "a", "update_postimage"), (1, "x", "update_preimage"), (5, "e", "delete")]
    assert _applied(saved[1], feed) == saved[0]
    assert (result.rows_deleted, result.rows_inserted, result.rows_updated) == (1, 0, 1)


def test_a_map_column_is_compared_by_its_entries(spark, db):
    """Spark has no set operations on maps; the restore compares them as their sorted entries,
    so a row its rewritten file still holds unchanged (2) is no change row."""
    t, schema = f"{db}.m", "id long, m map<string, int>"
    create_table(spark, t, schema, [[(1, {"a": 1, "b": 2}), (2, {"c": 3})], [(3, {"d": 4})]])
    src = source_view(spark, f"{db}_mm", schema, [(1, {"a": 9}), (5, {"e": 5})])
    feed = {"table": f"{t}__changes"}
    merge(spark, t, src, UPSERT, auto_compact=False, retain_versions=3, change_data_feed=feed)
    result = restore(spark, t, version=0, unique_key="id")
    assert sorted((r.id, sorted(r.m.items())) for r in spark.table(t).collect()) == [
        (1, [("a", 1), ("b", 2)]),
        (2, [("c", 3)]),
        (3, [("d", 4)]),
    ]
    spark.catalog.refreshTable(f"{t}__changes")
    changes = [r for r in spark.table(f"{t}__changes").collect() if r._commit_version == 2]  # see _feed
    assert sorted((r.id, sorted(r.m.items()), r._change_type) for r in changes) == [
        (1, [("a", 1), ("b", 2)], "update_postimage"),
        (1, [("a", 9)], "update_preimage"),
        (5, [("e", 5)], "delete"),
    ]
    assert (result.rows_deleted, result.rows_inserted, result.rows_updated) == (1, 0, 1)


def test_a_collated_string_column_is_compared_as_binary(spark, db):
    """Under UTF8_LCASE 'X' and 'x' are equal, but restoring one over the other changes the
    row: an update in the feed, as the merge that made it was; the unchanged row 2 is none."""
    t, schema = f"{db}.lc", "id long, v string collate UTF8_LCASE"
    create_table(spark, t, schema, [[(1, "X"), (2, "b")], [(3, "c")]])
    src = source_view(spark, f"{db}_lcs", "id long, v string", [(1, "x"), (5, "e")])
    feed = {"table": f"{t}__changes"}
    merge(spark, t, src, UPSERT, auto_compact=False, retain_versions=3, change_data_feed=feed)
    assert rows(spark, t) == [(1, "x"), (2, "b"), (3, "c"), (5, "e")]
    result = restore(spark, t, version=0, unique_key="id")
    assert rows(spark, t) == [(1, "X"), (2, "b"), (3, "c")]
    merged = [(1, "X", "update_preimage"), (1, "x", "update_postimage"), (5, "e", "insert")]
    assert _feed(spark, t, 1) == merged
    restored = [(1, "X", "update_postimage"), (1, "x", "update_preimage"), (5, "e", "delete")]
    assert _feed(spark, t, 2) == restored
    assert (result.rows_deleted, result.rows_inserted, result.rows_updated) == (1, 0, 1)


def test_a_variant_column_is_fed_as_deletes_and_inserts(spark, db):
    """No set operation takes a variant: the rows of the differing files are fed whole, never
    paired, and applied they still end with the restored table."""
    t = f"{db}.var"
    spark.sql(f"CREATE TABLE {t} (id long, v variant) USING parquet")
    rows_ = "SELECT 1 AS id, parse_json('1') AS v UNION ALL SELECT 2, parse_json('2')"
    spark.sql(f"INSERT INTO {t} SELECT /*+ COALESCE(1) */ * FROM ({rows_})")  # one file
    spark.sql("SELECT 1 AS id, parse_json('9') AS v").createOrReplaceTempView(f"{db}_vs")
    feed = {"table": f"{t}__changes"}
    merge(spark, t, f"{db}_vs", UPSERT, auto_compact=False, retain_versions=3, change_data_feed=feed)
    result = restore(spark, t, version=0, unique_key="id")
    got = sorted((r.id, str(r.v)) for r in spark.table(t).collect())
    assert got == [(1, "1"), (2, "2")]
    changes = [r for r in spark.table(f"{t}__changes").collect() if r._commit_version == 2]  # see _feed
    assert sorted((r.id, str(r.v), r._change_type) for r in changes) == [
        (1, "1", "insert"),
        (1, "9", "delete"),
        (2, "2", "delete"),
        (2, "2", "insert"),
    ]
    assert (result.rows_deleted, result.rows_inserted, result.rows_updated) == (2, 2, 0)


def test_every_version_stays_readable_across_restores_and_merges_after_them(spark, db):
    t = _table(spark, db)
    saved = _history(spark, db, t, [[(1, "x")], [(2, "y"), (7, "g")], [(3, "z")]], retain_versions=20)
    restore(spark, t, version=1)  # 4
    saved.append(rows(spark, t))
    saved += _history(spark, db, t, [[(1, "w"), (8, "h")]], retain_versions=20)[1:]  # 5
    restore(spark, t, version=4)  # 6: undo the merge after the restore
    saved.append(rows(spark, t))
    restore(spark, t, version=3)  # 7: undo the first restore
    saved.append(rows(spark, t))
    assert saved[4] == saved[1] and saved[6] == saved[4] and saved[7] == saved[3]
    for v, expected in enumerate(saved):
        assert sorted_rows(tuple(r) for r in as_of(spark, t, version=v).collect()) == expected, v
    for v in (4, 5, 6, 7):
        assert _applied(saved[v - 1], _feed(spark, t, v)) == saved[v], v
    # and the table merges on as usual
    _history(spark, db, t, [[(9, "i")]])
    assert rows(spark, t) == sorted_rows(saved[7] + [(9, "i")])


def test_a_column_added_since_the_version_stays_and_reads_null(spark, db):
    t = _table(spark, db)
    _history(spark, db, t, [[(1, "x")]], retain_versions=5)
    src = source_view(spark, f"{db}_w", "id long, v string, w int", [(2, "y", 7)])
    merge(spark, t, src, UPSERT, auto_compact=False, schema_evolution=True)
    restore(spark, t, version=1)
    assert rows(spark, t) == [(1, "x", None), (2, "b", None), (3, "c", None), (4, "d", None)]


def test_a_partition_a_merge_emptied_comes_back(spark, db):
    t = f"{db}.p"
    create_table(spark, t, "id long, day string", [[(1, "d1"), (2, "d1")], [(3, "d2")]], partition_by=["day"])
    src = source_view(spark, f"{db}_p", "id long, day string", [(1, "d1")])
    clauses = UPSERT + [{"when": "not_matched_by_source", "action": "delete"}]
    merge(spark, t, src, clauses, on="t.id = s.id AND t.day = s.day", auto_compact=False, retain_versions=2)
    assert rows(spark, t) == [(1, "d1")]
    restore(spark, t, version=0)
    assert rows(spark, t) == [(1, "d1"), (2, "d1"), (3, "d2")]


def test_without_retention_an_earlier_version_is_refused_and_nothing_changes(spark, db):
    t = _table(spark, db)
    _history(spark, db, t, [[(1, "x")], [(9, "z")]], retain_versions=0)
    state = folder_digest(table_dir(spark, t))
    with pytest.raises(JournalError, match="Version 0 of .* can no longer be read.*from 1 on can be read"):
        restore(spark, t, version=0)
    assert folder_digest(table_dir(spark, t)) == state
    assert restore(spark, t, version=1).version == 3  # an insert-only version still can be


def test_dry_run_reports_and_changes_nothing(spark, db):
    t = _table(spark, db)
    _history(spark, db, t, [[(1, "x"), (5, "e")]], retain_versions=3)
    state = folder_digest(table_dir(spark, t))
    written = history(spark, t)[0]["files_added"]  # the rewrite of (1, 'a')'s file, and the insert's
    report = restore(spark, t, version=0, dry_run=True)
    assert (report.version, report.dry_run, report.files_removed, report.files_restored) == (
        None,
        True,
        written,
        1,
    )
    assert (report.rows_deleted, report.rows_inserted) == (2, 1)
    assert folder_digest(table_dir(spark, t)) == state
    assert "would restore the rows of version 0" in report.summary()


def test_restoring_the_newest_version_changes_nothing(spark, db):
    t = _table(spark, db)
    _history(spark, db, t, [[(1, "x")]], retain_versions=3)
    result = restore(spark, t, version=1)
    assert (result.version, result.files_removed, result.files_restored) == (None, 0, 0)
    assert [h["version"] for h in history(spark, t)] == [1, 0]


def test_bad_arguments_are_named_before_anything_is_read(spark, db):
    t = _table(spark, db)
    _history(spark, db, t, [[(1, "x")]], retain_versions=3)
    with pytest.raises(MergeSpecError, match="give exactly one of `version` and `timestamp`"):
        restore(spark, t)
    with pytest.raises(MergeSpecError, match="`unique_key` column 'nope' is not a column"):
        restore(spark, t, version=0, unique_key=["nope"])
    with pytest.raises(JournalError, match="has no version 5"):
        restore(spark, t, version=5)


class Crash(BaseException):
    pass


STEPS = [
    "restore_staged",
    "restore_entry",
    "restore_move_0",
    "restore_registered",
    "restore_delete_0",
    "restore_before_applied",
    "restore_applied",
]


# tests/reliability/test_fault_restore.py kills a process after every one of these steps.
@pytest.mark.parametrize("step", long_except(STEPS, ["restore_staged", "restore_entry", "restore_applied"]))
def test_killed_at_any_step_the_table_and_feed_are_exactly_before_or_after(spark, db, monkeypatch, step):
    t = _table(spark, db)
    saved = _history(spark, db, t, [[(1, "x"), (5, "e")]], retain_versions=3)

    def die(at: str) -> None:
        if at == step:
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(Crash):
        restore(spark, t, version=0)
    monkeypatch.undo()
    # a reader between the crash and recovery never misses a row of either side
    assert set(saved[0]) <= set(rows(spark, t)) or set(saved[1]) <= set(rows(spark, t))
    recover(spark, t)
    committed = step != "restore_staged"
    assert rows(spark, t) == (saved[0] if committed else saved[1])
    assert _feed(spark, t, 2) == (
        [(1, "a", "insert"), (1, "x", "delete"), (5, "e", "delete")] if committed else []
    )
    assert [h["operation"] for h in history(spark, t)][0] == ("RESTORE" if committed else "MERGE")
    assert not os.listdir(os.path.join(table_dir(spark, t), "_rowmerge_log", "staging"))
    # the files the restore took out are retained, and version 1 still reads back
    if committed:
        assert sorted_rows(tuple(r) for r in as_of(spark, t, version=1).collect()) == saved[1]


def test_a_file_another_job_wrote_into_the_folder_stops_it(spark, db):
    t = _table(spark, db)
    _history(spark, db, t, [[(1, "x")]], retain_versions=3)
    spark.createDataFrame([(99, "foreign")], "id long, v string").coalesce(1).write.mode("append").parquet(
        table_dir(spark, t)
    )
    state = folder_digest(table_dir(spark, t))
    with pytest.raises(
        UnsupportedTableError, match="its folder and its journal disagree about the current files"
    ):
        restore(spark, t, version=0)
    assert folder_digest(table_dir(spark, t)) == state
