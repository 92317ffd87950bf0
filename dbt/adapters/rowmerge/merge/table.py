"""The target table as the engine sees it: location, file format, columns, partitioning.

Read from the catalog under the merge's lock (so a column another session added is seen);
every later phase uses this snapshot. Only plain file tables qualify: Parquet or ORC
data-source tables (what dbt-spark creates) and Hive-serde tables stored as Parquet/ORC.
The catalog is read through its own entry of a table (session catalog, classic session) or
``DESCRIBE TABLE EXTENDED ... AS JSON`` (Spark 4), never by parsing the human-readable layout,
in which a column may be named like a section header.
"""

from __future__ import annotations

import copy
import json
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)
from pyspark.sql.utils import AnalysisException

from . import calls
from .errors import MergeSpecError, UnsupportedTableError, spark_reason
from .lean_columns import jvm_class
from .sqltext import (
    DEFAULT_CATALOG,
    MAX_NAME_PARTS,
    display_name,
    name_key,
    parse_name,
    quote,
    quote_name,
    sql_string,
    sql_type,
)
from .storage import is_connect

SUPPORTED_FORMATS = ("parquet", "orc")
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
LAKEHOUSE_FORMATS = ("delta", "iceberg", "hudi")
# A change table's partition column: each commit's change rows are one partition of it,
# written by the journal entry that commits them (so it is named here, below both).
COMMIT_VERSION = "_commit_version"
# Spark keeps a CHAR(n)/VARCHAR(n) column's declared type here; the schema says "string".
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"


def catalog_sql(spark: SparkSession, statement: str) -> DataFrame:
    """Run a catalog statement (CREATE, ALTER, DROP, DESCRIBE), counted as one catalog call.

    The engine reaches the catalog only through this module's functions, so a merge's catalog
    calls are counted (calls.py): with a Hive metastore each is a request to it.
    """
    calls.catalog_call()
    return spark.sql(statement)


def refresh_table(spark: SparkSession, ident: str, files_at: str | None = None) -> None:
    """Drop the session's cached relation and file listing of ``ident``: its next read
    resolves it from the catalog (the schema now) and lists its files (the files now).

    A table of the session catalog is dropped from the session's relation cache and no more
    (:func:`_forget_relation`). ``REFRESH TABLE`` (the catalog API's ``refreshTable``)
    resolves the table first (a metastore request) and lists its files again, both thrown
    away at once, because it also refreshes the relation in place for DataFrames that hold
    it: a merge has the relation read again under its lock and forgets it after its commit,
    so with it a merge resolved its table three times (a metastore request each) and listed an
    unpartitioned table's files up to four times, where once each is needed. Any doubt
    (Connect, another catalog, a temporary view, data the session has cached):
    ``refreshTable``, counted as the catalog call it is.

    ``files_at``: the table's folder, once a commit has replaced files in it. Data the
    session cached from the table (``CACHE TABLE``, ``DataFrame.cache``) is then cached again
    from the files there: ``refreshTable`` alone re-caches it through the relation it resolves
    now, while the cached plan holds the one it was made with, whose listing names replaced
    files (the next read failed: FILE_NOT_EXIST)."""
    if _forget_relation(spark, ident):
        return
    calls.catalog_call()
    spark.catalog.refreshTable(ident)
    if files_at is not None:
        spark.catalog.refreshByPath(files_at)


def _forget_relation(spark: SparkSession, ident: str) -> bool:
    """Drop ``ident``'s entry from the session catalog's relation cache (no metastore request,
    no listing); False, dropping nothing, unless ``ident`` names a table of the session
    catalog and the session caches no data (``CACHE TABLE``, ``DataFrame.cache``: a cached
    plan that reads the table would go on serving the old rows)."""
    try:
        found = _session_table(spark, ident)
        if found is None or not spark._jsparkSession.sharedState().cacheManager().isEmpty():
            return False
        catalog, database, table = found
        catalog.invalidateCachedTable(_table_identifier(spark.sparkContext._jvm, database, table))
        return True
    except Exception:  # noqa: BLE001 - refreshTable says what is wrong
        return False


def table_exists(spark: SparkSession, ident: str) -> bool:
    calls.catalog_call()
    return bool(spark.catalog.tableExists(ident))


def current_database(spark: SparkSession) -> str:
    calls.catalog_call()
    return str(spark.catalog.currentDatabase())


def read_table(spark: SparkSession, ident: str) -> DataFrame:
    """The table ``ident`` as a DataFrame (resolving a name is a catalog lookup)."""
    calls.catalog_call()
    return spark.table(ident)


def sql_name(name: str) -> str:
    """A table name as back-quoted SQL text (ValueError if it is not a table name)."""
    return quote_name(parse_name(name))


LEGACY_LITERALS_CONF = "spark.sql.parser.escapedStringLiterals"


def check_string_literals(spark: Any) -> None:
    """Refuse a session that reads string literals as Spark 1.6 did, backslashes kept: the
    literals the engine writes (:func:`.sqltext.sql_string`: the files' key ranges, partition
    values, locations, comments) escape with backslashes, so O'Brien would be read as
    O\\'Brien and a key range would rule out the file that holds it."""
    if str(spark.conf.get(LEGACY_LITERALS_CONF, "false")).lower() == "true":
        raise MergeSpecError(
            [
                f"the session sets {LEGACY_LITERALS_CONF}=true (string literals read as Spark 1.6 "
                "did, backslashes kept), under which the string literals row_level_merge writes "
                "would mean other values; unset it for this session"
            ]
        )


# Where Spark's schema JSON keeps a field's collations (pyspark.sql.types' own key).
COLLATIONS_KEY = "__COLLATIONS"


def struct_from_json(value: Any) -> StructType:
    """``StructType.fromJson`` of a copy of ``value``: PySpark 4's rewrites the collations in
    the very dict it reads (``spark.UTF8_LCASE`` becomes ``UTF8_LCASE``), so reading the same
    JSON twice (a journal entry's change-table columns, checked and then applied) failed the
    second time, after the entry's commit point. Entries written before this was known hold
    the rewritten form, which fromJson refuses: it is read as the provider-qualified one."""
    return StructType.fromJson(_qualified_collations(copy.deepcopy(value)))


def _qualified_collations(value: Any) -> Any:
    """``value`` (schema JSON) with every collation in field metadata named with its provider."""
    if isinstance(value, list):
        for v in value:
            _qualified_collations(v)
    elif isinstance(value, dict):
        collations = (value.get("metadata") or {}).get(COLLATIONS_KEY)
        if isinstance(collations, dict):
            for path, name in collations.items():
                if isinstance(name, str) and "." not in name:
                    collations[path] = f"spark.{name}"
        for v in value.values():
            _qualified_collations(v)
    return value


@dataclass(frozen=True)
class TargetTable:
    name: str  # as the user wrote it, for messages
    ident: str  # back-quoted, for SQL text and the catalog API
    location: str
    file_format: str  # parquet | orc
    schema: StructType  # data columns, then partition columns (Spark's order)
    partition_columns: tuple[str, ...]
    # catalog, database(s), table: the catalog's own full name, whatever name the caller used
    full_name: tuple[str, ...] = ()
    # The table as load_target read it (under the writer's lock): the merge reads its rows
    # from this one frame, each read by name being a catalog request (see :meth:`loaded`).
    frame: DataFrame | None = field(default=None, compare=False, repr=False)

    @property
    def name_parts(self) -> tuple[str, ...]:
        """The catalog's full name, or the caller's name split into parts if it gave none."""
        return self.full_name or parse_name(self.name)

    @property
    def qualified_name(self) -> str:
        """The name the journal records: the catalog's, as ``db.t`` (the catalog shown only
        when it is not the session catalog); the caller's name if the catalog gave none."""
        return display_name(name_key(self.full_name)) if self.full_name else self.name

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema.fields)

    def field(self, name: str) -> StructField:
        lowered = name.lower()
        for f in self.schema.fields:
            if f.name.lower() == lowered:
                return f
        raise KeyError(name)

    def has_column(self, name: str) -> bool:
        return any(f.name.lower() == name.lower() for f in self.schema.fields)

    @property
    def supports_row_index(self) -> bool:
        return self.file_format == "parquet"

    def read(self, spark: SparkSession) -> DataFrame:
        """The table as it is now (resolved by name: a catalog request)."""
        return read_table(spark, self.ident)

    def files_only(self, frame: DataFrame, spark_paths: Sequence[str], column: str) -> DataFrame:
        """The rows of ``frame`` (a read of this table) in the files ``spark_paths``
        (``_metadata.file_path`` values, which the SQL name ``column`` gives), with a filter on
        the partition columns too where the files' folders say their partitions exactly
        (:func:`partitions_of`).

        A filter on the file path alone is applied after Spark has asked the metastore for
        every partition and listed every partition folder (past 32 folders, in a Spark job of
        a task per folder: 0.5 s at 72 day partitions on 2 cores, and growing with every day
        of an hourly model's history); with the partition filter it lists the files'
        partitions only. An empty list reads nothing (an empty IN list would still list and
        open every file)."""
        if not spark_paths:
            return frame.where(F.lit(False))
        kept = frame.where(one_of(column, spark_paths))
        in_partitions = partitions_of(self, spark_paths)
        return kept if in_partitions is None else kept.where(in_partitions)

    def loaded(self, spark: SparkSession) -> DataFrame:
        """The table as :func:`load_target` read it, for the reads of one merge before its
        commit: each read by name would ask the metastore for the table again (a Hive
        metastore request each). Never after the commit: the frame's listing of the files is
        the one from before it (the compaction that follows a merge reads :meth:`read`)."""
        return self.frame if self.frame is not None else self.read(spark)


def one_of(column: str, values: Sequence[str]) -> Column:
    """``column IN (values)`` (``column`` a SQL name) as one SQL text: one py4j call, where a
    literal each costs about four (a merge that rewrites 64 files: some 250). A value holding a
    quote or a backslash, whose escape the session's parser settings decide
    (``spark.sql.parser.escapedStringLiterals``), gets a literal each."""
    if any("'" in v or "\\" in v for v in values):
        return F.col(column).isin(list(values))
    listed = ", ".join(f"'{v}'" for v in values)
    return F.expr(f"{column} IN ({listed})")


@dataclass(frozen=True)
class Description:
    """What the catalog says about a table (``DESCRIBE TABLE EXTENDED ... AS JSON``)."""

    table_type: str  # MANAGED, EXTERNAL, VIEW
    provider: str  # lower case: parquet, orc, hive, csv, delta, ... ("" for views)
    serde: str  # lower case
    location: str  # as the catalog stores it ("" for views)
    partition_columns: tuple[str, ...]
    columns: tuple[str, ...]  # names, as the catalog has them now (never a session's cached schema)
    full_name: tuple[str, ...] = ()  # catalog, namespace..., table (empty if the catalog gave none)
    properties: tuple[tuple[str, str], ...] = ()  # TBLPROPERTIES the table was given
    comment: str | None = None
    # The session catalog's entry (a JVM CatalogTable) it was read from, or None (the
    # statement's JSON): what adding a partition needs, so a commit that registers one just
    # after describing the table under its lock asks the metastore once, not twice.
    catalog_entry: Any = field(default=None, compare=False, repr=False)


def describe_table(spark: SparkSession, ident: str) -> Description:
    """Describe the table ``ident`` (back-quoted SQL name); AnalysisException if it does not exist.

    A table of the session catalog is read with the catalog's own call (:func:`_catalog_entry`:
    one metastore request, 23-30 ms against 69-82 ms for the statement, which analyzes a command
    and reads the table twice; measured on 2 busy cores, Derby): every merge describes its
    target twice, before and under its lock. Anything else, or any doubt, goes through
    ``DESCRIBE TABLE EXTENDED ... AS JSON``, which also says what is wrong with a name.
    """
    found = _catalog_entry(spark, ident)
    if found is not None:
        return found
    text = catalog_sql(spark, f"DESCRIBE TABLE EXTENDED {ident} AS JSON").collect()[0][0]
    info: dict[str, Any] = json.loads(text)
    namespace = info.get("namespace")
    full_name: tuple[str, ...] = ()
    if info.get("table_name") and isinstance(namespace, list):
        full_name = (str(info.get("catalog_name") or ""), *map(str, namespace), str(info["table_name"]))
        full_name = full_name if full_name[0] else full_name[1:]
    return Description(
        table_type=str(info.get("type") or "").upper(),
        provider=str(info.get("provider") or "").lower(),
        serde=str(info.get("serde_library") or "").lower(),
        location=str(info.get("location") or ""),
        partition_columns=tuple(str(c) for c in info.get("partition_columns") or ()),
        columns=tuple(str(c.get("name")) for c in info.get("columns") or () if isinstance(c, dict)),
        full_name=full_name,
        properties=tuple(sorted((str(k), str(v)) for k, v in (info.get("table_properties") or {}).items())),
        comment=str(info["comment"]) if info.get("comment") else None,
    )


def _catalog_entry(spark: SparkSession, ident: str) -> Description | None:
    """``ident`` described from the session catalog's entry (CatalogTable), or None: through
    Connect, for a name of another catalog (or of a session whose current catalog is another),
    a temporary view's name, a table the catalog does not have, or any failure; the statement
    then decides, with its own message."""
    try:
        found = _session_table(spark, ident)
        if found is None:
            return None
        catalog, database, table = found
        entry = _catalog_table(spark, catalog, database, table)
        return _entry_description(spark.sparkContext._jvm, entry, (DEFAULT_CATALOG, database, table))
    except Exception:  # noqa: BLE001 - the statement says what is wrong
        return None


def _session_table(spark: SparkSession, ident: str) -> tuple[Any, str, str] | None:
    """(session catalog, database, table) that ``ident`` names in a classic session, or None:
    through Connect, for a name of another catalog (or of a session whose current catalog is
    another), or a temporary view's name. Asks the catalog nothing."""
    if is_connect(spark):
        return None
    parts = parse_name(ident)
    state = spark._jsparkSession.sessionState()
    if len(parts) == MAX_NAME_PARTS:
        if parts[0].lower() != DEFAULT_CATALOG:
            return None
        parts = parts[1:]
    elif str(state.catalogManager().currentCatalog().name()).lower() != DEFAULT_CATALOG:
        return None
    catalog = state.catalog()
    if len(parts) == 1:
        if catalog.getTempView(parts[0]).isDefined():
            return None
        return catalog, str(catalog.getCurrentDatabase()), parts[0]
    if len(parts) == 2:  # noqa: PLR2004 - database.table
        if parts[0].lower() == str(catalog.globalTempDatabase()).lower():
            return None
        return catalog, parts[0], parts[1]
    return None


def _table_identifier(jvm: Any, database: str, table: str) -> Any:
    return jvm_class(jvm, "org.apache.spark.sql.catalyst.TableIdentifier")(
        table, jvm_class(jvm, "scala.Option").apply(database)
    )


def _catalog_table(spark: SparkSession, catalog: Any, database: str, table: str) -> Any:
    """The session catalog's entry (CatalogTable) of ``database``.``table``: one catalog call."""
    ident = _table_identifier(spark.sparkContext._jvm, database, table)
    calls.catalog_call()
    return catalog.getTableMetadata(ident)


def _entry_description(jvm: Any, entry: Any, full_name: tuple[str, ...]) -> Description | None:
    """What ``DESCRIBE TABLE EXTENDED ... AS JSON`` says about the catalog entry ``entry``
    (a CatalogTable) of the table named ``full_name`` (as the name was written, as the
    statement gives it); None for a view, whose properties the statement shows its own way.

    The entry's fields cross in a few round trips, as JSON: its own text map (type, provider,
    location, serde, comment: exact strings), its schemas, and the properties it shows."""
    collections = jvm_class(jvm, "scala.jdk.javaapi.CollectionConverters")
    as_json = _json_writer(jvm).writeValueAsString
    shown = json.loads(as_json(collections.asJava(entry.toLinkedHashMap())))
    if str(shown.get("Type") or "").upper() == "VIEW":
        return None
    properties = entry.properties().removedAll(entry.ignoredProperties().keys())
    return Description(
        table_type=str(shown.get("Type") or "").upper(),
        provider=str(shown.get("Provider") or "").lower(),
        serde=str(shown.get("Serde Library") or "").lower(),
        location=str(shown.get("Location") or ""),
        partition_columns=tuple(f["name"] for f in json.loads(entry.partitionSchema().json())["fields"]),
        columns=tuple(f["name"] for f in json.loads(entry.schema().json())["fields"]),
        full_name=full_name,
        properties=tuple(sorted(json.loads(as_json(collections.asJava(properties))).items())),
        comment=shown.get("Comment"),
        catalog_entry=entry,
    )


_writers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _json_writer(jvm: Any) -> Any:
    """A Jackson ObjectMapper of the JVM view ``jvm`` (Spark ships Jackson), made once per view
    (kept like :func:`.lean_columns.jvm_class`'s classes, for as long as the view lives)."""
    found = _writers.get(jvm)
    if found is None:
        found = _writers[jvm] = jvm_class(jvm, "com.fasterxml.jackson.databind.ObjectMapper")()
    return found


def catalog_columns(spark: SparkSession, target: TargetTable) -> tuple[str, ...]:
    """The names of ``target``'s columns as the catalog has them now (never a session's cached
    schema): what a merge checks just before its commit point, once per merge.

    A table of the session catalog is read with the catalog's own call (one metastore request:
    45 ms against 74 ms for ``DESCRIBE TABLE EXTENDED ... AS JSON``, which analyzes a statement
    and reads the table twice; measured on 2 busy cores, Derby). The name is the one the
    description resolved (``target.full_name``), so it means what the statement would have.
    Connect, another catalog, or any failure: the statement, which says what is wrong.
    """
    parts = target.full_name
    if not is_connect(spark) and len(parts) == MAX_NAME_PARTS and parts[0].lower() == DEFAULT_CATALOG:
        try:
            found = _catalog_table(spark, spark._jsparkSession.sessionState().catalog(), parts[1], parts[2])
            # The schema crosses as one JSON string (iterating the JVM array is a call per name).
            return tuple(f["name"] for f in json.loads(found.schema().json())["fields"])
        except Exception:  # noqa: BLE001 - the statement below says what is wrong
            pass
    return describe_table(spark, target.ident).columns


MERGE_ROLE = "MERGE target"


def load_target(spark: SparkSession, name: str, role: str = MERGE_ROLE) -> TargetTable:
    """Describe ``name``; raise UnsupportedTableError with the fix if it cannot be merged into
    (naming it by ``role``, as :func:`locate_target` does)."""
    ident, described, file_format = _checked(spark, name, role)
    # The session caches a table's relation (with its schema) once read; another session
    # may have added columns since. Read the catalog's schema, not the cached one.
    refresh_table(spark, ident)
    frame = read_table(spark, ident)
    return TargetTable(
        name=name,
        ident=ident,
        location=described.location.rstrip("/"),
        file_format=file_format,
        schema=frame.schema,
        partition_columns=described.partition_columns,
        full_name=described.full_name,
        frame=frame,
    )


def locate_target(spark: SparkSession, name: str, role: str = MERGE_ROLE) -> str:
    """The location of the table ``name``, checked as :func:`load_target` checks the table,
    without reading its schema: what a writer needs before it takes the table's lock (under
    the lock it loads the table, which a writer it waited for may have changed). Reading the
    schema refreshes the session's relation, which resolves the table again (for an
    unpartitioned table, a listing of its files). ``role``: what the table is to the operation,
    as its errors name it ("MERGE target", "RESTORE table", ...)."""
    return _checked(spark, name, role)[1].location.rstrip("/")


def _checked(spark: SparkSession, name: str, role: str = MERGE_ROLE) -> tuple[str, Description, str]:
    """(SQL name, description, file format) of ``name``, or UnsupportedTableError with the fix
    if it cannot be merged into (each message names the table by ``role``)."""
    try:
        ident = sql_name(name)
    except ValueError as exc:
        raise UnsupportedTableError(f"{role} {name!r} is not a valid table name: {exc}.") from None
    try:
        described = describe_table(spark, ident)
    except AnalysisException as exc:
        raise UnsupportedTableError(
            f"{role} {name} does not exist or cannot be read: {spark_reason(exc).rstrip('. ')}. "
            + (
                "Create it first (dbt does this on the first run) or check the `target` name."
                if role == MERGE_ROLE
                else "Check the table's name."
            )
        ) from None
    table_type = described.table_type
    if table_type == "VIEW":
        raise UnsupportedTableError(
            f"{role} {name} is a view; row_level_merge rewrites table files. "
            "Materialize the model as an incremental table."
        )
    provider, serde = described.provider, described.serde
    if provider in SUPPORTED_FORMATS:
        file_format = provider
    elif provider == "hive" and ("parquet" in serde or "orc" in serde):
        file_format = "parquet" if "parquet" in serde else "orc"
        if is_connect(spark):
            # Spark resolves `_metadata` on a Hive-serde table only once the table's relation
            # was analyzed on its own (converted to a file relation); a Connect plan is
            # analyzed in one pass, so the merge could not find the files its rows come from.
            raise UnsupportedTableError(
                f"{role} {name} is a Hive-serde table (STORED AS {file_format.upper()}); "
                "through Spark Connect row_level_merge needs a data-source table. Recreate it "
                f"with USING {file_format} (dbt-spark's file_format='{file_format}' does; "
                "`dbt run --full-refresh` rebuilds the model), or merge in session mode."
            )
    elif provider in LAKEHOUSE_FORMATS:
        raise UnsupportedTableError(
            f"{role} {name} is a {provider} table; use dbt-spark's own "
            "incremental_strategy='merge' for it. row_level_merge is for plain Parquet/ORC tables."
        )
    else:
        raise UnsupportedTableError(
            f"{role} {name} has format {provider or 'unknown'!r} "
            f"(serde {serde or 'none'}); row_level_merge supports only Parquet and ORC tables "
            "(file_format='parquet' or 'orc')."
        )
    if not described.location:
        raise UnsupportedTableError(f"{role} {name} has no Location in the catalog.")
    return ident, described, file_format


def missing_columns(
    spark: SparkSession,
    ident: str,
    columns: Sequence[tuple[str, str]],
    known: Sequence[str] | None = None,
) -> list[tuple[str, str]]:
    """The columns of ``columns`` (name, type DDL) that the table ``ident`` does not have;
    ``known``: its columns as the caller just read them under the table's lock (else the
    catalog is asked)."""
    if not columns:
        return []
    existing = {c.lower() for c in (known if known is not None else describe_table(spark, ident).columns)}
    return [(name, ddl) for name, ddl in columns if name.lower() not in existing]


def alter_add_columns(spark: SparkSession, ident: str, columns: Sequence[tuple[str, str]]) -> None:
    """``ALTER TABLE ... ADD COLUMNS`` for columns (name, type DDL) the table is known to lack."""
    if columns:
        catalog_sql(spark, f"ALTER TABLE {ident} ADD COLUMNS ({_column_list(columns)})")
        refresh_table(spark, ident)


def add_columns(spark: SparkSession, ident: str, columns: Sequence[tuple[str, str]]) -> list[str]:
    """Add the columns (name, type DDL) the table ``ident`` lacks; return their names (repeatable)."""
    missing = missing_columns(spark, ident, columns)
    alter_add_columns(spark, ident, missing)
    return [name for name, _ in missing]


def column_ddl(fields: Sequence[StructField]) -> list[tuple[str, str]]:
    """Fields as (name, type DDL) columns: nullable, whatever the fields said."""
    return [(f.name, sql_type(f.dataType)) for f in fields]


def _column_list(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{quote(name)} {ddl}" for name, ddl in columns)


def create_table_at(
    spark: SparkSession, ident: str, schema: StructType, partition_by: Sequence[str], location: str
) -> None:
    """Register a Parquet table over ``location`` (its partitions found from the folders)."""
    cols = _column_list(column_ddl(schema.fields))
    parts = f" PARTITIONED BY ({', '.join(quote(c) for c in partition_by)})" if partition_by else ""
    catalog_sql(
        spark,
        f"CREATE TABLE IF NOT EXISTS {ident} ({cols}) USING parquet{parts} LOCATION {sql_string(location)}",
    )
    if partition_by:
        catalog_sql(spark, f"ALTER TABLE {ident} RECOVER PARTITIONS")


def create_changes_table(spark: SparkSession, name: str, schema: StructType) -> None:
    """Create the change table ``name`` (empty, partitioned by commit version) unless it exists.

    A catalog statement, not an empty write: no Spark job. CHAR/VARCHAR columns keep their
    declared type, as the target has it.
    """
    columns = [(f.name, str(f.metadata.get(CHAR_VARCHAR_KEY) or sql_type(f.dataType))) for f in schema.fields]
    catalog_sql(
        spark,
        f"CREATE TABLE IF NOT EXISTS {sql_name(name)} ({_column_list(columns)}) USING parquet "
        f"PARTITIONED BY ({quote(COMMIT_VERSION)})",
    )


def drop_changes_table(spark: SparkSession, name: str) -> int:
    """Drop the change table (a full refresh starts a new history); return the rows it held."""
    ident = sql_name(name)
    if not table_exists(spark, ident):
        return 0
    refresh_table(spark, ident)
    rows = read_table(spark, ident).count()
    catalog_sql(spark, f"DROP TABLE {ident}")
    return rows


def partition_values(rel: str) -> list[tuple[str, str]]:
    """``a=1/b=x%2Fy`` -> [(a, 1), (b, x/y)]: a partition folder's columns and values."""
    out = []
    for seg in rel.strip("/").split("/"):
        key, eq, value = seg.partition("=")
        if not eq or not key:
            raise ValueError(f"{rel!r} is not a partition path (segment {seg!r} has no name=value)")
        out.append((unquote(key), unquote(value)))
    return out


# Partition column types whose folder values :func:`partitions_of` types exactly in Python.
_EXACT_PARTITION_TYPES = (StringType, ByteType, ShortType, IntegerType, LongType, DateType, BooleanType)


def partitions_of(target: TargetTable, spark_paths: Sequence[str]) -> Column | None:
    """A condition on ``target``'s partition columns that holds for every partition holding
    one of the files ``spark_paths`` (``_metadata.file_path`` values), for Spark to prune
    the others; None where it cannot be sure of that.

    A file's partition is read from its folders (``col=value`` below the file, as the merge,
    compaction and the catalog's default partition locations lay them out). A value goes
    into the condition only when it is the one way Spark prints that value (``7``, not
    ``007``; ``2024-03-12``; ``true``): Spark compares the partition values the catalog holds,
    cast to the column's type, and a folder value that casts otherwise could leave a file out
    of the read, and its rows out of the rewrite. A column of another type (timestamps,
    decimals, floating point, ``CHAR``/``VARCHAR``, which compare padded), or a value not
    printed that way, is left unfiltered: the condition only ever keeps more partitions, never
    fewer."""
    columns = target.partition_columns
    if not columns:
        return None
    values: list[set[str | None]] = [set() for _ in columns]
    for url in spark_paths:
        folders = unquote(url).split("/")[:-1]
        if len(folders) < len(columns):
            return None
        for i, (col, seg) in enumerate(zip(columns, folders[-len(columns) :], strict=True)):
            key, eq, value = seg.partition("=")
            if not eq or _unescaped(key).lower() != col.lower():
                return None
            value = _unescaped(value)
            values[i].add(None if value == HIVE_DEFAULT_PARTITION else value)
    conditions = []
    for col, found in zip(columns, values, strict=True):
        fld = target.field(col)
        if fld.metadata.get(CHAR_VARCHAR_KEY):  # compared padded: left unfiltered
            continue
        typed = [_exact_literal(v, fld.dataType) for v in found if v is not None]
        if any(t is None for t in typed):
            continue
        ref = F.col(quote(col))
        cond = ref.isin(*typed) if typed else F.lit(False)
        conditions.append(cond | ref.isNull() if None in found else cond)
    if not conditions:
        return None
    out = conditions[0]
    for c in conditions[1:]:
        out = out & c
    return out


def _unescaped(name: str) -> str:
    """A partition folder name's text as Spark reads it: each ``%XX`` is the character of
    code XX (Hive's escaping, one byte at a time, not UTF-8)."""
    return unquote(name, encoding="latin-1")


# The values of each integral partition type: a folder value out of range is cast to NULL
# by Spark (or wraps as a literal), so it is left unfiltered.
_INTEGER_BITS = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}


def _exact_literal(value: str, dtype: DataType) -> Column | None:
    """``value`` (a partition folder's) as a literal of ``dtype`` if Spark prints that value
    exactly so, else None. A date goes to Spark as text cast by Spark (proleptic, any year):
    a Python date literal crosses py4j as a ``java.sql.Date``, which refuses years before
    1000 and moves the days of the 1582 calendar switch."""
    if not isinstance(dtype, _EXACT_PARTITION_TYPES):
        return None
    if isinstance(dtype, StringType):
        return F.lit(value)
    if isinstance(dtype, BooleanType):
        return F.lit(value == "true") if value in ("true", "false") else None
    if isinstance(dtype, DateType):
        try:
            day = date.fromisoformat(value)
        except ValueError:
            return None
        return F.lit(value).cast(DateType()) if day.isoformat() == value else None
    try:
        number = int(value)
    except ValueError:
        return None
    bits = _INTEGER_BITS[type(dtype)]
    if str(number) != value or not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        return None
    return F.lit(value).cast(dtype)


def register_partitions(
    spark: SparkSession, ident: str, partitions: list[str], catalog_entry: Any = None
) -> None:
    """Add partition directories a merge created to the catalog (no-op if already there).
    ``catalog_entry``: the table's catalog entry as this writer read it under its lock
    (:attr:`Description.catalog_entry`), so the catalog is not asked for it again."""
    if not partitions:
        return
    if any(HIVE_DEFAULT_PARTITION in p for p in partitions):
        catalog_sql(spark, f"ALTER TABLE {ident} RECOVER PARTITIONS")
        return
    values = [partition_values(rel) for rel in partitions]
    if _add_in_catalog(spark, ident, values, catalog_entry):
        return
    specs = [
        "PARTITION (" + ", ".join(f"{quote(k)} = {sql_string(v)}" for k, v in kvs) + ")" for kvs in values
    ]
    # One statement per batch keeps the metastore round trips low.
    for i in range(0, len(specs), 100):
        catalog_sql(spark, f"ALTER TABLE {ident} ADD IF NOT EXISTS {' '.join(specs[i : i + 100])}")


def _add_in_catalog(
    spark: SparkSession, ident: str, values: list[list[tuple[str, str]]], catalog_entry: Any = None
) -> bool:
    """Add partitions (``values``: each one's folder names and values) through the session's
    external catalog, as ``ALTER TABLE ... ADD IF NOT EXISTS PARTITION`` does at its core; True
    if added (or already there).

    The statement wraps that one request in SQL analysis, two more reads of the table's
    metadata and a refresh of the session's relation of the table: 169 ms against 70 ms for
    one partition with Derby's metastore (measured on 2 busy cores), paid by every merge with
    a change feed (a partition per version) and every merge into a new partition. A new
    partition's folder is in no listing the session holds, so nothing needs refreshing; the
    apply refreshes the target anyway. Each partition takes the table's storage format with
    its own default location, the folder its files were moved into (the folder names are the
    ones the write made: the values are not cast and re-printed on the way).

    False where this path does not apply, and then the caller runs the statement: Spark
    Connect (no JVM here), a table outside the session catalog, folder names that are not
    exactly the table's partition columns, or a Spark whose catalog classes differ.
    ``catalog_entry`` (the table's CatalogTable, read under the writer's lock) saves the
    request for the table's entry: its partition columns and storage format are all it gives.
    """
    if is_connect(spark):
        return False
    try:
        parts = parse_name(ident)
    except ValueError:
        return False
    # the session catalog's tables are the external catalog's
    if len(parts) == MAX_NAME_PARTS and parts[0].lower() == DEFAULT_CATALOG:
        parts = parts[1:]
    if len(parts) != 2:
        return False
    database, name = parts
    try:
        jvm = spark.sparkContext._jvm
        external = spark._jsparkSession.sharedState().externalCatalog()
        table = catalog_entry
        if table is None:
            calls.catalog_call()
            table = external.getTable(database, name)
        columns = {str(c).lower(): str(c) for c in _scala_list(table.partitionColumnNames())}
        specs = []
        for kvs in values:
            spec = {columns.get(k.lower(), ""): v for k, v in kvs}
            if len(spec) != len(columns) or "" in spec:
                return False
            specs.append(spec)
        storage = table.storage()
        # The table's format, serde and properties, no location: the catalog gives each
        # partition its default folder under the table's.
        empty = jvm_class(jvm, "scala.Option").empty()
        storage = storage.copy(empty, *[storage.productElement(i) for i in range(1, storage.productArity())])
        utils = jvm_class(jvm, "org.apache.spark.api.python.PythonUtils")
        partition = jvm_class(jvm, "org.apache.spark.sql.catalyst.catalog.CatalogTablePartition")
        now = int(time.time() * 1000)
        added = [
            partition(utils.toScalaMap(spec), storage, utils.toScalaMap({}), now, -1, empty) for spec in specs
        ]
        calls.catalog_call()
        external.createPartitions(database, name, utils.toSeq(added), True)
    except Exception:  # noqa: BLE001 - the statement (idempotent) then runs and says what is wrong
        return False
    return True


def _scala_list(seq: Any) -> list[Any]:
    """A Scala Seq's elements."""
    it = seq.iterator()
    out = []
    while it.hasNext():
        out.append(it.next())
    return out
