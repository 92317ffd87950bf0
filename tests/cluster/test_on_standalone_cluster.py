"""The product on a real standalone cluster (a master and two worker JVMs on loopback): the
integration project end to end (`make test`), and in `make test-long` (marker `long`) a
representative third of the engine suite and one fault-injection shape whose victims run
their merges on the cluster.

Every test here uses the one cluster this module's pytest process starts (tests/cluster/
conftest.py); the applications run one after another, each with both workers' executors.
Nothing shares the driver's JVM, working directory or temp dirs with the executors: they
are separate JVMs started by the workers in their own work directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.cluster.standalone import StandaloneCluster
from tests.engine_third import CLUSTER_MODULES, run_engine_third
from tests.reliability.conftest import java_opts, rdb  # noqa: F401 - fixtures of the fault test
from tests.reliability.harness import SHAPES, run_fault_injection

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_integration_project_on_a_standalone_cluster(
    standalone_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """The same project, profile `method: session` with `spark.master: spark://...`: batch 0
    creates every table and batch 1 merges into each (batch 2 merges the same models again,
    which the local run of the project checks: here it would only repeat what batch 1 showed
    of the cluster)."""
    apps = standalone_cluster.applications()
    env = {**os.environ, "ROWMERGE_SPARK_MASTER": standalone_cluster.master_url}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--in-process", "--batches", "2"]
        + ["--work-dir", str(tmp_path / "demo")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
    summary = json.loads((tmp_path / "demo" / "demo_summary.json").read_text())
    assert summary["ok"] is True
    # every merge of batch 1 ran (the project's own tests checked every table), then the
    # --empty runs and the history
    assert [b["batch"] for b in summary["batches"]] == [0, 1]
    merges = [m for b in summary["batches"][1:] for m in b["models"] if m["code"] == "MERGE"]
    assert len(merges) == 9, [m["model"] for m in merges]
    assert summary["empty_run"]["exit_code"] == 0 and summary["history"]
    # every dbt command ran in one driver, an application of the cluster, and both workers
    # are still alive and registered
    assert standalone_cluster.applications() - apps == 1
    assert standalone_cluster.alive_workers() == 2


@pytest.mark.slow
@pytest.mark.long
def test_engine_third_on_a_standalone_cluster(standalone_cluster: StandaloneCluster, tmp_path: Path) -> None:
    """The cluster half of tests/engine_third.py (CLUSTER_MODULES) in a subprocess whose shared
    session has the cluster as its master (tests/conftest.py: ROWMERGE_TEST_MASTER), with one
    executor on each worker registered before the first test (ROWMERGE_TEST_EXECUTORS)."""
    apps = standalone_cluster.applications()
    env = {"ROWMERGE_TEST_MASTER": standalone_cluster.master_url, "ROWMERGE_TEST_EXECUTORS": "2"}
    passed, out = run_engine_third(env, tmp_path / "t", modules=CLUSTER_MODULES)
    assert passed >= 81, out[-3000:]
    assert standalone_cluster.applications() - apps == 1  # the subprocess's one shared session
    assert standalone_cluster.alive_workers() == 2


@pytest.mark.slow
@pytest.mark.long
def test_fault_injection_upsert_with_victims_on_a_standalone_cluster(
    spark: SparkSession,
    rdb: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    java_opts: str,  # noqa: F811
    standalone_cluster: StandaloneCluster,
    record_property: Any,
) -> None:
    """tests/reliability's upsert shape, killed after every commit step, with each victim's
    jobs on the cluster's executors; recovery and the readers' checks run in this process."""
    apps = standalone_cluster.applications()
    counts = run_fault_injection(
        spark, rdb, tmp_path, java_opts, SHAPES["upsert"], victim_master=standalone_cluster.master_url
    )
    record_property("reliability", {**counts, "fault_trials_on_cluster": counts["fault_trials"]})
    assert (counts["rows_lost"], counts["rows_duplicated"]) == (0, 0)
    # every victim (the uninterrupted run and one per trial) was an application of the cluster
    assert standalone_cluster.applications() - apps == 1 + counts["fault_trials"]
    assert standalone_cluster.alive_workers() == 2
