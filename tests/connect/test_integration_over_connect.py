"""The integration project end to end through Spark Connect (`make demo CONNECT=1`): profile
`method: connect`, dbt and the merge engine as gRPC clients, the session in a Spark Connect
server that scripts/demo.py starts from the PySpark distribution and stops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.long  # `make demo CONNECT=1` and `make test-long`; make test keeps the Connect checks
def test_integration_project_through_spark_connect(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--connect", "--in-process"]
        + ["--work-dir", str(work)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
    summary = json.loads((work / "demo_summary.json").read_text())
    assert summary["ok"] is True
    merges = [m for b in summary["batches"][1:] for m in b["models"] if m["code"] == "MERGE"]
    assert len(merges) == 2 * 9, [m["model"] for m in merges]
    assert summary["history"], "rowmerge_history printed no versions"
    # The tables live where the Connect server keeps its warehouse, not in an embedded session's.
    assert (work / "connect_server" / "warehouse" / "rowmerge_it.db" / "orders_cdc").is_dir()
    assert not (work / "warehouse").exists()
    assert "Spark Connect server at sc://127.0.0.1:" in proc.stdout
