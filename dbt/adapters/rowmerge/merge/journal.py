"""Phase 7: commit through a journal under the table location, and recover from crashes.

Layout (``_``-prefixed, so Spark, Hive, Trino and DuckDB never read it as data)::

    <table>/_rowmerge_log/staging/<txn>/data/...   rewritten and inserted files, before the commit
    <table>/_rowmerge_log/staging/<txn>/cdf/...    change-feed files, before the commit
    <table>/_rowmerge_log/<version>.json           the entry; creating it (create-if-absent) commits
    <table>/_rowmerge_log/<version>.applied        written once every step of the entry is done
    <table>/_rowmerge_log/lock/                    the writer lease (see ``lock``)

Version 0 describes the table as dbt created it (or as the first merge found it). A merge
plans version ``read + 1`` while holding the lock and creates exactly that entry, so a writer
that lost its lock cannot commit over a newer version. After the commit point every step is
idempotent and they run in an order that never hides a row from readers: add columns if
absent, move each staged file into place if still staged, add new partitions if absent,
then delete each replaced file if still there, then mark the entry applied. ``recover``
replays an unapplied entry any number of times; staging without an entry is rolled back.
An entry that cannot be parsed was being created when its writer died: its commit never
completed, so it is rolled back too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession

from .cdf import ensure_changes_table
from .errors import ConcurrentMergeError, JournalError
from .lock import LOCK_DIR
from .storage import FileInfo, Storage
from .table import add_columns, register_partitions

logger = logging.getLogger("rowmerge")

LOG_DIR = "_rowmerge_log"
STAGING_DIR = "staging"
DATA_DIR = "data"
CDF_DIR = "cdf"
ENTRY_SUFFIX = ".json"
APPLIED_SUFFIX = ".applied"
VERSION_DIGITS = 20
ENTRY_FORMAT = 1

# Test hooks, read at each step of the commit protocol: the name of the step after which the
# process dies (os._exit), a file that collects the name of every step reached, and a pause
# after each step (so that a kill from outside can land inside the protocol).
FAULT_ENV = "ROWMERGE_FAULT_AFTER"
FAULT_TRACE_ENV = "ROWMERGE_FAULT_TRACE"
FAULT_DELAY_ENV = "ROWMERGE_FAULT_DELAY_S"
FAULT_EXIT_CODE = 137


def fault_point(step: str) -> None:
    """Mark the end of one commit step for the test hooks (no effect unless they are set)."""
    trace = os.environ.get(FAULT_TRACE_ENV)
    if trace:
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(step + "\n")
    if os.environ.get(FAULT_ENV) == step:
        os._exit(FAULT_EXIT_CODE)
    delay = os.environ.get(FAULT_DELAY_ENV)
    if delay:
        time.sleep(float(delay))


def spec_digest(raw: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def utc_now() -> datetime:
    """Now, at millisecond precision (what the journal stores and the change feed repeats)."""
    now = datetime.now(timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds")


def new_txn() -> str:
    return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"


@dataclass
class Recovery:
    """What ``recover`` did: versions rolled forward, staging folders and torn entries rolled back."""

    rolled_forward: list[int] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    discarded: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rolled_forward or self.rolled_back or self.discarded)

    def describe(self) -> str:
        if not self:
            return "nothing to recover"
        parts = []
        if self.rolled_forward:
            parts.append("rolled forward version(s) " + ", ".join(map(str, self.rolled_forward)))
        if self.discarded:
            parts.append("discarded incomplete entry(ies) " + ", ".join(map(str, self.discarded)))
        if self.rolled_back:
            parts.append(f"rolled back {len(self.rolled_back)} uncommitted staging folder(s)")
        return "; ".join(parts)


@dataclass
class Journal:
    """The journal of one table."""

    storage: Storage
    location: str

    # -- layout -----------------------------------------------------------------------------
    @property
    def log_dir(self) -> str:
        return f"{self.location}/{LOG_DIR}"

    def staging_dir(self, txn: str) -> str:
        return f"{self.log_dir}/{STAGING_DIR}/{txn}"

    def entry_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{ENTRY_SUFFIX}"

    def applied_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{APPLIED_SUFFIX}"

    def final_path(self, staging_data: str, staged: str) -> str:
        """Where a staged data file goes: the same partition sub-path under the table location."""
        rel = staged.split(staging_data.rstrip("/") + "/", 1)[1]
        return f"{self.location}/{rel}"

    # -- reading ----------------------------------------------------------------------------
    def listing(self) -> tuple[list[int], set[int]]:
        """(entry versions, applied versions) from one listing of the log folder."""
        entries, applied = [], set()
        for n in self.storage.list_names(self.log_dir):
            head, dot, suffix = n.partition(".")
            if not head.isdigit() or not dot:
                continue
            if "." + suffix == ENTRY_SUFFIX:
                entries.append(int(head))
            elif "." + suffix == APPLIED_SUFFIX:
                applied.add(int(head))
        return sorted(entries), applied

    def versions(self) -> list[int]:
        return self.listing()[0]

    def current_version(self) -> int:
        """The newest committed version (0 for a table without a journal: the table as found)."""
        versions = self.versions()
        return versions[-1] if versions else 0

    def read_entry(self, version: int) -> dict[str, Any] | None:
        """The entry, or None if it is incomplete (its writer died while creating it)."""
        try:
            entry: dict[str, Any] = json.loads(self.storage.read_text(self.entry_path(version)))
        except (ValueError, UnicodeDecodeError):
            return None
        return entry if entry.get("version") == version else None

    def snapshot(self) -> dict[str, FileInfo]:
        """Every data file of the table now, to prove at commit time that no one changed them."""
        return {self.storage.qualify(f.path): f for f in self.storage.list_data_files(self.location)}

    # -- writing ----------------------------------------------------------------------------
    def write_initial(self, entry: dict[str, Any]) -> None:
        """Create version 0 (the table as created or as found), already applied."""
        if self.storage.create_if_absent(self.entry_path(0), json.dumps(dict(entry, version=0), indent=1)):
            self.storage.create_if_absent(self.applied_path(0), "")

    def reset(self) -> int:
        """Forget every version and staging folder (a full refresh replaced the table); keep the lock."""
        removed = 0
        for name in self.storage.list_names(self.log_dir):
            if name != LOCK_DIR:
                self.storage.delete(f"{self.log_dir}/{name}", recursive=True)
                removed += name.endswith(ENTRY_SUFFIX)
        return removed

    def commit(
        self, entry: dict[str, Any], snapshot: Mapping[str, FileInfo], initial: dict[str, Any] | None = None
    ) -> None:
        """Create the planned entry: the commit point. Abort if anyone else changed the table.

        ``initial`` (version 0 of a table that had no journal, described when the merge read
        it) is written first, once the table is known to be unchanged.
        """
        changed = self._changed_files(snapshot)
        if changed:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            raise ConcurrentMergeError(
                f"{entry['operation']} into {entry['table']} aborted: another writer changed "
                f"{len(changed)} of the table's files while the merge ran ({shown}). Nothing was "
                "changed; run the model again. Jobs that write this table without row_level_merge "
                "(insert_overwrite runs, manual jobs) must not run at the same time as a merge."
            )
        if initial is not None:
            self.write_initial(initial)
        version = int(entry["version"])
        if not self.storage.create_if_absent(self.entry_path(version), json.dumps(entry, indent=1)):
            raise ConcurrentMergeError(
                f"{entry['operation']} into {entry['table']} aborted: version {version} was committed "
                "by another writer while this merge ran. Nothing was changed; run the model again."
            )

    def _changed_files(self, snapshot: Mapping[str, FileInfo]) -> list[str]:
        now = self.snapshot()
        return sorted(
            path
            for path, info in snapshot.items()
            if path not in now or (now[path].size, now[path].mtime) != (info.size, info.mtime)
        )

    def fence(self, table: str, reason: str) -> int:
        """Commit an empty version, so that a writer whose lease was taken over cannot commit."""
        while True:
            version = self.current_version() + 1
            entry = {
                "format": ENTRY_FORMAT,
                "version": version,
                "table": table,
                "operation": "FENCE",
                "timestamp": iso(utc_now()),
                "reason": reason,
                "added": [],
                "removed": [],
                "metrics": {},
            }
            if self.storage.create_if_absent(self.entry_path(version), json.dumps(entry, indent=1)):
                self.storage.create_if_absent(self.applied_path(version), "")
                return version

    # -- roll forward -----------------------------------------------------------------------
    def apply(self, spark: SparkSession, entry: Mapping[str, Any], table: str) -> None:
        """Roll ``entry`` forward on ``table`` (its name in this session's catalog); repeatable."""
        add_columns(spark, table, entry.get("new_columns", []))
        cdf = entry.get("cdf")
        if cdf:
            ensure_changes_table(spark, cdf["table"], cdf["columns"])
        # Version 0 and fences list files that were never staged: nothing to move.
        moves = [f for f in list(entry["added"]) + (list(cdf["files"]) if cdf else []) if "staged" in f]
        for i, f in enumerate(moves):
            self.storage.rename(f["staged"], f["path"])
            fault_point(f"move_{i}")
        # New partitions become visible before any replaced file goes away, so a reader of
        # the catalog sees every row throughout (old and new versions side by side at worst).
        register_partitions(spark, table, entry.get("partitions", []))
        if cdf:
            register_partitions(spark, cdf["table"], [cdf["partition"]])
        fault_point("registered")
        for i, f in enumerate(entry["removed"]):
            self.storage.delete(f["path"])
            fault_point(f"delete_{i}")
        fault_point("before_applied")
        self.storage.create_if_absent(self.applied_path(int(entry["version"])), "")
        fault_point("applied")
        if entry.get("txn"):
            self.storage.delete(self.staging_dir(entry["txn"]), recursive=True)
        spark.catalog.refreshTable(table)
        if cdf:
            spark.catalog.refreshTable(cdf["table"])

    def recover(self, spark: SparkSession, table: str) -> Recovery:
        """Roll unapplied entries forward, incomplete entries and orphan staging back (hold the lock)."""
        done = Recovery()
        versions, applied = self.listing()
        for v in versions:
            if v in applied:
                continue
            entry = self.read_entry(v)
            if entry is None:
                self.storage.delete(self.entry_path(v))
                done.discarded.append(v)
                continue
            try:
                self.apply(spark, entry, table)
            except FileNotFoundError as exc:
                raise JournalError(
                    f"Cannot finish the interrupted commit of version {v} of {table}: staged file "
                    f"{exc} is missing (was {self.log_dir} edited by hand?). Restore the file, or "
                    "rebuild the table with --full-refresh."
                ) from None
            done.rolled_forward.append(v)
        # Every entry is applied now, so no staging folder can be needed any more. Only the
        # newest entry's can be a leftover of a commit (a crash after its applied marker).
        newest = self.read_entry(versions[-1]) if versions and versions[-1] not in done.discarded else None
        for txn in self.storage.list_names(f"{self.log_dir}/{STAGING_DIR}"):
            self.storage.delete(self.staging_dir(txn), recursive=True)
            if newest is None or txn != newest.get("txn"):
                done.rolled_back.append(txn)
        return done

    # -- history ----------------------------------------------------------------------------
    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        out = []
        versions, applied = self.listing()
        for v in reversed(versions):
            e = self.read_entry(v)
            if e is None:
                continue  # being created right now, or left by a writer that died doing so
            out.append(history_row(e, v in applied))
            if limit is not None and len(out) >= limit:
                break
        return out


def history_row(entry: Mapping[str, Any], applied: bool) -> dict[str, Any]:
    """One version as history reports it: the entry's metrics plus the counts users ask for."""
    m = entry.get("metrics", {})
    inserted = m.get("numTargetRowsInserted", m.get("numOutputRows", 0))
    return {
        "version": entry["version"],
        "timestamp": entry["timestamp"],
        "operation": entry["operation"],
        "rows_inserted": inserted,
        "rows_updated": m.get("numTargetRowsUpdated", 0),
        "rows_deleted": m.get("numTargetRowsDeleted", 0),
        "files_added": len(entry.get("added", [])),
        "files_removed": len(entry.get("removed", [])),
        "metrics": m,
        "applied": applied,
    }
