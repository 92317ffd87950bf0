"""A merge process for the reliability tests: its own Spark, killed or racing on purpose.

    python -m tests.reliability.victim once  JOB.json   # one job, then exit (or die trying)
    python -m tests.reliability.victim serve ROOT       # one merge per JSON line on stdin

A job is a merge unless its ``kind`` names a table operation: ``restore`` (``version``,
``unique_key``) or ``vacuum`` (``retain_versions``, ``change_feed_retain_versions``, ``force``),
run on the job's ``table`` (operation_faults.py kills them after each commit step).

The process has its own in-memory catalog, into which it registers the test's tables by
location under the same names the test uses (as a second engine sharing the files would),
so the test process can recover and read them through its own Hive catalog afterwards.

Protocol on stdout: ``MERGING`` right before ``run_merge`` starts (the kill test times its
SIGKILL from it; ``OPERATING`` before a table operation), then ``RESULT {json}`` or
``ERROR {json}``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import MergeError, restore, run_merge, vacuum

# Set by the test: extra JVM options (class-data sharing archive, C1 only) to start faster.
JAVA_OPTS_ENV = "ROWMERGE_VICTIM_JAVA_OPTS"
# Set by the test: "1" runs queries interpreted; compiling code for a few rows once costs more.
INTERPRETED_ENV = "ROWMERGE_VICTIM_INTERPRETED"
# Set by the test: the engine's storage (spark.rowmerge.storage: hadoop, arrow; auto if unset).
STORAGE_ENV = "ROWMERGE_VICTIM_STORAGE"
# Set by the test: the victim's master (a standalone cluster's spark:// URL); local[1] if unset.
MASTER_ENV = "ROWMERGE_VICTIM_MASTER"


def session(root: str) -> SparkSession:
    builder = (
        SparkSession.builder.master(os.environ.get(MASTER_ENV) or "local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.sql.catalogImplementation", "in-memory")
        .config("spark.sql.warehouse.dir", os.path.join(root, "victim-warehouse"))
    )
    if os.environ.get(INTERPRETED_ENV) == "1":
        builder = (
            builder.config("spark.sql.codegen.wholeStage", "false")
            .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.sql.shuffle.partitions", "1")
        )
    if os.environ.get(STORAGE_ENV):
        builder = builder.config("spark.rowmerge.storage", os.environ[STORAGE_ENV])
    opts = os.environ.get(JAVA_OPTS_ENV)
    if opts:
        builder = builder.config("spark.driver.extraJavaOptions", opts)
    if os.environ.get(MASTER_ENV):
        # On a cluster: one executor (a separate JVM on a worker) is enough for a tiny merge,
        # and each victim waits for its executors to start before its first job.
        builder = builder.config("spark.cores.max", "1")
        if opts:
            builder = builder.config("spark.executor.extraJavaOptions", opts)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def register(spark: SparkSession, tables: list[dict[str, Any]]) -> None:
    """Register each table by location (dropping an earlier registration of the name)."""
    for t in tables:
        db = t["name"].split(".")[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
        spark.sql(f"DROP TABLE IF EXISTS {t['name']}")
        parts = f" PARTITIONED BY ({', '.join(t['partition_by'])})" if t["partition_by"] else ""
        spark.sql(
            f"CREATE TABLE {t['name']} ({t['ddl']}) USING {t['format']}{parts} LOCATION '{t['location']}'"
        )
        if t["partition_by"]:
            spark.sql(f"ALTER TABLE {t['name']} RECOVER PARTITIONS")


def source(spark: SparkSession, job: dict[str, Any]) -> None:
    """The source view: over the job's rows, or (``from_file``) over a Parquet file of them,
    written once per source name under the job's root (each trial's table has its own)."""
    rows = [tuple(r) for r in job["source"]["rows"]]
    name = job["spec"]["source"]
    frame = spark.createDataFrame(rows, job["source"]["ddl"])
    if job["source"].get("from_file"):
        path = f"{job['root']}/sources/{name}"
        frame.coalesce(1).write.mode("overwrite").parquet(path)
        frame = spark.read.parquet(path)
    frame.createOrReplaceTempView(name)


def merge(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    register(spark, job["tables"])
    source(spark, job)
    time.sleep(job.get("jitter_s", 0.0))
    print("MERGING", flush=True)
    started = time.time()
    try:
        result = run_merge(spark, job["spec"])
    except MergeError as exc:
        return {
            "ok": False,
            "error": type(exc).__name__,
            "message": str(exc),
            "started": started,
            "ended": time.time(),
        }
    return {
        "ok": True,
        "version": result.version,
        "metrics": result.metrics,
        "started": started,
        "ended": time.time(),
    }


# The table operations a job may name as its ``kind``, and the job keys each one takes.
OPERATIONS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "restore": (restore, ("version", "unique_key")),
    "vacuum": (vacuum, ("retain_versions", "change_feed_retain_versions", "force")),
}


def operate(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    """Run the job's table operation on ``job["table"]``; its result as the RESULT line's data."""
    register(spark, job["tables"])
    run, keys = OPERATIONS[job["kind"]]
    print("OPERATING", flush=True)
    started = time.time()
    try:
        result = run(spark, job["table"], **{k: job[k] for k in keys if k in job})
    except MergeError as exc:
        return {"ok": False, "error": type(exc).__name__, "message": str(exc), "started": started}
    return {"ok": True, "version": result.version, "result": result.as_dict(), "started": started}


def main(argv: list[str]) -> int:
    mode, arg = argv[1], argv[2]
    if mode == "once":
        with open(arg, encoding="utf-8") as fh:
            job = json.load(fh)
        spark = session(job["root"])
        out = operate(spark, job) if job.get("kind", "merge") != "merge" else merge(spark, job)
        print(("RESULT " if out["ok"] else "ERROR ") + json.dumps(out), flush=True)
        return 0
    spark = session(arg)
    print("READY", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if job.get("jitter_s") is None:
            job["jitter_s"] = random.random() * 0.2
        out = merge(spark, job)
        print(("RESULT " if out["ok"] else "ERROR ") + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
