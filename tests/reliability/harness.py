"""What the reliability suites share: merge shapes, expected states, victim processes, checks.

A trial builds a fresh target (and its change table) in the test's Hive catalog, lets a
victim process (tests/reliability/victim.py) merge into it and die, then recovers the table
from the test process and compares what every reader sees — the catalog, and a plain read
of the table's folder, as a Parquet reader without a metastore would do — with the states
the same merge produces when nothing goes wrong: before the merge, or after it. Row lists are
compared as sorted multisets, so a lost or a duplicated row fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from dbt.adapters.rowmerge.merge import recover, run_merge, start_history
from dbt.adapters.rowmerge.merge.journal import APPLIED_SUFFIX, LOG_DIR, STAGING_DIR, Entry, Journal
from dbt.adapters.rowmerge.merge.storage import (
    STORAGE_CONF,
    HadoopStorage,
    Storage,
    is_hidden,
    local_path,
    storage_for,
)
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage
from dbt.adapters.rowmerge.merge.table import describe_table, register_partitions, sql_name
from tests.engine.helpers import create_table, session_conf
from tests.reliability.victim import MASTER_ENV, STORAGE_ENV

REPO = Path(__file__).resolve().parents[2]
FAULT_EXIT = 137


@dataclass(frozen=True)
class Shape:
    """One merge: the target's files, the source rows and the clauses."""

    name: str
    ddl: str
    files: list[list[tuple[Any, ...]]]
    source_ddl: str
    source_rows: list[tuple[Any, ...]]
    clauses: list[dict[str, Any]]
    partition_by: tuple[str, ...] = ()
    on: str = "t.id = s.id"
    # The victim reads the source from a Parquet file (a size Spark estimates, so an insert of
    # new keys is written directly: direct.py), not from rows in the driver.
    source_from_file: bool = False
    replaces_files: bool = True  # the merge replaces some file (its commit deletes one)


def _files(start: int, count: int, per_file: int, p: int | None = None) -> list[list[tuple[Any, ...]]]:
    out = []
    for f in range(count):
        ids = range(start + f * per_file, start + (f + 1) * per_file)
        out.append([(i, f"v{i}", i * 10) + ((p,) if p is not None else ()) for i in ids])
    return out


UPSERT = Shape(
    name="upsert",
    ddl="id bigint, v string, n int",
    files=_files(1, 4, 5),
    source_ddl="id bigint, v string, n int",
    # 2 changes, 3 is unchanged (skipped), 30/31 are new: one file rewritten, one of inserts.
    source_rows=[(2, "two", 20), (3, "v3", 30), (30, "v30", 300), (31, "v31", 310)],
    clauses=[
        {"when": "matched", "action": "update", "set": "*"},
        {"when": "not_matched", "action": "insert", "values": "*"},
    ],
)

CDC = Shape(
    name="cdc",
    ddl="id bigint, v string, n int",
    files=_files(1, 4, 5),
    source_ddl="id bigint, v string, n int, op string",
    # The first and the last file are touched, two untouched ones lie between them in key
    # order: the rewrite writes each file's rows apart (a folder per task group, placed in the
    # table under names of their own: rewrite.task_groups, journal.layout.placed).
    source_rows=[
        (1, "gone", 0, "D"),
        (17, "seventeen", 177, "U"),
        (18, "gone", 0, "D"),
        (40, "forty", 400, "I"),
        (41, "never", 0, "D"),  # delete of an unknown row: nothing happens
    ],
    clauses=[
        {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
        {"when": "matched", "action": "update", "set": {"v": "s.v", "n": "s.n"}},
        {"when": "not_matched", "condition": "s.op <> 'D'", "action": "insert", "values": "*"},
    ],
)

NMBS_PARTITIONED = Shape(
    name="nmbs_partitioned",
    ddl="id bigint, v string, n int, p int",
    files=_files(1, 1, 4, p=1) + _files(11, 2, 4, p=2) + _files(21, 1, 4, p=3),
    source_ddl="id bigint, v string, n int, p int",
    source_rows=[
        (2, "two", 20, 1),  # update in place
        (12, "twelve", 120, 3),  # update that moves the row from p=2 to p=3
        (15, "v15", 150, 2),  # unchanged
        (50, "fifty", 500, 4),  # insert into a new partition
    ],
    clauses=[
        {"when": "matched", "action": "update", "set": "*"},
        {"when": "not_matched", "action": "insert", "values": "*"},
        # Every other row of p=2 is gone from the source: delete it.
        {"when": "not_matched_by_source", "condition": "t.p = 2", "action": "delete"},
    ],
    partition_by=("p",),
)

# New keys beyond the table's, read from a file: the merge bets on the direct write and wins
# (one job writes the inserts and their change rows). Its commit replaces no file; the
# compaction that follows (run with it) does.
INSERT_NEW = Shape(
    name="insert_new",
    ddl="id bigint, v string, n int",
    files=_files(1, 4, 5),
    source_ddl="id bigint, v string, n int",
    source_rows=[(30, "v30", 300), (31, "v31", 310), (0, "zero", 0)],
    clauses=[{"when": "not_matched", "action": "insert", "values": "*"}],
    source_from_file=True,
    replaces_files=False,
)

SHAPES = {s.name: s for s in (UPSERT, CDC, NMBS_PARTITIONED, INSERT_NEW)}


@dataclass(frozen=True)
class Table:
    name: str
    location: str
    changes: str
    changes_location: str
    file_format: str = "parquet"


def _location(spark: SparkSession, name: str) -> str:
    return HadoopStorage(spark).qualify(describe_table(spark, sql_name(name)).location)


def create_target(spark: SparkSession, name: str, shape: Shape) -> Table:
    """The shape's target as dbt leaves it after a first run: version 0, empty change table."""
    schema = shape.ddl.replace("bigint", "long")
    create_table(spark, name, schema, shape.files, partition_by=shape.partition_by)
    start_history(spark, name, "CREATE TABLE", f"{name}__changes")
    return Table(name, _location(spark, name), f"{name}__changes", _location(spark, f"{name}__changes"))


def copy_target(spark: SparkSession, source: Table, name: str, shape: Shape) -> Table:
    """What :func:`create_target` makes, with the data files copied from ``source`` (a table
    it made, never merged into) instead of written by a Spark job: the same files, for a
    fraction of the work when a suite builds many targets of one shape."""
    parts = f" PARTITIONED BY ({', '.join(shape.partition_by)})" if shape.partition_by else ""
    spark.sql(f"CREATE TABLE {name} ({shape.ddl}) USING {source.file_format}{parts}")
    folder, origin = local_path(_location(spark, name)), local_path(source.location)
    assert folder is not None and origin is not None, "copy_target copies local tables only"
    # Everything but the journal (start_history writes the copy's own), .crc files included.
    shutil.copytree(origin, folder, ignore=lambda d, _: [LOG_DIR] if d == origin else [], dirs_exist_ok=True)
    if shape.partition_by:
        spark.sql(f"ALTER TABLE {name} RECOVER PARTITIONS")
    spark.catalog.refreshTable(name)
    start_history(spark, name, "CREATE TABLE", f"{name}__changes")
    return Table(name, _location(spark, name), f"{name}__changes", _location(spark, f"{name}__changes"))


def spec(shape: Shape, table: Table, source: str, **extra: Any) -> dict[str, Any]:
    return {
        "target": table.name,
        "source": source,
        "target_alias": "t",
        "source_alias": "s",
        "on": shape.on,
        "clauses": shape.clauses,
        "change_data_feed": {"table": table.changes},
        **extra,
    }


def job(
    shape: Shape, table: Table, root: Path, source_rows: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """What a victim needs to run the shape's merge against ``table``."""
    feed_ddl = shape.ddl + ", _change_type string, _commit_timestamp timestamp, _commit_version bigint"
    return {
        "root": str(root),
        "tables": [
            {
                "name": table.name,
                "ddl": shape.ddl,
                "format": table.file_format,
                "partition_by": list(shape.partition_by),
                "location": table.location,
            },
            {
                "name": table.changes,
                "ddl": feed_ddl,
                "format": "parquet",
                "partition_by": ["_commit_version"],
                "location": table.changes_location,
            },
        ],
        "source": {
            "ddl": shape.source_ddl,
            "rows": source_rows if source_rows is not None else shape.source_rows,
            "from_file": shape.source_from_file,
        },
        "spec": spec(shape, table, f"src_{table.name.split('.')[1]}", **extra),
    }


def sort_rows(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` in the order every State keeps them (a multiset compares equal as a list)."""
    return sorted(rows, key=lambda t: tuple((v is not None, str(v)) for v in t))


def _sorted(df: DataFrame) -> list[tuple[Any, ...]]:
    return sort_rows(tuple(r) for r in df.collect())


def _columns(shape: Shape) -> list[str]:
    return [c.split()[0] for c in shape.ddl.split(",")]


FEED_COLUMNS = ["_change_type", "_commit_version"]  # what a State keeps of a feed row, beside the data


@dataclass(frozen=True)
class State:
    """What the readers of a table see: through the catalog, and by reading its folder."""

    rows: list[tuple[Any, ...]]
    folder_rows: list[tuple[Any, ...]]
    changes: list[tuple[Any, ...]]  # without _commit_timestamp
    folder_changes: list[tuple[Any, ...]]

    def consistent(self) -> bool:
        return self.rows == self.folder_rows and self.changes == self.folder_changes


def observe(spark: SparkSession, table: Table, shape: Shape) -> State:
    spark.catalog.refreshTable(table.name)
    spark.catalog.refreshTable(table.changes)
    cols = _columns(shape)
    folder = spark.read.format(table.file_format).load(table.location).select(*cols)
    feed_cols = [*cols, *FEED_COLUMNS]
    feed_files = HadoopStorage(spark).list_data_files(table.changes_location)
    folder_feed = spark.read.parquet(table.changes_location).select(*feed_cols) if feed_files else None
    return State(
        rows=_sorted(spark.table(table.name).select(*cols)),
        folder_rows=_sorted(folder),
        changes=_sorted(spark.table(table.changes).select(*feed_cols)),
        folder_changes=_sorted(folder_feed) if folder_feed is not None else [],
    )


@dataclass(frozen=True)
class Expected:
    pre: State
    post: State


def expected_states(spark: SparkSession, db: str, shape: Shape, **extra: Any) -> Expected:
    """Before and after the shape's merge, from an uninterrupted run on a twin table
    (``extra``: more spec keys)."""
    twin = create_target(spark, f"{db}.ref_{shape.name}", shape)
    pre = observe(spark, twin, shape)
    spark.createDataFrame(shape.source_rows, shape.source_ddl).createOrReplaceTempView(
        f"ref_src_{shape.name}"
    )
    run_merge(spark, spec(shape, twin, f"ref_src_{shape.name}", **extra))
    post = observe(spark, twin, shape)
    assert pre.consistent() and post.consistent() and pre != post
    return Expected(pre, post)


@dataclass
class Outcome:
    """What a trial left behind, before and after the test process recovered the table."""

    returncode: int
    stdout: str
    stderr: str
    committed: bool  # a journal entry for the merge existed when the victim was gone
    applied: bool  # ... and was fully applied
    recovered: list[int] = field(default_factory=list)
    state: State | None = None


def journal_of(spark: SparkSession, table: Table) -> Journal:
    return Journal(HadoopStorage(spark), table.location)


def recover_and_observe(spark: SparkSession, table: Table, shape: Shape, outcome: Outcome) -> Outcome:
    """Recover ``table`` (as the next merge would) and observe every reader's view."""
    journal = journal_of(spark, table)
    versions, applied = journal.listing()
    outcome.committed = versions[-1] >= 1
    outcome.applied = outcome.committed and versions[-1] in applied
    # Victims register the partitions they create in their own (in-memory) catalogs; with a
    # shared metastore those would be ours too, so mirror what they applied before reading.
    # (What they did not apply, recovery must register by itself.)
    for v in sorted(applied - {0}):
        entry = journal.read_entry(v)
        register_partitions(spark, sql_name(table.name), list(entry.partitions))
        if entry.cdf:
            register_partitions(spark, sql_name(table.changes), [entry.cdf.partition])
    outcome.recovered = recover(spark, table.name, lock_timeout_s=60).rolled_forward
    outcome.state = observe(spark, table, shape)
    staging = table.location.removeprefix("file:") + "/_rowmerge_log/staging"
    assert not os.path.isdir(staging) or os.listdir(staging) == [], "staging left after recovery"
    return outcome


def victim_command(mode: str, arg: str) -> list[str]:
    return [sys.executable, "-m", "tests.reliability.victim", mode, arg]


def victim_env(java_opts: str, **extra: str) -> dict[str, str]:
    # Interpreted queries: compiling code for a handful of rows costs a cold JVM more.
    env = dict(
        os.environ,
        ROWMERGE_VICTIM_JAVA_OPTS=java_opts,
        ROWMERGE_VICTIM_INTERPRETED="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):  # a classic session, always
        env.pop(name, None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def write_job(path: Path, data: dict[str, Any]) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def run_victim(job_file: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        victim_command("once", job_file), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def start_victim(job_file: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A victim in its own process group, so one SIGKILL takes its JVM down with it.

    Its stderr goes to ``<job_file>.err`` (a pipe nobody drains could fill and block it).
    """
    with open(job_file + ".err", "w") as err:
        return subprocess.Popen(
            victim_command("once", job_file),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )


def kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def result_line(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith(("RESULT ", "ERROR ")):
            out: dict[str, Any] = json.loads(line.split(" ", 1)[1])
            return out
    return None


def diff(actual: list[Any], expected: list[Any]) -> tuple[int, int]:
    """(rows lost, rows duplicated or extra) of ``actual`` against ``expected``, as multisets."""
    a, e = Counter(actual), Counter(expected)
    return sum((e - a).values()), sum((a - e).values())


def losses(state: State, want: State) -> tuple[int, int]:
    """Rows lost and duplicated over every reader's view of the table and of its feed."""
    lost = duplicated = 0
    for got, exp in (
        (state.rows, want.rows),
        (state.folder_rows, want.rows),
        (state.changes, want.changes),
        (state.folder_changes, want.changes),
    ):
        lo, du = diff(got, exp)
        lost, duplicated = lost + lo, duplicated + du
    return lost, duplicated


BEFORE_COMMIT = ("staged_data", "staged_cdf")
# `make test-long` (ROWMERGE_LONG=1) runs the whole campaigns: a crash after every step of
# the commit protocol, every kill trial. `make test` crashes after every distinct step and
# after the first and last of each run of alike steps (move_0 .. move_k, delete_0 .. delete_j:
# the same code on another file), and runs fewer kill trials.
LONG_ENV = "ROWMERGE_LONG"


def long_campaign() -> bool:
    return os.environ.get(LONG_ENV) == "1"


# One step per file (or per retained folder a VACUUM deletes).
REPEATED = (
    "move_",
    "delete_",
    "compact_move_",
    "compact_delete_",
    "restore_move_",
    "restore_delete_",
    "vacuum_expire_",
)


# A merge followed by its compaction (test_fault_compaction), sampled: of the merge's own steps
# its last move (the only shape of `make test` whose merge moves files into a partition folder
# it creates, not yet registered) and its last step (the hand-over to the compaction: applied,
# compaction not yet staged). The cdc and upsert campaigns crash after every kind of merge step
# on each `make test`; the compaction's own steps are all kept.
MERGE_STEPS_BEFORE_COMPACTION = ("applied",)


def crash_steps(steps: list[str], compaction: bool = False) -> list[str]:
    """The steps a fault-injection campaign crashes after (see LONG_ENV): every step, or in
    the sampled campaign the first and last of each run of per-file steps (and, before a
    compaction, the merge's steps of MERGE_STEPS_BEFORE_COMPACTION and its last move)."""
    if long_campaign():
        return steps
    if compaction:
        merge = [s for s in steps if not s.startswith("compact")]
        moves = [s for s in merge if s.startswith("move_")]
        kept = [s for s in merge if s in MERGE_STEPS_BEFORE_COMPACTION or s == moves[-1]]
        steps = kept + [s for s in steps if s.startswith("compact")]

    def run(step: str) -> str | None:
        for prefix in sorted(REPEATED, key=len, reverse=True):
            if step.startswith(prefix) and step[len(prefix) :].isdigit():
                return prefix
        return None

    keep = []
    for prefix in REPEATED:
        alike = [s for s in steps if run(s) == prefix]
        keep += alike[:1] + alike[-1:]
    return [s for s in steps if run(s) is None or s in keep]


def commit_steps(steps: list[str], prefix: str = "") -> list[str]:
    """The steps of one commit from its entry on, as ``Journal.apply`` names them."""
    moves = [s for s in steps if s.startswith(f"{prefix}move_") and s[len(prefix) + 5 :].isdigit()]
    deletes = [s for s in steps if s.startswith(f"{prefix}delete_") and s[len(prefix) + 7 :].isdigit()]
    return [
        f"{prefix}entry",
        *moves,
        f"{prefix}registered",
        *deletes,
        f"{prefix}before_applied",
        f"{prefix}applied",
    ]


# Auto-compaction after the merge (optimize.py): its own commit, its steps prefixed.
COMPACTION_STAGED = "compact_staged"


def run_fault_injection(
    spark: SparkSession,
    db: str,
    tmp_path: Path,
    java_opts: str,
    shape: Shape,
    victim_master: str | None = None,
    compaction: bool = False,
) -> dict[str, int]:
    """Kill a victim after every step of the commit protocol in turn; check each recovery.

    Returns the counts for the report: trials, and rows lost / duplicated (asserted 0).
    Victims use the storage of ``spark.rowmerge.storage`` in the test's session (Hadoop's
    unless a test sets it), so do the recoveries. ``victim_master``: where the victims run
    their jobs (a standalone cluster's ``spark://`` URL; their own ``local[1]`` if None).
    ``compaction``: the merge is followed by a compaction (``optimize_every: 1``), whose steps are
    crashed after too: from its staging on, the merge is committed, so the table must be the
    post-merge state (the compaction changes files, not rows).
    """
    # A full compaction after the merge (optimize_every: 1) packs every partition's small files,
    # the table's own among them, so it always has files to rewrite in this small table.
    extra: dict[str, Any] = (
        {"auto_compact": False, "optimize_every": 1} if compaction else {"auto_compact": False}
    )
    setup = {STORAGE_ENV: str(spark.conf.get(STORAGE_CONF, "auto"))}
    if victim_master:
        setup[MASTER_ENV] = victim_master

    expected = expected_states(spark, db, shape, **extra)

    # The uninterrupted run: it must reach the post state, and it names every step.
    table = create_target(spark, f"{db}.{shape.name}_trace", shape)
    trace = tmp_path / "trace.txt"
    proc = run_victim(
        write_job(tmp_path / "trace.json", job(shape, table, tmp_path, **extra)),
        victim_env(java_opts, ROWMERGE_FAULT_TRACE=str(trace), **setup),
    )
    assert proc.returncode == 0 and (result_line(proc.stdout) or {}).get("ok"), proc.stderr[-3000:]
    steps = trace.read_text().split()
    merge_steps = [*BEFORE_COMMIT, *commit_steps(steps)]
    compact_steps = [COMPACTION_STAGED, *commit_steps(steps, "compact_")] if compaction else []
    assert steps == merge_steps + compact_steps, steps
    assert sum(s.startswith("move_") for s in steps) >= 2, steps
    assert any(s.startswith("delete_") for s in steps) == shape.replaces_files, steps
    if shape.source_from_file:  # the merge took the direct write (direct.py)
        assert (result_line(proc.stdout) or {})["metrics"]["directInsert"] == 1, proc.stdout[-3000:]
    if compaction:
        assert sum(s.startswith("compact_delete_") for s in steps) >= 2, steps
    clean = recover_and_observe(spark, table, shape, Outcome(0, proc.stdout, proc.stderr, False, False))
    assert clean.state == expected.post

    lost = duplicated = 0
    steps = crash_steps(steps, compaction)
    tables = [create_target(spark, f"{db}.{shape.name}_0", shape)]
    for i, step in enumerate(steps):
        table = tables[i]
        victim = subprocess.Popen(
            victim_command(
                "once", write_job(tmp_path / f"job_{i}.json", job(shape, table, tmp_path, **extra))
            ),
            cwd=REPO,
            env=victim_env(java_opts, ROWMERGE_FAULT_AFTER=step, **setup),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if i + 1 < len(steps):  # build the next trial's table while this victim runs
            tables.append(create_target(spark, f"{db}.{shape.name}_{i + 1}", shape))
        stdout, stderr = victim.communicate(timeout=600)
        assert victim.returncode == FAULT_EXIT, (step, victim.returncode, stderr[-3000:])
        outcome = recover_and_observe(
            spark, table, shape, Outcome(victim.returncode, stdout, stderr, False, False)
        )
        assert outcome.state is not None
        want = expected.pre if step in BEFORE_COMMIT else expected.post
        lo, du = losses(outcome.state, want)
        lost, duplicated = lost + lo, duplicated + du
        assert outcome.committed == (step not in BEFORE_COMMIT), step
        which = "pre" if want is expected.pre else "post"
        assert outcome.state == want, (
            f"after a crash at step {step!r} the table is not the {which}-merge state"
        )
        if step in compact_steps:
            # the merge (version 1) was applied; the compaction (2) is finished if committed
            done = step in (COMPACTION_STAGED, "compact_applied")
            assert outcome.recovered == ([] if done else [2]), step
        else:
            assert outcome.recovered == ([] if step in (*BEFORE_COMMIT, "applied") else [1]), step
    name = f"{shape.name}_compacted" if compaction else shape.name
    return {
        "fault_trials": len(steps),
        f"fault_trials_{name}": len(steps),
        "rows_lost": lost,
        "rows_duplicated": duplicated,
    }


def fault_injection_test(
    shape_name: str, storage: str = "hadoop", compaction: bool = False, long: bool = False
) -> Callable[..., None]:
    """The test of one shape; each shape's test sits in its own module so xdist runs them side by side.

    ``storage``: the engine's storage in the victims and for the recoveries (``arrow``: the
    pyarrow.fs storage a Spark Connect client uses). ``long``: only in ``make test-long``."""

    @pytest.mark.slow
    def test(spark: SparkSession, rdb: str, tmp_path: Path, java_opts: str, record_property: Any) -> None:
        with session_conf(spark, {STORAGE_CONF: storage}):
            counts = run_fault_injection(
                spark, rdb, tmp_path, java_opts, SHAPES[shape_name], compaction=compaction
            )
        record_property("reliability", {**counts, f"fault_trials_{storage}_storage": counts["fault_trials"]})
        assert (counts["rows_lost"], counts["rows_duplicated"]) == (0, 0)

    suffix = "" if storage == "hadoop" else f"_on_{storage}_storage"
    then = "_and_its_compaction" if compaction else ""
    test.__name__ = f"test_fault_injection_{shape_name}{then}_every_commit_step{suffix}"
    return pytest.mark.long(test) if long else test


# -- refusals: the storage reports one step of applying a commit as not done ---------------------

APPLIED_STEP = "applied"  # the fault point after the entry's .applied marker is created


def _data_file_of(path: str, location: str) -> bool:
    """True if ``path`` is a data file of the table at ``location`` (no hidden part below it)."""
    rel = path.removeprefix(location.rstrip("/") + "/")
    return rel != path and not any(s in ("", ".", "..") or is_hidden(s) for s in rel.split("/"))


@dataclass
class Refusal:
    """One step of applying a merge committed to the table at ``location``, refused the way
    Hadoop reports a refusal: the call returns false and nothing happens.

    ``step`` is the step's fault-point name: ``move_<i>`` refuses the i-th rename out of the
    table's staging folder (apply moves the staged files in entry order, and nothing else
    renames them), ``delete_<i>`` the i-th delete of a data file of the table (apply deletes the
    replaced files in entry order, and nothing else deletes a data file), ``applied`` the
    creation of an ``.applied`` marker in its journal. Calls are told apart by that order and
    kind, never by file names (a merge makes them up). Once picked, the call's path (a move's
    source) is refused on every replay too, until :attr:`lifted`.
    """

    location: str  # the target's, qualified
    step: str
    lifted: bool = False
    path: str | None = None  # the refused call's path (a move's source), once picked
    refused: int = 0  # calls refused so far
    seen: int = 0  # candidate calls seen before one was picked

    @property
    def operation(self) -> str:
        return "create" if self.step == APPLIED_STEP else self.step.split("_", 1)[0]

    @property
    def index(self) -> int:
        return 0 if self.step == APPLIED_STEP else int(self.step.split("_", 1)[1])

    def _candidate(self, operation: str, path: str) -> bool:
        log = f"{self.location}/{LOG_DIR}"
        if operation == "move":
            return path.startswith(f"{log}/{STAGING_DIR}/")
        if operation == "delete":
            return _data_file_of(path, self.location)
        return path.rsplit("/", 1)[0] == log and path.endswith(APPLIED_SUFFIX)

    def refuses(self, operation: str, path: str) -> bool:
        """True if the storage must refuse this call (``path``: a move's source)."""
        if self.lifted or operation != self.operation or not self._candidate(operation, path):
            return False
        if self.path is None:
            if self.seen == self.index:
                self.path = path
            self.seen += 1
        if path != self.path:
            return False
        self.refused += 1
        return True


class _Refusing:
    """Mixed into a storage: it applies :attr:`refusal` to rename, delete and create_if_absent."""

    refusal: Refusal

    def rename(self, src: str, dst: str) -> bool:
        # A data file of the table renamed away is a replaced file retained (the delete step of
        # a table with retention on); a rename out of staging is a move into place.
        retained = _data_file_of(src, self.refusal.location)
        if self.refusal.refuses("delete" if retained else "move", src):
            return False
        return bool(super().rename(src, dst))  # type: ignore[misc]

    def delete(self, path: str, recursive: bool = False) -> bool:
        if not recursive and self.refusal.refuses("delete", path):
            return False
        return bool(super().delete(path, recursive))  # type: ignore[misc]

    def create_if_absent(self, path: str, text: str) -> bool:
        if self.refusal.refuses("create", path):
            return False
        return bool(super().create_if_absent(path, text))  # type: ignore[misc]


class RefusingHadoopStorage(_Refusing, HadoopStorage):
    """Hadoop's storage (a classic session's), refusing one step of an apply."""


class RefusingArrowStorage(_Refusing, ArrowStorage):
    """The pyarrow.fs storage (a Spark Connect client's), refusing one step of an apply."""


def refusing_storage_for(refusal: Refusal) -> Callable[[SparkSession], Storage]:
    """A stand-in for the engine's ``storage_for``: the storage it picks for the session
    (``spark.rowmerge.storage``), refusing what ``refusal`` picks."""

    def make(spark: SparkSession) -> Storage:
        storage: RefusingArrowStorage | RefusingHadoopStorage
        if isinstance(storage_for(spark), ArrowStorage):
            storage = RefusingArrowStorage.from_conf(spark.conf.getAll)  # type: ignore[assignment]
        else:
            storage = RefusingHadoopStorage(spark)
        storage.refusal = refusal
        return storage

    return make


def rows_of(
    spark: SparkSession, paths: Sequence[str], root: str, columns: list[str], file_format: str
) -> list[Any]:
    """The rows of the files ``paths`` below ``root``, with the partition values their folders
    give, as a sorted multiset."""
    if not paths:
        return []
    return _sorted(spark.read.format(file_format).option("basePath", root).load(list(paths)).select(*columns))


def partition_of(path: str, location: str) -> str:
    """The partition folder of the data file ``path`` below ``location`` ('' if unpartitioned)."""
    rel = path.removeprefix(location.rstrip("/") + "/")
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def stuck_state(
    spark: SparkSession,
    table: Table,
    shape: Shape,
    entry: Entry,
    step: str,
    expected: Expected,
    partitions_before: set[str],
) -> State:
    """What every reader sees while applying ``entry`` (version 1, committed on the pre-merge
    table) stopped at ``step``, refused: every step before it done, none after it.

    ``partitions_before``: the table's partition folders before the merge (the catalog reads
    only those until apply registers the new ones). Reads the files the steps done so far left
    in place: the ones moved, or the replaced ones not deleted yet.
    """
    cols = _columns(shape)
    if step == APPLIED_STEP:  # every file step is done: only the marker is missing
        return expected.post
    kind, index = step.split("_", 1)
    if kind == "delete":
        # Every new file is in place and registered; the replaced files from this one on are
        # still there, so their rows are read next to their new versions.
        left = [f.path for f in entry.removed[int(index) :]]
        old = rows_of(spark, left, table.location, cols, table.file_format)
        post = expected.post
        return State(
            rows=sort_rows(post.rows + old),
            folder_rows=sort_rows(post.folder_rows + old),
            changes=post.changes,
            folder_changes=post.folder_changes,
        )
    assert kind == "move", step
    # Files move in before any partition is registered and any replaced file goes, so a
    # reader sees the pre-merge rows plus those of the files moved so far: a plain read of the
    # folders all of them, the catalog those in partitions it already had. The change table's
    # new partition is not registered yet: through the catalog the feed is as before.
    moved = entry.moves()[: int(index)]
    added = {f.path for f in entry.added}
    data = [f.path for f in moved if f.path in added]
    known = [p for p in data if partition_of(p, table.location) in partitions_before]
    seen = rows_of(spark, known, table.location, cols, table.file_format)
    unseen = rows_of(spark, [p for p in data if p not in known], table.location, cols, table.file_format)
    feed = [f.path for f in moved if f.path not in added]
    pre = expected.pre
    return State(
        rows=sort_rows(pre.rows + seen),
        folder_rows=sort_rows(pre.folder_rows + seen + unseen),
        changes=pre.changes,
        folder_changes=sort_rows(
            pre.folder_changes
            + rows_of(spark, feed, table.changes_location, [*cols, *FEED_COLUMNS], "parquet")
        ),
    )
