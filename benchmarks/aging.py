"""`make bench-aging`: a table's life, not one merge.

Every other benchmark merges into a freshly written table. Here one table per system lives
through a long run of small merges, as an hourly incremental model's does. Starting from a
web_returns-shaped table (webreturns.py; 2M rows in 16 files by default), each shape runs the
same merges on every system, interleaved merge by merge so every system sees the same machine
(in an order rotated every merge, so no system is always first):

* ``insert_heavy``: 1,000 new rows per merge;
* ``recent_updates``: 100 updates among the newest 50,000 rows + 1,000 new rows;
* ``scattered``: 100 updates anywhere in the table + 1,000 new rows;
* ``partitioned_hourly``: the table partitioned by day; 24 merges a day, each 1,000 new rows of
  the current day + 50 updates among the rows that day's earlier merges wrote.

Systems, on copies of the same files: ``row_level_merge`` (the engine's defaults),
``row_level_merge_no_compaction`` (auto-compaction off: compaction's baseline), ``delta_rs``
(as is) and ``delta_rs_optimized`` (``optimize.compact()`` after every 100th merge, timed with
that merge, as its users run it). Both delta-rs tables are vacuumed (retention 0) after every
24th merge, untimed: only so the run fits on a disk (without it the recent-updates shape left
73 GB of replaced files by merge 460); a delta-rs merge reads only its current files. The
hourly shape adds ``row_level_merge_no_retention`` (retention off: retention's baseline) and
``row_level_merge_feed`` (the change feed on, with ``change_feed_retain_versions`` 24), both
vacuumed after the last merge. Every update writes
values no earlier merge wrote, so no update is skipped as unchanged.

Reported per decile of merges and system: merge time (mean, median, p95), Spark jobs, bytes
read and written (process I/O, measure.py), data files, median file size, small files (under a
quarter of 128 MB) and log bytes (journal or _delta_log). Every system's rows are hashed at
each decile's end and must agree. After the last merge: a full scan of each table by Spark and
by a plain reader (a pyarrow dataset over the folder; for delta-rs over its file list, since
the folder may still hold replaced files) against a freshly written copy of the same rows,
and a 100-row upsert of recent keys into our table and into the fresh copy (files it reads).

The machine's speed moves between sessions (on the 2-core VM, the same 10M-row merge took 3.2 s
in one session and 5.5 s in the next), and a shape's first and last tenths may run hours apart.
It moves within a session too: the hourly shape's last tenth, and a replay of its first tenth
20 minutes later, differed by 1.3-1.6x for every system, delta-rs included. So the first tenth
is replayed beside the last one (``PairedReplay``): its merges again, on a fresh copy of the
base table, for row_level_merge, merge j in the same round as the last tenth's j-th merge
(ordered with the systems like any of them), so both ran on the machine as it was then. The
merge-time targets compare the last tenth with that replay; the ratio to the first tenth as it
ran is reported beside it, and counts as a target too when both tenths ran in the same slice.
(A run saved before the pairing existed replays after its last merge: ``replay_first_tenth``,
every system interleaved as in the run, the peers' ratios showing how far the machine moved.)
The last tenth's own merges also run, each in its round, on a freshly written copy of our
table's rows as they stood before it (``FreshTwin``): aged over fresh is the cost of the table's
history alone, reported without a verdict. The targets compare the last tenth with the first,
and where every merge rewrites the whole table (scattered) the last tenth moves 1.45x the rows.

    python benchmarks/aging.py [--rows N] [--files F] [--merges M] [--shapes a,b] [--systems a,b]
                               [--out DIR] [--work DIR] [--minutes M] [--resume]

The whole run is long (1,000 merges x 4 shapes x 4 to 6 systems: on 2 cores the scattered shape alone,
which rewrites the whole table at every merge, takes most of a day), so it can run in slices:
``--minutes M`` (or a file named STOP in the work folder) stops it cleanly between two merges,
with every table and every measurement so far saved in ``<work>/<shape>/state.json``, and
``--resume`` goes on from there. A resumed run refuses unless the engine's code (git tree of
``dbt/``), the systems and the number of merges are the ones it started with; the report names
the engine tree and, per shape, the slices it ran in (merge numbers and times).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from cases import ON_KEY, SOURCE_ALIAS, TARGET_ALIAS  # noqa: E402
from measure import Usage, measured  # noqa: E402
from peers import DELTA_TYPES, delta_rs_merge, table_hash  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from run import spark_session  # noqa: E402
from webreturns import (  # noqa: E402
    DATE_COLUMN,
    DAYS,
    DEC,
    FIRST_DATE,
    KEY,
    BaseTable,
    copy_table,
    generate,
    rows_of,
)

UPSERT = [
    {"when": "matched", "action": "update", "set": "*"},
    {"when": "not_matched", "action": "insert", "values": "*"},
]
TARGET_FILE_BYTES = 128 * 1024 * 1024
SMALL_FILE_BYTES = TARGET_FILE_BYTES // 4
DELTA_OPTIMIZE_EVERY = 100
DELTA_VACUUM_EVERY = 24


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # webreturns kind: flat | by_date
    inserts: int
    updates: int
    window: int | None = None  # updates among the newest `window` rows (None: anywhere)
    hourly: bool = False  # 24 merges a day into the current day's partition


SHAPES = {
    s.name: s
    for s in (
        Shape("insert_heavy", "flat", 1000, 0),
        Shape("recent_updates", "flat", 1000, 100, window=50_000),
        Shape("scattered", "flat", 1000, 100),
        Shape("partitioned_hourly", "by_date", 1000, 50, hourly=True),
    )
}


def source_rows(spark: SparkSession, shape: Shape, base: BaseTable, k: int) -> DataFrame:
    """Merge ``k``'s rows (1-based): its new rows and its updates, as rows_frame numbers them."""
    before = base.rows + (k - 1) * shape.inserts  # rows the table holds before merge k
    rng = random.Random(k * 1_000_003 + len(shape.name))
    if shape.hourly:
        first_today = base.rows + (k - 1 - (k - 1) % 24) * shape.inserts
        pool = range(first_today, before)
    elif shape.window:
        pool = range(max(0, before - shape.window), before)
    else:
        pool = range(0, before)
    updated = sorted(rng.sample(pool, min(shape.updates, len(pool)))) if shape.updates else []
    ids = [(i,) for i in updated] + [(i,) for i in range(before, before + shape.inserts)]
    rows = rows_of(spark.createDataFrame(ids, "id long"), base.rows, base.kind == "by_date")
    if shape.hourly:
        day = F.date_add(F.lit(FIRST_DATE).cast("date"), F.lit(DAYS + (k - 1) // 24))
        rows = rows.withColumn(DATE_COLUMN, day)
    if updated:
        # Values no earlier merge wrote: every update changes its row.
        lo, hi = updated[0], updated[-1]
        row_no = _row_number_in(rows, lo, hi)
        touched = row_no.isNotNull()
        rows = rows.withColumn(
            "wr_return_quantity", F.when(touched, F.lit(1_000_000 + k)).otherwise(F.col("wr_return_quantity"))
        ).withColumn(
            "wr_return_amt", F.when(touched, F.lit(k / 100).cast(DEC)).otherwise(F.col("wr_return_amt"))
        )
    return rows


def _row_number_in(rows: DataFrame, lo: int, hi: int) -> Any:
    """NULL unless the row is an update: new rows are numbered past every updated one."""
    from webreturns import _row_number

    n = _row_number()
    return F.when((n >= F.lit(lo)) & (n <= F.lit(hi)), n)


@dataclass
class Decile:
    merges: int
    seconds: list[float] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    read_bytes: list[int] = field(default_factory=list)
    written_bytes: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        s = sorted(self.seconds)
        return {
            "merges": self.merges,
            "mean_s": round(statistics.fmean(s), 3),
            "median_s": round(statistics.median(s), 3),
            "p95_s": round(s[min(len(s) - 1, int(0.95 * len(s)))], 3),
            "spark_jobs": statistics.median(self.jobs),
            "read_mb": round(statistics.fmean(self.read_bytes) / 2**20, 2),
            "written_mb": round(statistics.fmean(self.written_bytes) / 2**20, 2),
        }


def data_files(paths: list[str]) -> dict[str, Any]:
    sizes = sorted(os.path.getsize(p) for p in paths)
    small_by_folder: dict[str, int] = {}
    for p in paths:
        if os.path.getsize(p) < SMALL_FILE_BYTES:
            folder = os.path.dirname(p)
            small_by_folder[folder] = small_by_folder.get(folder, 0) + 1
    return {
        "data_files": len(sizes),
        "median_file_kb": round(statistics.median(sizes) / 1024, 1) if sizes else 0,
        "small_files": sum(1 for s in sizes if s < SMALL_FILE_BYTES),
        "most_small_files_in_a_partition": max(small_by_folder.values(), default=0),
        "data_mb": round(sum(sizes) / 2**20, 1),
    }


def folder_files(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", ".")) or "=" in d]
        out += [os.path.join(dirpath, f) for f in filenames if not f.startswith(("_", "."))]
    return out


def folder_bytes(root: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


class RowLevelMerge:
    name = "row_level_merge"
    upkeep: dict[str, Any] = {}  # the engine's defaults: auto-compaction on
    shapes: tuple[str, ...] | None = None  # the shapes it runs in (None: every shape)

    def __init__(
        self, spark: SparkSession, base: BaseTable, work: Path, table: str, folder: Path | None = None
    ) -> None:
        """A copy of ``base``'s files under ``work``, or the files already in ``folder``."""
        from dbt.adapters.rowmerge.merge import start_history

        self.spark, self.base, self.table = spark, base, table
        self.dir = folder or work / self.name
        attach = folder is None and (self.dir / "_rowmerge_log").is_dir() and spark.catalog.tableExists(table)
        if attach:  # a resumed run: the table lives on, with its journal
            return
        if folder is None:
            copy_table(base, self.dir)
        cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in base.schema.fields)
        parts = f" PARTITIONED BY ({DATE_COLUMN})" if base.partition_columns else ""
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(f"CREATE TABLE {table} ({cols}) USING parquet{parts} LOCATION '{self.dir}'")
        if base.partition_columns:
            spark.sql(f"ALTER TABLE {table} RECOVER PARTITIONS")
        start_history(spark, table, "CREATE TABLE")

    def tidy(self, k: int) -> None:
        """Nothing: the engine's own retention (a default of the merge) is part of its merges."""

    def merge(self, source: Path, k: int) -> dict[str, Any]:
        from dbt.adapters.rowmerge.merge import run_merge

        self.spark.read.parquet(str(source)).createOrReplaceTempView("aging_source")
        result = run_merge(
            self.spark,
            {
                "target": self.table,
                "source": "aging_source",
                "target_alias": TARGET_ALIAS,
                "source_alias": SOURCE_ALIAS,
                "on": ON_KEY,
                "clauses": UPSERT,
                **self.options(),
            },
        )
        return dict(result.metrics)

    def options(self) -> dict[str, Any]:
        """The model config this system merges with, beyond the clauses."""
        return dict(self.upkeep)

    def files(self) -> list[str]:
        return folder_files(self.dir)

    def log_bytes(self) -> int:
        """The journal's bytes (entries, markers, checkpoints), not the retained files."""
        log = self.dir / "_rowmerge_log"
        return folder_bytes(log) - folder_bytes(log / "retained")

    def retained_bytes(self) -> int:
        """The retained data files' bytes (not the checksum files Hadoop moves beside them)."""
        root = self.dir / "_rowmerge_log" / "retained"
        return sum(
            os.path.getsize(os.path.join(d, f))
            for d, _, names in os.walk(root)
            for f in names
            if not f.startswith((".", "_"))
        )

    def frame(self) -> DataFrame:
        self.spark.catalog.refreshTable(self.table)
        return self.spark.table(self.table)

    def vacuumed(self) -> dict[str, Any]:
        """Vacuum with the table's own retention (the defaults), then what retention keeps:
        entries on disk, retained bytes, and the bytes the kept versions removed (read from
        their entries: a retained folder ``k`` holds exactly what version ``k`` removed)."""
        from dbt.adapters.rowmerge.merge import vacuum

        t = time.perf_counter()
        done = vacuum(self.spark, self.table)
        seconds = time.perf_counter() - t
        log = self.dir / "_rowmerge_log"
        names = sorted(os.listdir(log))
        entries = [n for n in names if n.endswith(".json") and n[:20].isdigit() and len(n) == 25]
        kept = sorted(int(n) for n in os.listdir(log / "retained")) if (log / "retained").is_dir() else []
        removed = 0
        for k in kept:
            entry = json.loads((log / f"{k:020d}.json").read_text())
            removed += sum(int(f["size"]) for f in entry.get("removed", []))
        return {
            "vacuum_s": round(seconds, 3),
            "vacuum_version": done.version,
            "oldest_readable": done.oldest_readable,
            "entries_on_disk": len(entries),
            "bases_on_disk": sum(1 for n in names if n.endswith(".base.json")),
            "retained_versions": len(kept),
            "retained_mb": round(self.retained_bytes() / 2**20, 2),
            "removed_by_kept_versions_mb": round(removed / 2**20, 2),
            "retained_equals_removed": self.retained_bytes() == removed,
            "log_kb_after_vacuum": round(self.log_bytes() / 1024, 1),
        }


class DeltaRs:
    name = "delta_rs"
    optimize_every: int | None = None

    def __init__(self, spark: SparkSession, base: BaseTable, work: Path, table: str) -> None:
        from deltalake import Field, Schema, convert_to_deltalake
        from deltalake.schema import PrimitiveType

        self.spark, self.base, self.dir = spark, base, work / self.name
        if (self.dir / "_delta_log").is_dir():  # a resumed run: the table lives on
            return
        copy_table(base, self.dir)
        partition_by = None
        if base.partition_columns:
            partition_by = Schema(
                [
                    Field(f.name, PrimitiveType(DELTA_TYPES.get(f.dataType.simpleString(), "string")))
                    for f in base.schema.fields
                    if f.name in base.partition_columns
                ]
            )
        convert_to_deltalake(
            str(self.dir), partition_by=partition_by, partition_strategy="hive" if partition_by else None
        )

    def merge(self, source: Path, k: int) -> dict[str, Any]:
        import pyarrow.parquet as pq
        from deltalake import DeltaTable

        dt = DeltaTable(str(self.dir))
        metrics = delta_rs_merge(dt, pq.read_table(str(source)), ON_KEY, UPSERT, self.base.columns).execute()
        if self.optimize_every and k % self.optimize_every == 0:
            DeltaTable(str(self.dir)).optimize.compact()
        return dict(metrics)

    def tidy(self, k: int) -> None:
        """Delete the files no longer in the table every DELTA_VACUUM_EVERY merges (untimed)."""
        from deltalake import DeltaTable

        if k % DELTA_VACUUM_EVERY == 0:
            table = DeltaTable(str(self.dir))
            table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)

    def files(self) -> list[str]:
        from deltalake import DeltaTable

        return [u.removeprefix("file://") for u in DeltaTable(str(self.dir)).file_uris()]

    def log_bytes(self) -> int:
        return folder_bytes(self.dir / "_delta_log")

    def frame(self) -> DataFrame:
        reader = self.spark.read.format("parquet").schema(self.base.schema).option("basePath", str(self.dir))
        return reader.load(self.files())


class DeltaRsOptimized(DeltaRs):
    name = "delta_rs_optimized"
    optimize_every = DELTA_OPTIMIZE_EVERY


class RowLevelMergeNoCompaction(RowLevelMerge):
    """The baseline: the same engine with auto-compaction off."""

    name = "row_level_merge_no_compaction"
    upkeep = {"auto_compact": False}


# Retention is measured where the undo issue asks for it, on hourly merges: there its cost
# (moves into retained/, expiry of old folders) and the feed's bound are what an hourly model
# pays. Elsewhere a third and fourth run of our engine would only lengthen the run (the
# scattered shape rewrites the whole table each merge: about three hours a system).
HOURLY = ("partitioned_hourly",)


class RowLevelMergeNoRetention(RowLevelMerge):
    """Retention's baseline: the same engine with retention off (replaced files deleted)."""

    name = "row_level_merge_no_retention"
    upkeep = {"retain_versions": 0, "retain_hours": 0}
    shapes = HOURLY


FEED_RETAIN_VERSIONS = 24


class RowLevelMergeFeed(RowLevelMerge):
    """The defaults with the change feed on and its own retention: after the merges a vacuum
    must leave the change table holding only the newest FEED_RETAIN_VERSIONS versions."""

    name = "row_level_merge_feed"
    upkeep = {"change_feed_retain_versions": FEED_RETAIN_VERSIONS}
    shapes = HOURLY

    @property
    def changes(self) -> str:
        return f"{self.table}__changes"

    def options(self) -> dict[str, Any]:
        return {**self.upkeep, "change_data_feed": {"table": self.changes}}

    def feed_on_disk(self) -> tuple[int, float]:
        """The change table's versions (folders) and MB on disk."""
        self.spark.catalog.refreshTable(self.changes)
        located = self.spark.sql(f"DESCRIBE FORMATTED {self.changes}").collect()
        root = Path(urlparse(next(r[1] for r in located if r[0] == "Location")).path)
        versions = [d for d in os.listdir(root) if d.startswith("_commit_version=")]
        return len(versions), round(folder_bytes(root) / 2**20, 2)

    def vacuumed(self) -> dict[str, Any]:
        versions, mb = self.feed_on_disk()
        done = super().vacuumed()
        after, mb_after = self.feed_on_disk()
        return {
            **done,
            "feed_versions_before": versions,
            "feed_mb_before": mb,
            "feed_versions_after": after,
            "feed_mb_after": mb_after,
        }


SYSTEMS = {
    s.name: s
    for s in (
        RowLevelMerge,
        RowLevelMergeNoCompaction,
        RowLevelMergeNoRetention,
        RowLevelMergeFeed,
        DeltaRs,
        DeltaRsOptimized,
    )
}


def runs_in(name: str, shape: Shape) -> bool:
    shapes = getattr(SYSTEMS[name], "shapes", None)
    return shapes is None or shape.name in shapes


SCAN_ROUNDS = 15


def scan_seconds(
    spark: SparkSession, base: BaseTable, tables: dict[str, tuple[list[str], Path]]
) -> dict[str, dict[str, float]]:
    """Full scans of every table, Spark (a hash over every column) and pyarrow (read every row).

    One warm-up round, then ``SCAN_ROUNDS`` rounds that visit the tables in turn; the median of
    each. Scanning one table twice and then the next measured the page cache and the JIT as much
    as the files (the first table scanned paid for both), which is what the aged/fresh ratio
    must not depend on. The pyarrow rounds run after all Spark rounds, after a collection and a
    pause, so a pyarrow scan does not share the two cores with a JVM still winding down a Spark
    scan: with the rounds interleaved, the insert-heavy table after 1,000 merges read 1.39x the
    fresh copy with pyarrow; the same files read alone on a quiet machine, 1.14x (medians of 6).

    Fifteen rounds, not five: a pyarrow scan takes a quarter of a second, and a pause of the
    idle JVM beside it (its collector, its cleaner threads) costs one round up to a second. In
    the hourly shape's run of 2026-11-29 three tables holding the very same 101 files read in
    0.304, 0.315 and 0.436 s (medians of five), and the aged/fresh ratio of that one layout
    came out 1.00, 1.18 and 1.24 in three runs; read again afterwards, ten rounds beside an
    idle JVM had spikes of 0.49, 0.61 and 1.26 s among rounds of 0.23-0.29 s, and the medians
    were 0.242 s fresh against 0.262-0.270 s aged (1.08-1.12); fifteen rounds with no JVM,
    0.239 s against 0.241-0.251 s (1.01-1.05). With fifteen rounds, up to seven such pauses
    leave the median alone.
    """
    import gc

    import pyarrow.dataset as ds

    cols = [F.col(c) for c in base.columns]
    partitioning = "hive" if base.partition_columns else None
    times: dict[str, dict[str, list[float]]] = {n: {"spark": [], "arrow": []} for n in tables}
    for rnd in range(SCAN_ROUNDS + 1):
        for name, (files, root) in tables.items():
            t = time.perf_counter()
            reader = spark.read.format("parquet").schema(base.schema).option("basePath", str(root))
            reader.load(files).select(F.sum(F.xxhash64(*cols))).collect()
            if rnd:  # round 0 warms the page cache and the JIT
                times[name]["spark"].append(time.perf_counter() - t)
    spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
    gc.collect()
    time.sleep(5)
    for rnd in range(SCAN_ROUNDS + 1):
        for name, (files, root) in tables.items():
            t = time.perf_counter()
            ds.dataset(
                files, format="parquet", partitioning=partitioning, partition_base_dir=str(root)
            ).to_table()
            if rnd:
                times[name]["arrow"].append(time.perf_counter() - t)
    return {
        n: {
            "spark_scan_s": round(statistics.median(t["spark"]), 3),
            "pyarrow_scan_s": round(statistics.median(t["arrow"]), 3),
        }
        for n, t in times.items()
    }


def engine_tree() -> str:
    """The git tree of the engine (``dbt/``): a resumed run must merge with the same code."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD:dbt"], cwd=ROOT.parent, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "dbt"], cwd=ROOT.parent, capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _base_json(base: BaseTable) -> dict[str, Any]:
    return {
        "kind": base.kind,
        "path": str(base.path),
        "rows": base.rows,
        "files": list(base.files),
        "bytes": base.bytes,
        "schema": base.schema.json(),
        "partition_columns": list(base.partition_columns),
    }


def _base_from(d: dict[str, Any]) -> BaseTable:
    from pyspark.sql.types import StructType

    return BaseTable(
        d["kind"],
        Path(d["path"]),
        d["rows"],
        tuple(d["files"]),
        d["bytes"],
        StructType.fromJson(json.loads(d["schema"])),
        tuple(d["partition_columns"]),
    )


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def _decile(records: list[dict[str, Any]]) -> Decile:
    return Decile(
        len(records),
        [r["s"] for r in records],
        [r["jobs"] for r in records],
        [r["read"] for r in records],
        [r["written"] for r in records],
    )


def _phase_medians(records: list[dict[str, Any]]) -> dict[str, float]:
    """Median of each phase time over ``records`` (those that report it)."""
    names = sorted({m for r in records for m in r.get("phases", {})})
    return {m: statistics.median(r["phases"][m] for r in records if m in r.get("phases", {})) for m in names}


class Stopped(Exception):
    """The run was asked to stop (deadline or STOP file) between two merges; its state is saved."""


def run_shape(
    spark: SparkSession,
    shape: Shape,
    args: argparse.Namespace,
    work: Path,
    systems: list[str],
    should_stop: Callable[[], bool],
) -> dict[str, Any]:
    """Run (or, with ``--resume``, go on with) one shape; raises Stopped between two merges
    when ``should_stop()`` says so, its state saved in ``<work>/<shape>/state.json``."""
    shape_dir = work / shape.name
    state_path = shape_dir / "state.json"
    systems = [name for name in systems if runs_in(name, shape)]
    state = json.loads(state_path.read_text()) if args.resume and state_path.is_file() else None
    engine = engine_tree()
    if state is not None:
        if state.get("result") is not None:
            return state["result"]
        wanted = {"engine": engine, "systems": systems, "merges": args.merges}
        found = {k: state[k] for k in wanted}
        if found != wanted:
            raise SystemExit(
                f"{shape.name}: cannot resume: the saved run has {found}, this one {wanted}; "
                "run without --resume to start the shape again"
            )
        base = _base_from(state["base"])
    else:
        shutil.rmtree(shape_dir, ignore_errors=True)
        base = generate(spark, shape.kind, args.rows, args.files, shape_dir / "base")
        state = {
            "engine": engine,
            "systems": systems,
            "merges": args.merges,
            "base": _base_json(base),
            "done": 0,
            "records": {name: [] for name in systems},
            "deciles": {name: [] for name in systems},
            "file_counts": {name: [] for name in systems},
            "slices": [],
            "replay_records": [],
            "result": None,
        }
    spark.sql("CREATE DATABASE IF NOT EXISTS aging")
    live = {name: SYSTEMS[name](spark, base, shape_dir, f"aging.{shape.name}_{name}") for name in systems}
    if state["done"]:
        # Resumed only from a clean stop between merges: every table holds exactly the rows of
        # the merges done (a run killed inside a merge starts the shape again).
        want = base.rows + state["done"] * shape.inserts
        counts = {name: system.frame().count() for name, system in live.items()}
        if any(c != want for c in counts.values()):
            raise SystemExit(
                f"{shape.name}: cannot resume after merge {state['done']}: expected {want} rows, "
                f"found {counts} (killed inside a merge?); run without --resume"
            )
    per = max(1, args.merges // 10)
    paired_from = args.merges - per + 1  # the last tenth's first merge
    # A run saved before the pairing existed, stopped inside its last tenth, cannot pair what
    # is left of it: it replays the first tenth after its last merge instead (_finish).
    pairs = RowLevelMerge.name in live and (state["done"] < paired_from or "replay_records" in state)
    replay = (
        PairedReplay(spark, shape, base, state, shape_dir, paired_from, lambda: _save(state_path, state))
        if pairs
        else None
    )
    # Started with the pairing, or before the last tenth: a run resumed inside its last tenth
    # from a state saved without a twin cannot have one.
    twins = pairs and (state["done"] < paired_from or FreshTwin.records_key in state)
    twin = (
        FreshTwin(spark, shape, base, state, shape_dir, paired_from, lambda: _save(state_path, state))
        if twins
        else None
    )
    beside = {name: extra for name, extra in ((REPLAY, replay), (TWIN, twin)) if extra is not None}
    slice_ = {"from_merge": state["done"] + 1, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        for k in range(state["done"] + 1, args.merges + 1):
            if should_stop():
                raise Stopped(f"{shape.name}: stopped after merge {state['done']}")
            source = shape_dir / "sources" / f"{k:05d}"
            source_rows(spark, shape, base, k).coalesce(1).write.mode("overwrite").parquet(str(source))
            round_ = {name: (system, source, k) for name, system in live.items()}
            if replay is not None and k >= paired_from:
                if replay.system is None:
                    replay.start()
                j = k - paired_from + 1  # merge j of the first tenth, in the same round as merge k
                again = shape_dir / "sources" / f"replay-{j:05d}"
                source_rows(spark, shape, base, j).coalesce(1).write.mode("overwrite").parquet(str(again))
                round_[REPLAY] = (replay.system, again, j)
            if twin is not None and k >= paired_from:
                if twin.system is None:
                    twin.start(live[RowLevelMerge.name].frame(), args.files)
                round_[TWIN] = (twin.system, source, k)
            for name, (system, src, n) in _round_order(round_, k):
                with measured(spark, f"aging {shape.name} {name} {n}") as usage:
                    metrics = system.merge(src, n)
                system.tidy(n)
                (state[beside[name].records_key] if name in beside else state["records"][name]).append(
                    _record(usage, metrics)
                )
                if name == REPLAY:
                    shutil.rmtree(src, ignore_errors=True)
            shutil.rmtree(source, ignore_errors=True)
            if k % per == 0 or k == args.merges:
                _decile_end(shape, base, live, state, k, per)
            state["done"] = k
            _save(state_path, state)
    finally:
        if state["done"] >= slice_["from_merge"]:
            slice_.update(to_merge=state["done"], ended=time.strftime("%Y-%m-%dT%H:%M:%S"))
            state["slices"].append(slice_)
            _save(state_path, state)
    state["result"] = _finish(spark, shape, args, base, live, state, shape_dir, replay, twin)
    _save(state_path, state)
    return state["result"]


def _record(usage: Usage, metrics: dict[str, Any]) -> dict[str, Any]:
    """One merge's measurements: seconds, Spark jobs, bytes read and written, and the
    system's own phase times (ours: executionTimeMs, scanTimeMs, ...)."""
    return {
        "s": round(usage.seconds, 4),
        "jobs": usage.spark_jobs,
        "read": usage.read_bytes,
        "written": usage.written_bytes,
        "phases": {
            m: v
            for m, v in metrics.items()
            if isinstance(v, (int, float)) and m.lower().endswith(("timems", "time_ms"))
        },
    }


def _round_order(live: dict[str, Any], k: int) -> list[tuple[str, Any]]:
    """The systems in the order merge ``k`` runs them: shuffled every merge (seeded by ``k``),
    so that none is always the first to read the merge's new source (and to pay for what the
    round's earlier work left cold) and none always follows the same one. In the hourly shape's
    first 516 merges at commit b5b4827, with our engine always first, it took 1.05x its own run
    without retention, 70 ms of the 112 ms a merge in the rewrite phase, which retention does
    not touch. (A rotation, used until 2026-11-29, fixed each system's predecessor: in the last
    tenth our engine would have followed the first tenth's replay, itself our engine, in most
    rounds.)"""
    items = list(live.items())
    random.Random(k).shuffle(items)
    return items


def _decile_end(
    shape: Shape, base: BaseTable, live: dict[str, Any], state: dict[str, Any], k: int, per: int
) -> None:
    hashes = {}
    for name, system in live.items():
        files = system.files()
        state["file_counts"][name].append((k, len(files)))
        first = (k - 1) // per * per  # the merges of this decile: first+1..k
        records = state["records"][name][first:k]
        row = {"after_merge": k, **_decile(records).summary(), **data_files(files)}
        row["phase_medians_ms"] = _phase_medians(records)
        row["log_kb"] = round(system.log_bytes() / 1024, 1)
        if isinstance(system, RowLevelMerge):
            row["retained_mb"] = round(system.retained_bytes() / 2**20, 2)
        hashes[name] = list(table_hash(system.frame(), base.columns))
        row["hash"] = hashes[name]
        state["deciles"][name].append(row)
    if len({json.dumps(h) for h in hashes.values()}) != 1:
        raise SystemExit(f"{shape.name}: tables differ after merge {k}: {hashes}")
    last = {n: state["deciles"][n][-1] for n in live}
    print(
        f"{shape.name} after {k}: "
        + "; ".join(f"{n} {d['median_s']} s/merge, {d['data_files']} files" for n, d in last.items()),
        flush=True,
    )


def _finish(
    spark: SparkSession,
    shape: Shape,
    args: argparse.Namespace,
    base: BaseTable,
    live: dict[str, Any],
    state: dict[str, Any],
    shape_dir: Path,
    paired: PairedReplay | None,
    twin: FreshTwin | None = None,
) -> dict[str, Any]:
    """After the last merge: the first tenth's replay (run beside the last tenth, or for a run
    saved before that existed, now), the fresh twin's summary, a fresh copy of the same rows,
    full scans, the probe, the checks."""
    systems = list(live)
    deciles = state["deciles"]
    if paired is not None:
        replay = paired.finish()
    elif RowLevelMerge.name in live:
        replay = replay_first_tenth(spark, shape, base, state, shape_dir)
    else:
        replay = None
    fresh_twin = twin.finish() if twin is not None else None
    # The same rows freshly written, as a rebuild would leave them.
    fresh = shape_dir / "fresh"
    write_fresh(spark, live[systems[0]].frame(), base, args.files, fresh)
    tables = {"fresh": (folder_files(fresh), fresh)}
    tables.update({name: (system.files(), system.dir) for name, system in live.items()})
    scans = scan_seconds(spark, base, tables)
    end: dict[str, Any] = {name: {**data_files(files), **scans[name]} for name, (files, _) in tables.items()}
    # A 100-row upsert among the newest 1,000 rows: the files it reads in our aged table and in
    # the fresh copy (registered as a table of its own).
    at = args.merges + 1
    total = base.rows + args.merges * shape.inserts
    probe_base = BaseTable(
        base.kind, base.path, total, base.files, base.bytes, base.schema, base.partition_columns
    )
    probe = shape_dir / "sources" / "probe"
    probe_rows = source_rows(spark, Shape("probe", shape.kind, 0, 100, window=1000), probe_base, at)
    probe_rows.coalesce(1).write.mode("overwrite").parquet(str(probe))
    fresh_table = RowLevelMerge(spark, base, shape_dir, f"aging.{shape.name}_fresh", folder=fresh)
    for label, system in (("fresh", fresh_table), (RowLevelMerge.name, live.get(RowLevelMerge.name))):
        if isinstance(system, RowLevelMerge):
            m = system.merge(probe, at)
            end[label]["probe_files_read"] = m.get("numTargetFilesAfterSkipping")
    for name in (RowLevelMerge.name, RowLevelMergeFeed.name):
        if isinstance(live.get(name), RowLevelMerge):
            end[name]["vacuum"] = live[name].vacuumed()
    timeline = {name: [r["s"] for r in records] for name, records in state["records"].items()}
    totals = {name: round(sum(seconds), 1) for name, seconds in timeline.items()}
    return {
        "shape": shape.name,
        "base_rows": base.rows,
        "base_files": len(base.files),
        "merges": args.merges,
        "deciles": deciles,
        "end": end,
        "total_s": totals,
        "replay": replay,
        "fresh_twin": fresh_twin,
        "checks": checks(deciles, end, totals, replay, _one_slice(state["slices"], args.merges), fresh_twin),
        "timeline": timeline,
        "file_counts": state["file_counts"],
        "engine": state["engine"],
        "slices": state["slices"],
    }


def write_fresh(spark: SparkSession, rows: DataFrame, base: BaseTable, files: int, folder: Path) -> None:
    """``rows`` written into ``folder`` as a load or a rebuild lays them out: ``files`` files,
    each a narrow range of keys (partitioned tables: a file per partition, sorted by key)."""
    keyed = rows.repartitionByRange(files, *KEY).sortWithinPartitions(*KEY)
    writer = (
        rows.repartition(DATE_COLUMN).sortWithinPartitions(*KEY).write.partitionBy(DATE_COLUMN)
        if base.partition_columns
        else keyed.write
    )
    # Adaptive execution would coalesce the range partitions into fewer, uneven files.
    coalesce = spark.conf.get("spark.sql.adaptive.coalescePartitions.enabled")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    try:
        writer.mode("overwrite").parquet(str(folder))
    finally:
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", coalesce)


# The first tenth's merges run again, on a fresh copy of the base table, beside the last tenth:
# merge j of the first tenth in the same round as merge (last tenth's first) + j - 1, ordered
# with the systems like any of them. The merge-time targets compare the last tenth with it.
REPLAY = "row_level_merge_first_tenth_again"


class PairedReplay:
    """Our engine's first tenth replayed in the rounds of the last tenth, so that the two ran on
    the same machine minute by minute: this machine's speed moved by 1.3-1.6x within one
    session (the hourly shape at engine tree da1b3a7e: every system, delta-rs included, took
    1.3-1.6x as long in its last tenth as in a replay of its first tenth 20 minutes later), far
    more than the 15 % the targets judge. Its records live in the state (``replay_records``),
    its table in ``<shape>/replay``: a run stopped inside the last tenth goes on with both."""

    records_key, result_key, started_key, what = "replay_records", "replay_result", "replay_started", "replay"

    def __init__(
        self,
        spark: SparkSession,
        shape: Shape,
        base: BaseTable,
        state: dict[str, Any],
        shape_dir: Path,
        paired_from: int,
        save: Callable[[], None],
    ) -> None:
        self.spark, self.shape, self.base, self.state = spark, shape, base, state
        self.folder, self.table = shape_dir / self.what, f"aging.{shape.name}_{self.what}"
        self.system: RowLevelMerge | None = None
        self.paired_from, self.save = paired_from, save
        state.setdefault(self.records_key, [])
        done = len(state[self.records_key])
        if self.result_key in state:  # finished (then the run stopped before its report)
            return
        if state["done"] >= paired_from:  # resumed inside the last tenth: the table lives on
            if done != state["done"] - paired_from + 1:
                raise SystemExit(
                    f"{shape.name}: {done} {self.what} merges beside merges {paired_from}-{state['done']}; "
                    "run without --resume"
                )
            want = self._rows_after(done)
            self.system = RowLevelMerge(spark, base, self.folder, self.table)
            found = self.system.frame().count()
            if found != want:
                raise SystemExit(
                    f"{shape.name}: cannot resume the {self.what} after its merge {done}: "
                    f"expected {want} rows, found {found}; run without --resume"
                )
        elif done:
            raise SystemExit(f"{shape.name}: {self.what} records before the last tenth; run without --resume")

    def _rows_after(self, done: int) -> int:
        """The rows of its table after ``done`` of its merges."""
        return self.base.rows + done * self.shape.inserts

    def start(self) -> None:
        """The fresh copy, made (untimed) just before the last tenth's first merge."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.state[self.started_key] = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.system = RowLevelMerge(self.spark, self.base, self.folder, self.table)

    def _expected_hash(self) -> list[int]:
        """The hash its rows must have after its merges: the first tenth's."""
        return list(self.state["deciles"][RowLevelMerge.name][0]["hash"])

    def finish(self) -> dict[str, Any]:
        """Its time summary, the per-round ratios of the last tenth's merges to its merges, and
        whether its rows are the ones expected (hash); saved in the state before its table is
        dropped, so a run that stops later in its report still has it."""
        if self.result_key in self.state:
            return dict(self.state[self.result_key])
        assert self.system is not None
        rows = list(table_hash(self.system.frame(), self.base.columns))
        again = self.state[self.records_key]
        last = self.state["records"][RowLevelMerge.name][self.paired_from - 1 :]
        result = {
            "started": self.state.get(self.started_key, ""),
            "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "paired": True,
            **_decile(again).summary(),
            "round_ratio": paired_ratio([a["s"] for a in last], [b["s"] for b in again]),
            "same_rows": rows == self._expected_hash(),
        }
        self.state[self.result_key] = result
        self.save()
        self.spark.sql(f"DROP TABLE IF EXISTS {self.table}")
        shutil.rmtree(self.folder, ignore_errors=True)
        return dict(result)


# The last tenth's own merges run again, each in its round, on a copy of our table's rows as it
# stood before the last tenth, freshly written (as a rebuild would leave them): what the
# table's history costs a merge, apart from what its growth costs. A shape whose every merge
# rewrites the whole table (scattered) reads and writes 1.45x the rows in its last tenth that it
# did in its first (2M rows growing by 1,000 a merge), whatever its files look like.
TWIN = "row_level_merge_fresh_twin"


class FreshTwin(PairedReplay):
    """Our engine on a freshly written copy of the aged table's rows, merge for merge beside the
    last tenth (the same sources): the last tenth's time over its twin's is the table's aging,
    its size being the same. Kept in the state and ``<shape>/twin`` like :class:`PairedReplay`."""

    records_key, result_key, started_key, what = "twin_records", "twin_result", "twin_started", "twin"

    def _rows_after(self, done: int) -> int:
        return self.base.rows + (self.paired_from - 1 + done) * self.shape.inserts

    def start(self, rows: DataFrame | None = None, files: int = 0) -> None:  # type: ignore[override]
        """The fresh copy of ``rows`` (our aged table before the last tenth) in ``files`` files,
        made untimed just before the last tenth's first merge."""
        assert rows is not None and files > 0
        shutil.rmtree(self.folder, ignore_errors=True)
        self.state[self.started_key] = time.strftime("%Y-%m-%dT%H:%M:%S")
        data = self.folder / RowLevelMerge.name  # where a resumed run finds it again
        write_fresh(self.spark, rows, self.base, files, data)
        self.system = RowLevelMerge(self.spark, self.base, self.folder, self.table, folder=data)

    def _expected_hash(self) -> list[int]:
        """Our table's rows after the last merge."""
        return list(self.state["deciles"][RowLevelMerge.name][-1]["hash"])


def paired_ratio(last: list[float], first: list[float], resamples: int = 2000) -> dict[str, float]:
    """The median of the per-round ratios last[i] / first[i] (merge i of the last tenth and of
    the replayed first tenth ran in the same round), with a 95 % bootstrap interval: the pairing
    cancels what the machine did during the round, and the median what one GC pause does to a
    mean or a p95 of 100 merges."""
    ratios = [a / b for a, b in zip(last, first, strict=True) if b > 0]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return {
        "median": round(statistics.median(ratios), 3),
        "low": round(medians[int(0.025 * resamples)], 3),
        "high": round(medians[int(0.975 * resamples) - 1], 3),
    }


def replay_first_tenth(
    spark: SparkSession, shape: Shape, base: BaseTable, state: dict[str, Any], shape_dir: Path
) -> dict[str, Any]:
    """The first tenth's merges again, now, on fresh copies of the base table: every system of
    the run, interleaved in the run's order (after three untimed merges of our engine on another
    copy, to warm a JVM that ``--replay`` has just started). Returns our
    engine's time summary (the targets' denominator), every system's under ``systems``, and
    whether every replayed table's rows equal the first tenth's (hash).

    Interleaved, not our engine alone: alone, the same merges ran faster than interleaved (the
    hourly shape at engine tree da1b3a7e: 1.27 s alone at 10:56, 1.42 s interleaved at 11:17,
    1.59 s as they ran in the first tenth hours earlier), since no other system's work evicts
    what ours keeps warm, so the last tenth, which ran interleaved, was judged against a faster
    baseline than its own. The peers' ratios (last tenth / replayed first tenth) witness how far
    the machine's speed moved between the two."""
    per = max(1, state["merges"] // 10)
    folder = shape_dir / "replay"
    shutil.rmtree(folder, ignore_errors=True)
    warm = RowLevelMerge(spark, base, folder / "warm", f"aging.{shape.name}_replay_warm")
    names = state["systems"]
    live = {name: SYSTEMS[name](spark, base, folder, f"aging.{shape.name}_replay_{name}") for name in names}
    began = time.strftime("%Y-%m-%dT%H:%M:%S")
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in live}
    for k in range(1, per + 1):
        source = folder / "sources" / f"{k:05d}"
        source_rows(spark, shape, base, k).coalesce(1).write.mode("overwrite").parquet(str(source))
        if k <= 3:
            warm.merge(source, k)
        for name, system in _round_order(live, k):
            with measured(spark, f"aging {shape.name} replay {name} {k}") as usage:
                metrics = system.merge(source, k)
            system.tidy(k)
            records[name].append(_record(usage, metrics))
        shutil.rmtree(source, ignore_errors=True)
    first = state["deciles"][state["systems"][0]][0]["hash"]
    same = all(list(table_hash(system.frame(), base.columns)) == first for system in live.values())
    for table in [f"aging.{shape.name}_replay_warm", *(f"aging.{shape.name}_replay_{n}" for n in live)]:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(f"DROP TABLE IF EXISTS {table}__changes")
    shutil.rmtree(folder, ignore_errors=True)
    summaries = {name: _decile(r).summary() for name, r in records.items()}
    return {
        "started": began,
        "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **summaries[RowLevelMerge.name],
        "same_rows": same,
        "systems": summaries,
    }


def replay_finished(spark: SparkSession, shape: Shape, work: Path) -> None:
    """Replay a finished shape's first tenth now and redo its checks with it (``--replay``)."""
    state_path = work / shape.name / "state.json"
    state = json.loads(state_path.read_text())
    result = state.get("result")
    if result is None:
        raise SystemExit(f"{shape.name}: not finished; its replay runs after its last merge")
    if (result.get("replay") or {}).get("paired"):
        raise SystemExit(
            f"{shape.name}: its first tenth was replayed beside its last tenth; a replay now would "
            "judge the last tenth against a machine it did not run on"
        )
    replay = replay_first_tenth(spark, shape, _base_from(state["base"]), state, work / shape.name)
    result["replay"] = replay
    one_slice = _one_slice(result["slices"], result["merges"])
    result["checks"] = checks(
        result["deciles"], result["end"], result["total_s"], replay, one_slice, result.get("fresh_twin")
    )
    _save(state_path, state)
    print(f"{shape.name}: first tenth replayed: mean {replay['mean_s']} s, p95 {replay['p95_s']} s")


def _one_slice(slices: list[dict[str, Any]], merges: int) -> bool:
    """Whether the first and the last tenth of the merges ran in the same slice."""
    per = max(1, merges // 10)
    return any(s["from_merge"] <= 1 and s["to_merge"] >= merges - per + 1 for s in slices)


def checks(
    deciles: dict[str, list[dict[str, Any]]],
    end: dict[str, Any],
    totals: dict[str, float],
    replay: dict[str, Any] | None = None,
    one_slice: bool = True,
    fresh_twin: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The issue's targets for our table, each as (measured, limit, held). The merge-time
    targets compare the last tenth with ``replay`` (the first tenth run again beside the last
    tenth, or for an older run after its last merge), and with the first tenth as it ran when
    both ran in ``one_slice`` and nothing was replayed beside the last tenth; otherwise that
    ratio is reported with no verdict (the machine's speed may have moved between them)."""
    ours, base = RowLevelMerge.name, RowLevelMergeNoCompaction.name
    if ours not in deciles or len(deciles[ours]) < 2:
        return {}
    first, last = deciles[ours][0], deciles[ours][-1]
    fresh, aged = end["fresh"], end[ours]
    out: dict[str, Any] = {}
    paired = replay is not None and bool(replay.get("paired"))
    if replay is not None:
        when = "beside it" if paired else "now"
        out[f"last decile / first replayed {when}: mean"] = (
            round(last["mean_s"] / replay["mean_s"], 3),
            1.15,
        )
        out[f"last decile / first replayed {when}: p95"] = (round(last["p95_s"] / replay["p95_s"], 3), 1.15)
    # As it ran, the first tenth is a verdict only when it ran in the last tenth's slice and
    # without a replay beside the last tenth (whose rounds then held one more merge).
    as_ran = (
        " (rounds of the last tenth held the replay too: no verdict)"
        if paired
        else ""
        if one_slice
        else " (ran in another slice: no verdict)"
    )
    as_ran_mean, as_ran_p95 = f"last/first decile mean{as_ran}", f"last/first decile p95{as_ran}"
    informational = {as_ran_mean, as_ran_p95} if as_ran else set()
    out[as_ran_mean] = (round(last["mean_s"] / first["mean_s"], 3), 1.15)
    out[as_ran_p95] = (round(last["p95_s"] / first["p95_s"], 3), 1.15)
    if fresh_twin is not None:
        # Not a target of the issue: the aging alone, the table's size being the same.
        for stat in ("mean", "p95"):
            label = f"last decile / same merges on a fresh copy of its rows beside it: {stat} (no verdict)"
            out[label] = (round(last[f"{stat}_s"] / fresh_twin[f"{stat}_s"], 3), 1.15)
            informational.add(label)
    out.update(
        {
            "data files": (aged["data_files"], 2 * fresh["data_files"] + 16),
            "most small files in a partition": (aged["most_small_files_in_a_partition"], 32),
            "Spark scan / fresh": (round(aged["spark_scan_s"] / fresh["spark_scan_s"], 3), 1.2),
            "pyarrow scan / fresh": (round(aged["pyarrow_scan_s"] / fresh["pyarrow_scan_s"], 3), 1.2),
            "probe files read": (aged.get("probe_files_read"), (fresh.get("probe_files_read") or 0) + 1),
        }
    )
    if base in totals:
        out["total time / without compaction"] = (round(totals[ours] / totals[base], 3), 1.1)
    if RowLevelMergeNoRetention.name in totals:
        out["total time / without retention"] = (
            round(totals[ours] / totals[RowLevelMergeNoRetention.name], 3),
            1.05,
        )
    held = {
        k: {"measured": m, "limit": lim, "held": None if k in informational else m is not None and m <= lim}
        for k, (m, lim) in out.items()
    }
    if fresh_twin is not None:
        held["fresh twin: same rows as the aged table"] = {
            "measured": "yes" if fresh_twin["same_rows"] else "no",
            "limit": "yes",
            "held": bool(fresh_twin["same_rows"]),
        }
    if replay is not None:
        same = bool(replay["same_rows"])
        held["first decile replayed: same rows"] = {
            "measured": "yes" if same else "no",
            "limit": "yes",
            "held": same,
        }
    vac = aged.get("vacuum")
    if vac:
        from dbt.adapters.rowmerge.merge.journal.checkpoint import CHECKPOINT_INTERVAL
        from dbt.adapters.rowmerge.merge.journal.retention import DEFAULT_RETAIN_VERSIONS

        limit = DEFAULT_RETAIN_VERSIONS + CHECKPOINT_INTERVAL
        held["journal entries after vacuum"] = {
            "measured": vac["entries_on_disk"],
            "limit": limit,
            "held": vac["entries_on_disk"] <= limit,
        }
        held["retained MB = MB the kept versions removed"] = {
            "measured": vac["retained_mb"],
            "limit": vac["removed_by_kept_versions_mb"],
            "held": vac["retained_equals_removed"],
        }
    fed = end.get(RowLevelMergeFeed.name, {}).get("vacuum")
    if fed:
        held["change-feed versions after vacuum"] = {
            "measured": fed["feed_versions_after"],
            "limit": FEED_RETAIN_VERSIONS,
            "held": fed["feed_versions_after"] <= FEED_RETAIN_VERSIONS,
        }
    return held


def write_report(results: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "aging.json").write_text(json.dumps({"meta": meta, "shapes": results}, indent=1))
    lines = [f"# Aging benchmark ({meta['machine']}; engine tree {meta['engine']})", ""]
    for r in results:
        ran = ", ".join(
            f"merges {s['from_merge']}-{s['to_merge']} {s['started']}..{s['ended']}" for s in r["slices"]
        )
        lines += [
            f"## {r['shape']}: {r['merges']} merges into {r['base_rows']:,} rows in {r['base_files']} files",
            "",
            f"Ran {ran}.",
            "",
            "| system | after merge | mean s | median s | p95 s | jobs | files | median file KB | small "
            "files | log KB | retained MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, rows in r["deciles"].items():
            for d in rows:
                lines.append(
                    f"| {name} | {d['after_merge']} | {d['mean_s']} | {d['median_s']} | {d['p95_s']} | "
                    f"{d['spark_jobs']} | {d['data_files']} | {d['median_file_kb']} | {d['small_files']} | "
                    f"{d['log_kb']} | {d.get('retained_mb', '')} |"
                )
        lines += [
            "",
            "| after the merges | data files | median file KB | Spark scan s | pyarrow scan s | "
            "100-row upsert: files read |",
            "|---|---|---|---|---|---|",
        ]
        for name, e in r["end"].items():
            lines.append(
                f"| {name} | {e['data_files']} | {e['median_file_kb']} | {e['spark_scan_s']} | "
                f"{e['pyarrow_scan_s']} | {e.get('probe_files_read', '')} |"
            )
        lines += [
            "",
            "| total seconds of the merges | "
            + " | ".join(f"{n}: {s}" for n, s in r["total_s"].items())
            + " |",
            "",
        ]
        lines += _replay_lines(r)
        lines += _twin_lines(r)
        fed = r["end"].get(RowLevelMergeFeed.name, {}).get("vacuum")
        if fed:
            lines += [
                f"Vacuum of row_level_merge_feed (change feed on, change_feed_retain_versions "
                f"{FEED_RETAIN_VERSIONS}): the change table went from {fed['feed_versions_before']} "
                f"versions ({fed['feed_mb_before']} MB) to {fed['feed_versions_after']} "
                f"({fed['feed_mb_after']} MB) in {fed['vacuum_s']} s.",
                "",
            ]
        vac = r["end"].get(RowLevelMerge.name, {}).get("vacuum")
        if vac:
            lines += [
                f"Vacuum of row_level_merge after the merges (its default retention): {vac['vacuum_s']} s, "
                f"{vac['entries_on_disk']} journal entries and {vac['bases_on_disk']} base on disk "
                f"(log {vac['log_kb_after_vacuum']} KB), versions from {vac['oldest_readable']} readable; "
                f"{vac['retained_versions']} retained folders, {vac['retained_mb']} MB "
                f"(the versions they belong to removed {vac['removed_by_kept_versions_mb']} MB).",
                "",
            ]
        if r["checks"]:
            lines += ["| target (row_level_merge) | measured | limit | held |", "|---|---|---|---|"]
            for k, c in r["checks"].items():
                verdict = "—" if c["held"] is None else "yes" if c["held"] else "NO"
                lines.append(f"| {k} | {c['measured']} | {c['limit']} | {verdict} |")
        lines.append("")
    (out / "aging.md").write_text("\n".join(lines))
    _chart(results, out / "aging.png")


def _replay_lines(r: dict[str, Any]) -> list[str]:
    """The replayed first tenth: how it ran, and (when every system was replayed) each system's
    last tenth against its replayed first tenth, the peers' ratios showing how far the machine's
    speed moved between the two."""
    rep = r.get("replay")
    if not rep:
        return []
    if rep.get("paired"):
        how = (
            "row_level_merge on a fresh copy of the base table, each merge in the same round as "
            "one of the last tenth's, so both ran on the machine as it was then"
        )
    elif "systems" in rep:
        how = "every system, interleaved as in the run, each on a fresh copy of the base table"
    else:
        how = "row_level_merge alone, on a fresh copy of the base table"
    ratio = rep.get("round_ratio")
    per_round = (
        f" Per round, the last tenth's merge / the replayed one: median {ratio['median']} "
        f"(95 % bootstrap interval {ratio['low']}-{ratio['high']})."
        if ratio
        else ""
    )
    lines = [
        f"First tenth replayed (merges 1-{rep['merges']}, {how}) {rep['started']}..{rep['ended']}: "
        f"row_level_merge mean {rep['mean_s']} s, median {rep['median_s']} s, p95 {rep['p95_s']} s; "
        f"same rows as the first tenth: {'yes' if rep['same_rows'] else 'NO'}.{per_round}",
        "",
    ]
    if "systems" in rep:
        lines += [
            "| system | first tenth as run: mean s | replayed: mean s | last tenth: mean s | "
            "last / replayed: mean | last / replayed: p95 |",
            "|---|---|---|---|---|---|",
        ]
        for name, again in rep["systems"].items():
            first, last = r["deciles"][name][0], r["deciles"][name][-1]
            lines.append(
                f"| {name} | {first['mean_s']} | {again['mean_s']} | {last['mean_s']} | "
                f"{round(last['mean_s'] / again['mean_s'], 3)} | {round(last['p95_s'] / again['p95_s'], 3)} |"
            )
        lines.append("")
    return lines


def _twin_lines(r: dict[str, Any]) -> list[str]:
    """The last tenth's merges beside the same merges on a fresh copy of the table's rows."""
    twin = r.get("fresh_twin")
    if not twin:
        return []
    last, ratio = r["deciles"][RowLevelMerge.name][-1], twin["round_ratio"]
    return [
        f"The last tenth's merges again, each in its round, on a freshly written copy of the table's "
        f"rows as they stood before the last tenth ({twin['started']}..{twin['ended']}): row_level_merge "
        f"mean {twin['mean_s']} s, median {twin['median_s']} s, p95 {twin['p95_s']} s, against "
        f"{last['mean_s']} / {last['median_s']} / {last['p95_s']} s on the aged table "
        f"(aged / fresh: mean {round(last['mean_s'] / twin['mean_s'], 3)}, "
        f"p95 {round(last['p95_s'] / twin['p95_s'], 3)}; per round median {ratio['median']}, 95 % "
        f"bootstrap interval {ratio['low']}-{ratio['high']}); same rows at the end: "
        f"{'yes' if twin['same_rows'] else 'NO'}.",
        "",
    ]


def _chart(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(5 * len(results), 7), squeeze=False)
    for col, r in enumerate(results):
        for name, seconds in r["timeline"].items():
            axes[0][col].plot(range(1, len(seconds) + 1), seconds, label=name, linewidth=0.6)
            xs, ys = zip(*r["file_counts"][name], strict=True)
            axes[1][col].plot(xs, ys, marker="o", label=name)
        axes[0][col].set_title(r["shape"])
        axes[0][col].set_ylabel("seconds per merge")
        axes[1][col].set_ylabel("data files")
        axes[1][col].set_xlabel("merge number")
        axes[0][col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--merges", type=int, default=1000)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--out", default=str(ROOT / "results"))
    p.add_argument("--work", default="/tmp/rowmerge-bench-aging")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on from the state a stopped run saved in --work (same engine code, systems, merges)",
    )
    p.add_argument(
        "--replay",
        default=None,
        help="for finished shapes (comma-separated), replay the first tenth now and redo the checks "
        "with it: for a shape whose last tenth ran in this session, before the machine changes",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop cleanly between two merges after this long (or when <work>/STOP exists); "
        "go on later with --resume",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="write the report of the shapes already finished in --work, and run nothing: a "
        "finished shape's evidence, saved before a long run's next shape ends",
    )
    p.add_argument(
        "--combine",
        default="",
        help="with --report-only: also the shapes of these aging.json reports (comma-separated), "
        "e.g. the per-shape reports committed in benchmarks/results/aging-partial/ by earlier sessions",
    )
    args = p.parse_args()
    work = Path(args.work)
    if args.report_only:
        earlier = [Path(f) for f in args.combine.split(",") if f]
        report_finished(work, args.shapes.split(","), Path(args.out), earlier, (args.rows, args.files))
        return
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    stop_file = work / "STOP"
    stop_file.unlink(missing_ok=True)

    def should_stop() -> bool:
        late = args.minutes is not None and time.time() - started > args.minutes * 60
        return late or stop_file.exists()

    spark = spark_session(work, args.driver_memory)
    systems = args.systems.split(",")
    results = []
    if args.replay:
        for name in args.replay.split(","):
            replay_finished(spark, SHAPES[name], work)
    try:
        for name in filter(None, args.shapes.split(",")):
            results.append(run_shape(spark, SHAPES[name], args, work, systems, should_stop))
    except Stopped as stopped:
        print(f"{stopped}; go on with --resume (state in {work})", flush=True)
    meta = {
        "machine": f"{platform.node()}, {os.cpu_count()} cores, {platform.machine()}",
        "rows": args.rows,
        "files": args.files,
        "merges": args.merges,
        "engine": engine_tree(),
        "minutes": round(sum(_minutes(r["slices"]) for r in results), 1),
    }
    if results:
        write_report(results, meta, Path(args.out))
        print(f"{len(results)} shape(s) done in {meta['minutes']} min; {Path(args.out) / 'aging.md'}")


def report_finished(
    work: Path, shapes: list[str], out: Path, earlier: Sequence[Path] = (), size: tuple[int, int] = (0, 0)
) -> None:
    """The report of the finished shapes among ``shapes``: from their saved state in ``work``,
    or from ``earlier`` reports (aging.json) for a shape the work folder does not hold (a run
    spread over machines: each finished shape's report is committed when it ends). ``size``:
    the run's --rows and --files, as a run's own report names them."""
    found: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {}  # shape -> result, engine, size
    for path in earlier:
        doc = json.loads(path.read_text())
        for result in doc["shapes"]:
            found[result["shape"]] = (result, doc["meta"]["engine"], doc["meta"])
    for name in shapes:
        path = work / name / "state.json"
        state = json.loads(path.read_text()) if path.is_file() else {}
        if state.get("result") is not None:
            asked = {"rows": size[0], "files": size[1], "merges": state["merges"]}
            found[name] = (state["result"], state["engine"], asked)
    finished = [found[name] for name in shapes if name in found]
    if not finished:
        raise SystemExit(f"--report-only: no shape of {', '.join(shapes)} is finished in {work}")
    meta = {
        "machine": f"{platform.node()}, {os.cpu_count()} cores, {platform.machine()}",
        "rows": finished[0][2]["rows"],
        "files": finished[0][2]["files"],
        "merges": finished[0][2]["merges"],
        "engine": ", ".join(sorted({engine for _, engine, _ in finished})),
        "minutes": round(sum(_minutes(result["slices"]) for result, _, _ in finished), 1),
    }
    write_report([result for result, _, _ in finished], meta, out)
    names = ", ".join(result["shape"] for result, _, _ in finished)
    print(f"{len(finished)} finished shape(s): {names}; {out / 'aging.md'}")


def _minutes(slices: list[dict[str, Any]]) -> float:
    def at(t: str) -> float:
        return time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S"))

    return sum(at(s["ended"]) - at(s["started"]) for s in slices) / 60


if __name__ == "__main__":
    main()
