"""One Spark session per pytest process (start-up costs 10-20 s), Hive catalog on Derby.

Every test gets its own database (see the ``db`` fixture), so tests never see each
other's tables. The session is the same one dbt's ``method: session`` cursor picks up with
``getOrCreate``, so functional dbt tests share it too.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

# dbt's shared adapter-test fixtures (project, unique_schema, ...) for tests/functional.
pytest_plugins = ["dbt.tests.fixtures.project"]


# Files that take minutes each, longest first (CI durations, stop 62: 426 s down to ~60 s).
# `make test` runs two workers that take whole files in collection order (--dist loadfile,
# without xdist's reordering by test count, which puts one-test files last): starting these
# first keeps one worker from idling while the other runs a campaign of several minutes at the
# end. Files not listed follow in their usual order; a stale list only costs time.
SLOW_FILES = (
    "tests/integration/test_integration_project.py",
    "tests/reliability/test_fault_compaction.py",
    "tests/reliability/test_fault_restore.py",
    "tests/cluster/test_on_standalone_cluster.py",
    "tests/reliability/test_fault_cdc.py",
    "tests/reliability/test_fault_vacuum.py",
    "tests/reliability/test_fault_upsert_arrow.py",
    "tests/reliability/test_kill.py",
    "tests/reliability/test_fault_direct_insert.py",
    "tests/connect/test_engine_third_over_connect.py",
    "tests/reliability/test_concurrency.py",
    "tests/reliability/test_undo_campaign.py",
    "tests/integration/test_console_errors.py",
    "tests/differential/test_differential.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(SLOW_FILES)))


# What tests run Spark with, beside its defaults: the suite's tables hold a few rows, and on
# the 2-core CI machine the suite is CPU-bound. Compiling generated code for every query costs
# more than evaluating a few rows interpreted (Spark's own tests run expressions both ways), and
# the serial collector spends less CPU than G1 on a small heap. Measured on 40 differential
# cases in one process: 123 -> 102 CPU-seconds. Code generation still runs where the product
# runs as users run it: the integration project (locally, on the cluster, through Connect) and
# the benchmark use Spark's defaults. One Spark API fails to decode its rows when evaluation is
# interpreted: spark.catalog.listTables() (use SHOW TABLES). ROWMERGE_TEST_CODEGEN=1 runs the
# tests with Spark's defaults instead.
CODEGEN_ENV = "ROWMERGE_TEST_CODEGEN"
_SPARK_DEFAULTS = os.environ.get(CODEGEN_ENV) == "1"
TEST_SQL_CONF = (
    {}
    if _SPARK_DEFAULTS
    else {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
)
TEST_JAVA_OPTS = "" if _SPARK_DEFAULTS else "-XX:+UseSerialGC"


def spark_conf(root: Path) -> dict[str, str]:
    """Settings for the shared test session (also used as the dbt profile's parameters)."""
    return {
        "spark.master": os.environ.get("ROWMERGE_TEST_MASTER", "local[2]"),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.sql.warehouse.dir": str(root / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true"
        ),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={root} {TEST_JAVA_OPTS}".strip(),
        # executors of a cluster (ROWMERGE_TEST_MASTER): separate JVMs
        **({"spark.executor.extraJavaOptions": TEST_JAVA_OPTS} if TEST_JAVA_OPTS else {}),
        "spark.sql.session.timeZone": "UTC",
        # dbt-spark forces this for its sessions; tests run with the same setting.
        "spark.sql.ansi.enabled": "false",
        **TEST_SQL_CONF,
    }


@pytest.fixture(scope="session")
def spark_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark")


# Set by tests/connect and tests/cluster when they rerun engine test modules in a subprocess:
# an sc:// URL makes `spark` a Spark Connect session to that server.
REMOTE_ENV = "ROWMERGE_TEST_REMOTE"
# Set by tests/cluster with ROWMERGE_TEST_MASTER: how many executors (separate JVMs on the
# cluster's workers) the shared session must have before any test runs.
EXECUTORS_ENV = "ROWMERGE_TEST_EXECUTORS"
EXECUTORS_TIMEOUT_S = 120


def wait_for_executors(session: SparkSession, expected: int) -> None:
    """Until ``expected`` executors registered with the session's driver (so every test of the
    run has its tasks on the cluster's JVMs, not some on the driver's); fails after a timeout
    or if more registered."""

    def registered() -> int:
        return int(session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1  # not the driver

    deadline = time.monotonic() + EXECUTORS_TIMEOUT_S
    while registered() < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    found = registered()
    assert found == expected, f"{found} executors registered, expected {expected}"


@pytest.fixture(scope="session")
def spark(spark_root: Path) -> Iterator[SparkSession]:
    if os.environ.get(REMOTE_ENV):
        remote = SparkSession.builder.remote(os.environ[REMOTE_ENV]).create()
        yield remote
        remote.stop()
        return
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in spark_conf(spark_root).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if os.environ.get(EXECUTORS_ENV):
        wait_for_executors(session, int(os.environ[EXECUTORS_ENV]))
    yield session
    session.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Add up what the reliability suites recorded (``record_property("reliability", {...})``).

    Defined here, not in tests/reliability: under xdist the controller process loads only
    this conftest, and properties travel to it with the test reports.
    """
    totals: Counter[str] = Counter()
    seen = False
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for key, value in getattr(report, "user_properties", None) or []:
                if key == "reliability":
                    seen = True
                    totals.update(value)
    if seen:
        terminalreporter.write_line("reliability: " + ", ".join(f"{k}={totals[k]}" for k in sorted(totals)))
