"""(Run by test_engine_third_over_connect.py in a subprocess whose `spark` is a Spark Connect session:
PySpark switches a whole process to Connect once it made a Connect session, so no test
process that also runs classic tests may make one.)

The merge engine through Spark Connect: every clause kind, the change feed, a partitioned
table, a cardinality error and a crash after the commit point, on a Spark Connect session
(no JVM in this process: the files are reached through pyarrow.fs, the plan checks through
the server's analyzer). The same merges run on the embedded session in tests/engine; here
every result must be the same, row for row."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import (
    CardinalityViolation,
    MergeSpecError,
    faults,
    history,
    optimize,
    recover,
)
from dbt.adapters.rowmerge.merge.errors import UnsupportedTableError
from dbt.adapters.rowmerge.merge.storage import is_connect, storage_for
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage
from tests.engine.helpers import UPSERT, create_table, file_snapshot, merge, rows, source_view

pytestmark = pytest.mark.slow


@pytest.fixture
def remote(spark):
    """The session of this process: a Spark Connect one (ROWMERGE_TEST_REMOTE)."""
    assert is_connect(spark), "run through tests/connect/test_engine_third_over_connect.py"
    return spark


@pytest.fixture
def rdb(remote):
    name = "c_" + uuid.uuid4().hex[:10]
    remote.sql(f"CREATE DATABASE {name}")
    yield name
    remote.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")


def changes(spark, t: str) -> list[tuple[Any, ...]]:
    df = spark.table(f"{t}__changes").drop("_commit_timestamp")
    return sorted((tuple(r) for r in df.collect()), key=lambda r: tuple(str(v) for v in r))


@pytest.fixture
def t(remote, rdb) -> str:
    name = f"{rdb}.t"
    create_table(remote, name, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]])
    return name


def test_a_connect_session_uses_the_pyarrow_storage(remote):
    assert is_connect(remote) and isinstance(storage_for(remote), ArrowStorage)


def test_every_clause_kind(remote, rdb, t):
    src = source_view(
        remote, f"{rdb}_s", "id long, v string, op string", [(1, "A", "u"), (2, "x", "d"), (9, "z", "i")]
    )
    clauses = [
        {"when": "matched", "condition": "s.op = 'd'", "action": "delete"},
        {"when": "matched", "action": "update", "set": {"v": "s.v"}},
        {"when": "not_matched", "action": "insert", "values": {"id": "s.id", "v": "s.v"}},
        {"when": "not_matched_by_source", "condition": "t.id = 4", "action": "delete"},
        {"when": "not_matched_by_source", "action": "update", "set": {"v": "upper(t.v)"}},
    ]
    result = merge(remote, t, src, clauses)
    assert rows(remote, t) == [(1, "A"), (3, "C"), (9, "z")]
    assert result.version == 1


def test_change_feed(remote, rdb, t):
    src = source_view(remote, f"{rdb}_s", "id long, v string", [(1, "A"), (3, "c"), (9, "z")])
    merge(remote, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    assert changes(remote, t) == [
        (1, "A", "update_postimage", 1),
        (1, "a", "update_preimage", 1),
        (9, "z", "insert", 1),
    ]


def test_partitioned_table(remote, rdb):
    t = f"{rdb}.p"
    schema = "id long, v string, d string"
    create_table(remote, t, schema, [[(1, "a", "x")], [(2, "b", "y")]], partition_by=["d"])
    src = source_view(remote, f"{rdb}_s", "id long, v string, d string", [(2, "B", "y"), (3, "c", "z")])
    merge(remote, t, src, UPSERT)
    assert rows(remote, t) == [(1, "a", "x"), (2, "B", "y"), (3, "c", "z")]


def test_cardinality_error_leaves_the_table_as_it_was(remote, rdb, t):
    before = file_snapshot(remote, t)
    src = source_view(remote, f"{rdb}_s", "id long, v string", [(1, "A"), (1, "B")])
    with pytest.raises(CardinalityViolation):
        merge(remote, t, src, UPSERT)
    assert file_snapshot(remote, t) == before
    assert rows(remote, t) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def test_hive_serde_target_is_refused_before_anything_is_written(remote, rdb):
    """A Connect plan is analyzed in one pass, in which Spark cannot resolve `_metadata` on a
    Hive-serde table: the merge says so and how to fix it, and changes nothing."""
    h = f"{rdb}.h"
    remote.sql(f"CREATE TABLE {h} (id bigint, v string) STORED AS PARQUET")
    remote.sql(f"INSERT INTO {h} VALUES (1, 'a'), (2, 'b')")
    before = file_snapshot(remote, h)
    src = source_view(remote, f"{rdb}_s", "id long, v string", [(1, "A"), (3, "c")])
    with pytest.raises(UnsupportedTableError) as err:
        merge(remote, h, src, UPSERT)
    assert f"MERGE target {h} is a Hive-serde table (STORED AS PARQUET)" in str(err.value)
    assert "USING parquet" in str(err.value)
    assert file_snapshot(remote, h) == before
    assert rows(remote, h) == [(1, "a"), (2, "b")]


def test_bad_clause_is_named_before_anything_is_written(remote, rdb, t):
    before = file_snapshot(remote, t)
    src = source_view(remote, f"{rdb}_s", "id long, v string", [(1, "A")])
    bad = [
        {"when": "matched", "condition": "rand() > 0.5", "action": "delete"},
        {"when": "matched", "condition": "exists(select 1)", "action": "delete"},
        {"when": "matched", "action": "update", "set": {"v": "s.nope"}},
        {"when": "not_matched", "action": "insert", "values": {"id": "max(s.id)", "v": "s.v"}},
    ]
    with pytest.raises(MergeSpecError) as err:
        merge(remote, t, src, bad)
    text = str(err.value)
    assert "clauses[0]" in text and "non-deterministic" in text
    assert "clauses[1]" in text and "subquery" in text
    assert "clauses[2]" in text and "s.nope" in text
    assert "clauses[3]" in text and "aggregate function" in text
    assert file_snapshot(remote, t) == before


def test_skipping_reads_only_the_files_the_keys_fall_in(remote, rdb, t):
    src = source_view(remote, f"{rdb}_s", "id long, v string", [(3, "C")])
    result = merge(remote, t, src, UPSERT)
    assert rows(remote, t) == [(1, "a"), (2, "b"), (3, "C"), (4, "d")]
    assert result.metrics["numTargetFilesAfterSkipping"] == 1


class Crash(BaseException):
    pass


def test_crash_after_the_commit_point_rolls_forward(remote, rdb, t, monkeypatch):
    def hook(name: str) -> None:
        if name == "entry":
            raise Crash(name)

    monkeypatch.setattr(faults, "fault_point", hook)
    src = source_view(remote, f"{rdb}_s", "id long, v string", [(1, "A"), (9, "z")])
    with pytest.raises(Crash):
        merge(remote, t, src, UPSERT)
    monkeypatch.undo()
    assert recover(remote, t).rolled_forward == [1]
    assert rows(remote, t) == [(1, "A"), (2, "b"), (3, "c"), (4, "d"), (9, "z")]


def test_optimize_and_auto_compaction(remote, rdb, t):
    """OPTIMIZE over Connect (the pyarrow storage): cluster_by, then auto-compaction after
    merges, and a crash inside a compaction finished by recovery."""
    result = optimize(remote, t, cluster_by=["id"])
    assert (result.version, result.files_removed, result.files_added) == (1, 3, 1)
    assert len(file_snapshot(remote, t)) == 1
    compacted = []
    for k in range(3):
        src = source_view(remote, f"{rdb}_i{k}", "id long, v string", [(10 + k, "n")])
        compacted.append(merge(remote, t, src, UPSERT, auto_compact_min_files=2).metrics["compactVersion"])
    # a merge's own new file waits for the next merge: after the second merge the optimized
    # file and the first merge's are two files of the smallest tier; after the third, that
    # compacted file and the second merge's
    assert compacted == [0, 4, 6]
    assert rows(remote, t) == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (10, "n"), (11, "n"), (12, "n")]
    ops = [h["operation"] for h in history(remote, t)]
    assert ops[:6] == ["OPTIMIZE", "MERGE", "OPTIMIZE", "MERGE", "MERGE", "OPTIMIZE"]
