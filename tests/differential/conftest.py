"""Fixtures for the differential tests: one database per module, shared by its cases.

A module runs hundreds of tiny merges; a database per case (tests/engine's ``db``) would add
two catalog calls to each. Every case names its tables after itself, so they never collide.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def diff_db(spark: SparkSession) -> Iterator[str]:
    name = "diff_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {name}")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")
