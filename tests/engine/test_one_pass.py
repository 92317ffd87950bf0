"""The one-pass rewrite: candidate files rewritten without a scan, kept only when it is exact.

Statistics narrow the files a merge reads to the candidates its source keys fall in. When every
candidate turns out touched and no target row met two source rows, the one-pass write is the
merge (``onePass``); otherwise it is thrown away and the scan decides (``onePassFallback``), with
exactly the result the scan path gives: same rows, same untouched files, same errors.
"""

from __future__ import annotations

import os
from collections import Counter

import duckdb
import pytest
from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import CardinalityViolation, MergeError
from dbt.adapters.rowmerge.merge import rewrite as rewrite_module
from dbt.adapters.rowmerge.merge.rewrite import (
    SINGLE_PARTITION_CONF,
    SINGLE_PARTITION_DEFAULT,
    SINGLE_TASK_ROWS,
)
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    kept_files,
    merge,
    rows,
    session_conf,
    single_task_rows,
    sorted_rows,
    source_view,
    spark_jobs,
    table_dir,
    table_state,
    target_scans,
)

FILES = [
    [(1, "a"), (2, "b")],
    [(3, "c"), (4, "d")],
    [(5, "e"), (6, "f")],
    [(7, "g"), (8, "h")],
]


def four_files(spark, db: str) -> str:
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", FILES)
    return t


def test_one_pass_upsert_rewrites_only_the_candidates(spark, db) -> None:
    """A merge this small is two Spark jobs: one evaluates the source, the other joins the
    candidate files with it in one task and writes both the rewritten files and the inserts
    (nothing is broadcast or shuffled)."""
    t = four_files(spark, db)
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id > 4")
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (4, "D"), (9, "i")])
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, UPSERT))
    m = result.metrics
    assert (m["onePassSingleTask"], jobs) == (1, 2)
    assert rows(spark, t) == [
        (1, "A"),
        (2, "b"),
        (3, "c"),
        (4, "D"),
        (5, "e"),
        (6, "f"),
        (7, "g"),
        (8, "h"),
        (9, "i"),
    ]
    assert (m["onePass"], m["onePassFallback"], m["scanTimeMs"]) == (1, 0, 0)
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"]) == (2, 1, 0)
    assert (m["numTargetRowsMatchedUpdated"], m["numTargetRowsCopied"]) == (2, 2)
    assert (m["numTargetFilesAfterSkipping"], m["numTargetFilesRemoved"]) == (2, 2)


def test_one_pass_delete_only(spark, db) -> None:
    t = four_files(spark, db)
    src = source_view(spark, f"{db}_src", "id long", [(2,), (7,), (8,)])
    m = merge(spark, t, src, [{"when": "matched", "action": "delete"}]).metrics
    assert rows(spark, t) == [(1, "a"), (3, "c"), (4, "d"), (5, "e"), (6, "f")]
    assert (m["onePass"], m["numTargetRowsDeleted"], m["numTargetRowsCopied"]) == (1, 3, 1)
    assert m["numTargetFilesRemoved"] == 2


def test_one_pass_falls_back_when_a_candidate_only_gets_unchanged_updates(spark, db) -> None:
    """File 2's update changes nothing: it is not touched, so its one-pass copy is dropped."""
    t = four_files(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (3, "c")])
    m = merge(spark, t, src, UPSERT).metrics
    assert (m["onePass"], m["onePassFallback"]) == (0, 1)
    assert rows(spark, t)[:3] == [(1, "A"), (2, "b"), (3, "c")]
    assert kept_files(before, file_snapshot(spark, t)) == sorted(files_of(spark, t, "id > 2"))
    assert (m["numTargetRowsUpdated"], m["numTargetFilesRemoved"]) == (1, 1)


def test_one_pass_falls_back_when_a_candidate_holds_no_match(spark, db) -> None:
    """Key 6 falls in the second file's range [5, 7] but is not in it: that file stays."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(5, "e"), (7, "g")]])
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (6, "x")])
    m = merge(spark, t, src, UPSERT).metrics
    assert rows(spark, t) == [(1, "A"), (2, "b"), (5, "e"), (6, "x"), (7, "g")]
    assert (m["onePass"], m["onePassFallback"]) == (0, 1)
    assert (m["numTargetFilesRemoved"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 1, 1)
    assert kept_files(before, file_snapshot(spark, t)) == files_of(spark, t, "id > 4 AND id <> 6")


# -- a lost bet: what the thrown-away write saw tells the touched files; no scan --------------


@pytest.mark.parametrize("limit", [SINGLE_TASK_ROWS.get(), 0], ids=["single_task", "broadcast"])
@pytest.mark.parametrize("with_feed", [False, True], ids=["no_feed", "feed"])
def test_a_lost_bet_rewrites_the_files_a_clause_acted_on_without_a_scan(spark, db, limit, with_feed) -> None:
    """Three candidates: one gets a real update, one only an update that changes nothing, one a
    new key inside its range. The one-pass write is thrown away, but it saw every target row
    meet at most one source row, so no cardinality rule can fail, and the files it saw a clause
    act on are the ones a scan would find: the first file alone is rewritten, the inserts
    (inside a range and beyond every range) are written beside it, and no scan runs."""
    t = f"{db}.t"
    data = [[(1, "a"), (2, "b")], [(3, "c"), (4, "d")], [(5, "e"), (7, "g")], [(8, "h"), (9, "i")]]
    create_table(spark, t, "id long, v string", data)
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id > 2")
    extra = {"change_data_feed": {"table": f"{t}__changes"}} if with_feed else {}
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (3, "c"), (6, "x"), (20, "t")])
    with single_task_rows(limit):
        result, scans = target_scans(
            spark, table_dir(spark, t), lambda: merge(spark, t, src, UPSERT, auto_compact=False, **extra)
        )
    m = result.metrics
    assert (m["onePass"], m["onePassFallback"], m["scanTimeMs"]) == (0, 1, 0)
    # The thrown-away write and the rewrite of the first file read the table; with the source
    # broadcast the write saw which source rows matched, so no anti-join reads it a third time.
    assert scans == (3 if limit else 2)
    expected = [(1, "A"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "x"), (7, "g"), (8, "h"), (9, "i")]
    assert rows(spark, t) == [*expected, (20, "t")]
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    assert (m["numTargetFilesAfterSkipping"], m["numTargetFilesRemoved"]) == (3, 1)
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 2, 1)
    if with_feed:
        spark.catalog.refreshTable(f"{t}__changes")
        assert feed_rows(spark, f"{t}__changes") == [
            (1, "A", "update_postimage"),
            (1, "a", "update_preimage"),
            (6, "x", "insert"),
            (20, "t", "insert"),
        ]


@pytest.mark.parametrize("limit", [SINGLE_TASK_ROWS.get(), 0], ids=["single_task", "broadcast"])
def test_a_merge_that_changes_nothing_ends_after_its_one_pass_write(spark, db, limit) -> None:
    """A look-back re-merge of rows the table holds already (every update changes nothing, no
    new key): the one-pass write saw no file acted on and wrote no insert, so the merge commits
    nothing, with no scan and no second write after it."""
    t = four_files(spark, db)
    state = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "a"), (2, "b"), (4, "d")])
    with single_task_rows(limit):
        result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, UPSERT, auto_compact=False))
    m = result.metrics
    # the source's job and the write's (with the source broadcast, its broadcast too)
    assert (m["onePassFallback"], m["scanTimeMs"], jobs) == (1, 0, 2 if limit else 3)
    counts = ("numTargetRowsUpdated", "numTargetRowsInserted", "numTargetFilesAdded", "numTargetFilesRemoved")
    assert [m[k] for k in counts] == [0, 0, 0, 0]
    assert table_state(spark, t) == state


def test_after_a_merge_that_left_a_candidate_untouched_the_next_scans_first(spark, db) -> None:
    """A model whose merges keep leaving candidates alone would write every candidate each run
    only to throw the write away: after a merge that left one of its candidates untouched, the
    next merge scans first; after one that touched every candidate, the merge bets again."""
    t = four_files(spark, db)

    def upsert(values: list[tuple[int, str]]) -> dict:
        src = source_view(spark, f"{db}_src", "id long, v string", values)
        return merge(spark, t, src, UPSERT, auto_compact=False).metrics

    def path(m: dict) -> tuple[int, int, bool]:
        return (m.get("onePass", 0), m.get("onePassFallback", 0), m["scanTimeMs"] > 0)

    m = upsert([(1, "A"), (3, "c")])  # the second candidate's update changes nothing: lost
    assert (path(m), m["numTargetFilesAfterSkipping"], m["numTargetFilesRemoved"]) == ((0, 1, False), 2, 1)
    m = upsert([(2, "B"), (4, "D")])  # no bet after it: the scan finds both candidates touched
    assert (path(m), m["numTargetFilesAfterSkipping"], m["numTargetFilesRemoved"]) == ((0, 0, True), 2, 2)
    m = upsert([(5, "E"), (7, "G")])  # every candidate touched before: bets, and wins
    assert (path(m), m["numTargetFilesRemoved"]) == ((1, 0, False), 2)
    assert rows(spark, t) == [(1, "A"), (2, "B"), (3, "c"), (4, "D"), (5, "E"), (6, "f"), (7, "G"), (8, "h")]


def test_new_keys_inside_files_ranges_keep_the_merges_scanning(spark, db) -> None:
    """Each upsert updates a key of one file and inserts a new key inside another file's range,
    so that candidate is opened and left untouched every run: after the first merge loses its
    bet, every later one scans first. (The scan counts as read only the files with a match; were
    the bet judged by that count, the next merge would bet, and lose, every other run: it is
    judged by the candidates left untouched, numCandidateFilesUntouched.)"""
    t = f"{db}.t"
    data = [[(1, "a"), (3, "c")], [(5, "e"), (7, "g")], [(9, "i"), (11, "k")], [(13, "m"), (15, "o")]]
    create_table(spark, t, "id long, v string", data)
    seen = []
    for keys in ([(1, "A"), (6, "f")], [(3, "C"), (10, "j")], [(5, "E"), (14, "n")]):
        src = source_view(spark, f"{db}_src", "id long, v string", keys)
        m = merge(spark, t, src, UPSERT, auto_compact=False).metrics
        bet = (m.get("onePass", 0), m.get("onePassFallback", 0), m["scanTimeMs"] > 0)
        seen.append((bet, m["numTargetFilesAfterSkipping"], m["numTargetFilesRemoved"]))
    assert seen == [((0, 1, False), 2, 1), ((0, 0, True), 1, 1), ((0, 0, True), 1, 1)]
    assert [r[0] for r in rows(spark, t)] == [1, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15]
    assert [r for r in rows(spark, t) if r[1].isupper()] == [(1, "A"), (3, "C"), (5, "E")]


def test_one_pass_duplicate_source_keys_raise_the_cardinality_error(spark, db) -> None:
    t = four_files(spark, db)
    state = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (1, "B"), (4, "D")])
    with pytest.raises(CardinalityViolation, match="1 target row"):
        merge(spark, t, src, UPSERT)
    assert table_state(spark, t) == state


def test_one_pass_unconditional_delete_with_duplicate_keys_deletes_once(spark, db) -> None:
    t = four_files(spark, db)
    src = source_view(spark, f"{db}_src", "id long", [(2,), (2,), (3,)])
    m = merge(spark, t, src, [{"when": "matched", "action": "delete"}]).metrics
    assert rows(spark, t) == [(1, "a"), (4, "d"), (5, "e"), (6, "f"), (7, "g"), (8, "h")]
    assert (m["onePass"], m["onePassFallback"], m["numTargetRowsDeleted"]) == (0, 1, 2)


def test_one_pass_cast_error_leaves_the_table_unchanged(spark, db) -> None:
    t = f"{db}.t"
    create_table(spark, t, "id long, n int", [[(1, 1), (2, 2)], [(3, 3)]])
    state = table_state(spark, t)
    src = source_view(spark, f"{db}_src", "id long, n long", [(1, 2**40)])
    with pytest.raises(MergeError, match="cannot be cast|does not fit|out of range|overflow"):
        merge(spark, t, src, UPSERT)
    assert table_state(spark, t) == state


def test_one_pass_is_not_used_with_not_matched_by_source(spark, db) -> None:
    t = four_files(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A")])
    clauses = [*UPSERT, {"when": "not_matched_by_source", "condition": "t.id = 8", "action": "delete"}]
    m = merge(spark, t, src, clauses).metrics
    assert rows(spark, t)[-1] == (7, "g")
    assert (m["onePass"], m["onePassFallback"]) == (0, 0)


def test_no_candidate_file_makes_an_upsert_insert_only(spark, db) -> None:
    """Every source key lies above every file's range: no file is read, nothing is scanned."""
    t = four_files(spark, db)
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(10, "j"), (11, "k")])
    m = merge(spark, t, src, UPSERT, change_data_feed={"table": f"{db}.t__changes"}).metrics
    assert rows(spark, t)[-2:] == [(10, "j"), (11, "k")]
    assert kept_files(before, file_snapshot(spark, t)) == sorted(before)
    assert (m["scanTimeMs"], m["onePass"], m["numTargetFilesAfterSkipping"]) == (0, 0, 0)
    assert (m["numTargetRowsInserted"], m["numTargetRowsUpdated"], m["numTargetFilesRemoved"]) == (2, 0, 0)
    changes = spark.sql(f"SELECT id, v, _change_type FROM {db}.t__changes ORDER BY id").collect()
    assert [tuple(r) for r in changes] == [(10, "j", "insert"), (11, "k", "insert")]


# -- the two joins of the one-pass write: in a single task, or with the source broadcast --------


CLAUSES = [
    {"when": "matched", "condition": "s.op = 'd'", "action": "delete"},
    {"when": "matched", "condition": "s.op = 'u'", "action": "update", "set": {"v": "s.v"}},
    {
        "when": "not_matched",
        "condition": "s.op <> 'd'",
        "action": "insert",
        "values": {"id": "s.id", "v": "s.v"},
    },
]
SOURCE = [
    (1, "A", "u"),
    (2, None, "d"),
    (3, "C", "u"),
    (4, None, "d"),
    (9, "I", "u"),
    (10, "J", "d"),
    (None, "N", "u"),
]


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_single_task_and_broadcast_joins_write_the_same(spark, db, partitioned) -> None:
    """Deletes, updates, conditional inserts and a NULL key, both ways: same rows, same counts."""
    outcomes = []
    for limit in (SINGLE_TASK_ROWS.get(), 0):
        t = f"{db}.t{limit}"
        data = [[(i, v, i % 2) for i, v in f] for f in FILES]
        create_table(spark, t, "id long, v string, p int", data, partition_by=["p"] if partitioned else ())
        src = source_view(spark, f"{db}_src", "id long, v string, op string", SOURCE)
        with single_task_rows(limit):
            m = merge(spark, t, src, CLAUSES, auto_compact=False).metrics
        assert (m["onePass"], m["onePassSingleTask"]) == (1, int(limit > 0))
        counts = [m[k] for k in ("numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsInserted")]
        outcomes.append((rows(spark, t), counts, m["numTargetFilesRemoved"]))
    assert outcomes[0] == outcomes[1]
    got, counts, removed = outcomes[0]
    assert [r[:2] for r in got] == [
        (None, "N"),
        (1, "A"),
        (3, "C"),
        (5, "e"),
        (6, "f"),
        (7, "g"),
        (8, "h"),
        (9, "I"),
    ]
    # Keys 1-4: two files next to each other in key order (they may share the single task),
    # or four once each file is split by partition.
    assert (counts, removed) == ([2, 2, 2], 4 if partitioned else 2)


def test_not_matched_clauses_name_source_columns_unqualified_on_both_joins(spark, db) -> None:
    """A not_matched clause is resolved against the source alone, so ``v`` and ``id`` there
    are the source's, although the target has columns of those names: the single-task join,
    whose rows hold both sides, evaluates them on the source's columns only."""
    clauses = [
        {"when": "matched", "condition": "s.op = 'u'", "action": "update", "set": {"v": "s.v"}},
        {
            "when": "not_matched",
            "condition": "op <> 'd' and v is not null",
            "action": "insert",
            "values": {"id": "id", "v": "concat(v, '!')"},
        },
    ]
    outcomes = []
    for limit in (SINGLE_TASK_ROWS.get(), 0):
        t = f"{db}.t{limit}"
        create_table(spark, t, "id long, v string", FILES)
        src = source_view(
            spark, f"{db}_src", "id long, v string, op string", [(1, "A", "u"), (9, "I", "u"), (10, "J", "d")]
        )
        with single_task_rows(limit):
            m = merge(spark, t, src, clauses, auto_compact=False).metrics
        assert (m["onePass"], m["onePassSingleTask"]) == (1, int(limit > 0))
        outcomes.append(rows(spark, t))
    assert outcomes[0] == outcomes[1]
    expected = [(1, "A"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f"), (7, "g"), (8, "h"), (9, "I!")]
    assert outcomes[0] == expected


def file_ranges(spark, t: str) -> list[tuple[int, int, int]]:
    """(lowest id, highest id, rows) of every file of ``t``."""
    found = spark.table(t).groupBy("_metadata.file_path").agg(F.min("id"), F.max("id"), F.count("*"))
    return sorted(tuple(r) for r in found.select("min(id)", "max(id)", "count(1)").collect())


def test_single_task_rewrite_keeps_files_no_bigger(spark, db) -> None:
    """The rewritten rows of neighbouring files come out of one task in key order and are cut
    at the largest replaced file's row count."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(i, "x") for i in range(k, k + 10)] for k in (0, 10, 100)])
    src = source_view(spark, f"{db}_src", "id long, v string", [(5, "A"), (15, "B"), (300, "C")])
    before = file_snapshot(spark, t)
    m = merge(spark, t, src, UPSERT, auto_compact=False).metrics
    assert (m["onePassSingleTask"], m["numTargetFilesRemoved"], m["numTargetRowsInserted"]) == (1, 2, 1)
    assert file_ranges(spark, t) == [(0, 9, 10), (10, 19, 10), (100, 109, 10), (300, 300, 1)]
    assert len(kept_files(before, file_snapshot(spark, t))) == 1


@pytest.mark.parametrize("limit", [SINGLE_TASK_ROWS.get(), 0], ids=["single_task", "broadcast"])
@pytest.mark.parametrize("with_feed", [False, True], ids=["no_feed", "feed"])
def test_files_with_an_untouched_one_between_them_are_rewritten_apart(spark, db, limit, with_feed) -> None:
    """Touched files with an untouched one between them in key order never end up in one
    file: a file written from both would span the untouched file's keys, and every later merge
    of one of those keys would find it a candidate that holds none (and fall back to a scan).
    Four small touched files, which Spark packs into a task, of unequal row counts, which a
    task's files (and a single task's sorted rows) would be cut across at the largest's count;
    an insert between two files' ranges, which the single task meets among them."""
    t = f"{db}.t"
    spans = [(0, 5), (100, 10), (200, 8), (300, 10), (400, 7), (500, 12)]  # (first key, rows)
    create_table(spark, t, "id long, v string", [[(i, "x") for i in range(k, k + n)] for k, n in spans])
    before = file_snapshot(spark, t)
    untouched = files_of(spark, t, "id between 100 and 399 and id not between 200 and 299")
    extra = {"change_data_feed": {"table": f"{t}__changes"}} if with_feed else {}
    keys = [(3, "A"), (205, "C"), (403, "E"), (505, "F"), (250, "new")]
    src = source_view(spark, f"{db}_src", "id long, v string", keys)
    # as with files of megabytes on two cores: Spark packs the small touched files into tasks
    with session_conf(spark, {"spark.sql.files.minPartitionNum": "1"}), single_task_rows(limit):
        m = merge(spark, t, src, UPSERT, auto_compact=False, **extra).metrics
    assert (m["onePass"], m["onePassSingleTask"], m["numTargetFilesRemoved"]) == (1, int(limit > 0), 4)
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (4, 1)
    assert kept_files(before, file_snapshot(spark, t)) == untouched
    found = file_ranges(spark, t)
    assert sum(n for _, _, n in found) == 53
    # no file's range takes in another's keys (400-406 and 500-511 may share a file)
    assert all(high < low for (_, high, _), (low, _, _) in zip(found, found[1:], strict=False))
    assert {(0, 4), (100, 109), (300, 309)} <= {(low, high) for low, high, _ in found}
    # the table's folder holds its files under their own names, no staging folder
    names = [p.rsplit("/", 1)[-1] for p in file_snapshot(spark, t)]
    assert len(set(names)) == len(names) == len(found)
    assert not [n for n in os.listdir(table_dir(spark, t)) if "=" in n]
    # so a merge of an untouched file's keys reads that file alone, in one pass
    src = source_view(spark, f"{db}_src2", "id long, v string", [(104, "B"), (304, "D")])
    with single_task_rows(limit):
        m = merge(spark, t, src, UPSERT, auto_compact=False, **extra).metrics
    assert (m["onePass"], m["onePassFallback"], m["numTargetFilesAfterSkipping"]) == (1, 0, 2)
    changed = [(3, "A"), (104, "B"), (205, "C"), (250, "new"), (304, "D"), (403, "E"), (505, "F")]
    assert [r for r in rows(spark, t) if r[1] != "x"] == changed
    if with_feed:
        updates = [*keys[:4], (104, "B"), (304, "D")]
        expected = [(k, "x", "update_preimage") for k, _ in updates]
        expected += [(k, v, "update_postimage") for k, v in updates]
        spark.catalog.refreshTable(f"{t}__changes")
        assert feed_rows(spark, f"{t}__changes") == sorted([*expected, (250, "new", "insert")])


def test_a_partitioned_table_keeps_each_partitions_files_apart(spark, db) -> None:
    """In each partition two touched files lie apart with an untouched one between them: each
    partition's files keep their own ranges, and the files land in their partitions."""
    t = f"{db}.t"
    starts = [d * 1000 + k for d in (1, 2) for k in (0, 100, 200)]
    files = [[(i, "x", s // 1000) for i in range(s, s + 5 + s % 1000 // 100)] for s in starts]
    create_table(spark, t, "id long, v string, day int", files, partition_by=["day"])
    keys = [(1001, "A", 1), (1201, "B", 1), (2002, "C", 2), (2202, "D", 2)]
    src = source_view(spark, f"{db}_src", "id long, v string, day int", keys)
    with session_conf(spark, {"spark.sql.files.minPartitionNum": "1"}), single_task_rows(0):
        m = merge(spark, t, src, UPSERT, auto_compact=False).metrics
    assert (m["onePass"], m["numTargetFilesRemoved"], m["numTargetRowsUpdated"]) == (1, 4, 4)
    found = spark.table(t).groupBy("_metadata.file_path", "day").agg(F.min("id"), F.max("id"))
    ranges = sorted((r[2], r[3], r[0].split("/")[-2]) for r in found.collect())
    assert ranges == [(s, s + 4 + s % 1000 // 100, f"day={s // 1000}") for s in starts]
    assert [r for r in rows(spark, t) if r[1] != "x"] == keys


def test_small_one_pass_upsert_with_the_change_feed_is_three_jobs(spark, db) -> None:
    """The data write joins the candidates with the source in a single task and emits the
    feed's rows too: the source's job, the data write and the job that stamps the change rows
    (reading them back, not the candidates)."""
    t = four_files(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (4, "D"), (9, "i")])
    feed = {"table": f"{db}.t__changes"}
    result, jobs = spark_jobs(
        spark, lambda: merge(spark, t, src, UPSERT, auto_compact=False, change_data_feed=feed)
    )
    assert (result.metrics["onePassSingleTask"], jobs) == (1, 3)
    changes = spark.sql(f"SELECT id, v, _change_type FROM {db}.t__changes").collect()
    assert sorted(tuple(r) for r in changes) == [
        (1, "A", "update_postimage"),
        (1, "a", "update_preimage"),
        (4, "D", "update_postimage"),
        (4, "d", "update_preimage"),
        (9, "i", "insert"),
    ]


# -- tables whose key ranges rule out no file --------------------------------------------------


def test_a_table_of_one_file_is_rewritten_in_one_pass(spark, db) -> None:
    """One file's range rules nothing out, so nothing is skipped; the merge still bets that it
    touches the file and rewrites it in the one job that joins (no scan before it)."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b"), (3, "c")]])
    src = source_view(spark, f"{db}_src", "id long, v string", [(2, "B"), (9, "i")])
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, UPSERT, auto_compact=False))
    m = result.metrics
    assert rows(spark, t) == [(1, "a"), (2, "B"), (3, "c"), (9, "i")]
    assert (m["onePass"], m["onePassSingleTask"], m["onePassFallback"], m["scanTimeMs"], jobs) == (
        1,
        1,
        0,
        0,
        2,
    )
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (1, 1, 2)


def test_a_table_whose_ranges_overlap_bets_again_only_after_a_merge_touched_every_file(spark, db) -> None:
    """Both files span the same keys, so every merge reads both. A merge of new keys among
    them touches neither: it loses the bet (the one-pass write is thrown away, the scan
    decides), and the next merge scans first instead of betting; it bets again after a merge
    that rewrote every file of the table."""
    t = f"{db}.t"
    create_table(
        spark, t, "id long, v string", [[(1, "a"), (5, "e"), (9, "i")], [(2, "b"), (6, "f"), (8, "h")]]
    )

    def upsert(values: list[tuple[int, str]]) -> dict:
        src = source_view(spark, f"{db}_src", "id long, v string", values)
        return merge(spark, t, src, UPSERT, auto_compact=False).metrics

    def bet(m: dict) -> tuple[int, int]:
        return (m.get("onePass", 0), m.get("onePassFallback", 0))

    m = upsert([(4, "d"), (7, "g")])  # new keys only, inside both files' ranges: lost
    assert (bet(m), m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == ((0, 1), 0, 1)
    m = upsert([(5, "E"), (6, "F"), (4, "D")])  # no bet after a lost one; touches every file
    assert bet(m) == (0, 0)
    assert m["numTargetFilesRemoved"] == m["numTargetFilesBeforeSkipping"] == 3
    everything = [(k, v.upper() + "2") for k, v in rows(spark, t)]
    assert bet(upsert(everything)) == (1, 0)  # every file touched before: bets, and wins
    assert rows(spark, t) == sorted(everything)


def test_the_single_task_join_stays_in_one_task_whatever_spark_estimates(spark, db) -> None:
    """Spark estimates the candidates as the whole table (here, through the compression factor,
    terabytes) and would spread a side it thinks that large over shuffle tasks: the write is
    planned with that limit lifted, and the session's own setting is back afterwards."""
    t = four_files(spark, db)
    src = source_view(spark, f"{db}_src", "id long, v string", [(1, "A"), (4, "D"), (9, "i")])
    with session_conf(spark, {"spark.sql.sources.fileCompressionFactor": "1000000000"}):
        result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, UPSERT, auto_compact=False))
        assert spark.conf.get(SINGLE_PARTITION_CONF) == SINGLE_PARTITION_DEFAULT
        # A session that sets its own limit keeps it: Spark then shuffles, the rows are the same.
        src2 = source_view(spark, f"{db}_src2", "id long, v string", [(1, "A2"), (4, "D2")])
        with session_conf(spark, {SINGLE_PARTITION_CONF: "1k"}):
            shuffled, jobs2 = spark_jobs(spark, lambda: merge(spark, t, src2, UPSERT, auto_compact=False))
            assert spark.conf.get(SINGLE_PARTITION_CONF) == "1k"
    assert (result.metrics["onePassSingleTask"], jobs) == (1, 2)
    assert (shuffled.metrics["onePassSingleTask"], shuffled.metrics["onePassFallback"]) == (1, 0)
    assert jobs2 > 2  # the exchanges' stages
    assert rows(spark, t) == [
        (1, "A2"),
        (2, "b"),
        (3, "c"),
        (4, "D2"),
        (5, "e"),
        (6, "f"),
        (7, "g"),
        (8, "h"),
        (9, "i"),
    ]


# -- the broadcast join's inserts, from the files' ranges ----------------------------------------

GAPS = [[(1, "a"), (3, "c")], [(5, "e"), (7, "g")], [(9, "i"), (11, "k")]]


@pytest.mark.parametrize("with_feed", [False, True], ids=["plain", "feed"])
def test_broadcast_upsert_of_keys_beyond_every_file_reads_the_candidates_once(spark, db, with_feed) -> None:
    """New keys beyond every file's range match nothing, so the write inserts them without a
    join: three Spark jobs (the source's, its broadcast, the write; a fourth stamps the feed),
    where finding the inserts by an anti-join with the candidates took two more, one of them a
    second read of the candidates."""
    t = f"{db}.t"
    create_table(spark, t, "id long, v string", GAPS)
    folder = table_dir(spark, t)
    src = source_view(spark, f"{db}_src", "id long, v string", [(5, "E"), (7, "G"), (20, "t"), (21, "u")])
    extra = {"change_data_feed": {"table": f"{db}.t__changes"}} if with_feed else {}
    with single_task_rows(0):
        (result, scans), jobs = spark_jobs(
            spark, lambda: target_scans(spark, folder, lambda: merge(spark, t, src, UPSERT, **extra))
        )
    m = result.metrics
    assert (m["onePass"], m["onePassSingleTask"]) == (1, 0)
    assert (m["onePassInsertsByStatistics"], m["onePassInsertsRechecked"]) == (1, 0)
    assert (jobs, scans) == (4 if with_feed else 3, 1)
    expected = [(1, "a"), (3, "c"), (5, "E"), (7, "G"), (9, "i"), (11, "k"), (20, "t"), (21, "u")]
    assert rows(spark, t) == expected
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsCopied"]) == (2, 2, 0)
    assert (m["numTargetFilesRemoved"], m["numTargetFilesAdded"]) == (1, 2)
    if with_feed:
        assert feed_rows(spark, f"{db}.t__changes") == [
            (5, "E", "update_postimage"),
            (5, "e", "update_preimage"),
            (7, "G", "update_postimage"),
            (7, "g", "update_preimage"),
            (20, "t", "insert"),
            (21, "u", "insert"),
        ]


RECHECK = [
    {"when": "matched", "action": "update", "set": {"v": "s.v"}},
    {
        "when": "not_matched",
        "condition": "s.v <> 'skip'",
        "action": "insert",
        "values": {"id": "s.id", "v": "s.v", "p": "s.p"},
    },
]


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
@pytest.mark.parametrize("with_feed", [False, True], ids=["plain", "feed"])
def test_broadcast_upsert_of_new_keys_inside_a_files_range_inserts_them_after_the_write(
    spark, db, partitioned, with_feed
) -> None:
    """Keys 2 and 6 lie inside a file's range but match no row there: the write, which only
    inserted the keys beyond every range (13, and not 14: its clause's condition is false),
    observes that two source rows inside the ranges matched nothing, and a second write inserts
    those of them a clause takes (2, not 6). Same rows, counts and change feed as the single-task
    join, which finds every insert in its own join."""
    outcomes = []
    for limit in (SINGLE_TASK_ROWS.get(), 0):
        t = f"{db}.t{limit}"
        data = [[(i, v, i % 2) for i, v in f] for f in GAPS]
        create_table(spark, t, "id long, v string, p int", data, partition_by=["p"] if partitioned else ())
        src = source_view(
            spark,
            f"{db}_src",
            "id long, v string, p int",
            [(1, "A", 1), (2, "b", 0), (6, "skip", 0), (7, "G", 1), (13, "m", 1), (14, "skip", 0)],
        )
        extra = {"change_data_feed": {"table": f"{t}__changes"}} if with_feed else {}
        with single_task_rows(limit):
            m = merge(spark, t, src, RECHECK, auto_compact=False, **extra).metrics
        assert (m["onePass"], m["onePassSingleTask"]) == (1, int(limit > 0))
        by_statistics = (m["onePassInsertsByStatistics"], m["onePassInsertsRechecked"])
        assert by_statistics == ((0, 0) if limit else (1, 1))
        counts = [m[k] for k in ("numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsCopied")]
        feed = feed_rows(spark, f"{t}__changes") if with_feed else []
        outcomes.append((rows(spark, t), counts, feed))
    assert outcomes[0] == outcomes[1]
    got, counts, feed = outcomes[0]
    assert got == [
        (1, "A", 1),
        (2, "b", 0),
        (3, "c", 1),
        (5, "e", 1),
        (7, "G", 1),
        (9, "i", 1),
        (11, "k", 1),
        (13, "m", 1),
    ]
    assert counts == [2, 2, 2]
    if with_feed:
        assert feed == [
            (1, "A", "update_postimage"),
            (1, "a", "update_preimage"),
            (2, "b", "insert"),
            (7, "G", "update_postimage"),
            (7, "g", "update_preimage"),
            (13, "m", "insert"),
        ]


def test_broadcast_upsert_on_two_keys_rechecks_a_pair_each_of_whose_keys_is_in_some_range(spark, db) -> None:
    """On a two-column key, (1, 20) has each value inside some file's range, in different
    files: it may match as far as the ranges tell, matches nothing, and is inserted by a second
    write, found from the ids of the source rows the first write saw match (the candidates are
    read once); (3, 99) lies beyond every range of the second key and is inserted by the first."""
    t = f"{db}.t"
    schema = "a long, b long, v string"
    create_table(spark, t, schema, [[(1, 10, "x"), (2, 11, "y")], [(5, 20, "z"), (6, 21, "w")]])
    folder = table_dir(spark, t)
    src = source_view(spark, f"{db}_src", schema, [(1, 10, "X"), (1, 20, "n"), (3, 99, "o")])
    clauses = [
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {"when": "not_matched", "action": "insert", "values": {"a": "s.a", "b": "s.b", "v": "s.v"}},
    ]

    def run():
        return merge(spark, t, src, clauses, on="t.a = s.a AND t.b = s.b", auto_compact=False)

    with single_task_rows(0):
        (result, scans), jobs = spark_jobs(spark, lambda: target_scans(spark, folder, run))
    m = result.metrics
    assert (m["onePass"], m["onePassInsertsByStatistics"], m["onePassInsertsRechecked"]) == (1, 1, 1)
    # The source's job, its broadcast and the write; then the matched ids broadcast and the
    # second write (an anti-join with the candidates read them again: a sixth job).
    assert (jobs, scans) == (5, 1)
    expected = [(1, 10, "X"), (1, 20, "n"), (2, 11, "y"), (3, 99, "o"), (5, 20, "z"), (6, 21, "w")]
    assert rows(spark, t) == expected
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (1, 2)


INSIDE_CASES = {
    # Two source rows with the same new key inside a range: both are inserts.
    "repeated_new_key": (
        "t.id = s.id",
        [[(1, "a", True), (3, "c", True)], [(5, "e", True), (7, "g", True)]],
        [(1, "A", True), (2, "x", True), (2, "y", True), (13, "m", True)],
    ),
    # One source row meets two target rows (a key the table holds twice): both updated.
    "key_held_twice": (
        "t.id = s.id",
        [[(1, "a", True), (3, "c", True)], [(5, "e", True), (5, "f", True), (7, "g", True)]],
        [(5, "E", True), (6, "n", True), (13, "m", True)],
    ),
}


@pytest.mark.parametrize("case", sorted(INSIDE_CASES))
def test_inserts_inside_the_ranges_found_from_the_observed_ids_agree_with_the_single_task_join(
    spark, db, case
) -> None:
    """The broadcast write's missed inserts are the source rows inside the ranges whose ids it
    did not see match: the same rows and counts as the single-task join, which finds every
    insert in its own join."""
    on, files, source = INSIDE_CASES[case]
    schema = "id long, v string, active boolean"
    clauses = [
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {"when": "not_matched", "action": "insert", "values": "*"},
    ]
    outcomes = []
    for limit in (SINGLE_TASK_ROWS.get(), 0):
        t = f"{db}.t{limit}"
        create_table(spark, t, schema, files)
        src = source_view(spark, f"{db}_src", schema, source)
        with single_task_rows(limit):
            m = merge(spark, t, src, clauses, on=on, auto_compact=False).metrics
        path = (
            m["onePass"],
            m["onePassSingleTask"],
            m["onePassInsertsByStatistics"],
            m["onePassInsertsRechecked"],
        )
        assert path == ((1, 1, 0, 0) if limit else (1, 0, 1, 1))
        counts = [m[k] for k in ("numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsCopied")]
        outcomes.append((rows(spark, t), counts))
    assert outcomes[0] == outcomes[1]
    want = {
        "repeated_new_key": [
            (1, "A", True),
            (2, "x", True),
            (2, "y", True),
            (3, "c", True),
            (5, "e", True),
            (7, "g", True),
            (13, "m", True),
        ],
        "key_held_twice": [
            (1, "a", True),
            (3, "c", True),
            (5, "E", True),
            (5, "E", True),
            (6, "n", True),
            (7, "g", True),
            (13, "m", True),
        ],
    }[case]
    assert outcomes[0][0] == want


def feed_rows(spark, table: str) -> list[tuple]:
    """(id, v, _change_type) of every change row of ``table``, sorted."""
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, v, _change_type FROM {table}").collect())


def duckdb_merge(schema: str, files, source, on: str, clauses: str) -> list[tuple]:
    """The rows DuckDB's own ``MERGE INTO`` leaves in a table of ``files`` (the oracle of
    tests/differential, here without its translations: every case below means the same there)."""
    con = duckdb.connect()
    for name in ("t", "s"):
        con.execute(f"CREATE TABLE {name} ({schema})")
    marks = ", ".join("?" * len(files[0][0]))
    con.executemany(f"INSERT INTO t VALUES ({marks})", [r for f in files for r in f])
    con.executemany(f"INSERT INTO s VALUES ({marks})", source)
    con.execute(f"MERGE INTO t USING s ON {on} {clauses}")
    return sorted_rows(con.execute("SELECT * FROM t").fetchall())


LOST_FILES = [
    [(1, "a", True), (2, "b", True)],
    [(3, "c", True), (4, "d", True)],
    [(5, "e", True), (7, "g", True)],
    [(8, "h", True), (9, "i", True)],
]
LOST_UPSERT = (
    [
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "v": "s.v", "flag": "s.flag"}},
    ],
    "WHEN MATCHED THEN UPDATE SET v = s.v "
    "WHEN NOT MATCHED THEN INSERT (id, v, flag) VALUES (s.id, s.v, s.flag)",
)
# Each loses the bet: a candidate ((3, 'c') or (8, 'h')) is met by a source row no clause changes.
LOST_CASES = {
    # A NULL key, a new key given twice inside a range, one beyond every range.
    "null_and_repeated_keys": (
        "t.id = s.id",
        LOST_UPSERT,
        [(1, "A", True), (3, "c", True), (6, "x", True), (6, "y", True), (None, "n", True), (20, "t", True)],
    ),
    # Two conditional NOT MATCHED clauses; a matched row no clause acts on is not inserted.
    "conditional_inserts": (
        "t.id = s.id",
        (
            [
                {"when": "matched", "condition": "s.v <> 'keep'", "action": "update", "set": {"v": "s.v"}},
                {
                    "when": "not_matched",
                    "condition": "s.v LIKE 'a%'",
                    "action": "insert",
                    "values": {"id": "s.id", "v": "concat('first:', s.v)", "flag": "s.flag"},
                },
                {
                    "when": "not_matched",
                    "condition": "s.flag",
                    "action": "insert",
                    "values": {"id": "s.id", "v": "concat('second:', s.v)", "flag": "s.flag"},
                },
            ],
            "WHEN MATCHED AND s.v <> 'keep' THEN UPDATE SET v = s.v "
            "WHEN NOT MATCHED AND s.v LIKE 'a%' "
            "THEN INSERT (id, v, flag) VALUES (s.id, 'first:' || s.v, s.flag) "
            "WHEN NOT MATCHED AND s.flag THEN INSERT (id, v, flag) VALUES (s.id, 'second:' || s.v, s.flag)",
        ),
        [
            (1, "A", True),
            (3, "keep", True),
            (6, "ax", False),
            (6, "bx", True),
            (6, "cx", False),
            (None, "an", True),
            (None, "bn", False),
            (20, "zz", True),
            (21, "aa", False),
        ],
    ),
    # A source-only conjunct in `on`: (4, 'D', false) meets no row, so it is inserted beside 4.
    "source_only_conjunct": (
        "t.id = s.id AND s.flag",
        LOST_UPSERT,
        [(1, "A", True), (3, "c", True), (4, "D", False), (6, "x", False), (8, "H", None)],
    ),
    # A conjunct on both sides: (3, 'c') and (8, 'h') meet no row (equal v), so both are inserted.
    "conjunct_on_both_sides": (
        "t.id = s.id AND t.v <> s.v",
        LOST_UPSERT,
        [(1, "A", True), (3, "c", True), (8, "h", False), (6, "x", True)],
    ),
}


@pytest.mark.parametrize("case", sorted(LOST_CASES))
def test_a_lost_bet_with_the_source_broadcast_inserts_what_duckdb_inserts(spark, db, case) -> None:
    """After a lost bet with the source broadcast the inserts are the source rows the thrown-away
    write did not see match (MaterializedSource.without_ids), through the NOT MATCHED clauses as
    usual. NULL keys, repeated new keys, conditional inserts and conjuncts beside the key in `on`
    must insert exactly what DuckDB's MERGE does; the table is read twice (the thrown-away write,
    the rewrite of the acted-on file), never by an anti-join."""
    on, (clauses, duck_clauses), source = LOST_CASES[case]
    schema = "id long, v string, flag boolean"
    t = f"{db}.t"
    create_table(spark, t, schema, LOST_FILES)
    src = source_view(spark, f"{db}_src", schema, source)
    with single_task_rows(0):
        result, scans = target_scans(
            spark, table_dir(spark, t), lambda: merge(spark, t, src, clauses, on=on, auto_compact=False)
        )
    m = result.metrics
    assert (m["onePass"], m["onePassFallback"], m["scanTimeMs"], scans) == (0, 1, 0, 2)
    want = duckdb_merge("id BIGINT, v VARCHAR, flag BOOLEAN", LOST_FILES, source, on, duck_clauses)
    assert rows(spark, t) == want
    assert m["numTargetRowsInserted"] == len(want) - 8  # 8 rows before, none deleted


PAIR_FILES = [
    [(1, 10, "x", 0), (2, 11, "y", 1)],
    [(5, 20, "z", 0), (6, 21, "w", 1)],
    [(7, 30, "q", 0), (8, 31, "r", 1)],
]
# (1, 10) updated, (6, 21) met with nothing to change (the bet is lost); (1, 20) and (3, 99) are
# pairs each of whose keys falls in some file's range; NULLs; (7, 31) new twice, once refused.
PAIR_SOURCE = [
    (1, 10, "X", 0),
    (6, 21, "w", 1),
    (1, 20, "n", 0),
    (1, None, "m", 0),
    (None, None, "k", 1),
    (3, 99, "o", 1),
    (7, 31, "p", 5),
    (7, 31, "p2", 5),
    (40, 40, "far", 9),
]


@pytest.mark.parametrize("variant", ["flat", "int_source_key", "partitioned_feed", "above_the_cap"])
def test_a_lost_bet_on_two_keys_inserts_what_duckdb_inserts(spark, db, variant, monkeypatch) -> None:
    """The same on a composite key: with a source key of a narrower type than the target's, on a
    partitioned table with the change feed (whose insert rows are the inserted rows), and with
    more rows inside the ranges than the write collects ids for (then anti-joins find them)."""
    if variant == "above_the_cap":
        monkeypatch.setattr(rewrite_module, "STATISTICS_INSERT_ROWS", 1)
    on = "t.a = s.a AND t.b = s.b"
    clauses = [
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {
            "when": "not_matched",
            "condition": "s.v <> 'p2'",
            "action": "insert",
            "values": {"a": "s.a", "b": "s.b", "v": "s.v", "p": "s.p"},
        },
    ]
    t = f"{db}.t"
    feed = variant == "partitioned_feed"
    create_table(spark, t, "a long, b long, v string, p int", PAIR_FILES, partition_by=["p"] if feed else ())
    b_type = "int" if variant == "int_source_key" else "long"
    src = source_view(spark, f"{db}_src", f"a long, b {b_type}, v string, p int", PAIR_SOURCE)
    extra = {"change_data_feed": {"table": f"{t}__changes"}} if feed else {}
    with single_task_rows(0):
        result, scans = target_scans(
            spark,
            table_dir(spark, t),
            lambda: merge(spark, t, src, clauses, on=on, auto_compact=False, **extra),
        )
    m = result.metrics
    assert (m["onePass"], m["onePassFallback"], m["scanTimeMs"]) == (0, 1, 0)
    # Above the cap the write found its inserts by an anti-join with the candidates, and so do
    # the inserts after the lost bet: four reads of the table instead of two.
    assert scans == (4 if variant == "above_the_cap" else 2)
    want = duckdb_merge(
        "a BIGINT, b BIGINT, v VARCHAR, p INT",
        PAIR_FILES,
        PAIR_SOURCE,
        on,
        "WHEN MATCHED THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED AND s.v <> 'p2' THEN INSERT (a, b, v, p) VALUES (s.a, s.b, s.v, s.p)",
    )
    assert rows(spark, t) == want  # columns a, b, v, p: the partition column p is last anyway
    inserted = Counter(want) - Counter(r for f in PAIR_FILES for r in f) - Counter([(1, 10, "X", 0)])
    assert m["numTargetRowsInserted"] == sum(inserted.values())
    if feed:
        spark.catalog.refreshTable(f"{t}__changes")
        insert_rows = spark.sql(
            f"SELECT a, b, v, p FROM {t}__changes WHERE _change_type = 'insert'"
        ).collect()
        assert Counter(tuple(r) for r in insert_rows) == inserted
