"""The Spark session of the dbt process, as dbt-spark's ``method: session`` builds it, once.

dbt-spark's session cursor calls ``SparkSession.builder...getOrCreate()`` with the profile's
settings before every statement; once the session exists Spark answers each call with
``WARN SparkSession: Using an existing Spark session; only runtime SQL configurations will take
effect`` (19-50 lines per run). Here the session is created once, with the profile's settings,
and every later caller (dbt's cursor, the merge engine) gets that same session back.

Created by dbt, the session is quiet by default: no ``[Stage ...]`` progress bars (they
overwrite dbt's lines); everything Spark's JVM prints (start-up lines, its ERROR log lines with
the Java stack trace of every failed task) goes to ``logs/spark.log`` beside dbt's own log; and
PySpark's query-context error logs (a JSON line with the whole Java stack trace for every
analysis error, including the ones the engine raises on purpose to check a config) go to dbt's
debug log, not the console; dbt reports the error itself. A profile brings them back with
``server_side_parameters: {spark.ui.showConsoleProgress: true, spark.log.level: WARN}``.

With the embedded Derby metastore (the default), a second process finds the database taken:
that is one clear error here, before Spark starts, instead of thousands of Derby lines.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
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
# Spark's own output (its JVM's standard error) in a quiet session: this file in dbt's log folder.
SPARK_LOG = "spark.log"
DERBY_URL_KEY = "spark.hadoop.javax.jdo.option.ConnectionURL"


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
    settings = {**QUIET_DEFAULTS, **parameters}
    problem = derby_in_use(settings)
    if problem:
        raise DbtRuntimeError(problem)
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not quiet:
        return builder.getOrCreate()
    log = os.path.join(log_dir(), SPARK_LOG)
    with ExitStack() as stack:
        try:
            stack.enter_context(_jvm_output_to(log))
        except OSError as exc:  # an unwritable log folder must not stop dbt: Spark prints as before
            _dbt_log.debug(f"Spark's output stays on the console: cannot write {log} ({exc})")
            log = ""
        session = builder.getOrCreate()
    if log:
        _dbt_log.debug(f"Spark's own log lines (start-up, task errors with Java stack traces): {log}")
    return session


def log_dir() -> str:
    """Where dbt writes its logs (``--log-path``, default ``logs``)."""
    try:
        from dbt.flags import get_flags

        path = getattr(get_flags(), "LOG_PATH", None)
    except Exception:  # noqa: BLE001 - flags not set up (the adapter used outside a dbt command)
        path = None
    return str(path or os.environ.get("DBT_LOG_PATH") or "logs")


@contextmanager
def _jvm_output_to(path: str) -> Iterator[None]:
    """Start Spark's JVM with its standard error on ``path`` for its whole life.

    Everything the JVM prints goes to its standard error: the launcher's own warning, Spark's
    start-up lines and every log line at the session's level, with the Java stack trace of
    each task that fails (for an error the engine explains, such as a constraint or a cast,
    ~180 lines on dbt's console before dbt's one-line message). The JVM inherits the
    descriptor while this process's own standard error points at ``path``; ours is restored
    at once (dbt writes to standard output).
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


_DERBY_URL = re.compile(r"^jdbc:derby:(?:;databaseName=)?([^;]*)", re.IGNORECASE)
_DERBY_NAME = re.compile(r";databaseName=([^;]+)", re.IGNORECASE)


def derby_in_use(settings: Mapping[str, Any]) -> str | None:
    """Why this process cannot start Spark with its embedded Hive metastore, or None.

    Embedded Derby serves one process: a second one boots it, fails with ``ERROR XSDB6:
    Another instance of Derby may have already booted the database`` thousands of times in
    Spark's log, and then runs without the metastore. Derby holds a lock on ``dbex.lck`` in the
    database folder while a process has it booted, which this process can test for itself.
    """
    url = str(settings.get(DERBY_URL_KEY) or "jdbc:derby:;databaseName=metastore_db;create=true")
    found = _DERBY_URL.match(url)
    if not found:
        return None  # a metastore server or another database: any number of processes
    name = found.group(1) or ""
    named = _DERBY_NAME.search(url)
    if named:
        name = named.group(1)
    if not name or name.startswith(("memory:", "classpath:", "jar:")):
        return None
    if not os.path.isabs(name):
        java_options = str(settings.get("spark.driver.extraJavaOptions", ""))
        home = re.search(r"-Dderby\.system\.home=(\S+)", java_options)
        name = os.path.join(home.group(1) if home else os.getcwd(), name)
    lock = os.path.join(name, "dbex.lck")
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return None  # not booted yet (or not readable: Derby will say so itself)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    except OSError:
        return (
            f"The embedded Hive metastore (Derby) at {name} is in use by another process: embedded "
            "Derby serves one Spark process at a time, so two dbt commands cannot use this profile at "
            "once. Wait for the other dbt command (or Spark session) to finish; to run several at "
            "once, give them one Spark: a Spark Connect server (`method: connect`, README "
            '"Connect mode") or a metastore server (spark.hadoop.hive.metastore.uris).'
        )
    finally:
        os.close(fd)


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
