"""The three systems every case runs on, on copies of the same Parquet files, and the check that
they end with the same table.

- ``row_level_merge``: this adapter's engine, ``run_merge`` on the copy registered as an external
  Parquet table (version 0 recorded first with ``start_history``, as dbt's first run does).
- ``full_rewrite``: what dbt-spark offers on Parquet today: compute the merged table with Spark
  (a full outer join that applies the clauses in order) and overwrite the whole table: write it
  next to the old one, then swap the folders.
- ``delta_rs``: the ``deltalake`` package, after ``convert_to_deltalake`` on the copy (with
  ``delta.enableChangeDataFeed`` for change-feed cases): ``DeltaTable.merge`` with the same
  clauses, built by :func:`delta_rs_merge`. The source is read with pyarrow inside the timed
  block, and passed with ``streamed_exec=False`` so that delta-rs can prune target files with
  the source's statistics (its default, streamed execution, turns that off).

Each system's ``prepare`` (copy, register, convert) is not timed; ``merge`` is. ``result`` is
the table as a reader sees it afterwards; :func:`table_hash` turns it into (rows, two
order-independent sums of per-row hashes over every column and its NULL flag).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cases import SOURCE_ALIAS, TARGET_ALIAS, Case, Clauses
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from webreturns import BaseTable, copy_table

SOURCE_VIEW = "bench_source"
IN_TARGET = "__bench_in_target"
IN_SOURCE = "__bench_in_source"
CLAUSE = "__bench_clause"


@dataclass
class Job:
    """One merge to run: the case, its base table and source files, the copy to work on."""

    spark: SparkSession
    case: Case
    base: BaseTable
    clauses: Clauses
    source_dir: Path
    copy_dir: Path
    table: str  # catalog name for systems that register one

    @property
    def columns(self) -> tuple[str, ...]:
        return self.base.columns


@dataclass
class Done:
    """What a system reports about one merge (beyond :class:`measure.Usage`)."""

    counters: dict[str, int | None] = field(default_factory=dict)
    phases_ms: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


def table_hash(df: DataFrame, columns: tuple[str, ...]) -> tuple[int, int, int]:
    """Row count and two sums of per-row hashes (xxhash64 and murmur3) over every column."""
    cols: list[Column] = [F.col(c) for c in columns]
    flags = [F.isnull(c) for c in columns]
    row = df.select(
        F.count(F.lit(1)),
        F.sum(F.xxhash64(*cols, *flags).cast("decimal(38,0)")),
        F.sum(F.hash(*cols, *flags).cast("decimal(38,0)")),
    ).first()
    assert row is not None
    return int(row[0]), int(row[1] or 0), int(row[2] or 0)


def assignments(spec: str | dict[str, str], columns: tuple[str, ...]) -> dict[str, str]:
    """A clause's ``set``/``values`` as column -> SQL expression (``*`` = same-named source column)."""
    if spec == "*":
        return {c: f"{SOURCE_ALIAS}.{c}" for c in columns}
    assert isinstance(spec, dict)
    return dict(spec)


def hidden(name: str) -> bool:
    """Spark's rule for names readers skip (``_commit_version=3`` is a partition, not hidden)."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


def dir_size(path: Path) -> tuple[int, int]:
    """Bytes and files under ``path`` that readers see."""
    total = count = 0
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if not hidden(d)]
        for f in filenames:
            if not hidden(f):
                total += os.path.getsize(os.path.join(dirpath, f))
                count += 1
    return total, count


def _read_files(
    spark: SparkSession, base: BaseTable, root: Path, files: list[str] | None = None
) -> DataFrame:
    reader = spark.read.format("parquet").schema(base.schema).option("basePath", str(root))
    return reader.load([str(root)] if files is None else files)


def _table_ddl(job: Job) -> str:
    cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in job.base.schema.fields)
    parts = f" PARTITIONED BY ({', '.join(job.base.partition_columns)})" if job.base.partition_columns else ""
    return f"CREATE TABLE {job.table} ({cols}) USING parquet{parts} LOCATION '{job.copy_dir}'"


def _location(spark: SparkSession, table: str) -> Path:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    loc = [r for r in rows if r[0] == "Location"][0][1]
    return Path(re.sub(r"^file:(//)?", "", str(loc)))


class RowLevelMerge:
    name = "row_level_merge"

    def __init__(self) -> None:
        self.job: Job | None = None

    def changes_table(self, job: Job) -> str | None:
        return f"{job.table}__changes" if job.case.change_data_feed else None

    def prepare(self, job: Job) -> None:
        from dbt.adapters.rowmerge.merge import start_history

        self.job = job
        spark = job.spark
        copy_table(job.base, job.copy_dir)
        spark.sql(f"DROP TABLE IF EXISTS {job.table}")
        spark.sql(_table_ddl(job))
        if job.base.partition_columns:
            spark.sql(f"ALTER TABLE {job.table} RECOVER PARTITIONS")
        changes = self.changes_table(job)
        if changes:
            spark.sql(f"DROP TABLE IF EXISTS {changes}")
        start_history(spark, job.table, "CREATE TABLE", changes)

    def merge(self) -> Done:
        from dbt.adapters.rowmerge.merge import run_merge

        job = self.job
        assert job is not None
        changes = self.changes_table(job)
        result = run_merge(
            job.spark,
            {
                "target": job.table,
                "source": SOURCE_VIEW,
                "target_alias": TARGET_ALIAS,
                "source_alias": SOURCE_ALIAS,
                "on": job.case.on,
                "clauses": job.clauses,
                "change_data_feed": {"table": changes} if changes else None,
            },
        )
        m = result.metrics
        return Done(
            counters={
                "inserted": m.get("numTargetRowsInserted"),
                "updated": m.get("numTargetRowsUpdated"),
                "deleted": m.get("numTargetRowsDeleted"),
                "files_added": m.get("numTargetFilesAdded"),
                "files_removed": m.get("numTargetFilesRemoved"),
                "bytes_added": m.get("numTargetBytesAdded"),
                "bytes_removed": m.get("numTargetBytesRemoved"),
                "change_files_added": m.get("numTargetChangeFilesAdded"),
            },
            phases_ms={k: v for k, v in m.items() if k.endswith("TimeMs") and k != "executionTimeMs"},
            metrics={**m, "version": result.version},
        )

    def after(self, done: Done) -> None:
        """Untimed: the change feed's bytes (the engine reports its files, not their size)."""
        job = self.job
        assert job is not None
        changes = self.changes_table(job)
        if changes:
            done.counters["change_bytes_added"] = dir_size(_location(job.spark, changes))[0]
        done.metrics["applyWindowMs"] = apply_window_ms(job.copy_dir, done.metrics.get("version"))

    def result(self) -> DataFrame:
        job = self.job
        assert job is not None
        job.spark.catalog.refreshTable(job.table)
        return job.spark.table(job.table)

    def cleanup(self) -> None:
        job = self.job
        if job is None:
            return
        changes = self.changes_table(job)
        if changes:
            job.spark.sql(f"DROP TABLE IF EXISTS {changes}")
        job.spark.sql(f"DROP TABLE IF EXISTS {job.table}")
        shutil.rmtree(job.copy_dir, ignore_errors=True)


def apply_window_ms(location: Path, version: int | None) -> int | None:
    """Commit point to applied marker of ``version`` (how long readers may see old and new files
    together): the journal entry's and the ``.applied`` marker's modification times."""
    log = location / "_rowmerge_log"
    stamps: dict[str, int] = {}
    for f in log.glob("*") if version and log.is_dir() else []:
        stem, _, suffix = f.name.partition(".")
        if stem.isdigit() and int(stem) == version and suffix in ("json", "applied"):
            stamps[suffix] = f.stat().st_mtime_ns
    if len(stamps) < 2:
        return None
    return round((stamps["applied"] - stamps["json"]) / 1e6)


def merged_frame(
    target: DataFrame, source: DataFrame, on: str, clauses: Clauses, base: BaseTable
) -> DataFrame:
    """The table after the merge, computed whole: clauses applied in order to a full outer join."""
    t = target.withColumn(IN_TARGET, F.lit(True)).alias(TARGET_ALIAS)
    s = source.withColumn(IN_SOURCE, F.lit(True)).alias(SOURCE_ALIAS)
    joined = t.join(s, F.expr(on), "full_outer")
    in_t = F.col(f"{TARGET_ALIAS}.{IN_TARGET}").isNotNull()
    in_s = F.col(f"{SOURCE_ALIAS}.{IN_SOURCE}").isNotNull()
    kinds = {"matched": in_t & in_s, "not_matched": in_s & ~in_t, "not_matched_by_source": in_t & ~in_s}
    choice: Any = None
    for i, clause in enumerate(clauses):
        applies = kinds[clause["when"]]
        if clause.get("condition"):
            applies = applies & F.coalesce(F.expr(clause["condition"]), F.lit(False))
        choice = F.when(applies, F.lit(i)) if choice is None else choice.when(applies, F.lit(i))
    joined = joined.withColumn(CLAUSE, choice.otherwise(F.lit(-1)))
    chosen = F.col(CLAUSE)
    writes = [i for i, c in enumerate(clauses) if c["action"] in ("update", "insert")]
    keep = (chosen.isin(writes) if writes else F.lit(False)) | ((chosen == -1) & in_t)
    out = []
    for f in base.schema.fields:
        value: Any = F.col(f"{TARGET_ALIAS}.{f.name}")
        for i, clause in enumerate(clauses):
            if clause["action"] == "update":
                expr = assignments(clause["set"], base.columns).get(f.name)
            elif clause["action"] == "insert":
                expr = assignments(clause["values"], base.columns).get(f.name, "NULL")
            else:
                continue
            if expr is not None:
                value = F.when(chosen == i, F.expr(expr).cast(f.dataType)).otherwise(value)
        out.append(value.alias(f.name))
    return joined.where(keep).select(*out)


class FullRewrite:
    name = "full_rewrite"

    def __init__(self) -> None:
        self.job: Job | None = None

    def prepare(self, job: Job) -> None:
        self.job = job
        copy_table(job.base, job.copy_dir)

    def merge(self) -> Done:
        job = self.job
        assert job is not None
        target = _read_files(job.spark, job.base, job.copy_dir)
        source = job.spark.read.format("parquet").load(str(job.source_dir))
        merged = merged_frame(target, source, job.case.on, job.clauses, job.base)
        new = job.copy_dir.with_name(job.copy_dir.name + ".new")
        shutil.rmtree(new, ignore_errors=True)
        writer = merged.write.format("parquet")
        if job.base.partition_columns:
            writer = writer.partitionBy(*job.base.partition_columns)
        writer.save(str(new))
        shutil.rmtree(job.copy_dir)
        new.rename(job.copy_dir)
        return Done()

    def after(self, done: Done) -> None:
        job = self.job
        assert job is not None
        added, files = dir_size(job.copy_dir)
        done.counters = {
            "files_added": files,
            "files_removed": len(job.base.files),
            "bytes_added": added,
            "bytes_removed": job.base.bytes,
        }

    def result(self) -> DataFrame:
        job = self.job
        assert job is not None
        return _read_files(job.spark, job.base, job.copy_dir)

    def cleanup(self) -> None:
        if self.job is not None:
            shutil.rmtree(self.job.copy_dir, ignore_errors=True)


def delta_rs_merge(dt: Any, source: Any, on: str, clauses: Clauses, columns: tuple[str, ...]) -> Any:
    """Our clause spec as a delta-rs ``TableMerger`` (clauses in order, predicates as given)."""
    merger = dt.merge(
        source, predicate=on, source_alias=SOURCE_ALIAS, target_alias=TARGET_ALIAS, streamed_exec=False
    )
    for c in clauses:
        cond = c.get("condition")
        when, action = c["when"], c["action"]
        if when == "matched" and action == "delete":
            merger = merger.when_matched_delete(predicate=cond)
        elif when == "matched":
            merger = merger.when_matched_update(assignments(c["set"], columns), predicate=cond)
        elif when == "not_matched":
            merger = merger.when_not_matched_insert(assignments(c["values"], columns), predicate=cond)
        elif action == "delete":
            merger = merger.when_not_matched_by_source_delete(predicate=cond)
        else:
            merger = merger.when_not_matched_by_source_update(assignments(c["set"], columns), predicate=cond)
    return merger


def _delta_log(root: Path, version: int) -> list[dict[str, Any]]:
    path = root / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# Spark's type names -> Delta's primitive type names, for partition columns.
DELTA_TYPES = {"date": "date", "int": "integer", "bigint": "long", "string": "string"}


class DeltaRs:
    name = "delta_rs"

    def __init__(self) -> None:
        self.job: Job | None = None
        self.sizes: dict[str, int] = {}
        self.version = 0

    def prepare(self, job: Job) -> None:
        from deltalake import DeltaTable, Field, Schema, convert_to_deltalake
        from deltalake.schema import PrimitiveType

        self.job = job
        copy_table(job.base, job.copy_dir)
        partition_by = None
        if job.base.partition_columns:
            partition_by = Schema(
                [
                    Field(f.name, PrimitiveType(DELTA_TYPES.get(f.dataType.simpleString(), "string")))
                    for f in job.base.schema.fields
                    if f.name in job.base.partition_columns
                ]
            )
        config = {"delta.enableChangeDataFeed": "true"} if job.case.change_data_feed else None
        convert_to_deltalake(
            str(job.copy_dir),
            partition_by=partition_by,
            partition_strategy="hive" if partition_by is not None else None,
            configuration=config,
        )
        self.version = DeltaTable(str(job.copy_dir)).version()
        self.sizes = {}
        for v in range(self.version + 1):
            for action in _delta_log(job.copy_dir, v):
                if "add" in action:
                    self.sizes[action["add"]["path"]] = int(action["add"]["size"])

    def merge(self) -> Done:
        import pyarrow.parquet as pq
        from deltalake import DeltaTable

        job = self.job
        assert job is not None
        dt = DeltaTable(str(job.copy_dir))
        source = pq.read_table(str(job.source_dir))
        m = delta_rs_merge(dt, source, job.case.on, job.clauses, job.columns).execute()
        return Done(
            counters={
                "inserted": m.get("num_target_rows_inserted"),
                "updated": m.get("num_target_rows_updated"),
                "deleted": m.get("num_target_rows_deleted"),
            },
            phases_ms={k: v for k, v in m.items() if k.endswith("_time_ms") and k != "execution_time_ms"},
            metrics=m,
        )

    def after(self, done: Done) -> None:
        """Untimed: files and bytes from the commit the merge wrote."""
        from deltalake import DeltaTable

        job = self.job
        assert job is not None
        version = DeltaTable(str(job.copy_dir)).version()
        added = removed = cdc = 0
        bytes_added = bytes_removed = cdc_bytes = 0
        for v in range(self.version + 1, version + 1):
            for action in _delta_log(job.copy_dir, v):
                if "add" in action:
                    added += 1
                    bytes_added += int(action["add"]["size"])
                elif "remove" in action:
                    removed += 1
                    r = action["remove"]
                    bytes_removed += int(r.get("size") or self.sizes.get(r["path"], 0))
                elif "cdc" in action:
                    cdc += 1
                    cdc_bytes += int(action["cdc"]["size"])
        done.counters.update(
            files_added=added,
            files_removed=removed,
            bytes_added=bytes_added,
            bytes_removed=bytes_removed,
            change_files_added=cdc,
            change_bytes_added=cdc_bytes,
        )
        done.metrics["version"] = version

    def result(self) -> DataFrame:
        from deltalake import DeltaTable

        job = self.job
        assert job is not None
        files = DeltaTable(str(job.copy_dir)).file_uris()
        if not files:
            return job.spark.createDataFrame([], job.base.schema)
        return _read_files(job.spark, job.base, job.copy_dir, files)

    def cleanup(self) -> None:
        if self.job is not None:
            shutil.rmtree(self.job.copy_dir, ignore_errors=True)


SYSTEMS = {s.name: s for s in (RowLevelMerge, FullRewrite, DeltaRs)}
