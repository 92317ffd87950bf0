"""Fixtures for engine tests: real tables in a per-test database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession


@pytest.fixture
def db(spark: SparkSession) -> Iterator[str]:
    """A fresh database for one test, dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:10]
    spark.sql(f"CREATE DATABASE {name}")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")
