"""What a merge leaves on disk: untouched files stay byte-for-byte, insert-only rewrites
nothing, an empty source changes nothing, the source is read before the target changes."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from dbt.adapters.rowmerge.merge import history
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    new_files,
    rows,
    session_conf,
    single_task_rows,
    source_view,
    spark_job_ids,
)

INSERT_ONLY = [{"when": "not_matched", "action": "insert", "values": "*"}]


def _target(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    return t


def test_insert_only_merge_rewrites_no_file(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "X"), (5, "e"), (6, "f")])
    result = merge(spark, t, src, INSERT_ONLY)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c"), (5, "e"), (6, "f")]
    after = file_snapshot(spark, t)
    assert kept_files(before, after) == sorted(before)
    m = result.metrics
    assert (m["numTargetRowsInserted"], m["numTargetRowsUpdated"], m["numTargetRowsCopied"]) == (2, 0, 0)
    assert (m["numTargetFilesRemoved"], m["numTargetBytesRemoved"]) == (0, 0)
    assert m["numTargetFilesAdded"] == len(new_files(before, after)) == 1
    assert result.version == 1


def test_insert_only_merge_inserts_every_duplicate_source_row(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(5, "e"), (5, "e"), (6, "f"), (2, "b")])
    result = merge(spark, t, src, INSERT_ONLY)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c"), (5, "e"), (5, "e"), (6, "f")]
    assert result.metrics["numTargetRowsInserted"] == 3
    assert kept_files(before, file_snapshot(spark, t)) == sorted(before)


def test_empty_source_changes_nothing(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    result = merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]
    assert file_snapshot(spark, t) == before
    m = result.metrics
    assert m["numSourceRows"] == 0
    assert (m["numTargetRowsInserted"], m["numTargetRowsUpdated"], m["numTargetFilesAdded"]) == (0, 0, 0)
    assert result.version == 0
    assert history(spark, t) == []


def test_empty_source_with_not_matched_by_source_delete_removes_every_row(spark, db):
    """Opted in (allow_empty_source): MERGE semantics; without it the guard refuses (test_guards)."""
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    nmbs_delete = {"when": "not_matched_by_source", "action": "delete"}
    result = merge(spark, t, src, [*UPSERT, nmbs_delete], allow_empty_source=True)
    assert rows(spark, t) == []
    assert file_snapshot(spark, t) == {}
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == (3, 2, 0)
    assert result.version == 1


def test_empty_target_upsert_inserts_every_source_row(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a"), (2, "b")])
    result = merge(spark, t, src, [*UPSERT, {"when": "not_matched_by_source", "action": "delete"}])
    assert rows(spark, t) == [(1, "a"), (2, "b")]
    m = result.metrics
    assert (m["numTargetRowsInserted"], m["numTargetRowsUpdated"], m["numTargetRowsDeleted"]) == (2, 0, 0)
    assert m["numTargetFilesRemoved"] == 0


def test_untouched_files_are_byte_for_byte_the_same_files(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a")], [(2, "b"), (3, "c")], [(4, "d")], [(5, "e")]])
    before = file_snapshot(spark, t)
    untouched = sorted(files_of(spark, t, "id = 1") + files_of(spark, t, "id = 5"))
    contents = {p: open(p, "rb").read() for p in untouched}
    src = source_view(spark, f"{db}_src", "id long, v string, op string", [(2, "B", "U"), (4, None, "D")])
    result = merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        ],
    )
    assert rows(spark, t) == [(1, "a"), (2, "B"), (3, "c"), (5, "e")]
    after = file_snapshot(spark, t)
    assert kept_files(before, after) == untouched
    assert all(open(p, "rb").read() == data for p, data in contents.items())
    m = result.metrics
    assert m["numTargetFilesRemoved"] == 2
    # The file whose only row was deleted is not replaced by an empty one.
    assert m["numTargetFilesAdded"] == len(new_files(before, after)) == 1


def test_deleting_every_row_of_a_file_adds_no_file(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id = 3")
    src = source_view(spark, f"{db}_src", "id long", [(1,), (2,)])
    result = merge(spark, t, src, [{"when": "matched", "action": "delete"}])
    assert rows(spark, t) == [(3, "c")]
    assert file_snapshot(spark, t) == {p: before[p] for p in untouched}
    m = result.metrics
    assert (m["numTargetRowsDeleted"], m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == (2, 1, 0)


def test_self_referencing_source_sees_pre_merge_target(spark, db):
    t = _target(spark, db)
    view = f"{db}_self"
    spark.sql(
        f"SELECT id, v || '!' AS v FROM {t} UNION ALL SELECT id + 10 AS id, v FROM {t} WHERE id < 3"
    ).createOrReplaceTempView(view)
    result = merge(spark, t, view, UPSERT)
    assert rows(spark, t) == [(1, "a!"), (2, "b!"), (3, "c!"), (11, "a"), (12, "b")]
    m = result.metrics
    assert m["numSourceRows"] == 5
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (3, 2)


def test_successive_merges_commit_increasing_versions(spark, db):
    t = _target(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A")])
    first = merge(spark, t, src, UPSERT)
    src2 = source_view(spark, f"{db}_src2", "id long, v string", [(1, "AA"), (4, "d")])
    second = merge(spark, t, src2, UPSERT)
    assert (first.version, second.version) == (1, 2)
    assert rows(spark, t) == [(1, "AA"), (2, "b"), (3, "c"), (4, "d")]
    log = history(spark, t)
    # Version 0 is the table as the first merge found it (two files, three rows).
    assert [h["version"] for h in log] == [2, 1, 0]
    assert [h["operation"] for h in log] == ["MERGE", "MERGE", "CONVERT"]
    assert (log[2]["files_added"], log[2]["rows_inserted"]) == (2, 3)
    assert log[0]["metrics"]["numTargetRowsInserted"] == 1
    assert log[1]["metrics"]["numTargetRowsInserted"] == 0


def test_empty_source_insert_only_changes_nothing(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [])
    result = merge(spark, t, src, INSERT_ONLY)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]
    assert file_snapshot(spark, t) == before
    assert (result.version, result.metrics["numTargetFilesAdded"]) == (0, 0)
    assert history(spark, t) == []


def test_empty_target_without_any_file_takes_inserts(spark, db):
    t = f"{db}.t"
    spark.sql(f"CREATE TABLE {t} (id bigint, v string) USING parquet")
    assert file_snapshot(spark, t) == {}
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a"), (2, "b")])
    result = merge(spark, t, src, [*UPSERT, {"when": "not_matched_by_source", "action": "delete"}])
    assert rows(spark, t) == [(1, "a"), (2, "b")]
    m = result.metrics
    assert (m["numTargetFilesBeforeSkipping"], m["numTargetFilesRemoved"], m["numTargetRowsInserted"]) == (
        0,
        0,
        2,
    )
    assert result.version == 1


def test_source_is_the_target_table_itself(spark, db):
    t = _target(spark, db)
    before = file_snapshot(spark, t)
    result = merge(spark, t, t, UPSERT)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]
    assert file_snapshot(spark, t) == before
    assert (result.version, result.metrics["numSourceRows"]) == (0, 3)
    result = merge(spark, t, t, [{"when": "matched", "action": "update", "set": {"v": "s.v || '!'"}}])
    assert rows(spark, t) == [(1, "a!"), (2, "b!"), (3, "c!")]
    assert result.metrics["numTargetRowsUpdated"] == 3


def test_a_rewrite_never_writes_a_file_bigger_than_the_largest_it_replaces(spark, db):
    """Spark packs small touched files into one task (here three to a task: twelve files of
    about Spark's 4 MB open cost over 4 cores); without a cap on rows per file the file
    holding the newest keys would absorb the small ones at every merge and grow forever."""
    import pyarrow.parquet as pq

    t = f"{db}.t"
    big = [(i, "old") for i in range(1, 51)]
    lows = range(51, 106, 5)  # eleven files of five rows
    smalls = [[(i, "old") for i in range(lo, lo + 5)] for lo in lows]
    create_table(spark, t, "id long, v string", [big, *smalls])
    before = file_snapshot(spark, t)
    # One update in each of the twelve files, and three inserts.
    updates = [(1, "new"), *[(lo, "new") for lo in lows]]
    inserts = [(200, "ins"), (201, "ins"), (202, "ins")]
    result = merge(spark, t, source_view(spark, f"{db}_src", "id long, v string", updates + inserts), UPSERT)
    after = file_snapshot(spark, t)
    added = {p: pq.read_metadata(p).num_rows for p in new_files(before, after)}
    assert kept_files(before, after) == []
    assert result.metrics["numTargetFilesRemoved"] == 12
    assert sum(added.values()) == 108
    assert max(added.values()) <= 50, sorted(added.values())
    expected = [(i, "new" if i == 1 or i in lows else "old") for i in range(1, 106)] + inserts
    assert rows(spark, t) == expected


@contextmanager
def _shuffled_join(spark, coalesce: bool = False):
    """Merges in this block join the source without broadcasting it, in tasks Spark does not
    coalesce (as a source too large to broadcast is joined at scale); ``coalesce``: in tasks
    adaptive execution may coalesce, as it does by default."""
    settings = {
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.adaptive.coalescePartitions.enabled": str(coalesce).lower(),
    }
    with session_conf(spark, settings), single_task_rows(0):
        yield


def _id_ranges(paths) -> list[tuple[int, int, int]]:
    """(min id, max id, rows) of each file, sorted."""
    import pyarrow.parquet as pq

    out = []
    for p in paths:
        ids = pq.read_table(p, columns=["id"]).column("id").to_pylist()
        out.append((min(ids), max(ids), len(ids)))
    return sorted(out)


MATCHED_ONLY = [
    {"when": "matched", "condition": "s.v = 'gone'", "action": "delete"},
    {"when": "matched", "action": "update", "set": {"v": "s.v"}},
]


@pytest.mark.parametrize("cdf", [False, True], ids=["", "cdf"])
@pytest.mark.parametrize("clauses", [UPSERT, MATCHED_ONLY], ids=["upsert", "update_delete"])
@pytest.mark.parametrize(
    "touched", [[0, 2, 4], [1, 2, 3], [2]], ids=["three_groups", "one_group", "one_file"]
)
def test_a_shuffled_rewrite_writes_each_touched_file_once(spark, db, clauses, touched, cdf):
    """A source too large to broadcast is joined by a shuffle, whose every task holds a slice
    of every touched file's rows: written as they come, each task would leave a file of each
    (here 4 tasks: 12 files for 3, with overlapping key ranges). Each file's rows are written
    by one task: as many files as were replaced, each over the keys of the one it replaces."""
    t = f"{db}.t"
    files = [[(i, "old") for i in range(k * 1000, k * 1000 + 1000)] for k in range(5)]
    create_table(spark, t, "id long, v string", files)
    before = file_snapshot(spark, t)
    changed = [
        (i, "gone" if i % 7 == 0 else "new") for k in touched for i in range(k * 1000, k * 1000 + 1000, 2)
    ]
    inserts = [(9000, "ins"), (9001, "ins")] if clauses is UPSERT else []
    src = source_view(spark, f"{db}_src", "id long, v string", changed + inserts)
    with _shuffled_join(spark):
        feed = {"change_data_feed": {"table": f"{t}__changes"}} if cdf else {}
        result = merge(spark, t, src, clauses, **feed)
    after = file_snapshot(spark, t)
    m = result.metrics
    assert m["numTargetFilesRemoved"] == len(touched)
    added = _id_ranges(new_files(before, after))
    rewritten = [r for r in added if r[0] < 9000]
    expected_ranges = []
    deletes = clauses is MATCHED_ONLY  # the rows whose source value is 'gone'
    for k in touched:
        kept = [i for i in range(k * 1000, k * 1000 + 1000) if not (deletes and i % 14 == 0)]
        expected_ranges.append((min(kept), max(kept), len(kept)))
    assert rewritten == expected_ranges
    assert [r for r in added if r[0] >= 9000] == ([(9000, 9001, 2)] if inserts else [])
    assert m["numTargetFilesAdded"] == len(added)
    new = dict(changed)
    expected = [
        (i, new.get(i, "old")) for i in range(5000) if not (deletes and new.get(i) == "gone")
    ] + inserts
    assert rows(spark, t) == expected


def test_a_shuffled_rewrite_writes_its_files_in_as_many_tasks(spark, db):
    """The rows gathered by file go to as many partitions as files, which adaptive execution
    (on here, as by default) does not coalesce: three touched files are written by three tasks,
    not packed into one task that writes them all on one core (as a repartition by the file
    column alone was, a small rewrite's partitions coalesced)."""
    t = f"{db}.t"
    files = [[(i, "old") for i in range(k * 1000, k * 1000 + 1000)] for k in range(5)]
    create_table(spark, t, "id long, v string", files)
    changed = [(i, "new") for k in (0, 2, 4) for i in range(k * 1000, k * 1000 + 1000, 2)]
    src = source_view(spark, f"{db}_src", "id long, v string", changed)
    with _shuffled_join(spark, coalesce=True):
        result, jobs = spark_job_ids(spark, lambda: merge(spark, t, src, MATCHED_ONLY))
    m = result.metrics
    tracker = spark.sparkContext.statusTracker()
    write_stage = tracker.getStageInfo(max(tracker.getJobInfo(jobs[-1]).stageIds))
    assert (m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == (3, 3)
    assert write_stage.numTasks == 3
    new = dict(changed)
    assert rows(spark, t) == [(i, new.get(i, "old")) for i in range(5000)]
