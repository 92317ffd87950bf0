"""The Spark session of the dbt process, as dbt-spark's ``method: session`` builds it, once.

dbt-spark's session cursor calls ``SparkSession.builder...getOrCreate()`` with the profile's
settings before every statement; once the session exists Spark answers each call with
``WARN SparkSession: Using an existing Spark session; only runtime SQL configurations will take
effect`` (19-50 lines per run). Here the session is created once, with the profile's settings,
and every later caller (dbt's cursor, the merge engine) gets that same session back.

Created by dbt, the session is quiet by default: no ``[Stage ...]`` progress bars (they
overwrite dbt's lines), only Spark's ERROR log lines, and PySpark's query-context error logs
(a JSON line with the whole Java stack trace for every analysis error, including the ones
the engine raises on purpose to check a config) go to dbt's debug log, not the console; dbt
reports the error itself. A profile brings them back with
``server_side_parameters: {spark.ui.showConsoleProgress: true, spark.log.level: WARN}``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from dbt.adapters.rowmerge.connections import RowMergeCredentials

_dbt_log = AdapterLogger("RowMerge")
QUIET_DEFAULTS = {"spark.ui.showConsoleProgress": "false", "spark.log.level": "ERROR"}
# PySpark logs every captured SQL/DataFrame error through these (pyspark.errors.exceptions.base).
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
QUIET_LEVELS = ("ERROR", "FATAL", "OFF")


class _ToDebugLog(logging.Handler):
    """PySpark's error logs (message and Java stack trace) into dbt's debug log (logs/dbt.log),
    not the console."""

    def emit(self, record: logging.LogRecord) -> None:
        _dbt_log.debug(f"PySpark {record.name}: {self.format(record)}")


def shared_session(parameters: Mapping[str, Any]) -> SparkSession:
    """The process's running Spark session, or a new one built with ``parameters`` (over
    :data:`QUIET_DEFAULTS`) when there is none."""
    quiet = str({**QUIET_DEFAULTS, **parameters}["spark.log.level"]).upper() in QUIET_LEVELS
    for name in QUERY_CONTEXT_LOGGERS:
        # created as PySpark creates them (a plain Logger would reject its keyword arguments)
        pyspark_logger = PySparkLogger.getLogger(name)
        for handler in list(pyspark_logger.handlers):
            if quiet and not isinstance(handler, _ToDebugLog):
                pyspark_logger.removeHandler(handler)
        if quiet and not pyspark_logger.handlers:
            pyspark_logger.addHandler(_ToDebugLog())
    existing: SparkSession | None = SparkSession._instantiatedSession  # type: ignore[attr-defined]
    if existing is not None and existing.sparkContext._jsc is not None:  # not stopped
        return existing
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in {**QUIET_DEFAULTS, **parameters}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def session_for(credentials: RowMergeCredentials) -> SparkSession:
    """Return the same session dbt-spark's cursor uses."""
    if str(credentials.method) != "session":
        raise DbtRuntimeError(
            "incremental_strategy='row_level_merge' needs `method: session` in the rowmerge "
            f"profile (found `method: {credentials.method}`): the merge engine runs on the "
            "PySpark session inside the dbt process. Point that session at your cluster with "
            "`server_side_parameters: {spark.master: ...}`."
        )
    return shared_session(credentials.server_side_parameters)
