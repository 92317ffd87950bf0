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

from ..errors import JournalError
from .checkpoint import ENTRY_READ_THREADS, Checkpoints
from .entry import Entry, FileEntry, fold
from .layout import RETAINED_DIR, VERSION_DIGITS, parse_iso


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
            return list(pool.map(lambda v: self.entry(v, table), versions))

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

    def lost_before(self, entries: Sequence[Entry], applied: Collection[int]) -> int:
        """The oldest version whose files can all still be found: every version before the
        newest one that replaced files without keeping them (retention off, or expired) had
        some of its files deleted. (An entry not applied yet keeps them where they are.)"""
        kept = set(self.storage.list_names(f"{self.log_dir}/{RETAINED_DIR}"))
        oldest = entries[0].version if entries else 0
        for e in entries:
            if not e.removed or (e.retains and e.version not in applied):
                continue
            if not (e.retains and f"{e.version:0{VERSION_DIGITS}d}" in kept):
                oldest = max(oldest, e.version)
        return oldest

    def snapshot_of(
        self, version: int, entries: Sequence[Entry], applied: Collection[int], table: str
    ) -> Snapshot:
        """The files of ``version`` and where each is now, once every entry is applied (see
        as_of.py for one that is not yet); a JournalError naming the oldest version that can
        be read when one of them is gone."""
        versions = [e.version for e in entries]
        if version not in versions:
            newest = versions[-1] if versions else 0
            raise JournalError(
                f"{table} has no version {version}: its versions are {versions[0] if versions else 0}"
                f" to {newest}. Nothing was read."
            )
        for e in entries:
            if e.version > version and (e.operation == "REBIND" or e.catalog is not None):
                what = (
                    "the table was renamed (its files moved with its folder)"
                    if e.operation == "REBIND"
                    else "a full refresh changed its columns, partitioning or format"
                )
                raise JournalError(
                    f"Version {version} of {table} cannot be read: at version {e.version} {what}, "
                    f"and versions before that are not readable through the table as it is now. "
                    f"Versions {e.version} and later can be. Nothing was read."
                )
        oldest = self.lost_before(entries, applied)
        if version < oldest:
            raise JournalError(
                f"Version {version} of {table} can no longer be read: files it holds were deleted "
                f"when a later version replaced them (retention was off, or vacuum expired them). "
                f"The oldest version that can be read is {oldest}. Nothing was read."
            )
        at: dict[str, FileEntry] = {}
        now: dict[str, FileEntry] = {}
        removed_by: dict[str, int] = {}
        for e in entries:
            fold(now, e)
            if e.version <= version:
                fold(at, e)
            for f in e.removed:
                removed_by[f.path] = e.version
        files = tuple(
            (f, path if path in now else self.retained_path(removed_by[path], path))
            for path, f in sorted(at.items())
        )
        return Snapshot(version, entries[versions.index(version)].timestamp, files)
