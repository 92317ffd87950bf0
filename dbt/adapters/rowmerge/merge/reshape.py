"""A full refresh that changes the table's shape, registered again over its own folder.

Spark alters a Parquet/ORC table only by adding columns. A refresh that drops, retypes or
reorders a column, or changes the partitioning or the file format, needs a new catalog entry;
dbt gets one by dropping the table, which for a managed table deletes its folder, journal
included, so versions restarted at 0 and every consumer of the change feed had to start over.
Here the refresh is still the table's next version (DESIGN §12): its entry records the shape
the table is registered with (:class:`Shape`), and applying it registers the table again over
the same folder, which keeps the journal:

1. the files the version replaces are removed (the table reads as empty from here to 5);
2. the journal folder is parked beside the table's folder (``<folder>.rowmerge-refresh``): a
   managed table's drop deletes its folder, and a managed table is only created in an empty
   one;
3. ``DROP TABLE``, then ``CREATE TABLE`` with the new shape (managed stays managed, at the
   catalog's default folder, which is the same folder; external stays at its location);
4. the journal moves back and the entry is applied as any other (its staged files move in).

Every step is repeatable and recovery finds where a crash left off: a parked journal is
finished by whoever opens the table's journal next (:func:`finish_parked`), or, while the
table is missing from the catalog, by dbt's next run of the model (:func:`finish_refresh`).
The table's lock lives in the journal folder and moves with it (renewal paused meanwhile).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType
from pyspark.sql.utils import AnalysisException

from . import faults
from .errors import ConcurrentMergeError, JournalError, UnsupportedTableError, spark_reason
from .journal import Entry, Journal
from .lock import LOCK_DIR, TableLock
from .sqltext import parse_name, quote, sql_string, sql_type
from .storage import storage_for
from .table import (
    CHAR_VARCHAR_KEY,
    Description,
    TargetTable,
    catalog_sql,
    current_database,
    describe_table,
    load_target,
    refresh_table,
    sql_name,
    struct_from_json,
)

logger = logging.getLogger("rowmerge")

PARKED_SUFFIX = ".rowmerge-refresh"


def parked_folder(location: str) -> str:
    """Where a refresh parks the journal of the table at ``location`` (beside its folder)."""
    return f"{location.rstrip('/')}{PARKED_SUFFIX}"


def shape_key(schema: StructType, partition_by: Sequence[str], file_format: str) -> tuple[Any, ...]:
    """What decides whether the catalog entry must change: columns (name, type), partitioning
    and format, as Spark reports them (a CHAR/VARCHAR column reads as string on both sides)."""
    return (
        file_format.lower(),
        tuple(c.lower() for c in partition_by),
        tuple((f.name.lower(), f.dataType.simpleString()) for f in schema.fields),
    )


@dataclass(frozen=True)
class Shape:
    """The table as a refresh registers it again: what its ``CREATE TABLE`` says."""

    schema: StructType  # data columns in the model's order, then the partition columns
    partition_by: tuple[str, ...]
    file_format: str
    location: str | None  # an external table's folder; None: managed (the catalog's default)
    properties: tuple[tuple[str, str], ...] = ()
    comment: str | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        return shape_key(self.schema, self.partition_by, self.file_format)

    def ddl(self, ident: str) -> str:
        def column(f: StructField) -> str:
            return f"{quote(f.name)} {f.metadata.get(CHAR_VARCHAR_KEY) or sql_type(f.dataType)}"

        parts = f" PARTITIONED BY ({', '.join(map(quote, self.partition_by))})" if self.partition_by else ""
        where = f" LOCATION {sql_string(self.location)}" if self.location else ""
        comment = f" COMMENT {sql_string(self.comment)}" if self.comment else ""
        props = ""
        if self.properties:
            props = (
                " TBLPROPERTIES ("
                + ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in self.properties)
                + ")"
            )
        columns = ", ".join(column(f) for f in self.schema.fields)
        return f"CREATE TABLE {ident} ({columns}) USING {self.file_format}{parts}{where}{comment}{props}"

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema.jsonValue(),
            "partition_by": list(self.partition_by),
            "format": self.file_format,
            "location": self.location,
            "properties": dict(self.properties),
            "comment": self.comment,
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Shape:
        return Shape(
            schema=struct_from_json(raw["schema"]),
            partition_by=tuple(raw.get("partition_by") or ()),
            file_format=str(raw["format"]),
            location=raw.get("location"),
            properties=tuple(sorted((str(k), str(v)) for k, v in (raw.get("properties") or {}).items())),
            comment=raw.get("comment"),
        )

    def target(self, table: TargetTable) -> TargetTable:
        """``table`` as it reads once registered with this shape (for checking and applying)."""
        return replace(
            table, file_format=self.file_format, schema=self.schema, partition_columns=self.partition_by
        )


def plan_shape(
    spark: SparkSession,
    target: TargetTable,
    schema: StructType,
    partition_by: Sequence[str],
    file_format: str,
    properties: Mapping[str, str] | None,
    storage_qualify: Callable[[str], str],
) -> Shape:
    """The shape a refresh registers ``target`` with (``schema``: the model's columns, partition
    columns last); UnsupportedTableError when the table cannot be registered again over its
    folder. The table keeps its properties and comment, the model's ``tblproperties`` over them."""
    described = describe_table(spark, target.ident)
    table_type = described.table_type
    if table_type == "EXTERNAL":
        location: str | None = target.location
    elif table_type == "MANAGED":
        location = None
        default = _default_folder(spark, target.name_parts)
        if default is None or storage_qualify(default) != storage_qualify(target.location):
            raise UnsupportedTableError(
                f"{target.name} is a managed table outside its schema's folder ({target.location}, "
                f"not {default}): created again, it would move there"
            )
    else:
        raise UnsupportedTableError(f"{target.name} is a {table_type or 'table of unknown type'} table")
    kept = {k: v for k, v in described.properties if not _reserved(k)}
    kept.update({str(k): str(v) for k, v in (properties or {}).items()})
    return Shape(
        schema=schema,
        partition_by=tuple(partition_by),
        file_format=file_format.lower(),
        location=location,
        properties=tuple(sorted(kept.items())),
        comment=described.comment,
    )


# Properties the catalog keeps for itself: CREATE TABLE refuses some, and the others describe
# the old table (statistics, timestamps), not the one registered again.
_RESERVED = {
    "provider",
    "location",
    "owner",
    "comment",
    "external",
    "is_managed_location",
    "transient_lastddltime",
    "numfiles",
    "totalsize",
    "numrows",
    "rawdatasize",
    "column_stats_accurate",
    "bucketing_version",
    "last_modified_by",
    "last_modified_time",
}


def _reserved(key: str) -> bool:
    k = key.lower()
    return k in _RESERVED or k.startswith(("spark.sql.", "option."))


def _shape_of(entry: Entry, table: str) -> Shape:
    assert entry.catalog is not None
    try:
        return Shape.from_json(entry.catalog)
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalError(
            f"Cannot finish version {entry.version} of {table}: its `catalog` (the shape the table is "
            f"registered with) is damaged ({exc!r}). Restore the journal from a backup, or rebuild the "
            "table with `dbt run --full-refresh`."
        ) from None


def _default_folder(spark: SparkSession, name_parts: Sequence[str]) -> str | None:
    """The folder the catalog gives a managed table of this name (its schema's folder / name)."""
    if not name_parts:
        return None
    schema = name_parts[-2] if len(name_parts) >= 2 else current_database(spark)
    try:
        rows = catalog_sql(spark, f"DESCRIBE DATABASE EXTENDED {quote(schema)}").collect()
    except AnalysisException:
        return None
    found = [str(r[1]) for r in rows if str(r[0]).lower() == "location"]
    return f"{found[0].rstrip('/')}/{name_parts[-1].lower()}" if found else None


def reregister(
    spark: SparkSession, journal: Journal, lock: TableLock, entry: Entry, target: TargetTable
) -> TargetTable:
    """Register the table again as ``entry.catalog`` says, keeping the journal (steps 1-3 of
    the module doc); repeatable from wherever a crash stopped it. Returns the table as
    registered now. Hold the lock; ``entry`` is committed and checked."""
    shape = _shape_of(entry, target.name)
    storage = journal.storage
    parked = Journal(storage, parked_folder(journal.location))
    ident = target.ident
    if not storage.exists(parked.log_dir):
        if _registered(spark, target.name, journal, shape):
            return shape.target(load_target(spark, target.name))
        for f in entry.removed:  # gone before the journal moves: the park moves the journal only
            journal.remove_replaced(f.path, entry.version)
        faults.fault_point("reshape_removed")
        with lock.moving():
            storage.move_folder(journal.log_dir, parked.log_dir)
            lock.relocate(parked.log_dir)
            faults.fault_point("reshape_parked")
            _register(spark, journal, parked, lock, shape, ident, target.name, entry.version)
    else:
        with lock.moving():
            _register(spark, journal, parked, lock, shape, ident, target.name, entry.version)
    logger.info(
        "rowmerge: %s: registered again for version %d (%s)", target.name, entry.version, shape.ddl(ident)
    )
    return shape.target(load_target(spark, target.name))


def _registered(spark: SparkSession, name: str, journal: Journal, shape: Shape) -> bool:
    """True if the catalog already holds the table with ``shape`` over the journal's folder."""
    try:
        now = load_target(spark, name)
    except UnsupportedTableError:
        return False
    same_place = journal.storage.qualify(now.location) == journal.location
    return same_place and shape_key(now.schema, now.partition_columns, now.file_format) == shape.key


def _register(
    spark: SparkSession,
    journal: Journal,
    parked: Journal,
    lock: TableLock,
    shape: Shape,
    ident: str,
    name: str,
    version: int,
) -> None:
    """Steps 3-4 with the journal parked: drop, create, move the journal back."""
    storage = journal.storage
    if storage.list_names(journal.log_dir) == [LOCK_DIR]:
        # Only a lock folder: a waiting writer's ticket, written in the instant the journal
        # left (it writes nothing more while the journal is away). No journal: remove it.
        storage.delete(journal.log_dir, recursive=True)
    if storage.exists(journal.log_dir):
        raise JournalError(
            f"Cannot finish version {version} of {name}: its journal is parked at {parked.log_dir} "
            f"while the table is registered again, but {journal.log_dir} exists too (did another "
            "process write to the table meanwhile?). Move that folder away, then run again: "
            f"`dbt run-operation rowmerge_recover --args '{{relation: {name}}}'`."
        )
    described = _describe(spark, ident)
    if described is not None and not _registered(spark, name, journal, shape):
        if storage.qualify(described.location.rstrip("/")) != journal.location:
            raise JournalError(
                f"Cannot finish version {version} of {name}: the catalog's {name} now reads "
                f"{described.location}, not {journal.location}, whose journal is parked at "
                f"{parked.log_dir}. Drop or rename that table, then run again."
            )
        _catalog(spark, f"DROP TABLE {ident}", name, version)
        described = None
        faults.fault_point("reshape_dropped")
    if described is None:
        _catalog(spark, shape.ddl(ident), name, version)
        faults.fault_point("reshape_created")
    now = _describe(spark, ident)
    if now is None or storage.qualify(now.location.rstrip("/")) != journal.location:
        raise JournalError(
            f"Cannot finish version {version} of {name}: registered again, the table reads "
            f"{now.location if now else 'nothing'}, not {journal.location}"
        )
    storage.move_folder(parked.log_dir, journal.log_dir)
    lock.relocate(journal.log_dir)
    faults.fault_point("reshape_unparked")
    storage.delete(parked.location, recursive=True)
    refresh_table(spark, ident)


def _catalog(spark: SparkSession, statement: str, name: str, version: int) -> None:
    """Run a catalog statement of the re-registration; a refusal as the JournalError it is."""
    try:
        catalog_sql(spark, statement)
    except AnalysisException as exc:
        raise JournalError(
            f"Cannot finish version {version} of {name}: the catalog refused `{statement}` "
            f"({spark_reason(exc)}). Fix that, then run again: the next run of the model finishes it."
        ) from None


def _describe(spark: SparkSession, ident: str) -> Description | None:
    try:
        return describe_table(spark, ident)
    except AnalysisException:
        return None


def finish_parked(spark: SparkSession, journal: Journal, lock_timeout_s: float = 0.0) -> bool:
    """Finish a refresh that stopped with the journal of ``journal``'s table parked (one
    status call when there is none). True if it finished one. A refresh still running (its
    lock held by a live process) fails this with ConcurrentMergeError: run again shortly."""
    storage = journal.storage
    parked = Journal(storage, parked_folder(journal.location))
    if not storage.exists(parked.location):
        return False
    if not storage.exists(parked.log_dir):  # stopped after the journal moved back
        if not storage.list_names(parked.location):
            storage.delete(parked.location, recursive=True)
        return False
    versions, applied = parked.listing()
    if not versions and storage.list_names(parked.log_dir) == [LOCK_DIR]:
        # Only a lock folder: a finisher's lease, taken in the instant the refresh moved the
        # journal back. No journal: remove it.
        storage.delete(parked.location, recursive=True)
        return False
    unapplied = [v for v in versions if v not in applied]
    newest = parked.entry(unapplied[-1], journal.location) if unapplied else None
    if newest is None or newest.catalog is None:
        raise JournalError(
            f"{parked.log_dir} holds a parked journal of the table at {journal.location} that no "
            "interrupted full refresh left (its newest version does not register the table "
            "again). Move it back to the table's folder as _rowmerge_log (or away), then run again."
        )
    try:
        lock = TableLock(storage, parked.log_dir, newest.table, "RECOVER", lock_timeout_s)
        lock.acquire()
    except ConcurrentMergeError as exc:
        raise ConcurrentMergeError(
            f"A full refresh of {newest.table} is registering the table again right now (its "
            f"journal is parked at {parked.log_dir} meanwhile): run again in a moment. ({exc})"
        ) from None
    try:
        if parked.versions() != versions:  # the refresh moved the journal back meanwhile
            return False
        shape = _shape_of(newest, newest.table)
        with lock.moving():
            _register(
                spark, journal, parked, lock, shape, sql_name(newest.table), newest.table, newest.version
            )
    finally:
        lock.release()
    logger.info("rowmerge: %s: finished registering it again for version %d", newest.table, newest.version)
    return True


def finish_refresh(spark: SparkSession, table_name: str, location: str | None = None) -> bool:
    """Finish a full refresh of ``table_name`` that stopped while the table was missing from
    the catalog (between its drop and its create). ``location``: an external table's folder;
    default: the catalog's folder for a managed table of that name. True if it did."""
    described = _describe(spark, sql_name(table_name))
    if described is not None:
        folder: str | None = described.location
    else:
        folder = location or _default_folder(spark, parse_name(table_name))
    if not folder:
        return False
    storage = storage_for(spark)
    return finish_parked(spark, Journal(storage, storage.qualify(folder.rstrip("/"))))
