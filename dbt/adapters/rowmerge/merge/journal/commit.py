"""Building and writing entries: the commit point, and the versions that change no file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from pyspark.sql.types import StructType

from ..errors import ConcurrentMergeError, JournalError, StorageError, spark_reason
from ..filestats import FileSummary
from ..lock import LOCK_DIR
from ..storage import FileInfo
from ..table import COMMIT_VERSION, TargetTable
from .base import Base, sha256
from .checks import Checks
from .entry import Entry, FeedFiles, FileEntry
from .layout import (
    BASE_SUFFIX,
    LOG_NAME,
    MAX_VERSION,
    VERSION_DIGITS,
    Staging,
    iso,
    new_txn,
    parse_iso,
    spec_digest,
    utc_now,
)
from .retention import Retention


class Written(Protocol):
    """A file a data phase wrote into staging (rewrite's StagedFile is one).

    A protocol, so that the journal stays below the data phases and never imports them.
    """

    @property
    def path(self) -> str: ...  # qualified
    @property
    def size(self) -> int: ...
    @property
    def rows(self) -> int | None: ...
    @property
    def summary(self) -> FileSummary | None: ...  # from the footer, if read


class ChangeTable(Protocol):
    """Where a merge's change rows go (cdf's ChangesTable is one)."""

    @property
    def name(self) -> str: ...  # as the spec gave it
    @property
    def location(self) -> str: ...  # qualified


class Writer(Checks):
    """Staging, entries, and the commit point."""

    def stage(self) -> Staging:
        """A new, empty staging folder for one merge (created by the first file written)."""
        return self.staging(new_txn())

    def discard(self, staging: Staging) -> None:
        """Roll back a merge that did not reach its commit point: drop everything it staged."""
        self.storage.delete(staging.dir, recursive=True)

    def initial_entry(
        self, target: TargetTable, operation: str, snapshot: Mapping[str, FileInfo] | None = None
    ) -> Entry:
        """Version 0: the table's files as dbt created them (or as the first merge found it).

        ``snapshot`` is the listing the caller read the table from (default: list it now).
        """
        found = self.snapshot() if snapshot is None else snapshot
        summaries = self.file_summaries(target, found)
        files = tuple(
            FileEntry(path, found[path].size, summaries[path].rows, stats=summaries[path].to_json() or None)
            for path in sorted(found)
        )
        return Entry(
            version=0,
            table=target.qualified_name,
            operation=operation,
            timestamp=iso(utc_now()),
            added=files,
            removed=(),
            metrics={
                "numFiles": len(files),
                "numOutputRows": sum(f.rows or 0 for f in files),
                "numOutputBytes": sum(f.size for f in files),
            },
        )

    def merge_entry(
        self,
        staging: Staging,
        *,
        version: int,
        timestamp: datetime,
        target: TargetTable,
        spec: Mapping[str, Any],
        added: Sequence[Written],
        removed: Iterable[tuple[str, int, int | None]],
        new_columns: Sequence[tuple[str, str]],
        changes: ChangeTable | None,
        feed_columns: StructType | None,
        feed: Sequence[Written],
        metrics: Mapping[str, Any],
        operation: str = "MERGE",
        feed_skipped: str | None = None,
        catalog: Mapping[str, Any] | None = None,
        cluster_by: Sequence[str] | None = None,
        retention: Retention | None = None,
    ) -> Entry:
        """The entry of a merge (or of a full refresh: ``operation`` REPLACE TABLE; of a
        compaction: OPTIMIZE) planned as ``version``: everything recovery needs to finish it.

        ``added``: the data files staged in ``staging.data_dir``; ``removed``: (qualified path,
        size, rows) of each file the commit replaces; ``new_columns``: (name, type DDL) that
        schema evolution adds; ``feed``: the change-feed files staged in ``staging.cdf_dir``
        for ``changes``, whose columns are ``feed_columns``; ``timestamp``: the commit time
        (which the change rows repeat); ``cluster_by``: the table's clustering columns from
        this version on (None: it has none); ``retention``: the table's retention from this
        version on (None: none stored), which also decides whether applying it keeps the
        files it replaces (retention.py).
        """
        files = tuple(
            FileEntry(
                f"{self.location}/{staging.data_path(f.path)}",
                f.size,
                f.rows,
                staged=f.path,
                stats=f.summary.to_json() or None if f.summary is not None else None,
            )
            for f in added
        )
        partitions: set[str] = set()
        if target.partition_columns:
            partitions = {f.path[len(self.location) + 1 :].rsplit("/", 1)[0] for f in files}
        cdf = None
        if changes is not None and feed:
            assert feed_columns is not None
            partition = f"{COMMIT_VERSION}={version}"
            cdf = FeedFiles(
                table=changes.name,
                location=changes.location,
                partition=partition,
                columns=feed_columns.jsonValue(),
                files=tuple(
                    FileEntry(
                        f"{changes.location}/{partition}/{f.path.rsplit('/', 1)[1]}",
                        f.size,
                        f.rows,
                        staged=f.path,
                    )
                    for f in feed
                ),
            )
        return Entry(
            version=version,
            table=target.qualified_name,
            operation=operation,
            timestamp=iso(timestamp),
            expired=self.expiring(retention, version, timestamp),
            txn=staging.txn,
            read_version=version - 1,
            spec_digest=spec_digest(spec),
            added=files,
            removed=tuple(FileEntry(path, size, rows) for path, size, rows in sorted(removed)),
            partitions=tuple(sorted(partitions)),
            new_columns=tuple(new_columns),
            cdf=cdf,
            metrics=dict(metrics),
            feed_skipped=feed_skipped,
            catalog=dict(catalog) if catalog is not None else None,
            cluster_by=tuple(cluster_by) if cluster_by is not None else None,
            retention=retention,
        )

    def restore_entry(
        self,
        staging: Staging,
        *,
        version: int,
        timestamp: datetime,
        target: TargetTable,
        restored: int,
        back: Sequence[tuple[FileEntry, str]],
        removed: Sequence[FileEntry],
        changes: ChangeTable | None,
        feed_columns: StructType | None,
        feed: Sequence[Written],
        metrics: Mapping[str, Any],
        cluster_by: Sequence[str] | None,
        retention: Retention | None,
    ) -> Entry:
        """The entry of a RESTORE planned as ``version``, which makes the table's rows those of
        version ``restored`` again: ``back``, each file of ``restored`` the table lacks now and
        the retained copy it moves back from; ``removed``, the current files ``restored`` did
        not have. Its change rows (``feed``) are staged like a merge's."""
        files = tuple(FileEntry(f.path, f.size, f.rows, staged=where, stats=f.stats) for f, where in back)
        partitions: set[str] = set()
        if target.partition_columns:
            partitions = {f.path[len(self.location) + 1 :].rsplit("/", 1)[0] for f in files}
        entry = self.merge_entry(
            staging,
            version=version,
            timestamp=timestamp,
            target=target,
            spec={"operation": "RESTORE", "restored": restored},
            added=(),
            removed=[(f.path, f.size, f.rows) for f in removed],
            new_columns=(),
            changes=changes,
            feed_columns=feed_columns,
            feed=feed,
            metrics=metrics,
            operation="RESTORE",
            cluster_by=cluster_by,
            retention=retention,
        )
        return replace(entry, added=files, partitions=tuple(sorted(partitions)), restored=restored)

    def expiring(self, retention: Retention | None, version: int, now: datetime) -> tuple[int, ...]:
        """The retained folders that fall out of ``retention`` once ``version`` is the newest
        version, at ``now`` (a commit's apply deletes them, so retention needs no upkeep of
        its own).

        A folder whose version's entry cannot be read is kept: what cannot be judged is not
        deleted (recovery and vacuum say what is wrong with the entry).
        """
        if retention is None:  # never chosen, and the default keeps nothing: none was kept
            return ()
        out = []
        base = self.base()
        for k in self.retained_versions():
            if base is not None and k <= base.version:
                out.append(k)  # a version a vacuum folded: no reader can ask for it
                continue
            if k > version or k > version - retention.versions:
                continue
            try:
                committed = parse_iso(self.read_entry(k).timestamp) if retention.hours > 0 else now
            except Exception:  # noqa: BLE001 - EntryInvalid, a vanished or unreadable file
                continue
            if not retention.keeps(k, committed, version, now):
                out.append(k)
        return tuple(out)

    def write_base(self, base: Base) -> str:
        """Write ``base`` (replacing a leftover no entry commits: a vacuum that stopped before
        its commit point) and read it back; the SHA-256 of its text, for the VACUUM entry to
        name. Hold the lock: no committed base is ever newer than the one being written."""
        self._drop_leftover_bases(base.version)
        path, text = self.base_path(base.version), base.to_json()
        self.__dict__.get("_bases", {}).pop(base.version, None)  # a leftover read before
        if not self.storage.create_if_absent(path, text):
            self.storage.delete(path)
            if not self.storage.create_if_absent(path, text):
                raise StorageError(
                    f"Could not write {path}: another process wrote it meanwhile. Nothing was changed."
                )
        read = self.storage.read_text(path)
        if read != text:
            raise StorageError(
                f"{path} did not read back as it was written ({len(read)} of {len(text)} characters): "
                "the vacuum stops before folding any entry into it. Nothing was changed."
            )
        Base.parse(read, base.version)
        return sha256(read)

    def _drop_leftover_bases(self, keep: int) -> None:
        """Delete the bases no entry commits (vacuums that stopped before their commit point,
        at other versions than ``keep``, the one being written): under the lock, after
        recovery, only the committed base counts."""
        committed = self.base()
        for name in self.storage.list_names(self.log_dir):
            found = LOG_NAME.match(name)
            if not found or found.group(2) != BASE_SUFFIX or len(found.group(1)) != VERSION_DIGITS:
                continue
            b = int(found.group(1))
            if b != keep and (committed is None or b != committed.version):
                self.storage.delete(f"{self.log_dir}/{name}")

    def write_initial(self, entry: Entry) -> None:
        """Create version 0 (the table as created or as found), already applied."""
        assert entry.version == 0
        if self.storage.create_if_absent(self.entry_path(0), entry.to_json()):
            self.storage.create_if_absent(self.applied_path(0), "")

    def reset(self) -> int:
        """Forget every version and staging folder (a full refresh replaced the table); keep the lock.

        Newest first, each entry before its applied marker: an interrupted reset leaves the
        older versions, every one still marked applied, never an entry recovery would replay.
        """
        versions, _ = self.listing()
        for v in reversed(versions):
            self.storage.delete(self.entry_path(v))
            self.storage.delete(self.applied_path(v))
        for name in self.storage.list_names(self.log_dir):
            if name != LOCK_DIR:
                self.storage.delete(f"{self.log_dir}/{name}", recursive=True)
        return len(versions)

    def commit(self, entry: Entry, initial: Entry | None = None) -> None:
        """Create the planned entry: the commit point (call :meth:`check_unchanged` just before).

        ``initial`` (version 0 of a table that had no journal, described when the merge read
        it) is written first, once the table is known to be unchanged.
        """
        path, text = self.entry_path(entry.version), entry.to_json()
        try:
            if initial is not None:
                self.write_initial(initial)
            created = self.storage.create_if_absent(path, text)
        except Exception as exc:  # noqa: BLE001 - a full disk, a refused write: committed or not?
            if not self._holds(path, text, exc):
                raise StorageError(
                    f"{entry.operation} into {entry.table} failed: its journal entry {path} could not "
                    f"be written ({spark_reason(exc)}). Nothing was changed. Free space or fix the "
                    f"permissions of {self.log_dir}, then run the model again."
                ) from None
            created = True  # the entry is there, whole: the merge is committed
        if not created:
            raise ConcurrentMergeError(
                f"{entry.operation} into {entry.table} aborted: version {entry.version} was committed "
                "by another writer while this merge ran. Nothing was changed; run the model again."
            )

    def _holds(self, path: str, text: str, error: Exception) -> bool:
        """After creating ``path`` failed with ``error``: True if it holds ``text`` all the same
        (False if it is absent or holds something else; ``error`` again if that cannot be
        told, for then no one knows whether the commit happened)."""
        try:
            return self.storage.exists(path) and self.storage.read_text(path) == text
        except Exception:  # noqa: BLE001
            raise error from None

    def next_version(self, versions: Sequence[int], table: str) -> int:
        """The version a commit after ``versions`` takes; JournalError past :data:`MAX_VERSION`.

        Checked before the commit point: a version the change feed cannot hold would fail
        after it, in every replay.
        """
        version = (versions[-1] if versions else 0) + 1
        if version > MAX_VERSION:
            raise JournalError(
                f"{table} cannot take another version: its journal's newest version is {versions[-1]}, "
                f"the largest a change feed's _commit_version (BIGINT) can hold. No history gets "
                f"there by merging: {self.entry_path(versions[-1])} was written by hand or by another "
                "tool. Restore the journal from a backup, or rebuild the table with "
                "`dbt run --full-refresh`. Nothing was changed."
            )
        return version

    def fence(self, table: str, reason: str) -> int:
        """Commit an empty version, so that a writer whose lease was taken over cannot commit."""
        return self._commit_marker(table, "FENCE", reason)

    def rebind(self, target: TargetTable, reason: str) -> int:
        """Commit a version that makes ``target`` this journal's table, in this folder, from
        now on (``reason``: it was renamed, or its folder moved or was copied). It lists every
        file of the table as it is now, with its statistics, as version 0 does: the files
        moved with their folder, and versions before it name the old paths. Hold the lock."""
        found = self.initial_entry(target, "REBIND")
        return self._commit_marker(target.qualified_name, "REBIND", reason, found.added)

    def _commit_marker(
        self, table: str, operation: str, reason: str, files: tuple[FileEntry, ...] = ()
    ) -> int:
        """Commit a version of ``operation`` that changes no file (``files``: the files of the
        table, listed for their statistics), at the next free version."""
        while True:
            versions = self.versions()
            version = self.next_version(versions, table)
            newest = self.newest(versions)
            entry = Entry(
                version=version,
                table=table,
                operation=operation,
                timestamp=iso(self.commit_time(versions, newest)),
                added=files,
                removed=(),
                metrics={},
                reason=reason,
                cluster_by=newest.cluster_by if newest is not None else None,
                retention=newest.retention if newest is not None else None,
            )
            if self.storage.create_if_absent(self.entry_path(version), entry.to_json()):
                self.storage.create_if_absent(self.applied_path(version), "")
                return version
