"""A representative third of the engine suite (tests/engine_third.py) through Spark Connect."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.connect_server import ConnectServer
from tests.engine_third import run_engine_third


@pytest.mark.slow
def test_engine_third_through_spark_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    passed, _ = run_engine_third({"ROWMERGE_TEST_REMOTE": connect_server.url}, tmp_path / "t")
    assert passed >= 149
