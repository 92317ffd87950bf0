"""A Spark Connect server for tests/connect: started once per test process that needs it,
from the PySpark distribution (scripts/connect_server.py), and stopped by pid at the end."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from scripts.connect_server import ConnectServer


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def remote(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect session: this process holds no JVM for it, only a gRPC channel."""
    session = SparkSession.builder.remote(connect_server.url).create()
    yield session
    session.stop()


@pytest.fixture
def rdb(remote: SparkSession) -> Iterator[str]:
    name = "c_" + uuid.uuid4().hex[:10]
    remote.sql(f"CREATE DATABASE {name}")
    yield name
    remote.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")
