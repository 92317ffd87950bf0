"""Reading a journal: its listing, its entries, the next commit's time, and history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..errors import JournalError
from .base import Base, sha256
from .entry import Entry, EntryInvalid, EntryTooNew, history_row, unreadable_row
from .layout import (
    APPLIED_SUFFIX,
    BASE_SUFFIX,
    ENTRY_SUFFIX,
    LOG_NAME,
    MAX_VERSION,
    RETAINED_DIR,
    VERSION_DIGITS,
    JournalFiles,
    parse_iso,
    utc_now,
)


class LogReader(JournalFiles):
    """What any reader of a journal may do: nothing here writes."""

    def listing(self) -> tuple[list[int], set[int]]:
        """(entry versions, applied versions) from one listing of the log folder."""
        entries, applied, _ = self.scan_log()
        return entries, applied

    def scan_log(self) -> tuple[list[int], set[int], list[str]]:
        """(entry versions, applied versions, stray names) from one listing of the log folder.

        A stray is a file named like a journal file that no journal writes: a version of
        another width than the journal's (``7.json``), or one past :data:`MAX_VERSION`. It is
        never read as an entry (its version would not name its file); recovery stops on it.

        After a vacuum folded the journal, its base (base.py) is the oldest version, applied,
        and the entries it folds are not versions any more (a vacuum deletes them once it
        has committed the base; until then they are left alone).
        """
        entries, applied, strays, bases = [], set(), [], []
        for n in self.storage.list_names(self.log_dir):
            found = LOG_NAME.match(n)
            if not found:
                continue
            head, suffix = found.groups()
            if len(head) != VERSION_DIGITS or int(head) > MAX_VERSION:
                strays.append(n)
            elif suffix == ENTRY_SUFFIX:
                entries.append(int(head))
            elif suffix == APPLIED_SUFFIX:
                applied.add(int(head))
            elif suffix == BASE_SUFFIX:
                bases.append(int(head))
        entries.sort()
        base = self._committed_base(bases, entries)
        self._base = base
        if base is None:
            return entries, applied, strays
        kept = [v for v in entries if v > base.version]
        return [base.version, *kept], {v for v in applied if v > base.version} | {base.version}, strays

    def base(self) -> Base | None:
        """The base the journal starts from (None: it was never folded)."""
        if not hasattr(self, "_base"):
            self.scan_log()
        return self._base

    def _committed_base(self, bases: Sequence[int], entries: Sequence[int]) -> Base | None:
        """The newest base that a VACUUM entry commits: it names the base's SHA-256, and the
        base names it. One that no entry commits is a leftover of a vacuum that did not get
        to its commit point, and is ignored. Bases are read once per journal object."""
        cache: dict[int, tuple[str, Base] | None] = self.__dict__.setdefault("_bases", {})
        present = set(entries)
        for b in sorted(bases, reverse=True):
            if b not in cache:
                try:
                    text = self.storage.read_text(self.base_path(b))
                    cache[b] = (text, Base.parse(text, b))
                except Exception:  # noqa: BLE001 - a half-written leftover; judged below
                    cache[b] = None
            found = cache[b]
            w = found[1].vacuum_version if found is not None else None
            if found is None or w not in present:
                continue
            try:
                vacuum = self._read_file_entry(w)[1]
            except (OSError, EntryInvalid):
                continue
            if vacuum.operation == "VACUUM" and vacuum.base == (b, sha256(found[0])):
                return found[1]
        return None

    def retained_versions(self) -> list[int]:
        """The versions whose replaced files are kept in ``retained/<version>/`` now."""
        names = self.storage.list_names(f"{self.log_dir}/{RETAINED_DIR}")
        return sorted(int(n) for n in names if n.isdigit() and len(n) == VERSION_DIGITS)

    def versions(self) -> list[int]:
        return self.listing()[0]

    def current_version(self) -> int:
        """The newest committed version (0 for a table without a journal: the table as found)."""
        versions = self.versions()
        return versions[-1] if versions else 0

    def read_entry(self, version: int) -> Entry:
        """The entry of ``version``; EntryInvalid if it cannot be read as one."""
        return self._read_entry_text(version)[1]

    def _read_entry_text(self, version: int) -> tuple[str, Entry]:
        """The text of ``version``'s entry and the entry it holds (a statistics checkpoint names
        the text's SHA-256); for the base's version, the base's."""
        base = self.base()
        if base is not None and version == base.version:
            text = self.__dict__["_bases"][version][0]
            return text, base.as_entry()
        return self._read_file_entry(version)

    def _read_file_entry(self, version: int) -> tuple[str, Entry]:
        """The text of the entry file of ``version`` and the entry it holds."""
        try:
            text = self.storage.read_text(self.entry_path(version))
        except UnicodeDecodeError as exc:
            raise EntryInvalid(f"is not UTF-8 text ({exc})") from None
        return text, Entry.parse(text, version)

    def entry(self, version: int, table: str) -> Entry:
        """The entry of ``version``, or a JournalError that tells the operator what to do."""
        try:
            return self.read_entry(version)
        except EntryTooNew as exc:
            raise JournalError(
                f"The journal of {table} cannot be read by this release: version {version}'s entry "
                f"{self.entry_path(version)} {exc}. Upgrade dbt-rowmerge to the release that wrote "
                "it (every writer of a table must run the same release, or a newer one). Nothing "
                "was changed."
            ) from None
        except EntryInvalid as exc:
            raise self._damaged(version, table, str(exc)) from None

    def _damaged(self, version: int, table: str, reason: str) -> JournalError:
        return JournalError(
            f"The journal of {table} cannot be trusted: version {version}'s entry "
            f"{self.entry_path(version)} {reason}. Entries are written whole, so this one was "
            "changed afterwards (by hand, or by a tool that edits files in place). "
            "row_level_merge stops here rather than guess what that commit did: restore the "
            "entry from a backup, or rebuild the table with `dbt run --full-refresh` (which "
            "starts a new journal). Nothing was changed."
        )

    def newest(self, versions: Sequence[int]) -> Entry | None:
        """The entry of the newest of ``versions`` (None: no version, or one that cannot be
        read, which stops recovery or the commit anyway)."""
        if not versions:
            return None
        try:
            return self.read_entry(versions[-1])
        except EntryInvalid:
            return None

    def commit_time(self, versions: Sequence[int], newest: Entry | None = None) -> datetime:
        """The timestamp the next commit takes: now, but never before the newest version's
        (a clock set back must not make commit timestamps go back: consumers select change
        rows by time, and ``as_of`` by timestamp picks the last version at or before it).
        ``newest``: that version's entry, if the caller has read it."""
        now = utc_now()
        entry = newest if newest is not None else self.newest(versions)
        if entry is None:
            return now
        try:
            last = parse_iso(entry.timestamp)
        except ValueError:
            return now  # a damaged newest entry stops recovery or the commit anyway
        return max(now, last + timedelta(milliseconds=1))

    def feed_tables(self) -> list[str]:
        """Every change table an entry of this journal wrote rows to, newest first."""
        out: list[str] = []
        for v in reversed(self.versions()):
            try:
                cdf = self.read_entry(v).cdf
            except EntryInvalid:
                continue
            if cdf is not None and cdf.table not in out:
                out.append(cdf.table)
        base = self.base()
        out += [name for name in (base.feed_tables if base else ()) if name not in out]
        return out

    def created_paths(self) -> frozenset[str]:
        """The files version 0 found in the table (compaction leaves them alone while they
        are idle); those still in the table, once a vacuum folded version 0 into the base."""
        base = self.base()
        if base is not None:
            return frozenset(base.created)
        return frozenset(f.path for f in self.read_entry(0).added)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        out = []
        versions, applied = self.listing()
        for v in reversed(versions):
            try:
                out.append(history_row(self.read_entry(v), v in applied))
            except EntryInvalid as exc:
                out.append(unreadable_row(v, v in applied, str(exc)))
            if limit is not None and len(out) >= limit:
                break
        return out
