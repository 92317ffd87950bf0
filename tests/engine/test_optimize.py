"""OPTIMIZE (optimize.py): small files become fewer, bigger ones as a version of their own,
rows unchanged, no change-feed rows; with ``cluster_by`` key ranges stop overlapping and file
skipping works again; auto-compaction after a merge; bad arguments refused before anything."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import date, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import (
    MergeSpecError,
    faults,
    history,
    optimize,
    recover,
)
from dbt.adapters.rowmerge.merge.errors import MergeCommittedError
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    folder_digest,
    merge,
    rows,
    source_view,
    table_dir,
)

INTERLEAVED = 8  # files whose keys interleave: every file spans the whole key range


def _interleaved(spark, t: str, per_file: int = 2000) -> None:
    create_table(
        spark,
        t,
        "id long, v string",
        [[(i * INTERLEAVED + k, f"v{k}") for i in range(per_file)] for k in range(INTERLEAVED)],
    )


def _upsert_reads(spark, db: str, t: str, first: int, name: str) -> int:
    """Files a 100-row upsert of the contiguous keys ``first``.. reads (after skipping)."""
    src = source_view(
        spark, f"{db}_{name}", "id long, v string", [(i, name) for i in range(first, first + 100)]
    )
    return merge(spark, t, src, UPSERT, auto_compact=False).metrics["numTargetFilesAfterSkipping"]


def test_optimize_with_cluster_by_restores_file_skipping(spark, db):
    t = f"{db}.t"
    _interleaved(spark, t)
    expected = rows(spark, t)
    result = optimize(spark, t, cluster_by=["id"], target_file_size_mb=0.02)
    assert (result.version, result.files_before, result.files_removed) == (1, 8, 8)
    assert result.files_added == len(file_snapshot(spark, t)) > 2
    assert rows(spark, t) == expected
    # each file now holds one key range: a contiguous upsert reads one or two files, not 8
    assert _upsert_reads(spark, db, t, 5000, "a") <= 2
    assert _upsert_reads(spark, db, t, 9000, "b") <= 2
    newest = history(spark, t)[2]
    assert (newest["operation"], newest["files_removed"], newest["files_added"], newest["rows_inserted"]) == (
        "OPTIMIZE",
        8,
        result.files_added,
        0,
    )
    m = newest["metrics"]
    assert (m["numFilesBefore"], m["numFilesRemoved"], m["numRowsRewritten"]) == (8, 8, 16000)
    assert m["numBytesRemoved"] == result.bytes_removed and m["numBytesAdded"] == result.bytes_added


def test_a_clustered_table_is_not_clustered_again(spark, db):
    """The journal records the range of the first cluster column only, and only of some types
    (not of an ORC file, nor of a timestamp); where it cannot tell, optimize reads the files'
    keys, so a partition already in key order is not rewritten again at every call."""
    start = datetime(2026, 1, 1)
    cases = {
        "orc_ids": ("orc", "id long, v string", ["id"], lambda i: (i, "v")),
        "stamps": ("parquet", "ts timestamp, v string", ["ts"], lambda i: (start + timedelta(0, i), "v")),
        "pairs": ("parquet", "g long, id long, v string", ["g", "id"], lambda i: (i % 3, i, "v")),
    }
    sizes = {}
    for name, (fmt, schema, key, row) in cases.items():
        t = f"{db}.{name}"
        files = [[row(i * INTERLEAVED + k) for i in range(400)] for k in range(INTERLEAVED)]
        create_table(spark, t, schema, files, fmt=fmt)
        expected = rows(spark, t)
        mb = sum(size for size, _ in file_snapshot(spark, t).values()) / 4 / 2**20  # about 4 files
        first = optimize(spark, t, cluster_by=key, target_file_size_mb=mb)
        assert (first.version, first.files_removed) == (1, INTERLEAVED), (name, first)
        assert first.files_added > 1, (name, first)
        # at most one more call packs what the sorted rewrite left small (its files are sized by
        # the bytes it read; sorted keys compress better); then there is nothing left to do
        calls = [optimize(spark, t, target_file_size_mb=mb) for _ in range(3)]
        assert [c.version for c in calls][1:] == [None, None], (name, calls)
        assert all(c.files_removed < first.files_added for c in calls), (name, calls)
        assert rows(spark, t) == expected, name
        # every file holds a key range of its own (packing took neighbours only)
        spans = _key_spans(spark, t, key)
        assert len(spans) > 1, (name, spans)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), (name, spans)
        sizes[name] = mb
    # a file whose keys fall among theirs puts a table out of key order again
    spark.sql(f"INSERT INTO {db}.orc_ids VALUES (5, 'late'), (3001, 'late')")
    again = optimize(spark, f"{db}.orc_ids", target_file_size_mb=sizes["orc_ids"])
    assert again.version is not None and again.files_removed > 2, again
    spans = _key_spans(spark, f"{db}.orc_ids", ["id"])
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans


def _key_spans(spark, t: str, key: list[str]) -> list[tuple]:
    """Each file's least and greatest ``key``, in key order."""
    spark.catalog.refreshTable(t)
    k = F.struct(*key)
    per_file = spark.table(t).groupBy("_metadata.file_path").agg(F.min(k).alias("lo"), F.max(k).alias("hi"))
    return sorted((tuple(r.lo), tuple(r.hi)) for r in per_file.collect())


def test_before_optimize_the_same_upsert_reads_every_file(spark, db):
    """The other half of the claim above: interleaved keys defeat file skipping."""
    t = f"{db}.t"
    _interleaved(spark, t)
    assert _upsert_reads(spark, db, t, 5000, "a") == INTERLEAVED


def test_optimize_bin_packs_small_files_and_keeps_rows_and_partitions(spark, db):
    t = f"{db}.p"
    create_table(
        spark,
        t,
        "id long, v string, day string",
        [[(i * 10 + k, "x", d) for i in range(50)] for k in range(5) for d in ("d1", "d2")],
        partition_by=["day"],
    )
    create_table(spark, f"{db}.lone", "id long", [[(1,)]])
    expected = rows(spark, t)
    before = sorted(os.path.relpath(os.path.dirname(p), table_dir(spark, t)) for p in file_snapshot(spark, t))
    assert before == ["day=d1"] * 5 + ["day=d2"] * 5
    result = optimize(spark, t)
    assert (result.files_removed, result.files_added) == (10, 2)
    after = sorted(os.path.relpath(os.path.dirname(p), table_dir(spark, t)) for p in file_snapshot(spark, t))
    assert after == ["day=d1", "day=d2"]
    assert rows(spark, t) == expected
    # nothing left to do: no version
    again = optimize(spark, t)
    assert (again.version, again.files_removed) == (None, 0)
    assert [h["operation"] for h in history(spark, t)] == ["OPTIMIZE", "CONVERT"]
    assert optimize(spark, f"{db}.lone").version is None


def test_optimize_of_one_partition_leaves_the_others(spark, db):
    t = f"{db}.p"
    create_table(
        spark,
        t,
        "id long, day date",
        [[(k, d)] for k in range(3) for d in (None, date(2026, 1, 1), date(2026, 1, 2))],
        partition_by=["day"],
    )
    folder = table_dir(spark, t)
    untouched = {p: s for p, s in file_snapshot(spark, t).items() if "2026-01-02" in p or "DEFAULT" in p}
    result = optimize(spark, t, partition_filter="day = date'2026-01-01'")
    assert (result.files_removed, result.files_added) == (3, 1)
    now = file_snapshot(spark, t)
    assert {p: s for p, s in now.items() if p in untouched} == untouched
    assert len([p for p in now if "day=2026-01-01" in p]) == 1
    # the NULL partition (Hive's default folder) is selectable too
    assert optimize(spark, t, partition_filter="day is null").files_removed == 3
    assert os.path.isdir(folder)


def test_partition_values_the_folders_escape_are_compacted(spark, db):
    """A value with a space or a ':' (every timestamp) is escaped in its folder's name and
    URL-encoded once more in `_metadata.file_path`; OPTIMIZE and auto-compaction find the files
    by the folder's own path."""
    hours = ("2026-01-01 10:00", "a b/c%d")
    t = f"{db}.p"
    batches = [[(k * 10 + j, h) for j in range(3)] for k in range(3) for h in hours]
    create_table(spark, t, "id long, hour string", batches, partition_by=["hour"])
    expected = rows(spark, t)
    result = optimize(spark, t)
    assert (result.files_removed, result.files_added) == (6, 2)
    assert rows(spark, t) == expected
    stamped = f"{db}.ts"
    create_table(
        spark, stamped, "id long, ts timestamp",
        [[(k, datetime(2026, 1, 1, 10, 30, 15))] for k in range(3)], partition_by=["ts"],
    )  # fmt: skip
    assert "ts=2026-01-01 10%3A30%3A15" in " ".join(file_snapshot(spark, stamped))
    assert optimize(spark, stamped).files_removed == 3
    assert rows(spark, stamped) == [(k, datetime(2026, 1, 1, 10, 30, 15)) for k in range(3)]
    # an hourly model's inserts into the escaped partition are compacted after its merges
    compacted = []
    for k in range(3):
        src = source_view(spark, f"{db}_h{k}", "id long, hour string", [(100 + k, hours[0])])
        found = merge(spark, t, src, UPSERT, on="t.id = s.id AND t.hour = s.hour", auto_compact_min_files=2)
        compacted.append(found.metrics["compactVersion"])
    assert any(compacted), compacted
    assert rows(spark, t) == sorted(expected + [(100 + k, hours[0]) for k in range(3)])


def test_dry_run_reports_and_writes_nothing(spark, db):
    t = f"{db}.t"
    _interleaved(spark, t, per_file=50)
    before = folder_digest(table_dir(spark, t))
    report = optimize(spark, t, cluster_by="id", dry_run=True)
    assert (report.dry_run, report.version, report.files_removed, report.files_added) == (True, None, 8, 1)
    assert "would rewrite 8 of 8 file(s)" in report.summary()
    assert folder_digest(table_dir(spark, t)) == before


def test_optimize_writes_no_change_rows_and_a_consumer_stays_exact(spark, db):
    t, changes = f"{db}.t", f"{db}.t__changes"
    create_table(spark, t, "id long, v string", [[(k, "a")] for k in range(6)])
    merge(spark, t, source_view(spark, f"{db}_s", "id long, v string", [(1, "b"), (9, "z")]), UPSERT,
          change_data_feed={"table": changes}, auto_compact=False)  # fmt: skip
    result = optimize(spark, t)
    assert result.version == 2 and result.files_removed >= 6
    merge(spark, t, source_view(spark, f"{db}_s2", "id long, v string", [(2, "c")]), UPSERT,
          change_data_feed={"table": changes}, auto_compact=False)  # fmt: skip
    spark.catalog.refreshTable(changes)
    feed = sorted((r._commit_version, r._change_type, r.id, r.v) for r in spark.table(changes).collect())
    assert {v for v, *_ in feed} == {1, 3}
    assert feed == [
        (1, "insert", 9, "z"),
        (1, "update_postimage", 1, "b"),
        (1, "update_preimage", 1, "a"),
        (3, "update_postimage", 2, "c"),
        (3, "update_preimage", 2, "a"),
    ]


def test_cluster_by_is_stored_and_honoured_by_later_compactions(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, w long", [[(k, f"v{k}", 100 - k)] for k in range(4)])
    optimize(spark, t, cluster_by=["w"])
    entry = json.loads(open(os.path.join(table_dir(spark, t), "_rowmerge_log", f"{1:020d}.json")).read())
    # format 4: it retains what it compacted (the default retention)
    assert entry["cluster_by"] == ["w"] and entry["format"] == 4
    # a merge carries it on; its auto-compaction sorts by it (w descends as id ascends)
    for k in range(4, 8):
        src = source_view(spark, f"{db}_s{k}", "id long, v string, w long", [(k, f"v{k}", 100 - k)])
        merge(spark, t, src, UPSERT, auto_compact_min_files=2)
    spark.catalog.refreshTable(t)
    by_file: dict[str, list[int]] = {}
    for r in spark.table(t).select("w", "_metadata.file_path").collect():
        by_file.setdefault(r.file_path, []).append(r.w)
    for ws in by_file.values():
        assert ws == sorted(ws)
    newest = history(spark, t)[0]
    assert newest["operation"] == "OPTIMIZE" and newest["metrics"]["orderedBy"] == ["w"]


def test_a_cluster_by_given_with_nothing_to_rewrite_is_stored_all_the_same(spark, db):
    t = f"{db}.one"
    create_table(spark, t, "id long, v string, w long", [[(k, f"v{k}", 100 - k) for k in range(4)]])
    expected = rows(spark, t)
    result = optimize(spark, t, cluster_by=["w"])
    assert (result.version, result.files_removed, result.files_added, result.cluster_by) == (1, 0, 0, ("w",))
    assert result.summary().endswith("nothing to compact (1 file(s)); cluster_by (w) stored as version 1")
    newest = history(spark, t)[0]
    assert (newest["operation"], newest["files_removed"], newest["files_added"]) == ("OPTIMIZE", 0, 0)
    assert (newest["metrics"]["numFilesAfter"], newest["metrics"]["numBytesAfter"]) == (
        1,
        newest["metrics"]["numBytesBefore"],
    )
    assert rows(spark, t) == expected
    assert optimize(spark, t, cluster_by=["W"]).version is None  # nothing new to record
    # the compactions after it sort by w (it descends as id ascends)
    for k in range(4, 7):
        src = source_view(spark, f"{db}_w{k}", "id long, v string, w long", [(k, f"v{k}", 100 - k)])
        merge(spark, t, src, UPSERT, auto_compact_min_files=2)
    compactions = [h for h in history(spark, t) if h["operation"] == "OPTIMIZE" and h["version"] > 1]
    assert compactions and all(h["metrics"]["orderedBy"] == ["w"] for h in compactions), compactions


def test_a_default_cluster_by_orders_inside_partitions_and_yields_to_the_stored_one(spark, db):
    # From dbt the model's unique_key is the default: its partition column is left out, it is
    # not stored, and a stored clustering comes first.
    t = f"{db}.p"
    create_table(
        spark, t, "id long, w long, day string", [[(k, 10 - k, "a")] for k in range(4)], partition_by=["day"]
    )
    first = optimize(spark, t, default_cluster_by=["day", "id"])
    assert first.cluster_by == ("id",) and history(spark, t)[0]["metrics"]["orderedBy"] == ["id"]
    entry = json.loads(open(os.path.join(table_dir(spark, t), "_rowmerge_log", f"{1:020d}.json")).read())
    assert "cluster_by" not in entry

    def inserts(ks: range) -> None:
        for k in ks:
            src = source_view(spark, f"{db}_d{k}", "id long, w long, day string", [(k, 10 - k, "a")])
            merge(spark, t, src, UPSERT, auto_compact=False)

    inserts(range(4, 6))
    assert optimize(spark, t, cluster_by=["w"]).cluster_by == ("w",)  # stored from now on
    inserts(range(6, 8))
    assert optimize(spark, t, default_cluster_by=["id"]).cluster_by == ("w",)
    assert rows(spark, t) == [(k, 10 - k, "a") for k in range(8)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cluster_by": ["nope"]}, "`cluster_by` column 'nope' is not a column of"),
        ({"cluster_by": ["day"]}, "`cluster_by` column 'day' is a partition column of"),
        ({"cluster_by": 5}, "`cluster_by` must be a column name or a list of column names, got 5"),
        ({"target_file_size_mb": 0}, "`target_file_size_mb` must be a number > 0, got 0"),
        (
            {"partition_filter": "id > 3"},
            "`partition_filter` (id > 3) must be a condition on the partition columns",
        ),
        (
            {"partition_filter": " "},
            "`partition_filter` must be a SQL condition on partition columns, got ' '",
        ),
        (  # why it does not parse, not an empty reason
            {"partition_filter": "day >>= 1"},
            "`partition_filter` (day >>= 1) must be a condition on the partition columns of",
        ),
        ({"partition_filter": "day >>= 1"}, "Syntax error at or near"),
        # only the partition columns are offered, nothing of the engine's own
        ({"partition_filter": "dya = 'a'"}, "Did you mean one of the following? [`day`]"),
    ],
)
def test_bad_arguments_are_refused_before_anything(spark, db, kwargs, message):
    t = f"{db}.p"
    create_table(spark, t, "id long, day string", [[(1, "a")], [(2, "a")]], partition_by=["day"])
    before = folder_digest(table_dir(spark, t))
    with pytest.raises(MergeSpecError) as info:
        optimize(spark, t, **kwargs)
    assert message in str(info.value)
    assert folder_digest(table_dir(spark, t)) == before


def test_an_empty_partitioned_table_and_a_column_spark_cannot_sort(spark, db):
    t = f"{db}.e"
    columns = "id long, m map<string, int>, day string"
    spark.sql(f"CREATE TABLE {t} ({columns}) USING parquet PARTITIONED BY (day)")
    assert optimize(spark, t, partition_filter="day = 'x'").version is None
    with pytest.raises(MergeSpecError) as info:
        optimize(spark, t, partition_filter="id > 3")
    assert "`partition_filter` (id > 3) must be a condition on the partition columns" in str(info.value)
    spark.sql(f"INSERT INTO {t} VALUES (1, map('a', 1), 'x'), (2, map('b', 2), 'x')")
    spark.sql(f"INSERT INTO {t} VALUES (3, map('c', 3), 'x')")
    before = folder_digest(table_dir(spark, t))
    with pytest.raises(MergeSpecError) as info:
        optimize(spark, t, cluster_by=["m"])
    assert f"`cluster_by` column 'm' of {t} is of type map<string,int>, which Spark cannot sort by" in str(
        info.value
    )
    assert folder_digest(table_dir(spark, t)) == before


# -- auto-compaction after a merge ----------------------------------------------------------


def _inserts(spark, db: str, t: str, n: int, first: int = 0, **extra) -> list:
    """``n`` insert-only merges of 10 new rows each (batches ``first``.. of new keys)."""
    out = []
    for k in range(first, first + n):
        src = source_view(
            spark, f"{db}_i{k}", "id long, v string", [(1000 + k * 10 + i, "n") for i in range(10)]
        )
        out.append(merge(spark, t, src, UPSERT, **extra))
    return out


def test_auto_compaction_commits_an_optimize_version_right_after_the_merge(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a") for i in range(100)]])
    results = _inserts(spark, db, t, 7, auto_compact_min_files=4)
    # the table's own file (version 0) starts no run, but fills the first one the merges' files
    # start; a merge's own new file waits for the next merge (it holds the rows just touched):
    # after merge 4, the three files before it and the table's merge into one, which is still
    # in the smallest tier (tiers are 8x steps), so it merges again after merge 7 with the
    # three files merges 4-6 wrote
    assert [r.metrics["compactVersion"] for r in results] == [0, 0, 0, 5, 0, 0, 9]
    assert [r.version for r in results] == [1, 2, 3, 4, 6, 7, 8]
    ops = [(h["version"], h["operation"], h["files_added"], h["files_removed"]) for h in history(spark, t)]
    # every insert-only merge replaced no file; each OPTIMIZE replaced four small ones
    assert ops == [
        (9, "OPTIMIZE", 1, 4),
        (8, "MERGE", 1, 0),
        (7, "MERGE", 1, 0),
        (6, "MERGE", 1, 0),
        (5, "OPTIMIZE", 1, 4),
        (4, "MERGE", 1, 0),
        (3, "MERGE", 1, 0),
        (2, "MERGE", 1, 0),
        (1, "MERGE", 1, 0),
        (0, "CONVERT", 1, 0),
    ]
    assert len(rows(spark, t)) == 170 and len(file_snapshot(spark, t)) == 2


def test_a_file_the_merge_just_rewrote_is_not_compacted_after_it(spark, db):
    """The rows a merge touched are the likeliest to be touched again (recent updates): its
    rewritten file joins no compaction right after it, so the table's colder files are not
    folded into the file the next merge rewrites. Once a merge leaves it alone, it does. Nor
    does a run take in its keys: a compacted file's range must not hold another file's."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a")] for i in range(4)])

    def update(k: int, key: int) -> int:
        src = source_view(spark, f"{db}_u{k}", "id long, v string", [(key, f"u{k}")])
        return merge(spark, t, src, UPSERT, auto_compact_min_files=2).metrics["compactVersion"]

    # the file of key 0, rewritten twice: each time the only written file, and just written
    assert [update(1, 0), update(2, 0)] == [0, 0]
    assert "OPTIMIZE" not in [h["operation"] for h in history(spark, t)]
    # key 1's file now: key 0's file was left alone and starts a run of two; the table's own
    # file of key 2 would fill it, but the compacted file (keys 0-2) would take in key 1's,
    # just written: a later merge of key 1 would find two files that may hold it. It waits.
    assert update(3, 1) == 0
    # key 3's file now: key 0's and key 1's files, neighbours in key order, make the run
    assert update(4, 3) == 5
    assert rows(spark, t) == [(0, "u2"), (1, "u3"), (2, "a"), (3, "u4")]
    assert len(file_snapshot(spark, t)) == 3  # the compacted file (keys 0-1), key 2's, key 3's
    assert [h["operation"] for h in history(spark, t)][:2] == ["OPTIMIZE", "MERGE"]


def test_a_partition_the_merges_moved_away_from_is_packed_once(spark, db):
    """Hourly merges into a daily partition: once they write the next day, the day before has
    settled and its small files (version 0's included) become one, though no tier filled."""
    t = f"{db}.p"
    create_table(spark, t, "id long, day string", [[(0, "a")], [(1, "b")]], partition_by=["day"])

    def insert(k: int, day: str) -> int:
        src = source_view(spark, f"{db}_h{k}", "id long, day string", [(100 + k, day)])
        return merge(spark, t, src, UPSERT, on="t.id = s.id AND t.day = s.day").metrics["compactVersion"]

    assert [insert(k, "a") for k in range(3)] == [0, 0, 0]  # day a: 4 files, no tier of 8 fills
    assert [insert(k, "b") for k in range(3, 5)] == [5, 0]  # day a settles, once
    by_day: dict[str, int] = {}
    for path in file_snapshot(spark, t):
        day = os.path.basename(os.path.dirname(path))
        by_day[day] = by_day.get(day, 0) + 1
    assert by_day == {"day=a": 1, "day=b": 3}
    ops = [(h["version"], h["operation"], h["files_added"], h["files_removed"]) for h in history(spark, t)]
    assert ops[:3] == [(6, "MERGE", 1, 0), (5, "OPTIMIZE", 1, 4), (4, "MERGE", 1, 0)]
    assert rows(spark, t) == sorted(
        [(0, "a"), (1, "b")]
        + [(100 + k, "a") for k in range(3)]
        + [
            (103, "b"),
            (104, "b"),
        ]
    )


def test_cold_partitions_of_the_table_as_found_are_packed_one_per_merge(spark, db):
    """Days no merge writes, created with several small files each (a table written in many
    tasks): each merge packs one such day's small files, the cheapest first, so the table's
    own layout is tidied without any merge paying for more than one partition. A day with one
    file is left alone, and so is the day the merges write (its files are the merges' own)."""
    t = f"{db}.p"
    days = [[(0, "a")], [(1, "a")], [(2, "b")], [(3, "b")], [(4, "b")], [(5, "c")]]
    create_table(spark, t, "id long, day string", days, partition_by=["day"])

    def insert(k: int) -> int:
        src = source_view(spark, f"{db}_c{k}", "id long, day string", [(100 + k, "d")])
        return merge(spark, t, src, UPSERT, on="t.id = s.id AND t.day = s.day").metrics["compactVersion"]

    def files_by_day() -> dict[str, int]:
        out: dict[str, int] = {}
        for path in file_snapshot(spark, t):
            day = os.path.basename(os.path.dirname(path))
            out[day] = out.get(day, 0) + 1
        return out

    assert insert(1) == 2  # day a (two files) is cheaper than day b (three)
    assert files_by_day() == {"day=a": 1, "day=b": 3, "day=c": 1, "day=d": 1}
    assert insert(2) == 4
    assert files_by_day() == {"day=a": 1, "day=b": 1, "day=c": 1, "day=d": 2}
    assert insert(3) == 0  # nothing cold is left with more than one small file
    ops = [(h["version"], h["operation"], h["files_added"], h["files_removed"]) for h in history(spark, t)]
    assert ops[:5] == [
        (5, "MERGE", 1, 0),
        (4, "OPTIMIZE", 1, 3),
        (3, "MERGE", 1, 0),
        (2, "OPTIMIZE", 1, 2),
        (1, "MERGE", 1, 0),
    ]
    assert rows(spark, t) == sorted(
        [(i, d) for d, ids in (("a", [0, 1]), ("b", [2, 3, 4]), ("c", [5])) for i in ids]
        + [(100 + k, "d") for k in (1, 2, 3)]
    )


def test_auto_compact_false_and_optimize_every(spark, db):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a")] for i in range(10)])
    off = _inserts(spark, db, t, 2, auto_compact=False)
    assert [r.metrics["compactVersion"] for r in off] == [0, 0]
    assert len(file_snapshot(spark, t)) == 12
    every = _inserts(spark, db, t, 3, first=2, auto_compact=False, optimize_every=4)
    # version 3, 4 (then OPTIMIZE 5), 6
    assert [(r.version, r.metrics["compactVersion"]) for r in every] == [(3, 0), (4, 5), (6, 0)]
    assert len(file_snapshot(spark, t)) == 2


def test_auto_compaction_that_fails_before_its_commit_leaves_the_merge_and_warns(
    spark, db, monkeypatch, capsys
):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a")] for i in range(3)])

    def fail(step: str) -> None:
        if step == "compact_staged":
            raise OSError("disk full")

    monkeypatch.setattr(faults, "fault_point", fail)
    # the second merge leaves two files merges wrote: its compaction is tried, and fails
    results = _inserts(spark, db, t, 2, auto_compact_min_files=2)
    assert [(r.version, r.metrics["compactVersion"]) for r in results] == [(1, 0), (2, 0)]
    assert [h["operation"] for h in history(spark, t)] == ["MERGE", "MERGE", "CONVERT"]
    assert len(rows(spark, t)) == 23 and len(file_snapshot(spark, t)) == 5
    assert not os.listdir(os.path.join(table_dir(spark, t), "_rowmerge_log", "staging"))


class Crash(BaseException):
    """The process dying at a step (not an Exception: no handler turns it into a warning)."""


OPTIMIZE_STEPS = [
    "compact_staged",
    "compact_entry",
    "compact_move_0",
    "compact_registered",
    "compact_delete_0",
    "compact_delete_2",
    "compact_before_applied",
    "compact_applied",
]


@pytest.mark.parametrize("step", OPTIMIZE_STEPS)
@pytest.mark.parametrize("via", ["optimize", "merge"])
def test_killed_at_any_step_the_table_is_exactly_before_or_after(spark, db, monkeypatch, step, via):
    """An OPTIMIZE run on its own, or as the auto-compaction after a merge, dies at ``step``:
    readers after recovery see exactly the rows (the merge's, if one ran), and the version is
    committed (from compact_entry on) or absent."""
    t = f"{db}.p"
    create_table(
        spark,
        t,
        "id long, day string",
        [[(k * 10 + i, d) for i in range(3)] for k in range(3) for d in ("a", "b")],
        partition_by=["day"],
    )
    if via == "merge":
        # two earlier merges leave files merges wrote in each partition (version 0's are
        # never auto-compacted): with the crashing merge's, three per partition compact
        for k in (200, 300):
            earlier = source_view(spark, f"{db}_e{k}", "id long, day string", [(k, "a"), (k + 1, "b")])
            merge(spark, t, earlier, UPSERT, auto_compact=False)
    # new keys above the others: a key between two files a run compacts would make it wait
    # (compaction.tiered: no compacted file's range may take in another file's keys)
    src = source_view(spark, f"{db}_s", "id long, day string", [(400, "a"), (401, "b")])
    expected = sorted(rows(spark, t) + ([(400, "a"), (401, "b")] if via == "merge" else []))

    def die(at: str) -> None:
        if at == step:
            raise Crash(at)

    monkeypatch.setattr(faults, "fault_point", die)
    with pytest.raises(Crash):
        if via == "optimize":
            optimize(spark, t)
        else:
            merge(spark, t, src, UPSERT, auto_compact_min_files=3)
    monkeypatch.undo()
    # a reader of the catalog between the crash and recovery never misses a row
    seen = rows(spark, t)
    assert set(seen) == set(expected)
    recover(spark, t)
    assert rows(spark, t) == expected
    ops = [h["operation"] for h in history(spark, t)]
    committed = step != "compact_staged"
    base = ["MERGE"] * 3 + ["CONVERT"] if via == "merge" else ["CONVERT"]
    assert ops == (["OPTIMIZE"] if committed else []) + base
    assert all(h["applied"] for h in history(spark, t))
    files = file_snapshot(spark, t)
    # optimize packs each partition into one file; the merge's tiered compaction merges, in
    # each partition, the two files earlier merges wrote and version 0's file nearest them
    if via == "optimize":
        assert len(files) == (2 if committed else 6)
    else:
        assert len(files) == (8 if committed else 12)
    assert not os.listdir(os.path.join(table_dir(spark, t), "_rowmerge_log", "staging"))


def test_a_merge_arriving_during_optimize_waits_for_the_lock(spark, db, monkeypatch):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a")] for i in range(6)])
    entered, release = threading.Event(), threading.Event()

    def pause(at: str) -> None:
        if at == "compact_staged" and threading.current_thread().name == "optimizer":
            entered.set()
            release.wait(60)

    monkeypatch.setattr(faults, "fault_point", pause)
    done: list = []
    worker = threading.Thread(target=lambda: done.append(optimize(spark, t)), name="optimizer")
    worker.start()
    assert entered.wait(60)
    merged: list = []
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "b"), (7, "c")])
    merger = threading.Thread(target=lambda: merged.append(merge(spark, t, src, UPSERT, auto_compact=False)))
    merger.start()
    time.sleep(2)
    assert not merged  # waiting on the lock
    release.set()
    worker.join(60)
    merger.join(120)
    assert done[0].version == 1 and merged[0].version == 2
    assert rows(spark, t) == [(0, "a"), (1, "b"), (2, "a"), (3, "a"), (4, "a"), (5, "a"), (7, "c")]


def test_optimize_error_after_its_commit_point_is_committed(spark, db, monkeypatch):
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "a")] for i in range(3)])

    def flaky(at: str) -> None:
        if at == "compact_move_0":
            raise OSError("the metastore went away")

    monkeypatch.setattr(faults, "fault_point", flaky)
    with pytest.raises(MergeCommittedError):
        optimize(spark, t)
    monkeypatch.undo()
    recover(spark, t)
    assert rows(spark, t) == [(0, "a"), (1, "a"), (2, "a")]
    assert len(file_snapshot(spark, t)) == 1


def test_a_cold_partition_too_big_for_the_bounds_does_not_hold_up_the_others(spark, db):
    """Day b's four tiny files are the cheapest cold partition but more files than a merge may
    compact (auto_compact_max_files 3): day a's two bigger files are packed instead, and day
    b waits for optimize."""
    t = f"{db}.p"
    big = [(i, "a", "x" * 40) for i in range(300)]
    days = [big[:150], big[150:], *[[(1000 + i, "b", "y")] for i in range(4)]]
    create_table(spark, t, "id long, day string, v string", days, partition_by=["day"])
    src = source_view(spark, f"{db}_cold", "id long, day string, v string", [(5000, "d", "z")])
    on = "t.id = s.id AND t.day = s.day"
    done = merge(spark, t, src, UPSERT, on=on, auto_compact_min_files=2, auto_compact_max_files=3)
    assert done.metrics["compactVersion"] == 2
    by_day: dict[str, int] = {}
    for path in file_snapshot(spark, t):
        day = os.path.basename(os.path.dirname(path))
        by_day[day] = by_day.get(day, 0) + 1
    assert by_day == {"day=a": 1, "day=b": 4, "day=d": 1}
    assert len(rows(spark, t)) == 305
