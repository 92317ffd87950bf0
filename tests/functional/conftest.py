"""dbt functional-test fixtures for adapter type ``rowmerge``.

dbt's ``project`` fixture (tests/conftest.py loads ``dbt.tests.fixtures.project``) builds a
fresh dbt project and schema per test class. The profile uses ``method: session`` with the
same Spark settings as the shared session fixture, so dbt's cursor (``getOrCreate``) and the
merge engine both reuse the one Spark session of this pytest process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.conftest import spark_conf


@pytest.fixture(scope="class")
def dbt_profile_target(spark: SparkSession, spark_root: Path, unique_schema: str) -> dict[str, Any]:
    # Depends on `spark` so the session exists (with the test settings) before dbt asks for it.
    return {
        "type": "rowmerge",
        "method": "session",
        "host": "localhost",
        "schema": unique_schema,
        "threads": 4,
        "server_side_parameters": spark_conf(spark_root),
    }
