"""Change data feed: exact change rows for each of Delta's rules.

Every test reads the feed table back through the catalog and compares every row, so a
missing, extra or duplicated change row fails. Rows are (columns..., _change_type,
_commit_version); the timestamp is checked against the journal separately.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import (
    CardinalityViolation,
    MergeSpecError,
    UnsupportedTableError,
    history,
    start_history,
)
from dbt.adapters.rowmerge.merge.rewrite import SINGLE_TASK_ROWS
from tests.engine.helpers import (
    UPSERT,
    create_table,
    merge,
    partitions,
    rows,
    session_conf,
    single_task_rows,
    source_view,
    table_dir,
    target_scans,
)

UPDATE_ALL = {"when": "matched", "action": "update", "set": "*"}
INSERT_ALL = {"when": "not_matched", "action": "insert", "values": "*"}


def feed(t: str) -> dict[str, Any]:
    return {"change_data_feed": {"table": f"{t}__changes"}}


def changes(spark, t: str) -> list[tuple[Any, ...]]:
    """Every change row of ``t`` without the timestamp, sorted."""
    spark.catalog.refreshTable(f"{t}__changes")
    df = spark.table(f"{t}__changes").drop("_commit_timestamp")
    data = [tuple(r) for r in df.collect()]
    return sorted(data, key=lambda r: tuple((v is not None, str(v)) for v in r))


def expect(*items: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    return sorted(items, key=lambda r: tuple((v is not None, str(v)) for v in r))


@pytest.fixture
def t(spark, db) -> str:
    name = f"{db}.t"
    create_table(spark, name, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]])
    return name


def test_cdf_upsert_emits_pre_post_and_insert_not_unchanged_or_copied(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "c"), (9, "z")])
    result = merge(spark, t, src, UPSERT, **feed(t))
    # 1 updated (its file-mate 2 is copied), 3 matched but unchanged, 9 inserted.
    assert changes(spark, t) == expect(
        (1, "a", "update_preimage", 1),
        (1, "A", "update_postimage", 1),
        (9, "z", "insert", 1),
    )
    assert result.metrics["numTargetChangeFilesAdded"] >= 1


def test_cdf_skip_unchanged_off_emits_pairs_for_no_op_updates(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "c")])
    merge(spark, t, src, UPSERT, skip_unchanged_updates=False, **feed(t))
    assert changes(spark, t) == expect(
        (1, "a", "update_preimage", 1),
        (1, "A", "update_postimage", 1),
        (3, "c", "update_preimage", 1),
        (3, "c", "update_postimage", 1),
    )


def test_cdf_skip_unchanged_on_no_op_only_merge_writes_no_version(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(3, "c")])
    result = merge(spark, t, src, UPSERT, **feed(t))
    assert result.version == 0
    assert changes(spark, t) == []
    assert history(spark, t) == []


def test_cdf_conditional_delete_emits_the_full_deleted_row(spark, db):
    t = f"{db}.orders"
    create_table(spark, t, "id long, status string, amount double", [[(1, "new", 5.0), (2, "new", 7.5)]])
    src = source_view(spark, f"{db}_s", "id long, op string", [(1, "D"), (2, "U")])
    merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            {"when": "matched", "action": "update", "set": {"status": "'seen'"}},
        ],
        **feed(t),
    )
    assert rows(spark, t) == [(2, "seen", 7.5)]
    assert changes(spark, t) == expect(
        (1, "new", 5.0, "delete", 1),
        (2, "new", 7.5, "update_preimage", 1),
        (2, "seen", 7.5, "update_postimage", 1),
    )


def test_cdf_unconditional_delete_matched_twice_emits_one_delete(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long", [(2,), (2,), (2,), (4,)])
    result = merge(spark, t, src, [{"when": "matched", "action": "delete"}], **feed(t))
    assert result.metrics["numTargetRowsDeleted"] == 2
    assert changes(spark, t) == expect((2, "b", "delete", 1), (4, "d", "delete", 1))


def test_cdf_not_matched_by_source_delete_emits_deletes(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "a"), (3, "C")])
    merge(
        spark,
        t,
        src,
        [UPDATE_ALL, {"when": "not_matched_by_source", "action": "delete"}],
        **feed(t),
    )
    assert rows(spark, t) == [(1, "a"), (3, "C")]
    assert changes(spark, t) == expect(
        (2, "b", "delete", 1),
        (3, "c", "update_preimage", 1),
        (3, "C", "update_postimage", 1),
        (4, "d", "delete", 1),
    )


def test_cdf_not_matched_by_source_soft_delete_emits_pre_post(spark, db):
    t = f"{db}.accounts"
    create_table(spark, t, "id long, active boolean", [[(1, True), (2, True), (3, False)]])
    src = source_view(spark, f"{db}_s", "id long, active boolean", [(1, True)])
    merge(
        spark,
        t,
        src,
        [
            {
                "when": "not_matched_by_source",
                "condition": "t.active",
                "action": "update",
                "set": {"active": "false"},
            }
        ],
        **feed(t),
    )
    # 1 matched (no matched clause), 3 already inactive: only 2 changes.
    assert changes(spark, t) == expect((2, True, "update_preimage", 1), (2, False, "update_postimage", 1))


def test_cdf_update_moving_row_between_partitions(spark, db):
    t = f"{db}.tickets"
    create_table(
        spark,
        t,
        "id long, title string, status string",
        [[(1, "x", "open"), (2, "y", "open")], [(3, "z", "closed")]],
        partition_by=("status",),
    )
    src = source_view(spark, f"{db}_s", "id long, title string, status string", [(1, "x", "closed")])
    merge(spark, t, src, UPSERT, **feed(t))
    assert rows(spark, t) == [(1, "x", "closed"), (2, "y", "open"), (3, "z", "closed")]
    # The feed holds the partition column as a plain column: the pre-image shows where it was.
    assert changes(spark, t) == expect(
        (1, "x", "open", "update_preimage", 1),
        (1, "x", "closed", "update_postimage", 1),
    )


def test_cdf_schema_evolution_preimage_shows_null_for_new_column(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string, score int", [(1, "A", 10), (7, "g", 70)])
    merge(spark, t, src, UPSERT, schema_evolution=True, **feed(t))
    assert [f.name for f in spark.table(f"{t}__changes").schema.fields] == [
        "id",
        "v",
        "_change_type",
        "_commit_timestamp",
        "score",  # added by the merge: Spark keeps the partition column last
        "_commit_version",
    ]
    spark.catalog.refreshTable(f"{t}__changes")
    got = sorted(
        tuple(r) for r in spark.table(f"{t}__changes").select("id", "v", "score", "_change_type").collect()
    )
    assert got == [
        (1, "A", 10, "update_postimage"),
        (1, "a", None, "update_preimage"),
        (7, "g", 70, "insert"),
    ]


def test_cdf_matched_row_whose_condition_is_false_emits_nothing(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (2, "B"), (8, "h")])
    merge(
        spark,
        t,
        src,
        [{"when": "matched", "condition": "s.v = 'A'", "action": "update", "set": "*"}, INSERT_ALL],
        **feed(t),
    )
    # 2 matched but its clause does not act: not updated, not inserted, no change row.
    assert changes(spark, t) == expect(
        (1, "a", "update_preimage", 1), (1, "A", "update_postimage", 1), (8, "h", "insert", 1)
    )


def test_cdf_insert_only_merge_reports_every_insert(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "dup"), (5, "e"), (6, None)])
    result = merge(spark, t, src, [INSERT_ALL], **feed(t))
    assert result.metrics["numTargetFilesRemoved"] == 0
    assert changes(spark, t) == expect((5, "e", "insert", 1), (6, None, "insert", 1))


def test_cdf_update_from_null_and_to_null(spark, db):
    t = f"{db}.n"
    create_table(spark, t, "id long, v string", [[(1, None), (2, "b")]])
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "x"), (2, None)])
    merge(spark, t, src, UPSERT, **feed(t))
    assert changes(spark, t) == expect(
        (1, None, "update_preimage", 1),
        (1, "x", "update_postimage", 1),
        (2, "b", "update_preimage", 1),
        (2, None, "update_postimage", 1),
    )


def test_cdf_every_change_type_in_one_merge(spark, db, t):
    src = source_view(
        spark, f"{db}_s", "id long, v string, op string", [(1, "-", "D"), (2, "B", "U"), (5, "e", "I")]
    )
    merge(
        spark,
        t,
        src,
        [
            {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
            UPDATE_ALL,
            {"when": "not_matched", "condition": "s.op <> 'D'", "action": "insert", "values": "*"},
            {
                "when": "not_matched_by_source",
                "condition": "t.id = 4",
                "action": "update",
                "set": {"v": "'gone'"},
            },
        ],
        **feed(t),
    )
    assert rows(spark, t) == [(2, "B"), (3, "c"), (4, "gone"), (5, "e")]
    assert changes(spark, t) == expect(
        (1, "a", "delete", 1),
        (2, "b", "update_preimage", 1),
        (2, "B", "update_postimage", 1),
        (4, "d", "update_preimage", 1),
        (4, "gone", "update_postimage", 1),
        (5, "e", "insert", 1),
    )


def test_cdf_versions_and_timestamps_equal_the_journal(spark, db, t):
    merge(spark, t, source_view(spark, f"{db}_s1", "id long, v string", [(1, "A")]), UPSERT, **feed(t))
    merge(
        spark,
        t,
        source_view(spark, f"{db}_s2", "id long, v string", [(1, "AA"), (5, "e")]),
        UPSERT,
        **feed(t),
    )
    assert changes(spark, t) == expect(
        (1, "a", "update_preimage", 1),
        (1, "A", "update_postimage", 1),
        (1, "A", "update_preimage", 2),
        (1, "AA", "update_postimage", 2),
        (5, "e", "insert", 2),
    )
    journal = {h["version"]: h["timestamp"] for h in history(spark, t)}
    stamps = {
        (r[0], r[1])
        for r in spark.table(f"{t}__changes").select("_commit_version", "_commit_timestamp").collect()
    }
    # The session runs in UTC, so the naive TIMESTAMP is the journal's UTC instant.
    expected = {
        (v, datetime.fromisoformat(journal[v]).astimezone(timezone.utc).replace(tzinfo=None)) for v in (1, 2)
    }
    assert stamps == expected
    assert partitions(spark, f"{t}__changes") == ["_commit_version=1", "_commit_version=2"]


def test_cdf_failed_merge_leaves_feed_and_table_unchanged(spark, db, t):
    merge(spark, t, source_view(spark, f"{db}_s1", "id long, v string", [(1, "A")]), UPSERT, **feed(t))
    before = (rows(spark, t), changes(spark, t))
    dup = source_view(spark, f"{db}_s2", "id long, v string", [(2, "x"), (2, "y")])
    with pytest.raises(CardinalityViolation):
        merge(spark, t, dup, UPSERT, **feed(t))
    assert (rows(spark, t), changes(spark, t)) == before
    assert partitions(spark, f"{t}__changes") == ["_commit_version=1"]


def test_cdf_table_created_with_its_schema_when_missing(spark, db, t):
    assert not spark.catalog.tableExists(f"{t}__changes")
    src = source_view(spark, f"{db}_s", "id long, v string", [(3, "c")])
    merge(spark, t, src, UPSERT, **feed(t))  # changes nothing, still prepares the feed
    cols = spark.catalog.listColumns(f"{t}__changes")
    assert [(c.name, c.dataType, c.isPartition) for c in cols] == [
        ("id", "bigint", False),
        ("v", "string", False),
        ("_change_type", "string", False),
        ("_commit_timestamp", "timestamp", False),
        ("_commit_version", "bigint", True),
    ]


def test_cdf_on_orc_target_writes_parquet_feed(spark, db):
    t = f"{db}.o"
    create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")]], fmt="orc")
    src = source_view(spark, f"{db}_s", "id long, v string", [(2, "B"), (3, "c")])
    merge(spark, t, src, UPSERT, **feed(t))
    assert changes(spark, t) == expect(
        (2, "b", "update_preimage", 1), (2, "B", "update_postimage", 1), (3, "c", "insert", 1)
    )


def test_cdf_start_history_recreates_the_feed_empty(spark, db, t):
    merge(spark, t, source_view(spark, f"{db}_s", "id long, v string", [(1, "A")]), UPSERT, **feed(t))
    started = start_history(spark, t, "REPLACE TABLE", f"{t}__changes")
    assert started["changes_rows_removed"] == 2
    assert started["versions_forgotten"] == 2  # the CONVERT version 0 and the merge
    assert changes(spark, t) == []
    assert [(h["version"], h["operation"]) for h in history(spark, t)] == [(0, "REPLACE TABLE")]
    merge(spark, t, source_view(spark, f"{db}_s2", "id long, v string", [(2, "B")]), UPSERT, **feed(t))
    assert changes(spark, t) == expect((2, "b", "update_preimage", 1), (2, "B", "update_postimage", 1))


def test_cdf_target_column_with_feed_name_is_rejected(spark, db):
    t = f"{db}.r"
    create_table(spark, t, "id long, _change_type string", [[(1, "x")]])
    src = source_view(spark, f"{db}_s", "id long, _change_type string", [(1, "y")])
    with pytest.raises(MergeSpecError, match="the target has a column named _change_type"):
        merge(spark, t, src, UPSERT, **feed(t))
    assert rows(spark, t) == [(1, "x")]
    assert not spark.catalog.tableExists(f"{t}__changes")


def test_cdf_existing_table_that_is_not_a_feed_is_rejected(spark, db, t):
    spark.sql(f"CREATE TABLE {t}__changes (id bigint) USING parquet")
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    with pytest.raises(UnsupportedTableError) as info:
        merge(spark, t, src, UPSERT, **feed(t))
    assert str(info.value) == (
        f"change_data_feed table {t}__changes exists but is not a change feed (a Parquet table "
        "partitioned by _commit_version; found parquet partitioned by nothing). Drop it or name "
        "another table in change_data_feed."
    )
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


@pytest.mark.parametrize("single_task", [True, False], ids=["single_task", "broadcast"])
def test_cdf_rows_come_from_the_data_write_which_reads_the_touched_files_once(spark, db, single_task):
    """The feed's rows come out of the job that writes the data files: a merge with the feed
    on scans the target's files exactly as often as the same merge without it, and no other
    job reads them: once, both in a single task (rewritten rows and inserts come out of one join)
    and with the source broadcast (the new key lies beyond every file's range, so the inserts
    need no second read: see test_one_pass). The feed's write lets each task keep its outputs
    open side by side (no sort) only while it runs; a value the session set stands."""
    from dbt.adapters.rowmerge.merge.rewrite import CONCURRENT_WRITERS_CONF

    with single_task_rows(SINGLE_TASK_ROWS.get() if single_task else 0):
        scans = {}
        for with_feed in (False, True):
            t = f"{db}.t_{int(with_feed)}"
            # the touched files are neighbours in key order: they may share the single task
            data = [[(1, "a"), (2, "b")], [(3, "c"), (4, "d")], [(7, "g")]]
            create_table(spark, t, "id long, v string", data)
            src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (2, "b"), (4, "D"), (9, "z")])
            extra = feed(t) if with_feed else {}
            run = lambda t=t, src=src, extra=extra: merge(spark, t, src, UPSERT, **extra)  # noqa: E731
            own = with_feed and not single_task  # the session's own setting stands
            with session_conf(spark, {CONCURRENT_WRITERS_CONF: "3"} if own else {}):
                result, scans[with_feed] = target_scans(spark, table_dir(spark, t), run)
                assert spark.conf.get(CONCURRENT_WRITERS_CONF) == ("3" if own else "0")
            assert result.metrics["onePass"] == 1
            assert result.metrics["onePassSingleTask"] == int(single_task)
            assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (4, "D"), (7, "g"), (9, "z")]
        assert changes(spark, f"{db}.t_1") == expect(
            (1, "a", "update_preimage", 1),
            (1, "A", "update_postimage", 1),
            (4, "d", "update_preimage", 1),
            (4, "D", "update_postimage", 1),
            (9, "z", "insert", 1),
        )
        assert scans == {False: 1, True: 1}


def test_a_session_that_read_the_change_table_sees_each_new_version_without_a_refresh(spark, db, t):
    """A commit adds its version as a new partition and does not refresh the change table
    (register_partitions): a reader that listed the table before, in this session, still sees
    the new version's rows, as a long-running session (a Thrift server, a notebook) would."""
    merge(spark, t, source_view(spark, f"{db}_s1", "id long, v string", [(1, "x")]), [UPDATE_ALL], **feed(t))
    before = spark.table(f"{t}__changes")
    assert sorted((r[0], r[2]) for r in before.select("id", "v", "_change_type").collect()) == [
        (1, "update_postimage"),
        (1, "update_preimage"),
    ]
    merge(spark, t, source_view(spark, f"{db}_s2", "id long, v string", [(5, "e")]), UPSERT, **feed(t))
    for frame in (before, spark.table(f"{t}__changes")):
        got = sorted(tuple(r) for r in frame.select("id", "_change_type", "_commit_version").collect())
        assert got == [(1, "update_postimage", 1), (1, "update_preimage", 1), (5, "insert", 2)]


@pytest.mark.parametrize("single_task", [True, False], ids=["single_task", "broadcast"])
def test_cdf_rows_no_clause_acts_on_leave_no_trace(spark, db, single_task):
    """Rows the write routes nowhere but the table's files, or nowhere at all: a target row
    whose matched clause's condition is false is copied as it was, with no change row; a
    source row the insert's condition refuses is neither written nor fed (in the single-task
    join it is a row of its own, routed by whether it holds a target row)."""
    with single_task_rows(SINGLE_TASK_ROWS.get() if single_task else 0):
        t = f"{db}.quiet"
        create_table(spark, t, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
        src = source_view(
            spark,
            f"{db}_quiet",
            "id long, v string, ok boolean",
            [(1, "A", False), (2, "B", True), (8, "h", False), (9, "i", True)],
        )
        clauses = [
            {"when": "matched", "condition": "s.ok", "action": "update", "set": "*"},
            {"when": "not_matched", "condition": "s.ok", "action": "insert", "values": "*"},
        ]
        result = merge(spark, t, src, clauses, **feed(t))
        assert result.metrics["onePassSingleTask"] == int(single_task)
        assert rows(spark, t) == [(1, "a"), (2, "B"), (3, "c"), (9, "i")]
        assert changes(spark, t) == expect(
            (2, "b", "update_preimage", 1),
            (2, "B", "update_postimage", 1),
            (9, "i", "insert", 1),
        )


@pytest.mark.parametrize("single_task", [True, False], ids=["single_task", "broadcast"])
def test_cdf_every_change_type_with_names_that_need_quoting(spark, db, single_task):
    """The write routes each row to the table's files and the feed in SQL text
    (rewrite._routed): columns named with a space, a dot, a backtick and a non-ASCII letter
    keep their values in every output. Files 1 and 3 are touched and file 2 is not, so the
    write also carries each row's task group (two groups of key neighbours)."""
    with single_task_rows(SINGLE_TASK_ROWS.get() if single_task else 0):
        t = f"{db}.odd"
        schema = "id long, `v w` string, `a.b` int, `q``x` string, `é` double"
        data = [
            [(1, "a", 10, "x1", 1.5), (2, "b", 20, "x2", 2.5)],
            [(3, "c", 30, "x3", 3.5)],
            [(7, "g", 70, "x7", 7.5)],
        ]
        create_table(spark, t, schema, data)
        src = source_view(
            spark,
            f"{db}_odd",
            schema + ", op string",
            [
                (1, "-", 0, "-", 0.0, "D"),
                (2, "B", 21, "y2", 2.0, "U"),
                (7, "G", 71, "y7", 7.0, "U"),
                (9, "z", 90, "y9", 9.0, "I"),
            ],
        )
        clauses = [{"when": "matched", "condition": "s.op = 'D'", "action": "delete"}, UPDATE_ALL, INSERT_ALL]
        result = merge(spark, t, src, clauses, **feed(t))
        assert result.metrics["onePassSingleTask"] == int(single_task)
        assert rows(spark, t) == [
            (2, "B", 21, "y2", 2.0),
            (3, "c", 30, "x3", 3.5),
            (7, "G", 71, "y7", 7.0),
            (9, "z", 90, "y9", 9.0),
        ]
        assert changes(spark, t) == expect(
            (1, "a", 10, "x1", 1.5, "delete", 1),
            (2, "b", 20, "x2", 2.5, "update_preimage", 1),
            (2, "B", 21, "y2", 2.0, "update_postimage", 1),
            (7, "g", 70, "x7", 7.5, "update_preimage", 1),
            (7, "G", 71, "y7", 7.0, "update_postimage", 1),
            (9, "z", 90, "y9", 9.0, "insert", 1),
        )
        assert [c.name for c in spark.table(f"{t}__changes").schema.fields][:5] == [
            "id",
            "v w",
            "a.b",
            "q`x",
            "é",
        ]
