"""``as_of``: a table as it was at any version its journal can still describe, as a DataFrame.

The journal names every file of every version and, with retention (journal/retention.py),
the files later versions replaced are still there, in ``_rowmerge_log/retained/<k>/``. So a
past version is read like the table itself — the same format, the table's current columns
(a column added since reads as NULL in older files), its partition columns parsed from the
folders — from the files where they are now. Nothing is written and no lock is taken.

The DataFrame reads the files when it runs, as any Spark read does: a merge into the table
before that moves files the version still has (into ``retained/``), and the read then fails
with a missing file. Read it right away (or cache it), as the ``rowmerge_as_of`` macro's
model does.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .errors import JournalError, MergeSpecError
from .feed_range import parse_timestamp
from .journal import FileEntry, Journal, Snapshot
from .journal.layout import inside
from .lean_columns import lean_columns
from .run import locate_or_finish, open_journal, storage_errors
from .table import TargetTable, load_target

logger = logging.getLogger("rowmerge")


def as_of(
    spark: SparkSession,
    table: str,
    version: int | None = None,
    timestamp: str | datetime | None = None,
) -> DataFrame:
    """The rows of ``table`` at ``version``, or at the newest version committed at or before
    ``timestamp`` (ISO 8601 text, UTC unless it says otherwise, or a datetime).

    Raises MergeSpecError for bad arguments and JournalError for a version the journal cannot
    give back (none such, or its files are gone: the message names the oldest readable one).
    """
    problems: list[str] = []
    when = version_arguments(version, timestamp, problems)
    if problems:
        raise MergeSpecError(problems)
    with lean_columns(), storage_errors(f"Reading {table} as of a version"):
        locate_or_finish(spark, table, "AS OF read of table")
        target = load_target(spark, table)
        journal = open_journal(spark, target.location)
        journal.check_placement(table)
        return read_version(spark, journal, target, version, when)


def read_version(
    spark: SparkSession,
    journal: Journal,
    target: TargetTable,
    version: int | None,
    when: datetime | None,
) -> DataFrame:
    """``target`` at ``version`` (or at the newest version at or before ``when``)."""
    journal.check_bound(target)
    versions, applied = journal.listing()
    if not versions:  # never merged into: the table as found is its only version, 0
        if version == 0:
            return target.read(spark)
        raise MergeSpecError(
            [
                f"{target.name} has no journal yet (no merge, optimize or full refresh has run on it "
                "since rowmerge found it), so it has only its current rows, version 0"
            ]
        )
    entries = journal.all_entries(versions, target.name)
    if version is None:
        assert when is not None
        version = journal.version_at(entries, when, target.name)
    snapshot = journal.snapshot_of(version, entries, applied, target.name)
    if versions[-1] not in applied:
        snapshot = _in_flight(journal, snapshot)
    logger.info(
        "rowmerge: %s as of version %d: %d file(s)", target.name, snapshot.version, len(snapshot.files)
    )
    check_retained_present(journal, target, snapshot.version, snapshot.files)
    return read_files(spark, journal, target, snapshot.files)


def check_retained_present(
    journal: Journal, target: TargetTable, version: int, files: Sequence[tuple[FileEntry, str]]
) -> None:
    """JournalError naming the first file of ``version`` that its retained folder should hold
    and does not (deleted by hand, or by a tool that does not know the journal): a read of it
    would fail later inside Spark, with no word of which version or why. Only retained files
    are looked at: one filesystem call each, none for the table's current files."""
    for f, where in files:
        if where != f.path and not journal.storage.exists(where):
            raise JournalError(
                f"Version {version} of {target.name} cannot be read: its file "
                f"{inside(f.path, journal.location)} should be kept at {where}, and is not there "
                "(deleted by hand, or by a tool that does "
                "not know the journal). Versions whose retained files are all there can still be read; "
                "nothing was changed."
            )


def version_arguments(version: Any, timestamp: Any, problems: list[str]) -> datetime | None:
    """Check the ``version`` / ``timestamp`` pair of as_of and restore (exactly one, each
    well formed), adding each problem to ``problems``; the timestamp as UTC, if given."""
    if (version is None) == (timestamp is None):
        problems.append("give exactly one of `version` and `timestamp`")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        problems.append(f"`version` must be a whole number >= 0, got {version!r}")
    if timestamp is None:
        return None
    try:
        return parse_timestamp(timestamp)
    except ValueError as exc:
        problems.append(f"`timestamp`: {exc}")
        return None


def _in_flight(journal: Journal, snapshot: Snapshot) -> Snapshot:
    """The newest version is committed but not applied yet (a merge is moving its files, or
    one died doing so): each file where it is found, of the places it can be."""
    files = []
    for f, where in snapshot.files:
        candidates = [where, f.path, *([f.staged] if f.staged else [])]
        found = next((c for c in candidates if journal.storage.exists(c)), where)
        files.append((f, found))
    return Snapshot(snapshot.version, snapshot.timestamp, tuple(files))


def read_files(
    spark: SparkSession, journal: Journal, target: TargetTable, files: Sequence[tuple[FileEntry, str]]
) -> DataFrame:
    """Read ``files`` (each file as a version had it, and where it is now) with the table's
    columns; partition values come from the folders below each file's base (the table, or a
    version's ``retained/`` folder).

    Paths go to the reader as the storage names them: a Hadoop ``Path`` made from one finds the
    file. The URL-encoded form (``to_spark_path``, what ``_metadata.file_path`` reports) is for
    comparing with that column, never for reading: a partition value with a space or a ':'
    would be encoded twice and not found."""
    if not files:
        return spark.createDataFrame([], target.schema)
    if not target.partition_columns:
        paths = [where for _, where in files]
        return spark.read.format(target.file_format).schema(target.schema).load(paths)
    by_base: dict[str, list[str]] = defaultdict(list)
    for f, where in files:
        rel = inside(f.path, journal.location)
        base = where[: -len(rel) - 1] if rel and where.endswith("/" + rel) else journal.location
        by_base[base].append(where)
    frames = []
    for base, paths in sorted(by_base.items()):
        reader = spark.read.format(target.file_format).schema(target.schema)
        frames.append(reader.option("basePath", base).load(paths))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
