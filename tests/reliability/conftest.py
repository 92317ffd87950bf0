"""Fixtures for the reliability suites (tests/conftest.py prints the summary of what they measured)."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

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
    made or used, the JVM simply starts without it. The archive is made once per run: the
    first pytest worker to need it writes it (under a file lock) into the run's temporary
    folder, which every xdist worker shares; the others wait and use it.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "victim_cds"
    folder.mkdir(exist_ok=True)
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            archive = folder / "victim.jsa"
            if not (folder / "done").exists():
                _make_archive(spark, folder, archive)
                (folder / "done").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return f"{VICTIM_JAVA_OPTS} -XX:SharedArchiveFile={archive}" if archive.exists() else VICTIM_JAVA_OPTS


def _make_archive(spark: SparkSession, folder: Path, archive: Path) -> None:
    """One warm-up merge in a victim whose JVM writes the classes it loaded to ``archive``."""
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
