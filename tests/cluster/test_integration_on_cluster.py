"""The integration project end to end on a real standalone cluster (two worker JVMs): the
same project, profile `method: session` with `spark.master: spark://...`, no code change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.standalone import StandaloneCluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_integration_project_on_a_standalone_cluster(
    standalone_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    env = {**os.environ, "ROWMERGE_SPARK_MASTER": standalone_cluster.master_url}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--in-process"]
        + ["--work-dir", str(tmp_path / "demo")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
    summary = json.loads((tmp_path / "demo" / "demo_summary.json").read_text())
    assert summary["ok"] is True
    # every merge of batches 1 and 2 ran (the project's own tests checked every table)
    merges = [m for b in summary["batches"][1:] for m in b["models"] if m["code"] == "MERGE"]
    assert len(merges) == 2 * 9, [m["model"] for m in merges]
    # the jobs ran on the cluster's executors: both workers are still alive and registered
    assert standalone_cluster.alive_workers() == 2
