"""``vacuum``: delete the files a table keeps past its retention, as a VACUUM version.

Every version that replaces files already deletes the retained folders that fall out of the
table's retention when it commits (journal/retention.py), so a table that merges keeps only
what its policy keeps. ``vacuum`` is for the rest: a table that stopped merging, a policy
made shorter, or a one-off clean-up with a shorter retention than the table's (its
arguments do not change the stored policy, as Delta's ``VACUUM … RETAIN`` does not).

It refuses to delete the files of a version that was current less than ``SAFE_HOURS`` ago
unless forced, as Delta refuses a retention under its safe minimum: a long ``as_of`` read or
a restore that started before it may still be reading them. Like a merge it takes the lock,
finishes an interrupted commit first (which also removes abandoned staging folders), and
commits through the journal: the VACUUM entry names the folders, its apply deletes them,
and a crash at any step leaves them either kept or deleted, recovered like any entry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.utils import AnalysisException

from . import faults, feed_owner
from .errors import MergeCommittedError, MergeSpecError, UnsafeVacuumError
from .journal import DEFAULT_RETENTION, Entry, FileEntry, Journal, Retention, history_row
from .journal.base import BASE_OPERATION, Base
from .journal.entry import FeedExpiry
from .journal.entry import fold as fold_entry
from .journal.layout import iso, parse_iso
from .lean_columns import lean_columns
from .lock import TableLock
from .spec import DEFAULT_LOCK_TIMEOUT_S, Upkeep, lock_timeout_problems, parse_upkeep
from .table import COMMIT_VERSION, TargetTable, describe_table, load_target, sql_name

logger = logging.getLogger("rowmerge")

OPERATION = "VACUUM"
# A version current less than this long ago may still be read by a running as_of or restore.
SAFE_HOURS = 1.0


@dataclass(frozen=True)
class VacuumResult:
    """What a vacuum did (or, as a dry run, would do)."""

    table: str
    version: int | None  # the VACUUM version committed (None: nothing to delete, or a dry run)
    expired: tuple[int, ...]  # the versions whose retained files are (or would be) deleted
    files_deleted: int
    bytes_deleted: int
    oldest_readable: int  # the oldest version as_of and restore can read afterwards
    dry_run: bool = False
    folded: int = 0  # journal entries folded into the base of ``oldest_readable``
    feed_dropped: int = 0  # change-feed versions dropped from the change table
    # a dry run: every path it would delete (retained files, journal files, feed folders)
    files: tuple[str, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None  # a dry run: why the vacuum itself would be refused without force
    journal_bytes: int = 0  # of the journal's files the base stands for (deleted once it commits)
    feed_bytes: int = 0  # of the change-feed versions dropped

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "expired": list(self.expired),
            "files_deleted": self.files_deleted,
            "bytes_deleted": self.bytes_deleted,
            "oldest_readable": self.oldest_readable,
            "folded": self.folded,
            "feed_dropped": self.feed_dropped,
            "dry_run": self.dry_run,
            "files": list(self.files),
            "refused": self.refused,
            "journal_bytes": self.journal_bytes,
            "feed_bytes": self.feed_bytes,
        }

    def summary(self) -> str:
        if not (self.expired or self.folded or self.feed_dropped):
            return (
                f"{self.table}: nothing past retention to delete; versions from "
                f"{self.oldest_readable} on can be read"
            )
        verb = "would delete" if self.dry_run else "deleted"
        at = f" as version {self.version}" if self.version is not None else ""
        parts = []
        if self.expired:
            parts.append(
                f"{self.files_deleted} retained file(s), {self.bytes_deleted} bytes, of "
                f"{len(self.expired)} version(s)"
            )
        if self.feed_dropped:
            parts.append(f"{self.feed_dropped} change-feed version(s)")
        if self.folded:
            parts.append(
                f"{self.folded} journal entries (folded into the base of version {self.oldest_readable})"
            )
        done = " and ".join(parts)
        said = f"{self.table}: {verb} {done}{at}; versions from {self.oldest_readable} on can be read"
        return said + (f". Without force it would be {self.refused}" if self.refused else "")


def vacuum(
    spark: SparkSession,
    table: str,
    retain_versions: int | None = None,
    retain_hours: float | None = None,
    dry_run: bool = False,
    force: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    change_feed_retain_versions: int | None = None,
) -> VacuumResult:
    """Delete the retained files of ``table`` that its retention no longer keeps.

    ``retain_versions`` / ``retain_hours``: keep this much instead of the table's stored
    retention, this once (each defaults to the stored setting); ``change_feed_retain_versions``
    likewise for the change feed: the rows of older versions are dropped from the change
    table (by default every version is kept). ``dry_run``: list what would
    be deleted and its bytes, deleting nothing and taking no lock (and say if the vacuum
    itself would be refused). ``force``: delete files of versions current less than
    SAFE_HOURS ago too. Raises MergeSpecError for bad arguments, UnsafeVacuumError for an
    unforced unsafe retention; the table is left as it was.
    """
    upkeep = _check_arguments(
        retain_versions, retain_hours, change_feed_retain_versions, dry_run, force, lock_timeout_s
    )
    from .run import locate_or_finish, open_journal, recover_locked, storage_errors, table_lock

    with lean_columns(), storage_errors(f"VACUUM of {table}"):
        journal = open_journal(spark, locate_or_finish(spark, table, f"{OPERATION} table"))
        journal.check_placement(table)
        if dry_run:
            target = load_target(spark, table)
            journal.check_bound(target)
            return _vacuum(spark, journal, None, target, upkeep, force)
        with table_lock(journal, table, OPERATION, lock_timeout_s) as lock:
            target = load_target(spark, table)
            if recover_locked(spark, journal, lock, target).rolled_forward:
                target = load_target(spark, table)
            journal.check_bound(target)
            return _vacuum(spark, journal, lock, target, upkeep, force)


def _check_arguments(
    versions: Any, hours: Any, feed_versions: Any, dry_run: Any, force: Any, lock_timeout_s: Any
) -> Upkeep:
    """The retention arguments, checked as a model's config keys are (spec.parse_upkeep)."""
    problems: list[str] = lock_timeout_problems(lock_timeout_s)
    raw = {"retain_versions": versions, "retain_hours": hours, "change_feed_retain_versions": feed_versions}
    upkeep = parse_upkeep(raw, problems)
    for key, value in (("dry_run", dry_run), ("force", force)):
        if not isinstance(value, bool):
            problems.append(f"`{key}` must be true or false, got {value!r}")
    if problems:
        raise MergeSpecError(problems)
    return upkeep


def _vacuum(
    spark: SparkSession,
    journal: Journal,
    lock: TableLock | None,
    target: TargetTable,
    upkeep: Upkeep,
    force: bool,
) -> VacuumResult:
    versions = journal.versions()
    if not versions:
        return VacuumResult(target.name, None, (), 0, 0, 0, dry_run=lock is None)
    entries = journal.all_entries(versions, target.name)
    newest = entries[-1]
    stored = newest.retention
    policy = upkeep.retention(stored) or DEFAULT_RETENTION
    now = journal.commit_time(versions, newest)
    # Retention counts back from the newest version that is not a vacuum's own: a vacuum
    # changes no row and no file, and counting it would make every vacuum push the window on
    # by one, so that vacuums alone, run again and again, would fold and delete every earlier
    # version of a table that no longer merges.
    since = _since_last_change(entries)
    oldest = keep_from(policy, since, now)
    expired = tuple(k for k in journal.retained_versions() if k <= oldest)
    fold = oldest if oldest > entries[0].version else None
    feed, feed_from = _feed_expiry(spark, journal, target, since, policy)
    if not expired and fold is None and feed is None:
        return VacuumResult(target.name, None, (), 0, 0, oldest, dry_run=lock is None)
    refused = (
        _unsafe(entries, target, expired, now, upkeep.retain_versions, upkeep.retain_hours)
        if expired and not force
        else None
    )
    if refused is not None and lock is not None:
        raise UnsafeVacuumError(f"vacuum of {target.name} {refused}")
    dropped = len(feed.versions) if feed is not None else 0
    kept = {k: journal.storage.list_data_files(journal.retained_dir(k)) for k in expired}
    files = sum(len(found) for found in kept.values())
    size = sum(f.size for found in kept.values() for f in found)
    # what else goes: the journal's files the base stands for, the feed's version folders
    doomed = journal.folded_by(fold) if fold is not None else {}
    journal_files = [f"{journal.log_dir}/{n}" for names in doomed.values() for n in sorted(names)]
    journal_bytes = sum(found.size for found in map(journal.storage.status, journal_files) if found)
    feed_folders = [f"{feed.location}/{COMMIT_VERSION}={k}" for k in feed.versions] if feed else []
    feed_bytes = sum(f.size for folder in feed_folders for f in journal.storage.list_data_files(folder))
    # the entries the base stands for from now on (the base before it is not one)
    folded = sum(
        1 for e in entries if fold is not None and e.version <= fold and e.operation != BASE_OPERATION
    )
    if lock is None:
        # every path it would delete: retained files, then the journal's files the base
        # would stand for, then the change table's version folders
        paths = (*(f.path for k in expired for f in kept[k]), *journal_files, *feed_folders)
        return VacuumResult(
            target.name, None, expired, files, size, oldest, True, folded, dropped, paths,
            refused=refused, journal_bytes=journal_bytes, feed_bytes=feed_bytes,
        )  # fmt: skip
    number = journal.next_version(versions, target.name)
    base = None
    if fold is not None:
        made = folded_base(journal, entries, fold, number)
        base = (fold, journal.write_base(made))
        faults.fault_point("vacuum_base")
    metrics = {
        "numVersionsExpired": len(expired),
        "numFilesDeleted": files,
        "numBytesDeleted": size,
        "numVersionsFolded": folded,
    }
    if policy.feed_versions is not None:
        metrics.update(numFeedVersionsDropped=dropped, feedKeptFrom=feed_from)
    entry = Entry(
        version=number,
        table=target.qualified_name,
        operation=OPERATION,
        timestamp=iso(now),
        added=(),
        removed=(),
        metrics=metrics,
        cluster_by=newest.cluster_by,
        retention=stored,
        expired=expired,
        base=base,
        feed_expired=feed,
    )
    lock.check()
    journal.check(entry, target, recovering=False)
    journal.commit(entry)
    faults.fault_point("vacuum_entry")
    try:
        journal.apply(spark, entry, target, steps="vacuum_")
    except Exception as exc:
        raise MergeCommittedError(target.name, number, exc) from exc
    done = VacuumResult(
        target.name, number, expired, files, size, oldest, False, folded, dropped, (), metrics,
        journal_bytes=journal_bytes, feed_bytes=feed_bytes,
    )  # fmt: skip
    logger.info("rowmerge: %s", done.summary())
    return done


def _since_last_change(entries: Sequence[Entry]) -> Sequence[Entry]:
    """``entries`` up to the newest one that is not a VACUUM (all of them if there is none)."""
    last = max((i for i, e in enumerate(entries) if e.operation != OPERATION), default=len(entries) - 1)
    return entries[: last + 1]


def _feed_expiry(
    spark: SparkSession, journal: Journal, target: TargetTable, entries: Sequence[Entry], policy: Retention
) -> tuple[FeedExpiry | None, int]:
    """The change-feed versions ``policy`` no longer keeps (in the change table the model
    writes now), and the oldest version it keeps (0: every one)."""
    if policy.feed_versions is None:
        return None, 0
    cutoff = max(0, entries[-1].version - policy.feed_versions + 1)
    written = next((e.cdf for e in reversed(entries) if e.cdf is not None), None)
    base = journal.base()
    name = written.table if written else (base.feed_table if base is not None else None)
    if name is None:
        return None, cutoff
    # Where the catalog has it now, never where an entry wrote it: the change table (or the
    # whole warehouse) may have moved since, and that folder may be another table's copy.
    try:
        location = journal.storage.qualify(describe_table(spark, sql_name(name)).location.rstrip("/"))
    except AnalysisException:
        return None, cutoff  # dropped: nothing of it to expire
    feed_owner.check_owner(journal.storage, location, name, target.name, target.name_parts)
    prefix = f"{COMMIT_VERSION}="
    found = sorted(
        int(n[len(prefix) :])
        for n in journal.storage.list_names(location)
        if n.startswith(prefix) and n[len(prefix) :].isdigit()
    )
    old = tuple(k for k in found if k < cutoff)
    return (FeedExpiry(name, location, old) if old else None), cutoff


def keep_from(policy: Retention, entries: Sequence[Entry], now: datetime) -> int:
    """The oldest version ``policy`` still keeps readable at ``now``, given every entry:
    the newest ``versions`` before the newest one, and every version current less than
    ``hours`` ago (the one current ``hours`` ago included); the newest alone when off."""
    newest = entries[-1].version
    by_hours = newest
    if policy.hours > 0:
        cutoff = now - timedelta(hours=policy.hours)
        then = [e.version for e in entries if parse_iso(e.timestamp) <= cutoff]
        by_hours = then[-1] if then else entries[0].version
    return max(entries[0].version, min(newest - policy.versions, by_hours))


def folded_base(journal: Journal, entries: Sequence[Entry], version: int, vacuum_version: int) -> Base:
    """The base of ``version``: ``entries`` up to it folded (the first one the journal's
    current base, if it has one)."""
    folded = [e for e in entries if e.version <= version]
    files: dict[str, FileEntry] = {}
    for e in folded:
        fold_entry(files, e)
    previous = journal.base()
    created = previous.created if previous is not None else tuple(f.path for f in folded[0].added)
    feed_tables: list[str] = []
    feed_table = None
    found_writer = False
    for e in reversed(folded):
        if e.cdf is not None and e.cdf.table not in feed_tables:
            feed_tables.append(e.cdf.table)
        if not found_writer and e.operation in ("MERGE", "REPLACE TABLE", "RESTORE") and e.txn is not None:
            feed_table, found_writer = (e.cdf.table if e.cdf is not None else None), True
    if previous is not None:
        feed_tables += [t for t in previous.feed_tables if t not in feed_tables]
        if not found_writer:
            feed_table = previous.feed_table
    rows = sum(int(h["rows_inserted"]) - int(h["rows_deleted"]) for h in map(_counts, folded))
    feed_kept_from = max(_feed_kept_from(e) for e in folded)
    last = folded[-1]
    return Base(
        version=version,
        vacuum_version=vacuum_version,
        table=last.table,
        timestamp=last.timestamp,
        files=tuple(files[p] for p in sorted(files)),
        created=tuple(p for p in created if p in files),
        first=previous.first if previous is not None else folded[0].version,
        first_timestamp=previous.first_timestamp if previous is not None else folded[0].timestamp,
        folded=version - (previous.first if previous is not None else folded[0].version) + 1,
        rows=max(rows, 0),
        cluster_by=last.cluster_by,
        retention=last.retention,
        feed_tables=tuple(feed_tables),
        feed_table=feed_table,
        feed_kept_from=feed_kept_from,
        feed_skipped=tuple(
            sorted(
                {e.version for e in folded if e.feed_skipped}
                | set(previous.feed_skipped if previous is not None else ())
            )
        ),
    )


def _feed_kept_from(entry: Entry) -> int:
    """The oldest change-feed version a VACUUM (or a base) says is kept (0: every one)."""
    value = entry.metrics.get("feedKeptFrom", 0) if entry.operation in (OPERATION, BASE_OPERATION) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _counts(entry: Entry) -> dict[str, Any]:
    return history_row(entry, True)


def _unsafe(
    entries: Sequence[Entry],
    target: TargetTable,
    expired: Sequence[int],
    now: Any,
    retain_versions: int | None,
    retain_hours: float | None,
) -> str | None:
    """Why deleting ``expired`` is refused, if it would delete the files of a version that was
    current less than SAFE_HOURS ago (``entries``: every entry the journal holds; a folder whose
    entry is not among them is one ``expiring`` would delete anyway); None if it is safe."""
    committed = {e.version: parse_iso(e.timestamp) for e in entries}
    recent = [k - 1 for k in expired if k in committed and committed[k] > now - timedelta(hours=SAFE_HOURS)]
    if not recent:
        return None
    given = ", ".join(
        f"`{key}` = {value!r}"
        for key, value in (("retain_versions", retain_versions), ("retain_hours", retain_hours))
        if value is not None
    )
    return (
        f"refused: it would delete the files of version(s) {', '.join(map(str, recent[:5]))}, "
        f"current less than {SAFE_HOURS:g} hour(s) ago ({given or 'the table retention'}); a "
        "running as_of read or restore may still be reading them. Keep `retain_hours` at 1 or "
        "more, or pass force=True (dbt: `force: true`) to delete them anyway. Nothing was deleted."
    )
