"""Credentials and connection manager: dbt-spark's, under the adapter type ``rowmerge``.

Every dbt-spark profile setting works unchanged; ``method: session`` is the one that can
run row_level_merge, because the engine needs the Spark session in the dbt process. Its
cursor runs each statement on the one shared session (see session.py) instead of asking
Spark's builder for it, with the profile's settings, before every statement.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dbt.adapters.contracts.connection import Connection
from dbt.adapters.spark.connections import SparkConnectionManager, SparkCredentials
from dbt.adapters.spark.session import Connection as SessionConnection
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql.utils import AnalysisException

from dbt.adapters.rowmerge.session import shared_session


@dataclass
class RowMergeCredentials(SparkCredentials):
    @property
    def type(self) -> str:
        return "rowmerge"

    def _connection_keys(self) -> tuple[str, ...]:
        if str(self.method) != "session":
            return super()._connection_keys()
        return ("method", "schema", "master", "warehouse", "metastore", "spark_version")

    def connection_info(self, *, with_aliases: bool = False) -> Iterator[tuple[str, Any]]:
        """What ``dbt debug`` shows: for ``method: session``, where the session runs and where
        its tables live (dbt-spark's host/port/cluster mean nothing there)."""
        if str(self.method) != "session":
            yield from super().connection_info(with_aliases=with_aliases)
            return
        import pyspark

        params = self.server_side_parameters
        yield "method", "session"
        yield "schema", self.schema
        yield "master", params.get("spark.master", "local[*] (Spark's default)")
        here = "in the directory dbt runs in"
        yield "warehouse", params.get("spark.sql.warehouse.dir", f"spark-warehouse/ {here}")
        yield "metastore", _metastore(params)
        yield "spark_version", pyspark.__version__


def _metastore(params: dict[str, Any]) -> str:
    if str(params.get("spark.sql.catalogImplementation", "")).lower() == "in-memory":
        return "in-memory (tables are forgotten when dbt exits)"
    for key in ("spark.hadoop.hive.metastore.uris", "spark.hadoop.javax.jdo.option.ConnectionURL"):
        if params.get(key):
            return f"{params[key]} ({key})"
    return "Derby: metastore_db/ in the directory dbt runs in (spark.hadoop.javax.jdo.option.ConnectionURL)"


class RowMergeConnectionManager(SparkConnectionManager):
    TYPE = "rowmerge"

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        connection = super().open(connection)
        wrapper = connection.handle
        if isinstance(wrapper, SessionConnectionWrapper) and not isinstance(wrapper, SessionWrapper):
            connection.handle = SessionWrapper(
                SharedSession(server_side_parameters=wrapper.handle.server_side_parameters)
            )
        return connection


class SessionWrapper(SessionConnectionWrapper):
    """dbt-spark's session wrapper with seed values rendered as SQL literals: dbt-spark writes
    every non-number as ``'<value>'``, so an empty seed cell (None) was loaded as the string
    'None' and a value holding a quote broke the INSERT."""

    @classmethod
    def _fix_binding(cls, value: Any) -> str | float:
        if value is None:
            return "NULL"
        if isinstance(value, str):
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return super()._fix_binding(value)


class SharedSessionCursor(Cursor):
    """dbt-spark's session cursor, running each statement on the shared session."""

    def execute(self, sql: str, *parameters: Any) -> None:
        if parameters:
            sql = sql % parameters
        try:
            self._df = shared_session(self.server_side_parameters).sql(sql)
        except AnalysisException as exc:
            raise DbtRuntimeError(str(exc)) from exc


class SharedSession(SessionConnection):
    """dbt-spark's session ``Connection``, handing out :class:`SharedSessionCursor` s."""

    def cursor(self) -> SharedSessionCursor:
        return SharedSessionCursor(server_side_parameters=self.server_side_parameters)
