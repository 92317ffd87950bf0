"""Kill the merge right after each commit step, as test_fault_upsert does, with every victim
driving a real standalone cluster (its tasks in the workers' executor JVMs, not in the
driver): the commit protocol must not assume that executors share the driver's JVM,
working directory or temporary folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.cluster.conftest import standalone_cluster  # noqa: F401 -- the fixture
from tests.cluster.standalone import StandaloneCluster
from tests.reliability.harness import SHAPES, run_fault_injection
from tests.reliability.victim import MASTER_ENV


@pytest.mark.slow
def test_fault_injection_upsert_on_a_standalone_cluster(
    standalone_cluster: StandaloneCluster,  # noqa: F811
    spark: SparkSession,
    rdb: str,
    tmp_path: Path,
    java_opts: str,
    record_property: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(MASTER_ENV, standalone_cluster.master_url)
    counts = run_fault_injection(spark, rdb, tmp_path, java_opts, SHAPES["upsert"])
    record_property("reliability", {**counts, "fault_trials_on_cluster": counts["fault_trials"]})
    assert (counts["rows_lost"], counts["rows_duplicated"]) == (0, 0)
    assert standalone_cluster.alive_workers() == 2
