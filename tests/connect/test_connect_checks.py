"""tests/connect/connect_checks.py (every clause kind, change feed, partitioned table,
cardinality error, plan errors, skipping, crash and recovery) through Spark Connect, in a
subprocess (see conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.connect_server import ConnectServer
from tests.engine_third import run_engine_third


@pytest.mark.slow
def test_connect_checks(connect_server: ConnectServer, tmp_path: Path) -> None:
    env = {"ROWMERGE_TEST_REMOTE": connect_server.url}
    passed, _ = run_engine_third(env, tmp_path / "t", modules=["tests/connect/connect_checks.py"])
    assert passed == 8
