"""The engine on separate executor JVMs (local-cluster), to prove nothing assumes one JVM.

Runs in a subprocess because a Spark process can host only one SparkContext and the rest of
the suite shares a plain local one. Covers a Hive-serde (STORED AS PARQUET) partitioned table,
an update, an insert into a new partition and a not-matched-by-source delete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    from dbt.adapters.rowmerge.merge import run_merge
    root = sys.argv[1]
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.warehouse.dir", root + "/wh")
        .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                "jdbc:derby:;databaseName=" + root + "/ms;create=true")
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + root)
        .enableHiveSupport().getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("create table h (id bigint, s string) partitioned by (p int) stored as parquet")
    spark.sql("insert into h partition (p=1) values (1,'a'),(2,'b')")
    spark.sql("insert into h partition (p=2) values (3,'c'),(5,'e')")
    spark.createDataFrame([(1, "A", 1), (4, "D", 3), (3, "c", 2)], "id long, s string, p int") \\
        .createOrReplaceTempView("src")
    files_before = len(spark.table("h").inputFiles())
    result = run_merge(spark, {
        "target": "h", "source": "src", "target_alias": "t", "source_alias": "s",
        "on": "t.id = s.id",
        "clauses": [
            {"when": "matched", "action": "update", "set": "*"},
            {"when": "not_matched", "action": "insert", "values": "*"},
            {"when": "not_matched_by_source", "condition": "t.p = 2", "action": "delete"},
        ]})
    rows = sorted(tuple(r) for r in spark.table("h").collect())
    parts = sorted(r[0] for r in spark.sql("show partitions h").collect())
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("RESULT " + json.dumps({"rows": rows, "partitions": parts, "summary": result.summary(),
                                  "files_before": files_before, "executors": executors}))
    spark.stop()
    """
)


@pytest.mark.slow
def test_run_merge_on_local_cluster_with_hive_serde_table(tmp_path: Path) -> None:
    env = dict(os.environ, SPARK_WORKER_DIR=str(tmp_path / "work"))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[0][len("RESULT ") :])
    assert out["executors"] == 2
    assert [tuple(r) for r in out["rows"]] == [(1, "A", 1), (2, "b", 1), (3, "c", 2), (4, "D", 3)]
    assert out["partitions"] == ["p=1", "p=2", "p=3"]
    # id 1 updated, id 5 deleted (two files); id 3 is an unchanged update: its file stays.
    assert out["summary"] == (
        f"MERGE 1 updated, 1 inserted, 1 deleted; 2 of {out['files_before']} files rewritten"
    )
