"""The standalone cluster for tests/cluster: started once per test process that needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.standalone import StandaloneCluster


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
