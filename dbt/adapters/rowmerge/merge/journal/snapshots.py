"""Any version's files, and where each of them lives now (retention.py).

A file that version ``k`` replaced lives in ``retained/<k>/`` while retention keeps it; a file
a later version brought back (a restore) lives in the table folder again. So where a file of
version ``v`` is now follows from the entries alone: in the table if the newest version still
has it, else in the folder of the last version that removed it — if that version retained it
and the folder is still there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from .. import calls
from ..errors import JournalError
from .base import BASE_OPERATION
from .checkpoint import ENTRY_READ_THREADS, Checkpoints
from .entry import Entry, FileEntry, fold
from .layout import parse_iso


@dataclass(frozen=True)
class Snapshot:
    """The files of one version: each as the version had it, and where it is now."""

    version: int
    timestamp: str
    files: tuple[tuple[FileEntry, str], ...]


class Snapshots(Checkpoints):
    """Reading the table as of any version its journal can still describe."""

    def all_entries(self, versions: Sequence[int], table: str) -> list[Entry]:
        """Every entry of ``versions``, in order; a JournalError for one that cannot be read
        (a version's files cannot be told without every entry before it)."""
        with ThreadPoolExecutor(max_workers=ENTRY_READ_THREADS) as pool:
            return list(pool.map(calls.joined(lambda v: self.entry(v, table)), versions))

    def version_at(self, entries: Sequence[Entry], when: datetime, table: str) -> int:
        """The newest version committed at or before ``when`` (an aware datetime)."""
        found = [e.version for e in entries if parse_iso(e.timestamp) <= when]
        if not found:
            first = entries[0]
            raise JournalError(
                f"{table} has no version at or before {when.isoformat()}: its oldest version, "
                f"{first.version}, was committed at {first.timestamp}. Nothing was read."
            )
        return found[-1]

    def snapshot_of(
        self, version: int, entries: Sequence[Entry], applied: Collection[int], table: str
    ) -> Snapshot:
        """The files of ``version`` and where each is now, once every entry is applied (see
        as_of.py for one that is not yet); a JournalError naming the oldest version that can
        be read when one of them is gone."""
        versions = [e.version for e in entries]
        if versions and entries[0].operation == BASE_OPERATION and version < versions[0]:
            raise JournalError(
                f"Version {version} of {table} can no longer be read: a vacuum folded the versions "
                f"before {versions[0]} (past the table's retention). Every version from {versions[0]} "
                "on can be read. Nothing was read."
            )
        if version not in versions:
            newest = versions[-1] if versions else 0
            raise JournalError(
                f"{table} has no version {version}: its versions are {versions[0] if versions else 0}"
                f" to {newest}. Nothing was read."
            )
        for e in entries:
            if e.version > version and (e.operation == "REBIND" or e.catalog is not None):
                what = (
                    f"the table was rebound ({e.reason or 'renamed'}; its files' paths changed)"
                    if e.operation == "REBIND"
                    else "a full refresh changed its columns, partitioning or format"
                )
                raise JournalError(
                    f"Version {version} of {table} cannot be read: at version {e.version} {what}, "
                    f"and versions before that are not readable through the table as it is now. "
                    f"Versions {e.version} and later can be. Nothing was read."
                )
        at: dict[str, FileEntry] = {}
        now: dict[str, FileEntry] = {}
        # path -> (the last version that removed it, whether that version kept it)
        removed_by: dict[str, tuple[int, bool]] = {}
        # retained folders deleted (or to be deleted, by an entry not applied yet)
        expired = {k for e in entries for k in e.expired}
        for e in entries:
            fold(now, e)
            if e.version <= version:
                fold(at, e)
            # an entry not applied yet has not moved its files anywhere: none is lost
            kept = (e.retains or e.version not in applied) and e.version not in expired
            for f in e.removed:
                removed_by[f.path] = (e.version, kept)
        lost = [k for path, (k, kept) in removed_by.items() if not kept and path not in now]
        if any(path not in now and not removed_by[path][1] for path in at):
            raise JournalError(
                f"Version {version} of {table} can no longer be read: files it holds were deleted "
                f"when a later version replaced them (retention was off, or vacuum expired them). "
                f"Every version from {max(lost)} on can be read. Nothing was read."
            )
        files = tuple(
            (f, path if path in now else self.retained_path(removed_by[path][0], path))
            for path, f in sorted(at.items())
        )
        return Snapshot(version, entries[versions.index(version)].timestamp, files)
