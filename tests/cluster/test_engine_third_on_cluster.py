"""A representative third of the engine suite (tests/engine_third.py) on the standalone
cluster: the driver in a pytest subprocess, the tasks in the two workers' executor JVMs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.standalone import StandaloneCluster
from tests.engine_third import run_engine_third


@pytest.mark.slow
def test_engine_third_on_a_standalone_cluster(standalone_cluster: StandaloneCluster, tmp_path: Path) -> None:
    passed, _ = run_engine_third({"ROWMERGE_TEST_MASTER": standalone_cluster.master_url}, tmp_path / "t")
    assert passed >= 149
    assert standalone_cluster.alive_workers() == 2
