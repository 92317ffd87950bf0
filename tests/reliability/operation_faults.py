"""Kill RESTORE and VACUUM after every step of their commit, and check each recovery.

A table operation commits through the journal as a merge does (restore.py, vacuum.py), so a
victim process (victim.py, job kinds ``restore`` and ``vacuum``) runs it on a table with
history and dies right after one step (``ROWMERGE_FAULT_AFTER``); the test process then
recovers the table and checks, as run_fault_injection does for merges:

* the rows and the change feed every reader sees (the catalog, and a plain read of the folders)
  are exactly those before the operation (death before its commit point) or after it;
* so are the retained files (``_rowmerge_log/retained/<version>/``: each path and its bytes);
* history shows the operation iff it committed;
* every version in retention in the state reached reads back with ``as_of`` as the rows saved
  when it was current: no retained file of a version in retention is lost;
* the table takes one more merge.

The table is built once in the test's session: merges with retention and the change feed on
(and, for VACUUM, a first vacuum that folds the journal into a base, so the victim's vacuum
folds an older base and drops change-feed versions too). Its folders and its change table's
are saved, and every run — the uninterrupted traced one that names the steps and gives the
post state, then one trial per step — starts from them put back at the same locations. The
journal names files by their full paths, so a table copied elsewhere would need another
journal; put back in place, every trial starts from the same bytes under the same journal.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import as_of, history, recover, run_merge, vacuum
from dbt.adapters.rowmerge.merge.journal import LOG_DIR, STAGING_DIR, Entry
from dbt.adapters.rowmerge.merge.storage import STORAGE_CONF, local_path
from dbt.adapters.rowmerge.merge.table import COMMIT_VERSION, quote, register_partitions, sql_name
from tests.reliability.harness import (
    CDC,
    FAULT_EXIT,
    State,
    Table,
    commit_steps,
    crash_steps,
    create_target,
    diff,
    job,
    journal_of,
    long_campaign,
    losses,
    observe,
    result_line,
    run_victim,
    sort_rows,
    spec,
    victim_env,
    write_job,
)
from tests.reliability.victim import STORAGE_ENV

Row = tuple[Any, ...]
SHAPE = CDC  # id bigint, v string, n int: four files of five rows; merges delete with op 'D'
RETAIN_VERSIONS = 10  # the tables' stored retention: every version they make stays readable
# The merge every recovered table must still take (an update of a row every version has).
AFTER = [(1, "after", 1, "U"), (99, "new", 990, "I")]


@dataclass(frozen=True)
class Operation:
    """One table operation under test: the history it runs on, and its victim job."""

    name: str  # the job kind: restore, vacuum
    # Each version after version 0, in order: a merge's CDC source rows, or a vacuum's arguments.
    history: tuple[list[Row] | dict[str, Any], ...]
    arguments: dict[str, Any]  # what the victim passes to the operation
    before_commit: str  # the one step before the operation's entry (its commit point)

    @property
    def operation(self) -> str:
        return self.name.upper()


RESTORE = Operation(
    name="restore",
    history=(
        [(2, "two", 20, "U"), (30, "thirty", 300, "I")],
        [(7, "seven", 70, "U"), (8, "gone", 0, "D"), (31, "thirty-one", 310, "I")],
        [(12, "twelve", 120, "U"), (2, "deux", 22, "U")],
    ),
    # Version 1 again: three replaced files come back from retained/2 and retained/3, and the
    # files versions 2 and 3 wrote leave (into retained/4); the feed pairs updates by id.
    arguments={"version": 1, "unique_key": "id"},
    before_commit="restore_staged",
)

VACUUM = Operation(
    name="vacuum",
    history=(
        [(2, "two", 20, "U"), (30, "thirty", 300, "I")],
        [(7, "seven", 70, "U")],
        [(31, "thirty-one", 310, "I")],  # inserts only: replaces no file, retains nothing
        [(12, "twelve", 120, "U"), (8, "gone", 0, "D")],
        # version 5 deletes retained/1 and /2 and folds versions 0 to 2 into the base of 2
        {"retain_versions": 2, "force": True},
        [(17, "seventeen", 170, "U")],
        [(3, "three", 30, "U"), (32, "thirty-two", 320, "I")],
    ),
    # Version 8 deletes retained/4 and /6, folds the base of 2 and versions 3 to 6 into the
    # base of 6, and drops the change-feed versions before 6 (1 to 4).
    arguments={"retain_versions": 1, "change_feed_retain_versions": 2, "force": True},
    before_commit="vacuum_base",
)

OPERATIONS = {op.name: op for op in (RESTORE, VACUUM)}


@dataclass(frozen=True)
class Reached:
    """Everything a trial compares: what readers see, the retained files, every version in
    retention with its rows, and the newest version with its operation."""

    state: State
    retained: dict[str, str]  # path below the table's folder -> SHA-256 of the bytes
    readable: dict[int, list[Row]]  # version in retention -> its rows (as_of)
    newest: tuple[int, str]


def retained_files(table: Table) -> dict[str, str]:
    """Every retained data file of ``table`` (``.crc`` files aside) with a digest of its bytes."""
    folder = local_path(table.location)
    assert folder is not None
    root = os.path.join(folder, LOG_DIR, "retained")
    out = {}
    for path, _, names in os.walk(root):
        for n in names:
            if not n.startswith("."):
                with open(os.path.join(path, n), "rb") as fh:
                    out[os.path.relpath(os.path.join(path, n), folder)] = hashlib.sha256(
                        fh.read()
                    ).hexdigest()
    return out


def read_back(spark: SparkSession, table: Table, versions: Iterable[int]) -> dict[int, list[Row]]:
    """The rows of each of ``versions``, read with ``as_of`` (in one Spark job)."""
    columns = [c.split()[0] for c in SHAPE.ddl.split(",")]
    reads = [
        as_of(spark, table.name, version=v).select(F.lit(v).alias("version"), *columns) for v in versions
    ]
    out: dict[int, list[Row]] = {v: [] for v in versions}
    for r in reduce(DataFrame.unionByName, reads).collect():
        out[r[0]].append(tuple(r)[1:])
    return {v: sort_rows(rows) for v, rows in out.items()}


def reach(spark: SparkSession, table: Table, saved: dict[int, list[Row]]) -> Reached:
    """What ``table`` holds now (every version history lists must be in ``saved``)."""
    rows = history(spark, table.name)
    readable = {h["version"]: saved[h["version"]] for h in rows}
    assert read_back(spark, table, readable) == readable, "a version does not read back"
    return Reached(
        observe(spark, table, SHAPE),
        retained_files(table),
        readable,
        (rows[0]["version"], rows[0]["operation"]),
    )


@dataclass
class Saved:
    """The table's folders (and its change table's), put back in place before every run."""

    table: Table
    folder: Path
    partitions: set[str]  # the change table's partitions in the test's catalog

    def _pairs(self) -> list[tuple[str, Path]]:
        out = []
        for location, name in ((self.table.location, "table"), (self.table.changes_location, "changes")):
            path = local_path(location)
            assert path is not None, "operation trials put back local tables only"
            out.append((path, self.folder / name))
        return out

    def save(self) -> None:
        for path, copy in self._pairs():
            shutil.copytree(path, copy)

    def put_back(self, spark: SparkSession) -> None:
        """The saved folders in place again, and the change table's catalog partitions theirs."""
        extra = partitions(spark, self.table.changes) - self.partitions
        if extra:  # before the folders come back: dropping a managed partition deletes its folder
            drop_partitions(spark, self.table.changes, extra)
        for path, copy in self._pairs():
            shutil.rmtree(path)
            shutil.copytree(copy, path)
        spark.sql(f"ALTER TABLE {self.table.changes} RECOVER PARTITIONS")
        spark.catalog.refreshTable(self.table.name)
        spark.catalog.refreshTable(self.table.changes)


def partitions(spark: SparkSession, name: str) -> set[str]:
    return {r[0] for r in spark.sql(f"SHOW PARTITIONS {name}").collect()}


def drop_partitions(spark: SparkSession, name: str, specs: Iterable[str]) -> None:
    parts = ", ".join(f"PARTITION ({quote(COMMIT_VERSION)} = {s.split('=', 1)[1]})" for s in sorted(specs))
    spark.sql(f"ALTER TABLE {name} DROP IF EXISTS {parts}")


def build(spark: SparkSession, db: str, op: Operation) -> tuple[Table, dict[int, list[Row]]]:
    """The operation's table with its history; the rows of every version, version 0 first."""
    table = create_target(spark, f"{db}.{op.name}_t", SHAPE)
    saved = {0: observe(spark, table, SHAPE).rows}
    for version, step in enumerate(op.history, start=1):
        if isinstance(step, dict):
            done = vacuum(spark, table.name, **step)
            assert done.version == version, done
        else:
            source = f"{op.name}_src_{version}"
            spark.createDataFrame(step, SHAPE.source_ddl).createOrReplaceTempView(source)
            result = run_merge(
                spark, spec(SHAPE, table, source, auto_compact=False, retain_versions=RETAIN_VERSIONS)
            )
            assert result.version == version
        saved[version] = observe(spark, table, SHAPE).rows
    return table, saved


def mirror(spark: SparkSession, table: Table, entry: Entry) -> None:
    """What a victim that applied ``entry`` did to its own catalog, done to ours: with a shared
    metastore it would be ours. (What it did not apply, recovery must do by itself.)"""
    if entry.cdf:
        register_partitions(spark, sql_name(table.changes), [entry.cdf.partition])
    if entry.feed_expired:
        drop_partitions(spark, table.changes, [f"{COMMIT_VERSION}={k}" for k in entry.feed_expired.versions])


def after_victim(spark: SparkSession, table: Table, number: int) -> tuple[bool, list[int]]:
    """Recover ``table`` once its victim is gone: (whether version ``number`` was committed,
    the versions recovery rolled forward)."""
    versions, applied = journal_of(spark, table).listing()
    committed = versions[-1] == number
    if committed and number in applied:
        mirror(spark, table, journal_of(spark, table).read_entry(number))
    recovered = recover(spark, table.name, lock_timeout_s=60).rolled_forward
    staging = os.path.join(local_path(table.location) or "", LOG_DIR, STAGING_DIR)
    assert not os.path.isdir(staging) or os.listdir(staging) == [], "staging left after recovery"
    return committed, recovered


def merge_after(spark: SparkSession, table: Table, rows: list[Row], version: int) -> None:
    """One more merge into the recovered table: it commits as ``version`` and changes what it should."""
    source = f"{table.name.split('.')[1]}_after"
    spark.createDataFrame(AFTER, SHAPE.source_ddl).createOrReplaceTempView(source)
    result = run_merge(spark, spec(SHAPE, table, source, auto_compact=False))
    assert result.version == version, (result.version, version)
    keys = {r[0] for r in AFTER}
    want = sort_rows([r for r in rows if r[0] not in keys] + [r[:3] for r in AFTER])
    spark.catalog.refreshTable(table.name)
    assert sort_rows(tuple(r) for r in spark.table(table.name).collect()) == want


def expected_steps(op: Operation, steps: list[str]) -> list[str]:
    """The steps the operation's commit takes, as its apply names them (journal/apply.py)."""
    if op is RESTORE:
        return [op.before_commit, *commit_steps(steps, "restore_")]
    expires = [s for s in steps if s.startswith("vacuum_expire_")]
    folds = ["vacuum_fold_json", "vacuum_fold_applied", "vacuum_fold_stats_json", "vacuum_fold_base_json"]
    return [
        op.before_commit,
        "vacuum_entry",
        "vacuum_registered",
        *expires,
        *folds,
        "vacuum_feed_dropped",
        "vacuum_feed_deleted",
        "vacuum_before_applied",
        "vacuum_applied",
    ]


def folder_version(path: str) -> int:
    """The version whose ``retained/`` folder holds ``path`` (a key of Reached.retained)."""
    return int(path.split("/")[2])


def check_post(
    op: Operation,
    pre: Reached,
    post: Reached,
    saved: dict[int, list[Row]],
    number: int,
    steps: list[str],
    table: Table,
) -> None:
    """The uninterrupted run did what the operation does (every trial is compared with it)."""
    assert post.newest == (number, op.operation) and pre.newest[0] == number - 1
    assert post.state.consistent() and pre.state.consistent()
    moved = {p for p in pre.retained if p not in post.retained}
    if op is RESTORE:
        assert post.state.rows == saved[op.arguments["version"]] != pre.state.rows
        assert [c for c in post.state.changes if c[-1] != number] == pre.state.changes
        assert sum(s.startswith("restore_move_") for s in steps) >= 2, steps
        assert sum(s.startswith("restore_delete_") for s in steps) >= 2, steps
        # the files it brought back left their retained folders for the table's, unchanged; the
        # current files it took out are kept in its own folder
        folder = local_path(table.location)
        assert folder is not None and moved
        for p in moved:
            with open(os.path.join(folder, p.split("/", 3)[3]), "rb") as fh:
                assert hashlib.sha256(fh.read()).hexdigest() == pre.retained[p], p
        assert {folder_version(p) for p in post.retained.keys() - pre.retained.keys()} == {number}
        assert sorted(post.readable) == [*sorted(pre.readable), number]
    else:
        assert post.state.rows == pre.state.rows
        cutoff = number - op.arguments["change_feed_retain_versions"]
        assert post.state.changes == [c for c in pre.state.changes if c[-1] >= cutoff] != pre.state.changes
        assert sum(s.startswith("vacuum_expire_") for s in steps) >= 2, steps
        # only the folders of versions no longer in retention went: every other file stays
        oldest = min(post.readable)
        assert oldest > min(pre.readable) and sorted(post.readable) == [
            *[v for v in sorted(pre.readable) if v >= oldest],
            number,
        ]
        assert moved and all(folder_version(p) <= oldest for p in moved)
        assert post.retained == {p: d for p, d in pre.retained.items() if folder_version(p) > oldest}


def run_operation_fault_injection(
    spark: SparkSession, db: str, tmp_path: Path, java_opts: str, op: Operation
) -> dict[str, int]:
    """Kill a victim running ``op`` after every step of its commit in turn; check each recovery.

    Returns the counts for the report: trials, rows lost / duplicated over every reader's
    view, the versions read back and the retained files lost (asserted 0).
    """
    setup = {STORAGE_ENV: str(spark.conf.get(STORAGE_CONF, "auto"))}
    table, saved = build(spark, db, op)
    number = len(op.history) + 1  # the operation's version
    pre = reach(spark, table, saved)
    kept = Saved(table, tmp_path / "saved", partitions(spark, table.changes))
    kept.save()
    data = {"root": str(tmp_path), "tables": job(SHAPE, table, tmp_path)["tables"]}
    data.update(kind=op.name, table=table.name, **op.arguments)
    job_file = write_job(tmp_path / "job.json", data)

    # The uninterrupted run: it names every step, and gives the post state.
    trace = tmp_path / "trace.txt"
    proc = run_victim(job_file, victim_env(java_opts, ROWMERGE_FAULT_TRACE=str(trace), **setup))
    done = result_line(proc.stdout) or {}
    assert proc.returncode == 0 and done.get("ok") and done["version"] == number, proc.stderr[-3000:]
    assert after_victim(spark, table, number) == (True, [])
    post = reach(spark, table, {**saved, number: observe(spark, table, SHAPE).rows})
    steps = trace.read_text().split()
    assert steps == expected_steps(op, steps), steps
    check_post(op, pre, post, saved, number, steps, table)

    lost = duplicated = files_lost = read = 0
    steps = crash_steps(steps)
    for step in steps:
        kept.put_back(spark)
        proc = run_victim(job_file, victim_env(java_opts, ROWMERGE_FAULT_AFTER=step, **setup))
        assert proc.returncode == FAULT_EXIT, (step, proc.returncode, proc.stderr[-3000:])
        committed, recovered = after_victim(spark, table, number)
        assert committed == (step != op.before_commit), step
        assert recovered == ([] if step in (op.before_commit, f"{op.name}_applied") else [number]), step
        want = post if committed else pre
        which = "post" if committed else "pre"
        state = observe(spark, table, SHAPE)
        lo, du = losses(state, want.state)
        retained = retained_files(table)
        files_lost += sum(1 for p, digest in want.retained.items() if retained.get(p) != digest)
        for version, rows in read_back(spark, table, want.readable).items():
            lo_v, du_v = diff(rows, want.readable[version])
            lo, du, read = lo + lo_v, du + du_v, read + 1
        lost, duplicated = lost + lo, duplicated + du
        assert state == want.state, (
            f"after a crash at step {step!r} the table is not the {which}-{op.name} state"
        )
        assert retained == want.retained, f"after a crash at step {step!r} the retained files are not {which}"
        assert (lo, du) == (0, 0), f"after a crash at step {step!r} a version in retention reads back wrong"
        listed = history(spark, table.name)
        assert [h["version"] for h in listed] == sorted(want.readable, reverse=True), step
        assert (listed[0]["version"], listed[0]["operation"]) == want.newest and listed[0]["applied"], step
        # A merge after the recovery (a quarter of a trial's time): after the first crash
        # before the commit point, the first after it and the last; after every one in the
        # long campaign.
        if long_campaign() or step in (steps[0], steps[1], steps[-1]):
            merge_after(spark, table, want.state.rows, want.newest[0] + 1)
    return {
        "fault_trials": len(steps),
        f"fault_trials_{op.name}": len(steps),
        "rows_lost": lost,
        "rows_duplicated": duplicated,
        "retained_files_lost": files_lost,
        "versions_read_back": read,
    }


def operation_fault_injection_test(name: str) -> Callable[..., None]:
    """The test of one operation; each sits in its own module so xdist runs them side by side."""

    @pytest.mark.slow
    def test(spark: SparkSession, rdb: str, tmp_path: Path, java_opts: str, record_property: Any) -> None:
        counts = run_operation_fault_injection(spark, rdb, tmp_path, java_opts, OPERATIONS[name])
        record_property("reliability", counts)
        assert (counts["rows_lost"], counts["rows_duplicated"], counts["retained_files_lost"]) == (0, 0, 0)

    test.__name__ = f"test_fault_injection_{name}_every_commit_step"
    return test
