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
from datetime import timedelta
from typing import Any

from pyspark.sql import SparkSession

from . import faults
from .callsites import without_call_sites
from .errors import MergeCommittedError, MergeSpecError
from .journal import DEFAULT_RETENTION, Entry, Journal, chosen_retention
from .journal.layout import iso, parse_iso
from .lock import TableLock
from .spec import DEFAULT_LOCK_TIMEOUT_S, Upkeep, parse_upkeep
from .table import TargetTable, load_target

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
    files: tuple[str, ...] = ()  # a dry run: every file it would delete
    metrics: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "expired": list(self.expired),
            "files_deleted": self.files_deleted,
            "bytes_deleted": self.bytes_deleted,
            "oldest_readable": self.oldest_readable,
            "dry_run": self.dry_run,
            "files": list(self.files),
        }

    def summary(self) -> str:
        if not self.expired:
            return (
                f"{self.table}: nothing past retention to delete; versions from "
                f"{self.oldest_readable} on can be read"
            )
        verb = "would delete" if self.dry_run else "deleted"
        at = f" as version {self.version}" if self.version is not None else ""
        return (
            f"{self.table}: {verb} {self.files_deleted} retained file(s), {self.bytes_deleted} bytes, "
            f"of {len(self.expired)} version(s){at}; versions from {self.oldest_readable} on can be read"
        )


def vacuum(
    spark: SparkSession,
    table: str,
    retain_versions: int | None = None,
    retain_hours: float | None = None,
    dry_run: bool = False,
    force: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> VacuumResult:
    """Delete the retained files of ``table`` that its retention no longer keeps.

    ``retain_versions`` / ``retain_hours``: keep this much instead of the table's stored
    retention, this once (each defaults to the stored setting). ``dry_run``: list what would
    be deleted and its bytes, deleting nothing and taking no lock. ``force``: delete files of
    versions current less than SAFE_HOURS ago too. Raises MergeSpecError for bad arguments
    or an unforced unsafe retention; the table is left as it was.
    """
    upkeep = _check_arguments(retain_versions, retain_hours, dry_run, force)
    retain_versions, retain_hours = upkeep.retain_versions, upkeep.retain_hours
    from .run import load_or_finish, open_journal, recover_locked, storage_errors, table_lock

    with without_call_sites(), storage_errors(f"VACUUM of {table}"):
        load_or_finish(spark, table)
        journal = open_journal(spark, load_target(spark, table).location)
        journal.check_placement(table)
        if dry_run:
            target = load_target(spark, table)
            journal.check_bound(target)
            return _vacuum(spark, journal, None, target, retain_versions, retain_hours, force)
        with table_lock(journal, table, OPERATION, lock_timeout_s) as lock:
            target = load_target(spark, table)
            if recover_locked(spark, journal, lock, target).rolled_forward:
                target = load_target(spark, table)
            journal.check_bound(target)
            return _vacuum(spark, journal, lock, target, retain_versions, retain_hours, force)


def _check_arguments(versions: Any, hours: Any, dry_run: Any, force: Any) -> Upkeep:
    """The retention arguments, checked as a model's config keys are (spec.parse_upkeep)."""
    problems: list[str] = []
    upkeep = parse_upkeep({"retain_versions": versions, "retain_hours": hours}, problems)
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
    retain_versions: int | None,
    retain_hours: float | None,
    force: bool,
) -> VacuumResult:
    versions = journal.versions()
    newest = journal.newest(versions)
    if newest is None:
        return VacuumResult(target.name, None, (), 0, 0, 0, dry_run=lock is None)
    stored = newest.retention
    policy = chosen_retention(retain_versions, retain_hours, stored) or DEFAULT_RETENTION
    now = journal.commit_time(versions, newest)
    expired = journal.expiring(policy, newest.version, now)
    if not expired:
        oldest = _oldest_readable(journal, versions, newest.version)
        return VacuumResult(target.name, None, (), 0, 0, oldest, dry_run=lock is None)
    if not force:
        _check_safe(journal, target, expired, now, retain_versions, retain_hours)
    kept = {k: journal.storage.list_data_files(journal.retained_dir(k)) for k in expired}
    files = sum(len(found) for found in kept.values())
    size = sum(f.size for found in kept.values() for f in found)
    oldest = max(max(expired), _oldest_readable(journal, versions, newest.version))
    if lock is None:
        paths = tuple(f.path for k in expired for f in kept[k])
        return VacuumResult(target.name, None, expired, files, size, oldest, True, paths)
    number = journal.next_version(versions, target.name)
    metrics = {"numVersionsExpired": len(expired), "numFilesDeleted": files, "numBytesDeleted": size}
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
    )
    lock.check()
    journal.check(entry, target, recovering=False)
    journal.commit(entry)
    faults.fault_point("vacuum_entry")
    try:
        journal.apply(spark, entry, target, steps="vacuum_")
    except Exception as exc:
        raise MergeCommittedError(target.name, number, exc) from exc
    done = VacuumResult(target.name, number, expired, files, size, oldest, False, (), metrics)
    logger.info("rowmerge: %s", done.summary())
    return done


def _check_safe(
    journal: Journal,
    target: TargetTable,
    expired: Sequence[int],
    now: Any,
    retain_versions: int | None,
    retain_hours: float | None,
) -> None:
    """Refuse to delete the files of a version that was current less than SAFE_HOURS ago."""
    recent = []
    for k in expired:
        try:
            committed = parse_iso(journal.read_entry(k).timestamp)
        except Exception:  # noqa: BLE001 - an unreadable entry: expiring() kept its folder
            continue
        if committed > now - timedelta(hours=SAFE_HOURS):
            recent.append(k - 1)
    if not recent:
        return
    given = ", ".join(
        f"`{key}` = {value!r}"
        for key, value in (("retain_versions", retain_versions), ("retain_hours", retain_hours))
        if value is not None
    )
    raise MergeSpecError(
        [
            f"vacuum of {target.name} refused: it would delete the files of version(s) "
            f"{', '.join(map(str, recent[:5]))}, current less than {SAFE_HOURS:g} hour(s) ago "
            f"({given or 'the table retention'}); a running as_of read or restore may still be "
            "reading them. Keep `retain_hours` at 1 or more, or pass force=True "
            "(dbt: `force: true`) to delete them anyway."
        ]
    )


def _oldest_readable(journal: Journal, versions: Sequence[int], newest: int) -> int:
    """The oldest version whose files are all still kept (before any new expiry): the one
    after the newest version whose replacing version's folder is gone or was never kept."""
    kept = set(journal.retained_versions())
    oldest = newest
    for v in reversed([v for v in versions if v < newest]):
        if v + 1 not in kept and _replaced_files(journal, v + 1):
            break
        oldest = v
    return oldest


def _replaced_files(journal: Journal, version: int) -> bool:
    """Whether ``version`` replaced any file (a version that replaced none keeps its
    predecessor readable without a retained folder)."""
    try:
        return bool(journal.read_entry(version).removed)
    except Exception:  # noqa: BLE001 - an unreadable entry: assume it did
        return True
