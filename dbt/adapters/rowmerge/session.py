"""The Spark session of the dbt process, as dbt-spark's ``method: session`` builds it."""

from __future__ import annotations

from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.connections import RowMergeCredentials


def session_for(credentials: RowMergeCredentials) -> SparkSession:
    """Return the same session dbt-spark's cursor uses (getOrCreate with the profile's params)."""
    if str(credentials.method) != "session":
        raise DbtRuntimeError(
            "incremental_strategy='row_level_merge' needs `method: session` in the rowmerge "
            f"profile (found `method: {credentials.method}`): the merge engine runs on the "
            "PySpark session inside the dbt process. Point that session at your cluster with "
            "`server_side_parameters: {spark.master: ...}`."
        )
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in credentials.server_side_parameters.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
