"""Fixtures for the reliability suites (tests/conftest.py prints the summary of what they measured)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from tests.reliability.harness import UPSERT, create_target, job, run_victim, victim_env, write_job

# Extra JVM options of victim processes: C1 only and the serial collector start a small
# local Spark noticeably faster; the merges they run are tiny.
VICTIM_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def rdb(spark: SparkSession) -> Iterator[str]:
    """One database per reliability module (its trials use distinct table names)."""
    name = "r_" + uuid.uuid4().hex[:10]
    spark.sql(f"CREATE DATABASE {name}")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")


@pytest.fixture(scope="session")
def java_opts(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    """JVM options for victims, with a class-data sharing archive when the JVM can make one.

    Dozens of victim JVMs start in a run; mapping the classes a merge loads from an archive
    (written by one warm-up merge at its exit) halves each start. If the archive cannot be
    made or used, the JVM simply starts without it.
    """
    folder = tmp_path_factory.mktemp("cds")
    archive = folder / "victim.jsa"
    db = "cds_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db}")
    try:
        table = create_target(spark, f"{db}.warmup", UPSERT)
        proc = run_victim(
            write_job(folder / "job.json", job(UPSERT, table, folder)),
            victim_env(f"{VICTIM_JAVA_OPTS} -XX:ArchiveClassesAtExit={archive}"),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
    return f"{VICTIM_JAVA_OPTS} -XX:SharedArchiveFile={archive}" if archive.exists() else VICTIM_JAVA_OPTS
