"""Benchmark: row_level_merge against rewriting the whole table, on the same data, same run.

Each named scenario builds a fresh Parquet table, applies one change batch twice — once with
``run_merge`` and once with the baseline a dbt-spark user has today on plain Parquet (compute the
merged table and overwrite it entirely) — checks that both end states are identical row for
row, and records wall time, bytes written and files rewritten. Results go to
``benchmarks/results/`` as JSON, a markdown table and a PNG chart; figures are ratios against the
baseline measured in the same run.

    python benchmarks/run.py [--rows 5000000] [--files 64] [--scenarios a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from dbt.adapters.rowmerge.merge import run_merge, start_history  # noqa: E402
from dbt.adapters.rowmerge.merge.storage import is_hidden  # noqa: E402

WORK = ROOT / "work"
RESULTS = ROOT / "results"


@dataclass
class Scenario:
    name: str
    description: str
    partitioned: bool
    make_source: Callable[[SparkSession, int], DataFrame]
    clauses: list[dict[str, Any]]
    change_data_feed: bool = False


UPSERT = [
    {"when": "matched", "action": "update", "set": "*"},
    {"when": "not_matched", "action": "insert", "values": "*"},
]
CDC = [
    {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
    {
        "when": "matched",
        "action": "update",
        "set": {"amount": "s.amount", "status": "s.status", "updated_at": "s.updated_at"},
    },
    {
        "when": "not_matched",
        "condition": "s.op <> 'D'",
        "action": "insert",
        "values": {
            "id": "s.id",
            "customer": "s.customer",
            "amount": "s.amount",
            "status": "s.status",
            "updated_at": "s.updated_at",
            "day": "s.day",
        },
    },
]


def base_rows(spark: SparkSession, rows: int) -> DataFrame:
    """The table: ids in load order, so recent ids sit in the last files (as in real tables)."""
    return spark.range(rows).select(
        F.col("id"),
        (F.col("id") % 50_000).alias("customer"),
        (F.col("id") % 997 / 10.0).alias("amount"),
        F.lit("open").alias("status"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("updated_at"),
        F.floor(F.col("id") * 30 / rows).cast("int").alias("day"),
    )


def changed(df: DataFrame) -> DataFrame:
    return df.withColumn("amount", F.col("amount") + 1).withColumn("status", F.lit("paid"))


def src_recent(spark: SparkSession, rows: int) -> DataFrame:
    """1% of rows updated, all among the newest 2%, plus 1% new rows."""
    n = rows // 100
    upd = changed(base_rows(spark, rows).where(F.col("id") >= rows - 2 * n).where(F.col("id") % 2 == 0))
    new = base_rows(spark, rows + n).where(F.col("id") >= rows)
    return upd.unionByName(new)


def src_scattered(spark: SparkSession, rows: int) -> DataFrame:
    """0.1% of rows updated, spread evenly over the whole table (touches every file)."""
    return changed(base_rows(spark, rows).where(F.col("id") % 1000 == 7))


def src_insert_only(spark: SparkSession, rows: int) -> DataFrame:
    return base_rows(spark, rows + rows // 50).where(F.col("id") >= rows)


def src_cdc(spark: SparkSession, rows: int) -> DataFrame:
    """Partitioned table: changes to the last two days: updates, deletes and new rows."""
    n = rows // 100
    recent = base_rows(spark, rows).where(F.col("day") >= 28)
    upd = changed(recent.where(F.col("id") % 7 == 0)).withColumn("op", F.lit("U"))
    dele = recent.where(F.col("id") % 7 == 1).withColumn("op", F.lit("D"))
    new = base_rows(spark, rows + n).where(F.col("id") >= rows).withColumn("day", F.lit(29))
    return upd.unionByName(dele).unionByName(new.withColumn("op", F.lit("I")))


SCENARIOS = [
    Scenario("upsert_recent", "1% updates among the newest rows + 1% inserts", False, src_recent, UPSERT),
    Scenario(
        "upsert_recent_cdf",
        "the same with change_data_feed on",
        False,
        src_recent,
        UPSERT,
        change_data_feed=True,
    ),
    Scenario("upsert_scattered", "0.1% updates spread over every file", False, src_scattered, UPSERT),
    Scenario("insert_only", "2% new rows, insert-only merge", False, src_insert_only, [UPSERT[1]]),
    Scenario(
        "partitioned_cdc", "30 day partitions; CDC updates/deletes/inserts in the last 2", True, src_cdc, CDC
    ),
]


def spark_session() -> SparkSession:
    builder = (
        SparkSession.builder.master(os.environ.get("BENCH_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.warehouse.dir", str(WORK / "warehouse"))
        .config("spark.sql.ansi.enabled", "false")
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={WORK / 'metastore_db'};create=true",
        )
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={WORK}")
        .enableHiveSupport()
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def create_target(spark: SparkSession, name: str, sc: Scenario, rows: int, files: int) -> None:
    """The table as dbt's first run leaves it: written, then version 0 (and its change table)."""
    df = base_rows(spark, rows)
    if sc.partitioned:
        df.repartitionByRange(files, "day", "id").write.format("parquet").partitionBy("day").saveAsTable(name)
    else:
        df.repartitionByRange(files, "id").write.format("parquet").saveAsTable(name)
    start_history(spark, name, "CREATE TABLE", f"{name}__changes" if sc.change_data_feed else None)


def apply_window_ms(spark: SparkSession, table: str, version: int) -> int:
    """Commit point to applied marker: how long readers may see old and new files together."""
    log = Path(location(spark, table)) / "_rowmerge_log"
    entry = (log / f"{version:020d}.json").stat().st_mtime_ns
    applied = (log / f"{version:020d}.applied").stat().st_mtime_ns
    return round((applied - entry) / 1e6)


def dir_bytes(path: str) -> tuple[int, int]:
    """Bytes and files readers see under ``path`` (Spark's hidden-name rule)."""
    total, count = 0, 0
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if not is_hidden(d)]
        for f in filenames:
            if not is_hidden(f):
                total += os.path.getsize(os.path.join(dirpath, f))
                count += 1
    return total, count


def location(spark: SparkSession, table: str) -> str:
    row = [r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect() if r[0] == "Location"][0]
    return str(row[1]).replace("file:", "")


def baseline_full_rewrite(spark: SparkSession, table: str, sc: Scenario) -> dict[str, Any]:
    """What plain dbt-spark offers: compute the merged table, overwrite all of it."""
    start = time.monotonic()
    t = spark.table(table).alias("t")
    s = spark.table(f"{table}_src").alias("s")
    cols = [c for c in spark.table(table).columns]
    joined = t.join(s, F.col("t.id") == F.col("s.id"), "full_outer")
    is_delete = F.col("s.op") == "D" if "op" in spark.table(f"{table}_src").columns else F.lit(False)
    keep = ~(F.col("s.id").isNotNull() & F.coalesce(is_delete, F.lit(False)))
    merged = joined.where(keep).select(
        *[
            F.when(F.col("s.id").isNotNull(), F.col(f"s.{c}")).otherwise(F.col(f"t.{c}")).alias(c)
            for c in cols
        ]
    )
    out = f"{table}_baseline"
    writer = merged.write.format("parquet")
    if sc.partitioned:
        writer = writer.partitionBy("day")
    writer.saveAsTable(out)
    seconds = time.monotonic() - start
    size, files = dir_bytes(location(spark, out))
    return {"seconds": seconds, "bytes_written": size, "files_written": files, "table": out}


def checksum(spark: SparkSession, table: str) -> tuple[int, int]:
    cols = ["id", "customer", "amount", "status", "updated_at", "day"]
    row = spark.table(table).select(F.count("*"), F.sum(F.xxhash64(*cols))).collect()[0]
    return int(row[0]), int(row[1] or 0)


@dataclass
class Outcome:
    scenario: str
    description: str
    rows: int
    files: int
    source_rows: int
    merge_seconds: float
    baseline_seconds: float
    merge_bytes_written: int
    baseline_bytes_written: int
    files_rewritten: int
    files_added: int
    change_files_added: int
    apply_window_ms: int
    time_ratio: float
    bytes_ratio: float
    identical: bool
    metrics: dict[str, int]


def run_scenario(spark: SparkSession, sc: Scenario, rows: int, files: int) -> Outcome:
    table = f"bench.{sc.name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"DROP TABLE IF EXISTS {table}_baseline")
    spark.sql(f"DROP TABLE IF EXISTS {table}__changes")
    create_target(spark, table, sc, rows, files)
    # Both contenders read the same materialized change batch.
    sc.make_source(spark, rows).write.format("parquet").mode("overwrite").saveAsTable(f"{table}_src")
    spark.sql(f"CACHE TABLE {table}_src")
    source_rows = spark.table(f"{table}_src").count()

    base = baseline_full_rewrite(spark, table, sc)
    start = time.monotonic()
    result = run_merge(
        spark,
        {
            "target": table,
            "source": f"{table}_src",
            "target_alias": "t",
            "source_alias": "s",
            "on": "t.id = s.id",
            "clauses": sc.clauses,
            "change_data_feed": {"table": f"{table}__changes"} if sc.change_data_feed else None,
        },
    )
    merge_seconds = time.monotonic() - start
    m = result.metrics
    # With change_data_feed the change rows are written too: they count as bytes written.
    change_bytes = dir_bytes(location(spark, f"{table}__changes"))[0] if sc.change_data_feed else 0
    identical = checksum(spark, table) == checksum(spark, base["table"])
    spark.sql(f"UNCACHE TABLE {table}_src")
    return Outcome(
        scenario=sc.name,
        description=sc.description,
        rows=rows,
        files=files,
        source_rows=source_rows,
        merge_seconds=round(merge_seconds, 2),
        baseline_seconds=round(base["seconds"], 2),
        merge_bytes_written=m["numTargetBytesAdded"] + change_bytes,
        baseline_bytes_written=base["bytes_written"],
        files_rewritten=m["numTargetFilesRemoved"],
        files_added=m["numTargetFilesAdded"],
        change_files_added=m["numTargetChangeFilesAdded"],
        apply_window_ms=apply_window_ms(spark, table, result.version),
        time_ratio=round(merge_seconds / base["seconds"], 3),
        bytes_ratio=round((m["numTargetBytesAdded"] + change_bytes) / max(base["bytes_written"], 1), 4),
        identical=identical,
        metrics=m,
    )


def write_results(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "rows": args.rows,
        "files": args.files,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "master": os.environ.get("BENCH_MASTER", "local[2]"),
        "date": time.strftime("%Y-%m-%d"),
    }
    (RESULTS / "results.json").write_text(
        json.dumps({"meta": meta, "scenarios": [asdict(o) for o in outcomes]}, indent=1)
    )
    lines = [
        f"Table of {args.rows:,} rows in {args.files} Parquet files; {meta['machine']}; Spark "
        f"`{meta['master']}`; {meta['date']}. Ratios are row_level_merge / full rewrite, same run.",
        "",
        "| scenario | change rows | files rewritten | merge s | full rewrite s | time ratio | bytes ratio "
        "| apply window ms | same result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.scenario} — {o.description} | {o.source_rows:,} | {o.files_rewritten} of "
            f"{o.metrics['numTargetFilesBeforeSkipping']} | {o.merge_seconds} | {o.baseline_seconds} | "
            f"{o.time_ratio} | {o.bytes_ratio} | {o.apply_window_ms} | {'yes' if o.identical else 'NO'} |"
        )
    (RESULTS / "results.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = [o.scenario for o in outcomes]
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [o.time_ratio for o in outcomes], 0.4, label="time")
    ax.bar([i + 0.2 for i in x], [o.bytes_ratio for o in outcomes], 0.4, label="bytes written")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(list(x), names)
    ax.set_ylabel("row_level_merge / full rewrite")
    ax.set_title(f"dbt-rowmerge vs full table rewrite ({args.rows:,} rows, {args.files} files)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "chart.png", dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    spark = spark_session()
    spark.sql("CREATE DATABASE IF NOT EXISTS bench")
    wanted = args.scenarios.split(",")
    outcomes = []
    for sc in SCENARIOS:
        if sc.name in wanted:
            o = run_scenario(spark, sc, args.rows, args.files)
            print(json.dumps({k: v for k, v in asdict(o).items() if k != "metrics"}), flush=True)
            outcomes.append(o)
    write_results(outcomes, args)
    print((RESULTS / "results.md").read_text())
    failed = [o.scenario for o in outcomes if not o.identical]
    if failed:
        print(f"RESULT MISMATCH in {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
