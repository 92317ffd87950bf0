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


_remote_sessions: dict[str, SparkSession] = {}


def shared_session(parameters: Mapping[str, Any], remote: str | None = None) -> SparkSession:
    """The process's running Spark session, or a new one built with ``parameters`` (over
    :data:`QUIET_DEFAULTS`) when there is none; with ``remote`` (an ``sc://`` URL), the
    Spark Connect session to that server (one per URL, its ``parameters`` set as session
    configuration)."""
    quiet = str({**QUIET_DEFAULTS, **parameters}["spark.log.level"]).upper() in QUIET_LEVELS
    for name in QUERY_CONTEXT_LOGGERS:
        # created as PySpark creates them (a plain Logger would reject its keyword arguments)
        pyspark_logger = PySparkLogger.getLogger(name)
        for handler in list(pyspark_logger.handlers):
            if quiet and not isinstance(handler, _ToDebugLog):
                pyspark_logger.removeHandler(handler)
        if quiet and not pyspark_logger.handlers:
            pyspark_logger.addHandler(_ToDebugLog())
    if remote is not None:
        return _remote_session(remote, parameters)
    existing: SparkSession | None = SparkSession._instantiatedSession  # type: ignore[attr-defined]
    if existing is not None and existing.sparkContext._jsc is not None:  # not stopped
        return existing
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in {**QUIET_DEFAULTS, **parameters}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _remote_session(url: str, parameters: Mapping[str, Any]) -> SparkSession:
    """The Connect session to ``url``; a server that went away is reconnected once asked again."""
    session = _remote_sessions.get(url)
    if session is not None and not getattr(session, "is_stopped", False):
        return session
    builder = SparkSession.builder.remote(url)
    # Only runtime settings reach a Connect session; the server owns its static ones (master,
    # warehouse, catalog), and the client's console has no Spark progress bar or log level.
    for key, value in parameters.items():
        if key not in QUIET_DEFAULTS:
            builder = builder.config(key, value)
    session = builder.create()
    _remote_sessions[url] = session
    return session


def stop_remote_sessions() -> None:
    """Stop this process's Spark Connect sessions.

    A process that runs dbt in-process and then stops its Connect server must call this
    first: a client session still open when its server is gone retries the server at
    interpreter exit, with back-off, for about ten minutes.
    """
    while _remote_sessions:
        _, session = _remote_sessions.popitem()
        session.stop()


def connect_url(host: str, token: str | None = None, use_ssl: bool = False) -> str:
    """The Spark Connect URL of a profile: ``host`` (``sc://host:port``, parameters allowed)
    plus ``token`` and ``use_ssl`` as Connect's ``;name=value`` parameters."""
    url = host.rstrip("/")
    extra = []
    if token:
        extra.append(f"token={token}")
    if use_ssl and "use_ssl=" not in url:
        extra.append("use_ssl=true")
    if not extra:
        return url
    sep = ";" if "/;" in url else "/;"
    return url + sep + ";".join(extra)


def session_for(credentials: RowMergeCredentials) -> SparkSession:
    """Return the same session dbt-spark's cursor uses."""
    method = str(credentials.method)
    if method == "connect":
        return shared_session(credentials.server_side_parameters, credentials.remote_url)
    if method != "session":
        raise DbtRuntimeError(
            "incremental_strategy='row_level_merge' needs `method: session` or `method: connect` in "
            f"the rowmerge profile (found `method: {credentials.method}`): the merge engine runs on "
            "a PySpark session of the dbt process. Point `session` at your cluster with "
            "`server_side_parameters: {spark.master: ...}`, or reach a Spark Connect server with "
            "`method: connect` and `host: sc://host:port`."
        )
    return shared_session(credentials.server_side_parameters)
