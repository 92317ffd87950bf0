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

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.spark.connections import SparkConnectionManager, SparkCredentials
from dbt.adapters.spark.session import Connection as SessionConnection
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.dataclass_schema import StrEnum
from dbt_common.exceptions import DbtRuntimeError
from pyspark.sql.utils import AnalysisException

from dbt.adapters.rowmerge.session import connect_url, shared_session


class RowMergeConnectionMethod(StrEnum):
    """dbt-spark's methods plus ``connect``: a Spark Connect server (``host: sc://host:port``)."""

    THRIFT = "thrift"
    HTTP = "http"
    ODBC = "odbc"
    SESSION = "session"
    CONNECT = "connect"


@dataclass
class RowMergeCredentials(SparkCredentials):
    method: RowMergeConnectionMethod = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.method == RowMergeConnectionMethod.CONNECT:
            if not str(self.host or "").startswith("sc://"):
                raise DbtRuntimeError(
                    f"`method: connect` needs `host: sc://<host>:<port>` (the Spark Connect server; "
                    f"port 15002 by default), found `host: {self.host}`"
                )
            try:
                import pyspark.sql.connect.session  # noqa: F401
            except ImportError as exc:
                raise DbtRuntimeError(
                    "`method: connect` needs the Spark Connect client: pip install 'dbt-rowmerge[connect]'"
                    f" ({exc})"
                ) from exc
        super().__post_init__()

    @property
    def type(self) -> str:
        return "rowmerge"

    @property
    def remote_url(self) -> str:
        """The Spark Connect URL (``method: connect``): host, token and TLS."""
        return connect_url(str(self.host), self.token, self.use_ssl)

    def _connection_keys(self) -> tuple[str, ...]:
        if str(self.method) == "connect":
            return ("method", "host", "schema", "use_ssl", "storage", "spark_version")
        if str(self.method) != "session":
            return super()._connection_keys()
        return ("method", "schema", "master", "warehouse", "metastore", "spark_version")

    def connection_info(self, *, with_aliases: bool = False) -> Iterator[tuple[str, Any]]:
        """What ``dbt debug`` shows: for ``method: session``, where the session runs and where
        its tables live (dbt-spark's host/port/cluster mean nothing there); for ``method:
        connect``, the server (never the token) and how the engine reaches the files."""
        if str(self.method) == "connect":
            import pyspark

            yield "method", "connect"
            yield "host", str(self.host).split(";", 1)[0]
            yield "schema", self.schema
            yield "use_ssl", bool(self.use_ssl or self.token)
            yield "storage", "pyarrow.fs from this process (spark.rowmerge.storage.* options)"
            yield "spark_version", pyspark.__version__
            return
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
        creds = connection.credentials
        if str(getattr(creds, "method", "")) == "connect" and connection.state != ConnectionState.OPEN:
            # dbt-spark knows no such method: the cursor runs SQL on the Connect session.
            connection.handle = SessionWrapper(
                SharedSession(server_side_parameters=creds.server_side_parameters, remote=creds.remote_url)
            )
            connection.state = ConnectionState.OPEN
            return connection
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
    """dbt-spark's session cursor, running each statement on the shared session (or, with
    ``remote``, on the Spark Connect session to that URL)."""

    def __init__(self, *, server_side_parameters: dict[str, Any] | None = None, remote: str | None = None):
        super().__init__(server_side_parameters=server_side_parameters)
        self.remote = remote

    def execute(self, sql: str, *parameters: Any) -> None:
        if parameters:
            sql = sql % parameters
        try:
            self._df = shared_session(self.server_side_parameters, self.remote).sql(sql)
        except AnalysisException as exc:
            raise DbtRuntimeError(str(exc)) from exc


class SharedSession(SessionConnection):
    """dbt-spark's session ``Connection``, handing out :class:`SharedSessionCursor` s."""

    def __init__(self, *, server_side_parameters: dict[str, Any] | None = None, remote: str | None = None):
        super().__init__(server_side_parameters=server_side_parameters)
        self.remote = remote

    def cursor(self) -> SharedSessionCursor:
        return SharedSessionCursor(server_side_parameters=self.server_side_parameters, remote=self.remote)
