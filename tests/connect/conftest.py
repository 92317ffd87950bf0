"""A Spark Connect server for tests/connect: started once per test process that needs it,
from the PySpark distribution (scripts/connect_server.py), and stopped by pid at the end.

Clients of it run in subprocesses only: once a process made a Spark Connect session,
PySpark routes every later session and Column of that process (and of the processes it
starts, through SPARK_CONNECT_MODE_ENABLED) to Connect, which would break the classic tests
that share a pytest worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scripts.connect_server import ConnectServer
from tests.conftest import TEST_JAVA_OPTS, TEST_SQL_CONF


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    # The engine third's settings (tests/conftest.py), in the server that runs its queries.
    server = ConnectServer(
        tmp_path_factory.mktemp("connect"), conf=TEST_SQL_CONF, java_opts=TEST_JAVA_OPTS
    ).start()
    try:
        yield server
    finally:
        server.stop()
