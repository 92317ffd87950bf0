"""direct.py: when no source row can match, one Spark job reads the source and writes its
inserts; when some row could, that write is thrown away and the merge runs as usual, with the
same rows, the same errors and nothing left behind."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dbt.adapters.rowmerge.merge import ConstraintViolation, history
from dbt.adapters.rowmerge.merge import direct as direct_module
from dbt.adapters.rowmerge.merge.notices import warnings_to
from tests.engine.helpers import (
    UPSERT,
    create_table,
    merge,
    rows,
    spark_jobs,
    table_dir,
    table_state,
)
from tests.engine.test_guards import engine_warnings

INSERT_ONLY = [{"when": "not_matched", "action": "insert", "values": "*"}]
SCHEMA = "id long, v string"


def _table(spark, db: str, partitioned: bool = False) -> str:
    t = f"{db}.t"
    if partitioned:
        create_table(
            spark,
            t,
            "id long, v string, day string",
            [[(i, f"v{i}", d) for i in range(k, k + 10)] for k, d in ((0, "d1"), (10, "d1"), (20, "d2"))],
            partition_by=["day"],
        )
    else:
        create_table(spark, t, SCHEMA, [[(i, f"v{i}") for i in range(k, k + 10)] for k in (0, 10, 20)])
    return t


def _view(spark, name: str, schema: str, data: list[tuple]) -> str:
    """A view of ``data`` over SQL ``VALUES``, whose size Spark estimates (a DataFrame made from
    Python rows is of unknown size to it, so no merge bets on it: see direct.py)."""

    def lit(v) -> str:
        return "NULL" if v is None else repr(v) if isinstance(v, str) else str(v)

    cols = [c.split() for c in schema.split(",")]
    values = ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in data)
    casts = ", ".join(f"CAST(c{i} AS {t}) AS {n}" for i, (n, t) in enumerate(cols))
    names = ", ".join(f"c{i}" for i in range(len(cols)))
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {casts} FROM VALUES {values} AS v({names})")
    return name


@contextmanager
def engine_logs() -> Iterator[list[str]]:
    """Every line the engine logs, INFO and up."""
    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found.append(record.getMessage())

    log = logging.getLogger("rowmerge")
    handler, level = Collect(level=logging.INFO), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield found
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _staged_leftovers(spark, t: str) -> list[str]:
    """Files under the journal's staging folder (a discarded write must leave none)."""
    root = os.path.join(table_dir(spark, t), "_rowmerge_log", "staging")
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def _sorted(data: list[tuple]) -> list[tuple]:
    return sorted(data, key=lambda r: tuple((v is not None, v) for v in r))


def test_insert_of_new_keys_is_one_job(spark, db) -> None:
    t = _table(spark, db)
    before = rows(spark, t)
    new = [(100 + i, f"n{i}") for i in range(5)] + [(-7, "below")]
    src = _view(spark, f"{db}_src", SCHEMA, new)
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, INSERT_ONLY, auto_compact=False))
    m = result.metrics
    assert jobs == 1
    assert (m["directInsert"], m["directInsertFallback"], m["onePass"]) == (1, 0, 0)
    assert (m["numSourceRows"], m["numTargetRowsInserted"], m["numTargetFilesAdded"]) == (6, 6, 1)
    assert (
        m["numTargetFilesBeforeSkipping"],
        m["numTargetFilesAfterSkipping"],
        m["numTargetFilesRemoved"],
    ) == (
        3,
        0,
        0,
    )
    assert rows(spark, t) == _sorted(before + new)
    assert _staged_leftovers(spark, t) == []
    assert history(spark, t)[0]["metrics"]["directInsert"] == 1


def test_a_key_inside_the_ranges_discards_the_write_and_merges_as_usual(spark, db) -> None:
    # 15 lies inside the second file's range and exists; 35 is new but lies inside no range.
    t = _table(spark, db)
    before = rows(spark, t)
    src = _view(spark, f"{db}_src", SCHEMA, [(15, "dup"), (35, "new"), (200, "far")])
    m = merge(spark, t, src, INSERT_ONLY, auto_compact=False).metrics
    assert (m["directInsert"], m["directInsertFallback"]) == (0, 1)
    assert (m["numSourceRows"], m["numTargetRowsInserted"]) == (3, 2)
    assert rows(spark, t) == _sorted(before + [(35, "new"), (200, "far")])
    assert _staged_leftovers(spark, t) == []
    # Every row written once: nothing of the discarded write reached the table.
    assert len(rows(spark, t)) == len(before) + 2


def test_an_insert_of_keys_inside_the_ranges_loses_once_not_every_run(spark, db) -> None:
    t = _table(spark, db)
    m1 = merge(
        spark, t, _view(spark, f"{db}_a", SCHEMA, [(5, "x"), (100, "a")]), INSERT_ONLY, auto_compact=False
    )
    assert (m1.metrics["directInsertFallback"], m1.metrics["numSourceRowsOutsideRanges"]) == (1, 1)
    # The last merge's source lay partly inside: no bet.
    m2 = merge(
        spark, t, _view(spark, f"{db}_b", SCHEMA, [(7, "y"), (101, "b")]), INSERT_ONLY, auto_compact=False
    )
    assert (m2.metrics["directInsert"], m2.metrics["directInsertFallback"]) == (0, 0)
    # Nor after this one, whose rows all lay outside as it counted them: the next merge bets.
    m3 = merge(spark, t, _view(spark, f"{db}_c", SCHEMA, [(102, "c")]), INSERT_ONLY, auto_compact=False)
    assert (m3.metrics["directInsert"], m3.metrics["numSourceRowsOutsideRanges"]) == (0, 1)
    m4 = merge(spark, t, _view(spark, f"{db}_d", SCHEMA, [(103, "d")]), INSERT_ONLY, auto_compact=False)
    assert (m4.metrics["directInsert"], m4.metrics["numSourceRowsOutsideRanges"]) == (1, 1)
    assert rows(spark, t) == [(i, f"v{i}") for i in range(30)] + [
        (100, "a"),
        (101, "b"),
        (102, "c"),
        (103, "d"),
    ]


def test_an_upsert_bets_only_after_a_merge_whose_rows_lay_outside(spark, db) -> None:
    t = _table(spark, db)
    first = merge(spark, t, _view(spark, f"{db}_a", SCHEMA, [(100, "a")]), UPSERT, auto_compact=False)
    # Version 0 (the table as found) is no merge: the upsert runs as usual.
    assert (first.metrics["directInsert"], first.metrics["directInsertFallback"]) == (0, 0)
    second = merge(spark, t, _view(spark, f"{db}_b", SCHEMA, [(101, "b")]), UPSERT, auto_compact=False)
    assert (second.metrics["directInsert"], second.metrics["numTargetRowsInserted"]) == (1, 1)
    # This one updates: the bet is lost, the write discarded, the merge runs as usual.
    third = merge(
        spark, t, _view(spark, f"{db}_c", SCHEMA, [(5, "upd"), (102, "c")]), UPSERT, auto_compact=False
    )
    assert (third.metrics["directInsert"], third.metrics["directInsertFallback"]) == (0, 1)
    assert (third.metrics["numTargetRowsUpdated"], third.metrics["numTargetRowsInserted"]) == (1, 1)
    # After a merge that replaced a file the upsert does not bet.
    fourth = merge(spark, t, _view(spark, f"{db}_d", SCHEMA, [(103, "d")]), UPSERT, auto_compact=False)
    assert (fourth.metrics["directInsert"], fourth.metrics["directInsertFallback"]) == (0, 0)
    expected = [(i, "upd" if i == 5 else f"v{i}") for i in range(30)]
    assert rows(spark, t) == expected + [(100, "a"), (101, "b"), (102, "c"), (103, "d")]
    assert _staged_leftovers(spark, t) == []


def test_a_table_of_one_file_keeps_the_evidence_of_its_merges(spark, db) -> None:
    """In a table of one file no key's range rules a file out, so the usual path plans no file
    skipping; it still counts the source rows inside the file's range, so an upsert of new keys
    bets after an upsert of new keys, and an insert after a lost bet bets again."""
    t = f"{db}.one"
    create_table(spark, t, SCHEMA, [[(i, f"v{i}") for i in range(10)]])
    first = merge(spark, t, _view(spark, f"{db}_a", SCHEMA, [(100, "a")]), UPSERT, auto_compact=False)
    assert (first.metrics["directInsert"], first.metrics["numSourceRows"]) == (0, 1)
    assert first.metrics["numSourceRowsOutsideRanges"] == 1
    second = merge(spark, t, _view(spark, f"{db}_b", SCHEMA, [(101, "b")]), UPSERT, auto_compact=False)
    assert (second.metrics["directInsert"], second.metrics["numTargetRowsInserted"]) == (1, 1)
    # An insert of a key inside the ranges loses its bet; the usual path counts the row inside.
    third = merge(
        spark, t, _view(spark, f"{db}_c", SCHEMA, [(5, "dup"), (102, "c")]), INSERT_ONLY, auto_compact=False
    )
    assert (third.metrics["directInsert"], third.metrics["directInsertFallback"]) == (0, 1)
    assert (third.metrics["numSourceRows"], third.metrics["numSourceRowsOutsideRanges"]) == (2, 1)
    # Not every row lay outside: the next insert does not bet, and counts its rows again...
    fourth = merge(spark, t, _view(spark, f"{db}_d", SCHEMA, [(103, "d")]), INSERT_ONLY, auto_compact=False)
    assert (fourth.metrics["directInsert"], fourth.metrics["directInsertFallback"]) == (0, 0)
    assert fourth.metrics["numSourceRowsOutsideRanges"] == 1
    # ...so the one after it bets again.
    fifth = merge(spark, t, _view(spark, f"{db}_e", SCHEMA, [(104, "e")]), INSERT_ONLY, auto_compact=False)
    assert fifth.metrics["directInsert"] == 1
    assert third.metrics["numTargetRowsInserted"] == 1  # key 5 matched: an insert-only merge leaves it
    expected = [(i, f"v{i}") for i in range(10)]
    assert rows(spark, t) == _sorted(expected + [(100, "a"), (101, "b"), (102, "c"), (103, "d"), (104, "e")])
    assert _staged_leftovers(spark, t) == []


def test_conditions_null_keys_and_partitions(spark, db) -> None:
    t = _table(spark, db, partitioned=True)
    before = rows(spark, t)
    clauses = [
        {"when": "not_matched", "condition": "s.v <> 'skip'", "action": "insert", "values": "*"},
    ]
    data = [(100, "a", "d2"), (101, "skip", "d3"), (None, "nul", "d3"), (102, "b", "d3")]
    src = _view(spark, f"{db}_src", "id long, v string, day string", data)
    with engine_warnings() as warnings:
        m = merge(spark, t, src, clauses, auto_compact=False).metrics
    assert (m["directInsert"], m["numSourceRows"], m["numTargetRowsInserted"]) == (1, 4, 3)
    assert warnings == [
        f"rowmerge: 1 source row(s) merged into {t} have a NULL in a key column (id): NULL equals nothing "
        "in `on`, so they match no target row; an insert clause inserts them as new rows on every run. "
        "Filter them out or coalesce the key in the model SQL."
    ]
    assert rows(spark, t) == _sorted(before + [(100, "a", "d2"), (None, "nul", "d3"), (102, "b", "d3")])
    assert sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {t}").collect()) == ["day=d1", "day=d2", "day=d3"]


def test_a_failing_insert_fails_as_the_usual_path_does(spark, db) -> None:
    t = f"{db}.t"
    create_table(spark, t, "id long, v string, n int", [[(1, "a", 1), (2, "b", 2)]])
    before = table_state(spark, t)
    src = _view(spark, f"{db}_src", "id long, v string, n int", [(9, None, 1)])
    with pytest.raises(ConstraintViolation) as err, engine_logs() as logs:
        merge(spark, t, src, INSERT_ONLY, constraints=[{"type": "not_null", "column": "v"}])
    # The direct write failed first; the usual path then raised the error as it always does.
    assert any("the direct write failed" in line for line in logs), logs
    assert str(err.value) == (
        f"MERGE into {t} failed: a row it writes violates constraint not_null(v) (first: id=9). Nothing "
        "was changed. Fix the rows in the model SQL, or change the model's contract."
    )
    assert table_state(spark, t) == before
    assert _staged_leftovers(spark, t) == []


def test_the_change_feed_gets_the_inserts_of_the_same_job(spark, db) -> None:
    # Two jobs: the write (table files and change rows) and the feed's stamping.
    t = _table(spark, db)
    src = _view(spark, f"{db}_src", SCHEMA, [(100, "a"), (101, "b")])
    spec = {"change_data_feed": {"table": f"{t}__changes"}}
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, INSERT_ONLY, auto_compact=False, **spec))
    m = result.metrics
    assert (jobs, m["directInsert"], m["numTargetRowsInserted"], m["numTargetChangeFilesAdded"]) == (
        2,
        1,
        2,
        1,
    )
    spark.catalog.refreshTable(f"{t}__changes")
    feed = spark.table(f"{t}__changes").select("id", "v", "_change_type", "_commit_version").collect()
    assert sorted(tuple(r) for r in feed) == [(100, "a", "insert", 1), (101, "b", "insert", 1)]
    # A lost bet discards the change rows with the data: the usual path writes them once.
    src = _view(spark, f"{db}_src", SCHEMA, [(5, "dup"), (102, "c")])
    m = merge(spark, t, src, INSERT_ONLY, auto_compact=False, **spec).metrics
    assert (m["directInsertFallback"], m["numTargetRowsInserted"]) == (1, 1)
    spark.catalog.refreshTable(f"{t}__changes")
    # (read whole: a partition filter on the change table trips Derby's metastore here)
    feed = spark.table(f"{t}__changes").select("id", "_change_type", "_commit_version").collect()
    assert [(r[0], r[1]) for r in feed if r[2] == 2] == [(102, "insert")]
    assert _staged_leftovers(spark, t) == []


@pytest.mark.parametrize(
    "why",
    ["large_source_partitioned", "no_statistics", "unknown_size"],
    ids=["large_source_partitioned", "orc", "unknown_size"],
)
def test_no_bet_where_it_does_not_apply(spark, db, request, why) -> None:
    t = f"{db}.t"
    fmt = "orc" if why == "no_statistics" else "parquet"
    if why == "large_source_partitioned":
        # A large source into partitions would leave a file per partition value in every task.
        request.getfixturevalue("large_sources")
        create_table(
            spark,
            t,
            "id long, v string, day string",
            [[(1, "a", "d1")], [(5, "b", "d2")]],
            partition_by=["day"],
        )
        src = _view(spark, f"{db}_src", "id long, v string, day string", [(10, "n", "d2")])
        expected = [(1, "a", "d1"), (5, "b", "d2"), (10, "n", "d2")]
    elif why == "unknown_size":
        # Rows from the driver in four tasks: Spark cannot estimate their size (it says the
        # largest long), which is no evidence of a large source; no bet, even where any larger
        # than nothing would be spread.
        request.getfixturevalue("large_sources")
        create_table(spark, t, SCHEMA, [[(1, "a")], [(5, "b")]])
        data = spark.sparkContext.parallelize([(10 + i, f"n{i}") for i in range(4)], 4)
        spark.createDataFrame(data, SCHEMA).createOrReplaceTempView(f"{db}_src")
        src = f"{db}_src"
        expected = [(1, "a"), (5, "b")] + [(10 + i, f"n{i}") for i in range(4)]
    else:
        create_table(spark, t, SCHEMA, [[(1, "a")], [(5, "b")]], fmt=fmt)
        src = _view(spark, f"{db}_src", SCHEMA, [(10, "n")])
        expected = [(1, "a"), (5, "b"), (10, "n")]
    m = merge(spark, t, src, INSERT_ONLY, auto_compact=False).metrics
    inserted = len(expected) - 2
    assert (m["directInsert"], m["directInsertFallback"], m["numTargetRowsInserted"]) == (0, 0, inserted)
    assert rows(spark, t) == expected


@pytest.fixture
def large_sources() -> Iterator[None]:
    """Every source of the test is larger than the direct write takes into one task."""
    token = direct_module.DIRECT_SOURCE_BYTES.set(0)
    try:
        yield
    finally:
        direct_module.DIRECT_SOURCE_BYTES.reset(token)


def _tasks_view(spark, name: str, first: int, count: int, tasks: int) -> str:
    """A view of ``count`` rows (ids from ``first``) read by ``tasks`` tasks, whose size Spark
    estimates (a range)."""
    spark.sql(
        f"CREATE OR REPLACE TEMP VIEW {name} AS "
        f"SELECT id, concat('n', id) AS v FROM range({first}, {first + count}, 1, {tasks})"
    )
    return name


def _news(first: int, count: int) -> list[tuple]:
    return [(i, f"n{i}") for i in range(first, first + count)]


@pytest.mark.parametrize("cdf", [False, True], ids=["", "cdf"])
@pytest.mark.usefixtures("large_sources")
def test_a_large_source_is_written_by_its_own_tasks_in_one_job(spark, db, cdf) -> None:
    """A source above DIRECT_SOURCE_BYTES is not squeezed into one task: each of its tasks
    writes one file of its rows (and their change rows) in the one job."""
    t = _table(spark, db)
    before = rows(spark, t)
    spec = {"change_data_feed": {"table": f"{t}__changes"}} if cdf else {}
    src = _tasks_view(spark, f"{db}_src", 100, 300, 2)
    result, jobs = spark_jobs(spark, lambda: merge(spark, t, src, INSERT_ONLY, auto_compact=False, **spec))
    m = result.metrics
    assert jobs == (2 if cdf else 1)  # with the feed, its stamping
    assert (m["directInsert"], m["directInsertFallback"], m["directInsertScattered"]) == (1, 0, 0)
    assert (m["numSourceRows"], m["numTargetRowsInserted"], m["numTargetFilesAdded"]) == (300, 300, 2)
    assert rows(spark, t) == _sorted(before + _news(100, 300))
    assert _staged_leftovers(spark, t) == []
    if cdf:
        spark.catalog.refreshTable(f"{t}__changes")
        feed = spark.table(f"{t}__changes").select("id", "v", "_change_type", "_commit_version").collect()
        assert sorted(tuple(r) for r in feed) == [(i, v, "insert", 1) for i, v in _news(100, 300)]


@pytest.mark.usefixtures("large_sources")
def test_a_scattered_large_source_merges_as_usual_and_is_not_spread_again(spark, db) -> None:
    """300 rows are worth one file: written by 3 tasks they would be 3, more than twice that. The
    write is thrown away, the merge runs as usual (one file), and the merges after it do not
    spread such a source again: the flag is carried from merge to merge."""
    t = _table(spark, db)
    before = rows(spark, t)
    with engine_logs() as logs:
        first = merge(spark, t, _tasks_view(spark, f"{db}_a", 100, 300, 3), INSERT_ONLY, auto_compact=False)
    m = first.metrics
    assert (m["directInsert"], m["directInsertFallback"], m["directInsertScattered"]) == (0, 1, 1)
    assert (m["numTargetRowsInserted"], m["numTargetFilesAdded"]) == (300, 1)
    assert any("the source's tasks wrote too many small files; merging as usual" in line for line in logs)
    assert _staged_leftovers(spark, t) == []
    for k, first_id in enumerate((400, 700)):
        src = _tasks_view(spark, f"{db}_{k}", first_id, 300, 3)
        m = merge(spark, t, src, INSERT_ONLY, auto_compact=False).metrics
        assert (m["directInsert"], m["directInsertFallback"], m["directInsertScattered"]) == (0, 0, 1)
        assert (m["numTargetRowsInserted"], m["numTargetFilesAdded"]) == (300, 1)
    assert rows(spark, t) == _sorted(before + _news(100, 900))
    assert [h["metrics"]["directInsertScattered"] for h in history(spark, t)[:3]] == [1, 1, 1]


def test_the_evidence_is_read_through_the_compaction_that_followed_a_merge(spark, db) -> None:
    # optimize_every 1: an OPTIMIZE version follows every merge; the bet looks at the merge.
    t = _table(spark, db)
    upkeep = {"optimize_every": 1, "target_file_size_mb": 1}
    m1 = merge(spark, t, _view(spark, f"{db}_a", SCHEMA, [(100, "a")]), UPSERT, **upkeep).metrics
    assert (m1["directInsert"], m1["numSourceRowsOutsideRanges"]) == (0, 1) and m1["compactVersion"] > 0
    m2 = merge(spark, t, _view(spark, f"{db}_b", SCHEMA, [(101, "b")]), UPSERT, **upkeep).metrics
    assert (m2["directInsert"], m2["numTargetRowsInserted"]) == (1, 1) and m2["compactVersion"] > 0
    assert rows(spark, t) == [(i, f"v{i}") for i in range(30)] + [(100, "a"), (101, "b")]
    assert [h["operation"] for h in history(spark, t)][:4] == ["OPTIMIZE", "MERGE", "OPTIMIZE", "MERGE"]


def test_an_empty_source_writes_nothing(spark, db) -> None:
    t = _table(spark, db)
    before = table_state(spark, t)
    spark.sql(f"CREATE OR REPLACE TEMP VIEW {db}_src AS SELECT CAST(1 AS BIGINT) AS id, 'x' AS v WHERE false")
    result = merge(spark, t, f"{db}_src", INSERT_ONLY, auto_compact=False)
    assert (result.version, result.metrics["numSourceRows"], result.metrics["numTargetFilesAdded"]) == (
        0,
        0,
        0,
    )
    assert table_state(spark, t) == before
    assert _staged_leftovers(spark, t) == []


def test_a_warning_raised_as_an_error_leaves_nothing_staged(spark, db) -> None:
    # dbt's --warn-error turns the NULL-key warning into an error (notices.warnings_to): the
    # direct write's staged files go with it, and the table is unchanged.
    t = _table(spark, db)
    before = table_state(spark, t)
    src = _view(spark, f"{db}_src", SCHEMA, [(None, "n"), (100, "a")])

    def raising(message: str) -> None:
        raise RuntimeError(message)

    with pytest.raises(RuntimeError, match="have a NULL in a key column"), warnings_to(raising):
        merge(spark, t, src, INSERT_ONLY, auto_compact=False)
    assert table_state(spark, t) == before
    assert _staged_leftovers(spark, t) == []
