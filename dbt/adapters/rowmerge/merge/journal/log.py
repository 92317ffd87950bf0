"""Reading a journal: its listing, its entries, the next commit's time, and history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..errors import JournalError
from .entry import Entry, EntryInvalid, EntryTooNew, history_row, unreadable_row
from .layout import (
    APPLIED_SUFFIX,
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
        """
        entries, applied, strays = [], set(), []
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
        return sorted(entries), applied, strays

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
        the text's SHA-256)."""
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
        return out

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
