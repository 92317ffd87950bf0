"""The commit journal (journal/, run.py): entries, version 0, recovery, foreign writers, locking.

Crashes here are simulated in-process: the commit protocol's step hook raises instead of
killing the process, so the merge stops exactly after that step with nothing cleaned up
after the commit point. (tests/reliability kills real processes at every step.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from dbt.adapters.rowmerge.merge import (
    ConcurrentMergeError,
    JournalError,
    MergeCommittedError,
    MergeError,
    MergeSpecError,
    faults,
    history,
    recover,
)
from dbt.adapters.rowmerge.merge import journal as journal_module
from dbt.adapters.rowmerge.merge.lock import Owner, TableLock
from dbt.adapters.rowmerge.merge.storage import STORAGE_CONF, storage_for
from tests.engine.helpers import (
    UPSERT,
    create_table,
    file_snapshot,
    files_of,
    merge,
    partitions,
    rows,
    session_conf,
    source_view,
    table_dir,
)


@pytest.fixture(autouse=True, params=["hadoop", "arrow"])
def storage_kind(spark, request) -> Iterator[str]:
    """Every journal test on both storages: Hadoop's (session mode) and pyarrow.fs (what a
    Spark Connect client uses); the engine picks it from the session conf."""
    with session_conf(spark, {STORAGE_CONF: request.param}):
        yield request.param


class SimulatedCrash(BaseException):
    """Stands for the process dying: not an Exception, so no handler turns it into an error."""


def crash_after(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    def hook(name: str) -> None:
        if name == step:
            raise SimulatedCrash(name)

    monkeypatch.setattr(faults, "fault_point", hook)


def log_dir(spark, t: str) -> Path:
    return Path(table_dir(spark, t)) / "_rowmerge_log"


def entry(spark, t: str, version: int) -> dict[str, Any]:
    return json.loads((log_dir(spark, t) / f"{version:020d}.json").read_text())


@pytest.fixture
def t(spark, db) -> str:
    name = f"{db}.t"
    create_table(spark, name, "id long, v string", [[(1, "a"), (2, "b")], [(3, "c")]])
    return name


def test_journal_first_merge_writes_version_0_and_a_complete_entry(spark, db, t):
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (9, "z")])
    result = merge(spark, t, src, UPSERT)
    assert result.version == 1
    v0 = entry(spark, t, 0)
    assert v0["operation"] == "CONVERT"
    assert {f["path"].removeprefix("file:"): f["size"] for f in v0["added"]} == {
        path: size for path, (size, _) in before.items()
    }
    assert sorted(f["rows"] for f in v0["added"]) == [1, 2]
    assert v0["metrics"] == {
        "numFiles": 2,
        "numOutputRows": 3,
        "numOutputBytes": sum(s for s, _ in before.values()),
    }
    v1 = entry(spark, t, 1)
    assert set(v1) == {
        "format", "version", "table", "operation", "timestamp", "txn", "read_version", "spec_digest",
        "added", "removed", "partitions", "new_columns", "cdf", "metrics", "retention",
    }  # fmt: skip
    assert v1["retention"] == {"versions": 24, "hours": 0.0}  # the default
    assert (v1["version"], v1["read_version"], v1["operation"], v1["table"]) == (1, 0, "MERGE", t)
    assert [f["rows"] for f in v1["removed"]] == [2]  # the file holding 1 and 2
    assert sorted(f["rows"] for f in v1["added"]) == [1, 2]  # rewritten (1, 2) + insert (9)
    assert all(
        f["staged"].split("/_rowmerge_log/staging/")[1].startswith(v1["txn"] + "/data/") for f in v1["added"]
    )
    assert v1["metrics"]["numTargetRowsInserted"] == 1
    assert sorted(os.listdir(log_dir(spark, t))) == [
        f"{0:020d}.applied",
        f"{0:020d}.json",
        f"{1:020d}.applied",
        f"{1:020d}.json",
        "lock",
        "retained",  # version 1's: the file it replaced
        "staging",
    ]
    assert os.listdir(log_dir(spark, t) / "staging") == []
    assert os.listdir(log_dir(spark, t) / "retained") == [f"{1:020d}"]


def test_journal_history_rows_and_limit(spark, db, t):
    merge(spark, t, source_view(spark, f"{db}_s1", "id long, v string", [(1, "A")]), UPSERT)
    merge(spark, t, source_view(spark, f"{db}_s2", "id long, v string", [(2, None), (7, "g")]), UPSERT)
    log = history(spark, t)
    assert [
        (h["version"], h["operation"], h["rows_inserted"], h["rows_updated"], h["rows_deleted"],
         h["files_added"], h["files_removed"], h["applied"])
        for h in log
    ] == [
        (2, "MERGE", 1, 1, 0, 2, 1, True),
        (1, "MERGE", 0, 1, 0, 1, 1, True),
        (0, "CONVERT", 3, 0, 0, 2, 0, True),
    ]  # fmt: skip
    assert [h["version"] for h in history(spark, t, limit=2)] == [2, 1]
    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(MergeSpecError) as info:
            history(spark, t, limit=bad)
        wanted = f"`limit` must be a whole number >= 1 (left out: every version), got {bad!r}"
        assert wanted in str(info.value)


@pytest.mark.parametrize("step", ["entry", "move_0", "registered", "delete_0", "before_applied", "applied"])
def test_journal_crash_after_commit_point_rolls_forward(spark, db, monkeypatch, t, step):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (9, "z")])
    crash_after(monkeypatch, step)
    with pytest.raises(SimulatedCrash):
        merge(spark, t, src, UPSERT)
    monkeypatch.undo()
    done = recover(spark, t)
    assert done.rolled_forward == ([] if step == "applied" else [1])
    assert done.rolled_back == []
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (9, "z")]
    assert os.listdir(log_dir(spark, t) / "staging") == []
    assert not recover(spark, t)  # a second recovery has nothing left to do


def plant_orphan_staging(spark, t: str, txn: str = "1700000000000-deadbeef0000") -> str:
    """Staging a writer left when it died before its commit point (a file in data/ and cdf/)."""
    for sub in ("data", "cdf"):
        folder = log_dir(spark, t) / "staging" / txn / sub
        folder.mkdir(parents=True)
        (folder / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    return txn


@pytest.mark.parametrize("step", ["staged_data", "staged_cdf"])
def test_journal_error_before_commit_point_removes_its_staging(spark, db, monkeypatch, t, step):
    before = file_snapshot(spark, t)
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (9, "z")])
    crash_after(monkeypatch, step)
    with pytest.raises(SimulatedCrash):
        merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    monkeypatch.undo()
    # The merge's own error path rolled back; a real crash leaves staging (next test).
    assert os.listdir(log_dir(spark, t) / "staging") == []
    assert file_snapshot(spark, t) == before
    assert rows(spark, f"{t}__changes") == []
    assert history(spark, t) == []


def test_journal_orphan_staging_is_rolled_back(spark, db, t):
    before = file_snapshot(spark, t)
    txn = plant_orphan_staging(spark, t)
    done = recover(spark, t)
    assert (done.rolled_forward, done.rolled_back) == ([], [txn])
    assert done.describe() == "rolled back 1 uncommitted staging folder(s)"
    assert os.listdir(log_dir(spark, t) / "staging") == []
    assert file_snapshot(spark, t) == before


def test_journal_recovery_replays_schema_evolution_and_partitions(spark, db, monkeypatch):
    t = f"{db}.p"
    create_table(spark, t, "id long, v string, p int", [[(1, "a", 1)], [(2, "b", 2)]], partition_by=("p",))
    src = source_view(
        spark, f"{db}_s", "id long, v string, extra string, p int", [(1, "A", "x", 1), (3, "c", "y", 3)]
    )
    crash_after(monkeypatch, "entry")
    with pytest.raises(SimulatedCrash):
        merge(spark, t, src, UPSERT, schema_evolution=True)
    monkeypatch.undo()
    assert partitions(spark, t) == ["p=1", "p=2"]
    assert recover(spark, t).rolled_forward == [1]
    assert [f.name for f in spark.table(t).schema.fields] == ["id", "v", "extra", "p"]
    assert partitions(spark, t) == ["p=1", "p=2", "p=3"]
    assert rows(spark, t) == [(1, "A", "x", 1), (2, "b", None, 2), (3, "c", "y", 3)]


def test_journal_recovery_of_a_collated_table_with_its_change_feed(spark, db, monkeypatch):
    """The entry's change-table columns hold a collation: recovery reads them twice (checked,
    then applied), which PySpark's StructType.fromJson, rewriting the dict it reads, once
    failed at after the commit point, every time."""
    t = f"{db}.lc"
    create_table(spark, t, "id long, v string collate UTF8_LCASE", [[(1, "a"), (2, "b")]])
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (3, "c")])
    crash_after(monkeypatch, "entry")
    with pytest.raises(SimulatedCrash):
        merge(spark, t, src, UPSERT, change_data_feed={"table": f"{t}__changes"})
    monkeypatch.undo()
    assert recover(spark, t).rolled_forward == [1]
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c")]
    changes = sorted((r.id, r.v, r._change_type) for r in spark.table(f"{t}__changes").collect())
    assert changes == [(1, "A", "update_postimage"), (1, "a", "update_preimage"), (3, "c", "insert")]


def test_journal_unreadable_entry_stops_the_table_and_is_kept(spark, db, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    merge(spark, t, src, UPSERT)  # versions 0 and 1
    # Entries are published whole, so a cut-short entry 2 was damaged after it was written.
    txn = plant_orphan_staging(spark, t)
    damaged = log_dir(spark, t) / f"{2:020d}.json"
    damaged.write_text('{"format": 1, "version": 2, "tab')
    before = file_snapshot(spark, t)
    with pytest.raises(JournalError) as info:
        recover(spark, t)
    message = str(info.value)
    assert message.startswith(
        f"The journal of {t} cannot be trusted: version 2's entry file:{damaged} is not valid JSON ("
    )
    assert "restore the entry from a backup, or rebuild the table with `dbt run --full-refresh`" in message
    assert damaged.read_text() == '{"format": 1, "version": 2, "tab'  # kept, not discarded
    assert (log_dir(spark, t) / "staging" / txn).is_dir()  # nothing rolled back either
    assert file_snapshot(spark, t) == before
    # The next merge refuses too: it neither reuses version 2 nor runs on a table it cannot vouch for.
    with pytest.raises(JournalError):
        merge(spark, t, source_view(spark, f"{db}_s2", "id long, v string", [(2, "B")]), UPSERT)
    assert file_snapshot(spark, t) == before
    assert [(h["version"], h["operation"]) for h in history(spark, t)] == [
        (2, "UNREADABLE"),
        (1, "MERGE"),
        (0, "CONVERT"),
    ]


def test_journal_missing_staged_file_is_a_clear_error(spark, db, monkeypatch, t):
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A"), (9, "z")])
    crash_after(monkeypatch, "entry")
    with pytest.raises(SimulatedCrash):
        merge(spark, t, src, UPSERT)
    monkeypatch.undo()
    staged = [f["staged"] for f in entry(spark, t, 1)["added"]]
    assert len(staged) == 2
    before = file_snapshot(spark, t)
    os.remove(staged[1].removeprefix("file:"))
    with pytest.raises(JournalError) as info:
        recover(spark, t)
    assert str(info.value) == (
        f"Cannot finish the interrupted commit of version 1 of {t}: 1 staged file(s) are missing and "
        f"not in place either ({staged[1]}); was {'file:' + str(log_dir(spark, t))} edited by hand? "
        "Nothing was moved. Restore the files, or rebuild the table with `dbt run --full-refresh`."
    )
    # Checked before any move: the other staged file is still staged, the table untouched.
    assert os.path.exists(staged[0].removeprefix("file:"))
    assert file_snapshot(spark, t) == before


def _foreign_write(spark, t: str, monkeypatch: pytest.MonkeyPatch, action) -> None:
    """Run ``action`` (another writer) right after the merge staged its files."""

    def hook(name: str) -> None:
        if name == "staged_data":
            action()

    monkeypatch.setattr(faults, "fault_point", hook)


def test_journal_foreign_overwrite_aborts_with_no_change(spark, db, monkeypatch, t):
    victim = files_of(spark, t, "id = 1")[0]  # the file of rows 1 and 2
    _foreign_write(spark, t, monkeypatch, lambda: os.remove(victim))
    src = source_view(spark, f"{db}_s", "id long, v string", [(3, "C")])
    with pytest.raises(ConcurrentMergeError) as info:
        merge(spark, t, src, UPSERT)
    assert str(info.value) == (
        f"MERGE into {t} aborted: another writer changed 1 of the table's files while the merge ran "
        f"(file:{victim}). Nothing was changed; run the model again. Jobs that write this table without "
        "row_level_merge (insert_overwrite runs, manual jobs) must not run at the same time as a merge."
    )
    # Exactly what the foreign writer left: the merge added and removed nothing.
    assert rows(spark, t) == [(3, "c")]
    assert history(spark, t) == []
    assert os.listdir(log_dir(spark, t) / "staging") == []


def test_journal_foreign_rewrite_of_a_file_in_place_aborts(spark, db, monkeypatch, t):
    victim = files_of(spark, t, "id = 3")[0]  # a file the merge does not even touch

    def rewrite_in_place() -> None:
        data = Path(victim).read_bytes()
        Path(victim).write_bytes(data)
        os.utime(victim, (time.time() + 5, time.time() + 5))

    _foreign_write(spark, t, monkeypatch, rewrite_in_place)
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    with pytest.raises(ConcurrentMergeError, match="another writer changed 1 of the table's files"):
        merge(spark, t, src, UPSERT)
    assert rows(spark, t) == [(1, "a"), (2, "b"), (3, "c")]


def test_journal_foreign_append_is_kept_and_merge_commits(spark, db, monkeypatch, t):
    def append() -> None:
        spark.createDataFrame([(50, "x")], "id long, v string").write.insertInto(t)

    _foreign_write(spark, t, monkeypatch, append)
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    assert merge(spark, t, src, UPSERT).version == 1
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (50, "x")]


def test_journal_merge_waits_for_the_lock_then_commits(spark, db, t):
    storage = storage_for(spark)
    holder = TableLock(storage, "file:" + str(log_dir(spark, t)), t, "MERGE", 0)
    holder.acquire()
    timer = threading.Timer(2.0, holder.release)
    timer.start()
    started = time.monotonic()
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    result = merge(spark, t, src, UPSERT, lock_timeout_s=60)
    timer.join()
    assert time.monotonic() - started >= 2.0
    assert result.version == 1
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c")]


def test_journal_merge_and_recover_fail_naming_the_lock_holder(spark, db, t):
    storage = storage_for(spark)
    before = file_snapshot(spark, t)
    with TableLock(storage, "file:" + str(log_dir(spark, t)), t, "MERGE", 0):
        src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
        with pytest.raises(ConcurrentMergeError, match=f"MERGE on {t} gave up after waiting 1 s"):
            merge(spark, t, src, UPSERT, lock_timeout_s=1)
        with pytest.raises(ConcurrentMergeError, match=f"RECOVER on {t} gave up after waiting 0.5 s"):
            recover(spark, t, lock_timeout_s=0.5)
    assert file_snapshot(spark, t) == before
    assert history(spark, t) == []


def test_journal_expired_remote_lock_is_fenced_before_the_merge(spark, db, monkeypatch, t):
    folder = log_dir(spark, t) / "lock"
    folder.mkdir(parents=True)
    stale = Owner("other-host", 77, "MERGE", t, "x", time.time() - 3600, 60.0)
    (folder / f"{1:020d}.json").write_text(json.dumps(stale.__dict__))
    # The old holder staged files before it stalled: they must not survive the takeover.
    orphan = log_dir(spark, t) / "staging" / "old-txn" / "data"
    orphan.mkdir(parents=True)
    (orphan / "part-0.parquet").write_bytes(b"x")
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    result = merge(spark, t, src, UPSERT)
    assert result.version == 2
    log = history(spark, t)
    assert [(h["version"], h["operation"]) for h in log] == [(2, "MERGE"), (1, "FENCE"), (0, "CONVERT")]
    assert entry(spark, t, 1)["reason"].startswith(
        f"lock taken over from MERGE on {t} by pid 77 on host other-host"
    )
    assert os.listdir(log_dir(spark, t) / "staging") == []
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c")]


def test_journal_unreadable_expired_lease_is_fenced(spark, db, t):
    """A lease nobody can read may belong to a writer that still runs: taking it over fences it out."""
    folder = log_dir(spark, t) / "lock"
    folder.mkdir(parents=True)
    lease = folder / f"{1:020d}.json"
    lease.write_text("{not json")
    old = time.time() - 3600
    os.utime(lease, (old, old))
    src = source_view(spark, f"{db}_s", "id long, v string", [(1, "A")])
    assert merge(spark, t, src, UPSERT).version == 2
    log = history(spark, t)
    assert [(h["version"], h["operation"]) for h in log] == [(2, "MERGE"), (1, "FENCE"), (0, "CONVERT")]
    reason = entry(spark, t, 1)["reason"]
    assert reason == f"lock taken over from an unknown writer (its lease file:{lease} could not be read)"
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c")]


def test_journal_writer_that_lost_its_lease_while_paused_gets_a_clear_error(spark, db, monkeypatch, t):
    """Paused past its lease, the writer finds its staging removed by the new holder's recovery."""
    changes = f"{t}__changes"
    merge(spark, t, source_view(spark, f"{db}_s0", "id long, v string", [(1, "A")]), UPSERT,
          change_data_feed={"table": changes})  # fmt: skip
    before = file_snapshot(spark, t), rows(spark, changes)
    lock_dir = log_dir(spark, t) / "lock"

    def paused_and_taken_over(name: str) -> None:
        if name != "staged_data":
            return
        # While this writer slept, another machine's writer took the expired lease over
        # (a higher generation) and its recovery rolled this writer's staging back.
        top = max(int(n.split(".")[0]) for n in os.listdir(lock_dir) if n.endswith(".json"))
        other = Owner("other-host", 77, "MERGE", t, "x", time.time(), 60.0)
        (lock_dir / f"{top + 1:020d}.json").write_text(json.dumps(other.__dict__))
        for txn in os.listdir(log_dir(spark, t) / "staging"):
            shutil.rmtree(log_dir(spark, t) / "staging" / txn)

    monkeypatch.setattr(faults, "fault_point", paused_and_taken_over)
    # Insert-only with a change feed: the feed is read back from the (now missing) staging.
    src = source_view(spark, f"{db}_s", "id long, v string", [(8, "h"), (9, "i")])
    with pytest.raises(ConcurrentMergeError) as info:
        merge(spark, t, src, [UPSERT[1]], change_data_feed={"table": changes})
    assert str(info.value) == (
        f"MERGE on {t} aborted: this process lost the table's lock (its lease expired and MERGE on {t} "
        f"by pid 77 on host other-host, since {_since(other_since(lock_dir))} took it over). Nothing was "
        "changed; run the model again."
    )
    assert (file_snapshot(spark, t), rows(spark, changes)) == before


def other_since(lock_dir: Path) -> float:
    top = max(n for n in os.listdir(lock_dir) if n.endswith(".json"))
    return float(json.loads((lock_dir / top).read_text())["acquired_at"])


def _since(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class Flaky(Exception):
    """Stands for a storage or metastore call failing after the commit point."""


def test_journal_error_after_the_commit_point_is_committed_not_failed(spark, db, monkeypatch):
    t = f"{db}.counts"
    create_table(spark, t, "id long, n int", [[(1, 10), (2, 20)], [(3, 30)]])
    src = source_view(spark, f"{db}_s", "id long, n int", [(1, 1), (3, 3)])
    clauses = [{"when": "matched", "action": "update", "set": {"n": "t.n + s.n"}}]

    def storage_fails(name: str) -> None:
        if name == "move_0":
            raise Flaky("the metastore went away")

    monkeypatch.setattr(faults, "fault_point", storage_fails)
    with pytest.raises(MergeCommittedError) as info:
        merge(spark, t, src, clauses)
    monkeypatch.undo()
    err = info.value
    assert not isinstance(err, MergeError)  # a caller that retries MergeErrors must not retry this
    assert (err.table, err.version) == (t, 1)
    assert str(err) == (
        f"MERGE into {t} is committed as version 1, but applying it stopped: the metastore went away. "
        "The merge is durable and will be completed by recovery, which runs before the next merge of "
        f"this table (or now: `dbt run-operation rowmerge_recover --args '{{relation: {t}}}'`). Do not "
        "run this merge again: it would be applied twice."
    )
    assert recover(spark, t).rolled_forward == [1]
    assert rows(spark, t) == [(1, 11), (2, 20), (3, 33)]  # applied once
    assert [(h["version"], h["applied"]) for h in history(spark, t)] == [(1, True), (0, True)]


def _crash_committed(
    spark, db, monkeypatch, t: str, step: str, rows_: list[tuple[int, str]]
) -> dict[str, Any]:
    """Run an upsert that dies right after ``step`` of the commit protocol; return its entry."""
    crash_after(monkeypatch, step)
    with pytest.raises(SimulatedCrash):
        merge(spark, t, source_view(spark, f"{db}_c", "id long, v string", rows_), UPSERT)
    monkeypatch.undo()
    return entry(spark, t, 1)


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda e: "[]", "holds a JSON list, not an object"),
        (lambda e: json.dumps({k: v for k, v in e.items() if k != "removed"}), "has no `removed`"),
        (lambda e: json.dumps({**e, "version": 7}), "says it is version 7, but its file is version 1"),
        (lambda e: json.dumps(e)[:-40], "is not valid JSON"),
    ],
    ids=["list", "no-removed", "wrong-version", "cut-short"],
)
def test_journal_damaged_entry_of_a_partly_applied_commit_is_never_discarded(
    spark, db, monkeypatch, t, damage, reason
):
    committed = _crash_committed(spark, db, monkeypatch, t, "move_0", [(1, "A"), (9, "z")])
    path = log_dir(spark, t) / f"{1:020d}.json"
    path.write_text(damage(committed))
    # One staged file is already in place next to the file it replaces: rows 1 and 2 show twice.
    partly = file_snapshot(spark, t), rows(spark, t)
    with pytest.raises(JournalError, match=re.escape(f"version 1's entry file:{path} {reason}")):
        recover(spark, t)
    with pytest.raises(JournalError):  # and the next merge neither runs nor reuses version 1
        merge(spark, t, source_view(spark, f"{db}_n", "id long, v string", [(5, "e")]), UPSERT)
    assert (file_snapshot(spark, t), rows(spark, t)) == partly
    assert os.listdir(log_dir(spark, t) / "staging") == [committed["txn"]]
    # Restoring the entry is the fix the message names: recovery then finishes the commit.
    path.write_text(json.dumps(committed, indent=1))
    assert recover(spark, t).rolled_forward == [1]
    assert rows(spark, t) == [(1, "A"), (2, "b"), (3, "c"), (9, "z")]


def test_journal_entry_of_a_newer_format_asks_for_an_upgrade(spark, db, monkeypatch, t):
    committed = _crash_committed(spark, db, monkeypatch, t, "entry", [(1, "A"), (9, "z")])
    path = log_dir(spark, t) / f"{1:020d}.json"
    # The entry reads back exactly as it was written (one parser, one serializer).
    assert json.loads(journal_module.Entry.parse(path.read_text(), 1).to_json()) == committed
    newer = json.dumps({**committed, "format": 5, "added": "laid out some other way"})
    path.write_text(newer)
    before = file_snapshot(spark, t), rows(spark, t)
    with pytest.raises(JournalError) as info:
        recover(spark, t)
    assert str(info.value) == (
        f"The journal of {t} cannot be read by this release: version 1's entry file:{path} was "
        "written by a newer rowmerge (entry format 5; this release reads formats up to 4). Upgrade "
        "dbt-rowmerge to the release that wrote it (every writer of a table must run the same "
        "release, or a newer one). Nothing was changed."
    )
    assert path.read_text() == newer  # kept
    assert (file_snapshot(spark, t), rows(spark, t)) == before
    newest = history(spark, t)[0]
    assert (newest["version"], newest["operation"]) == (1, "UNREADABLE")
    assert "written by a newer rowmerge" in newest["metrics"]["error"]


@pytest.mark.parametrize(
    "fmt, error, reason",
    [
        (5, journal_module.EntryTooNew, "was written by a newer rowmerge (entry format 5"),
        (0, journal_module.EntryInvalid, "has format 0; this release reads formats 1 to 4"),
        ("1", journal_module.EntryInvalid, "has `format` = '1', not a whole number"),
    ],
)
def test_journal_entry_format_is_checked_first(fmt, error, reason):
    with pytest.raises(journal_module.EntryInvalid) as info:
        journal_module.Entry.parse(json.dumps({"format": fmt, "version": 5}), 1)
    assert type(info.value) is error
    assert str(info.value).startswith(reason)


def _tampered(spark, db, monkeypatch, t, edit) -> tuple[dict[str, Any], Path]:
    committed = _crash_committed(spark, db, monkeypatch, t, "entry", [(1, "A"), (9, "z")])
    path = log_dir(spark, t) / f"{1:020d}.json"
    path.write_text(json.dumps(edit(json.loads(json.dumps(committed))), indent=1))
    return committed, path


def test_journal_removed_path_outside_the_table_is_refused(spark, db, monkeypatch, t, tmp_path):
    precious = tmp_path / "precious.parquet"
    precious.write_bytes(b"not yours")

    def edit(e):
        e["removed"][0]["path"] = f"file:{precious}"
        return e

    committed, _ = _tampered(spark, db, monkeypatch, t, edit)
    before = file_snapshot(spark, t)
    with pytest.raises(
        JournalError, match=f"removes removed\\[0\\] file:{precious}, which is not a data file"
    ):
        recover(spark, t)
    assert precious.read_bytes() == b"not yours"
    assert file_snapshot(spark, t) == before
    assert all(os.path.exists(f["staged"].removeprefix("file:")) for f in committed["added"])


@pytest.mark.parametrize("where", ["outside", "dot-dot", "log-folder"])
def test_journal_added_path_outside_the_table_is_refused(spark, db, monkeypatch, t, tmp_path, where):
    loc = "file:" + table_dir(spark, t)
    target = {
        "outside": f"file:{tmp_path}/stolen.parquet",
        "dot-dot": f"{loc}/../escaped.parquet",
        "log-folder": f"{loc}/_rowmerge_log/hidden.parquet",
    }[where]

    def edit(e):
        e["added"][0]["path"] = target
        return e

    committed, _ = _tampered(spark, db, monkeypatch, t, edit)
    before = file_snapshot(spark, t)
    with pytest.raises(JournalError, match="adds added\\[0\\] .*, which is not a data file of the table"):
        recover(spark, t)
    assert file_snapshot(spark, t) == before
    assert not os.path.exists(target.removeprefix("file:"))
    assert all(os.path.exists(f["staged"].removeprefix("file:")) for f in committed["added"])


def test_journal_staged_path_outside_the_staging_folder_is_refused(spark, db, monkeypatch, t):
    other = f"{db}.other"
    create_table(spark, other, "id long, v string", [[(7, "g")]])
    victim = files_of(spark, other, "id = 7")[0]

    def edit(e):
        e["added"][0]["staged"] = f"file:{victim}"
        return e

    _tampered(spark, db, monkeypatch, t, edit)
    before = file_snapshot(spark, t)
    with pytest.raises(JournalError, match="stages added\\[0\\] at file:"):
        recover(spark, t)
    assert os.path.exists(victim) and rows(spark, other) == [(7, "g")]
    assert file_snapshot(spark, t) == before


class RecordingStorage:
    """The session's real storage, recording each delete (and able to stop after ``limit``
    of them)."""

    def __init__(self, spark, limit: int | None = None) -> None:
        self.inner = storage_for(spark)
        self.deleted: list[str] = []
        self.limit = limit

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete(self, path: str, recursive: bool = False) -> bool:
        if self.limit is not None and len(self.deleted) >= self.limit:
            raise SimulatedCrash(path)
        self.deleted.append(path.rsplit("/", 1)[-1])
        return self.inner.delete(path, recursive)


def test_journal_reset_deletes_newest_first_each_entry_before_its_marker(spark, db, t):
    for i, key in enumerate((1, 2)):
        merge(spark, t, source_view(spark, f"{db}_r{i}", "id long, v string", [(key, "x")]), UPSERT)
    loc, folder = "file:" + table_dir(spark, t), log_dir(spark, t)
    saved = folder.parent / "saved_log"
    shutil.copytree(folder, saved)
    recording = RecordingStorage(spark)
    assert journal_module.Journal(recording, loc).reset() == 3
    names = [n for n in recording.deleted if n[0].isdigit()]
    assert names == [f"{v:020d}{suffix}" for v in (2, 1, 0) for suffix in (".json", ".applied")]
    # Interrupted anywhere, what is left is older versions, each still marked applied.
    for limit in range(1, 6):
        shutil.rmtree(folder)
        shutil.copytree(saved, folder)
        with pytest.raises(SimulatedCrash):
            journal_module.Journal(RecordingStorage(spark, limit), loc).reset()
        versions, applied = journal_module.Journal(storage_for(spark), loc).listing()
        assert len(versions) == 3 - (limit + 1) // 2 and set(versions) <= applied, (limit, versions, applied)
        assert not recover(spark, t).rolled_forward


def test_journal_change_table_of_an_entry_must_be_a_change_feed(spark, db, monkeypatch, t):
    other = f"{db}.plain"
    create_table(spark, other, "id long, v string", [[(7, "g")]])
    crash_after(monkeypatch, "entry")
    with pytest.raises(SimulatedCrash):
        merge(spark, t, source_view(spark, f"{db}_c", "id long, v string", [(1, "A")]), UPSERT,
              change_data_feed={"table": f"{t}__changes"})  # fmt: skip
    monkeypatch.undo()
    path = log_dir(spark, t) / f"{1:020d}.json"
    committed = json.loads(path.read_text())
    committed["cdf"]["table"] = other
    path.write_text(json.dumps(committed))
    before = file_snapshot(spark, t), file_snapshot(spark, other)
    with pytest.raises(JournalError, match=f"names change table {other}, which is not a change feed"):
        recover(spark, t)
    assert (file_snapshot(spark, t), file_snapshot(spark, other)) == before
