"""Run a :class:`Case` through the engine (real Spark tables) and compare with the oracle.

:func:`run_engine` creates the target (one Parquet file per listed file, per partition), a
source temp view, runs ``run_merge`` with the change feed on and reads back the table and its
feed. :func:`check` returns the differences from the oracle's outcome, and :func:`reproduction`
prints everything needed to replay a mismatch by hand.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import CardinalityViolation, MergeSpecError, run_merge
from dbt.adapters.rowmerge.merge.direct import DIRECT_SOURCE_BYTES
from dbt.adapters.rowmerge.merge.rewrite import SINGLE_TASK_ROWS
from dbt.adapters.rowmerge.merge.source import SOURCE_BROADCAST
from dbt.adapters.rowmerge.merge.table import HIVE_DEFAULT_PARTITION

from . import oracle
from .cases import Case, Outcome, project, sort_rows

# Timestamps are naive on both sides: Python must convert them in UTC, as the session does.
os.environ["TZ"] = "UTC"
time.tzset()


def _ddl(schema: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{c}` {t}" for c, t in schema)


ARROW_TYPES = {
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "DECIMAL(10,2)": pa.decimal128(10, 2),
    "STRING": pa.string(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),  # isAdjustedToUTC: Spark's TIMESTAMP
    "BOOLEAN": pa.bool_(),
}


def create_target(spark: SparkSession, case: Case, name: str, location: str) -> None:
    """The target at ``location``: two Parquet files per entry of ``case.target_files`` (per
    partition; one if it holds one row).

    The files are written by pyarrow, as another engine sharing the table would write them,
    and the table is declared over them: one catalog call instead of one Spark job per file.
    """
    data = [(i, c, t) for i, (c, t) in enumerate(case.target_schema) if c not in case.partition_by]
    parts = [case.target_columns.index(p) for p in case.partition_by]
    schema = pa.schema([(c, ARROW_TYPES[t]) for _, c, t in data])
    root = Path(location)
    for n, rows in enumerate(case.target_files):
        groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for row in rows:
            values = tuple(HIVE_DEFAULT_PARTITION if row[i] in (None, "") else str(row[i]) for i in parts)
            groups.setdefault(values, []).append(row)
        for values, members in groups.items():
            folder = root.joinpath(*[f"{p}={v}" for p, v in zip(case.partition_by, values, strict=True)])
            folder.mkdir(parents=True, exist_ok=True)
            # Each listed file lands as two files (a half of its rows each, in order), so most
            # partitions hold several small files after the merge and compaction has work.
            half = (len(members) + 1) // 2
            for part, chunk in enumerate((members[:half], members[half:])):
                if not chunk:
                    continue
                columns = [pa.array([r[i] for r in chunk], type=schema.field(c).type) for i, c, _ in data]
                table = pa.Table.from_arrays(columns, schema=schema)
                pq.write_table(table, folder / f"part-{n:05d}-{part}.parquet")
    partitioned = f" PARTITIONED BY ({', '.join(f'`{p}`' for p in case.partition_by)})" if parts else ""
    ddl = _ddl(case.target_schema)
    spark.sql(f"CREATE TABLE {name} ({ddl}) USING parquet{partitioned} LOCATION '{root}'")
    if parts:
        spark.sql(f"ALTER TABLE {name} RECOVER PARTITIONS")


# Every merge is followed by a full compaction (optimize.py: optimize_every 1, a 1 MB target),
# which packs every partition left with two small files or more, version 0's among them, so it
# happens in most cases. (The tiered step after a merge needs min_files files in one tier, and in
# these tiny tables merges rarely leave that many; the engine and functional tests cover it.)
# The compaction changes files, never rows: rows and feed must stay the oracle's.
COMPACTION = ({"target_file_size_mb": 1, "auto_compact": False, "optimize_every": 1},)
# Cases whose merge committed a version, and those where an OPTIMIZE version followed it.
RAN: list[str] = []
COMPACTED: list[str] = []
MERGED: list[str] = []
# Cases whose merge was written in one pass, joined in a single task or with the source
# broadcast (rewrite.single_task_join): every table here is tiny, so half the cases are sent
# down the broadcast path (SINGLE_TASK_ROWS 0), chosen by a hash of the tag like compaction.
ONE_PASS_SINGLE_TASK: list[str] = []
ONE_PASS_BROADCAST: list[str] = []
# Cases whose one-pass write was thrown away: then the files it saw a clause act on were
# rewritten without a scan (LOST), or a target row met two source rows and the scan decided.
ONE_PASS_LOST: list[str] = []
ONE_PASS_SCANNED: list[str] = []
# Broadcast one-pass writes that inserted the rows with keys outside the files' ranges
# themselves, then found the other inserts from the ids of the source rows they saw match.
ONE_PASS_RECHECKED: list[str] = []


# Three cases in four (by a hash of the tag) read their source from a Parquet file, as a dbt
# model's view reads tables: Spark estimates its size, so the merge may bet on the direct write
# (direct.py). The others build it from rows in the driver, of a size Spark does not know:
# those never bet. Cases written directly, and cases whose bet was lost (written as usual).
DIRECT: list[str] = []
DIRECT_FALLBACK: list[str] = []


def source_from_files(tag: str) -> bool:
    return zlib.crc32(f"source_files:{tag}".encode()) % 4 != 0


def create_source(spark: SparkSession, case: Case, name: str, location: str, from_files: bool) -> None:
    """The source view ``name``: over a Parquet file pyarrow writes at ``location``
    (``from_files``), or over the rows from the driver."""
    ddl = _ddl(case.source_schema)
    if not from_files:
        spark.createDataFrame(list(case.source_rows), ddl).createOrReplaceTempView(name)
        return
    folder = Path(location)
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([(c, ARROW_TYPES[t]) for c, t in case.source_schema])
    columns = [pa.array([r[i] for r in case.source_rows], type=f.type) for i, f in enumerate(schema)]
    pq.write_table(pa.Table.from_arrays(columns, schema=schema), folder / "part-00000.parquet")
    spark.read.schema(ddl).parquet(str(folder)).createOrReplaceTempView(name)


# A third of the cases (by a hash of the tag) run as if their source were too large for the
# paths of a small one: not broadcast, so a rewrite joins it through a shuffle and gathers each
# file's rows back (rewrite.rewritten_rows), and written directly by its own tasks
# (direct.DIRECT_SOURCE_BYTES 0). Those cases, and those among them written directly.
LARGE_SOURCE: list[str] = []
DIRECT_SPREAD: list[str] = []


def large_source_for(tag: str) -> bool:
    return zlib.crc32(f"large_source:{tag}".encode()) % 3 == 0


def single_task_rows_for(tag: str) -> int:
    """The single-task limit of the case tagged ``tag``: the engine's default or 0."""
    return SINGLE_TASK_ROWS.get() if zlib.crc32(f"single_task:{tag}".encode()) % 2 else 0


def compaction_for(tag: str) -> dict[str, Any]:
    """The upkeep keys of the case tagged ``tag`` (by a hash of it: the generator's draws stay)."""
    return COMPACTION[zlib.crc32(tag.encode()) % len(COMPACTION)]


def run_engine(spark: SparkSession, case: Case, db: str, tag: str) -> Outcome:
    """Run ``case`` with the engine on fresh tables ``{db}.{tag}`` and read the result back."""
    target, source, changes = f"{db}.{tag}", f"{db}_{tag}_src", f"{db}.{tag}__changes"
    create_target(spark, case, target, f"{database_folder(spark, db)}/{tag}")
    from_files = source_from_files(tag)
    create_source(spark, case, source, f"{database_folder(spark, db)}/{tag}__source", from_files)
    error, detail = None, ""
    RAN.append(tag)
    path = SINGLE_TASK_ROWS.set(single_task_rows_for(tag))
    large = large_source_for(tag)
    broadcast = SOURCE_BROADCAST.set(not large)
    direct_bytes = DIRECT_SOURCE_BYTES.set(0) if large else None
    if large:
        LARGE_SOURCE.append(tag)
    try:
        result = run_merge(spark, {**case.spec(target, source, changes), **compaction_for(tag)})
        if result.version >= 1:  # committed a version (a merge that changes nothing does not)
            MERGED.append(tag)
        if result.metrics.get("compactVersion"):
            COMPACTED.append(tag)
        if result.metrics.get("directInsert"):
            (DIRECT_SPREAD if large else DIRECT).append(tag)
        if result.metrics.get("directInsertFallback"):
            DIRECT_FALLBACK.append(tag)
        if result.metrics.get("onePass"):
            (ONE_PASS_SINGLE_TASK if result.metrics["onePassSingleTask"] else ONE_PASS_BROADCAST).append(tag)
        if result.metrics.get("onePassInsertsRechecked"):
            ONE_PASS_RECHECKED.append(tag)
        if result.metrics.get("onePassFallback"):
            (ONE_PASS_SCANNED if result.metrics["scanTimeMs"] else ONE_PASS_LOST).append(tag)
    except CardinalityViolation as exc:
        error, detail = "cardinality", str(exc)
    except MergeSpecError as exc:
        error, detail = "spec", str(exc)
    except Exception as exc:  # anything else is a mismatch, shown with its type
        error, detail = f"{type(exc).__name__}", str(exc)[:2000]
    finally:
        SINGLE_TASK_ROWS.reset(path)
        SOURCE_BROADCAST.reset(broadcast)
        if direct_bytes is not None:
            DIRECT_SOURCE_BYTES.reset(direct_bytes)
    spark.catalog.refreshTable(target)
    table = spark.table(target)
    columns = [f.name.lower() for f in table.schema.fields]
    rows = [r.asDict() for r in table.collect()]
    feed: list[dict[str, Any]] = []
    if spark.catalog.tableExists(changes):
        spark.catalog.refreshTable(changes)
        feed = [r.asDict() for r in spark.table(changes).collect()]
    spark.catalog.dropTempView(source)
    ordered = _column_order(case, columns)
    change_rows = [(*project([r], ordered)[0], r["_change_type"]) for r in feed]
    versions = sorted({r["_commit_version"] for r in feed})
    if versions not in ([], [1]):
        detail += f"\nchange rows carry _commit_version {versions}, expected only 1"
        error = error or "bad_commit_version"
    return Outcome(error, ordered, project(rows, ordered), change_rows, detail)


def database_folder(spark: SparkSession, db: str) -> str:
    """The local folder of database ``db`` (where its managed tables live)."""
    uri = spark.catalog.getDatabase(db).locationUri
    return uri.removeprefix("file:")


def _column_order(case: Case, columns: list[str]) -> list[str]:
    """The engine's columns in the oracle's order: target columns as declared, then evolved ones."""
    declared = [c for c in case.target_columns if c in columns]
    return declared + [c for c in columns if c not in declared]


def compare(expected: Outcome, actual: Outcome) -> list[str]:
    """Differences between the oracle's and the engine's outcome (empty: they agree)."""
    problems = []
    if expected.error != actual.error:
        problems.append(f"outcome: oracle {expected.error or 'success'}, engine {actual.error or 'success'}")
    if expected.columns != actual.columns:
        problems.append(f"columns: oracle {expected.columns}, engine {actual.columns}")
    exp, act = expected.sorted(), actual.sorted()
    if exp.rows != act.rows:
        problems.append(_multiset_diff("rows", exp.rows, act.rows))
    if exp.changes != act.changes:
        problems.append(_multiset_diff("change feed", exp.changes, act.changes))
    return problems


def _multiset_diff(what: str, exp: list[tuple[Any, ...]], act: list[tuple[Any, ...]]) -> str:
    missing, extra = list(exp), []
    for r in act:
        if r in missing:
            missing.remove(r)
        else:
            extra.append(r)
    return f"{what}: only in oracle {missing}; only in engine {extra}"


def check(
    spark: SparkSession, case: Case, db: str, tag: str, con: duckdb.DuckDBPyConnection | None = None
) -> tuple[list[str], Outcome, Outcome]:
    """Run both sides; returns (differences, oracle outcome, engine outcome)."""
    expected = oracle.apply(case, con)
    actual = run_engine(spark, case, db, tag)
    return compare(expected, actual), expected, actual


def reproduction(case: Case, problems: list[str], expected: Outcome, actual: Outcome) -> str:
    """A self-contained description of a mismatch: spec, rows, both outcomes, a regression stub."""
    spec = case.spec("db.target", "source_view", "db.target__changes")
    lines = [
        f"=== MISMATCH {case.name}",
        *[f"  {p}" for p in problems],
        "spec (Spark SQL):",
        json.dumps(spec, indent=2),
        f"target schema: {case.target_schema}  partitioned by {case.partition_by}",
        f"target files: {case.target_files!r}",
        f"source schema: {case.source_schema}",
        f"source rows: {case.source_rows!r}",
        f"oracle SQL (DuckDB):\n{expected.detail}",
        f"oracle: {expected.error or 'success'} columns={expected.columns}",
        f"  rows={sort_rows(expected.rows)!r}",
        f"  changes={sort_rows(expected.changes)!r}",
        f"engine: {actual.error or 'success'} columns={actual.columns} {actual.detail[:500]}",
        f"  rows={sort_rows(actual.rows)!r}",
        f"  changes={sort_rows(actual.changes)!r}",
        "regression case (tests/differential/test_regressions.py):",
        case.to_python(),
    ]
    return "\n".join(lines)
