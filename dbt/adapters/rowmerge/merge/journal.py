"""Phase 9: commit through a journal under the table location, and recover from crashes.

Layout (``_``-prefixed, so Spark, Hive, Trino and DuckDB never read it as data)::

    <table>/_rowmerge_log/staging/<txn>/data/...   rewritten and inserted files, before the commit
    <table>/_rowmerge_log/staging/<txn>/cdf/...    change-feed files, before the commit
    <table>/_rowmerge_log/<version>.json           the entry; creating it (create-if-absent) commits
    <table>/_rowmerge_log/<version>.applied        written once every step of the entry is done
    <table>/_rowmerge_log/<version>.stats.json     file statistics as of that version (a cache)
    <table>/_rowmerge_log/lock/                    the writer lease (see ``lock``)

Version 0 describes the table as dbt created it (or as the first merge found it). A merge
plans version ``read + 1`` while holding the lock and creates exactly that entry, so a writer
that lost its lock cannot commit over a newer version. Before the entry is created, the
entry is validated exactly as recovery will validate it, so nothing that can be checked is
left to fail after the commit point. After it, every step is idempotent and they run in an
order that never hides a row from readers: add columns if absent, move each staged file
into place if still staged, add new partitions if absent, then delete each replaced file if
still there, then mark the entry applied. ``recover`` replays an unapplied entry any number
of times; staging without an entry is rolled back.

The journal owns its entries end to end: it hands a merge its staging folders
(:meth:`Journal.stage`), builds the entry from what the data phases staged there
(:meth:`Journal.merge_entry`, :meth:`Journal.initial_entry`), and serializes, parses and
validates it. It takes plain values from those phases and imports none of them, so the
layout, the entry format and the checks recovery relies on live in this one module.

Entries are published whole (``Storage.create_if_absent``), so an entry that cannot be read
or does not describe a valid commit of this table was damaged after it was written. Recovery
never guesses: it stops with a :class:`JournalError` that says what to do, and never
discards the entry (its commit may be partly applied, and dropping it would let the next
merge reuse its version). It also never follows a path outside the table's (or its change
table's) location, and checks that every staged file is present before it moves any.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from pyspark.sql.utils import AnalysisException

from .errors import ConcurrentMergeError, JournalError, StorageError, UnsupportedTableError, spark_reason
from .filestats import FileSummary, indexed_columns, parse_summary, summarize_files
from .lock import LOCK_DIR
from .sqltext import check_path_safe, parse_name, same_table
from .storage import FileInfo, Storage, is_hidden
from .table import (
    COMMIT_VERSION,
    TargetTable,
    add_columns,
    column_ddl,
    create_table_at,
    describe_table,
    partition_values,
    register_partitions,
    sql_name,
)

logger = logging.getLogger("rowmerge")

LOG_DIR = "_rowmerge_log"
STAGING_DIR = "staging"
DATA_DIR = "data"
CDF_DIR = "cdf"
ENTRY_SUFFIX = ".json"
ENTRY_READ_THREADS = 8  # entries read at once when gathering file statistics
# Every CHECKPOINT_INTERVAL versions, the file statistics folded from entries 0..v are saved
# (see Journal.file_summaries), so a merge reads one checkpoint and the entries after it, not
# every entry the table ever had.
CHECKPOINT_SUFFIX = ".stats.json"
CHECKPOINT_INTERVAL = 20
CHECKPOINT_FORMAT = 1
APPLIED_SUFFIX = ".applied"
VERSION_DIGITS = 20
# A version is a change feed's _commit_version (BIGINT): the largest one a commit may take.
MAX_VERSION = 2**63 - 1
# Format 2 is format 1 plus `catalog` (a full refresh that registers the table again,
# reshape.py); only such entries are written as 2, so an older release refuses them instead of
# applying one as a plain REPLACE TABLE into the old catalog entry, and reads every other one.
FIRST_ENTRY_FORMAT = 1
ENTRY_FORMAT = 2
OPERATIONS = ("MERGE", "CREATE TABLE", "REPLACE TABLE", "CONVERT", "FENCE", "REBIND")
# Names in the log folder: <20 digits><suffix>; a digit-named file of another width was not
# written by a journal, and recovery stops on it instead of guessing (see Journal.scan_log).
_LOG_NAME = re.compile(r"^(\d+)(\.json|\.applied|\.stats\.json)$")
_TXN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]*$")

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


def utc_now() -> datetime:
    """Now, at millisecond precision (what the journal stores and the change feed repeats)."""
    now = datetime.now(timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def parse_iso(text: str) -> datetime:
    """A journal timestamp (written by :func:`_iso`) as an aware UTC datetime."""
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds")


def _spec_digest(raw: Mapping[str, Any]) -> str:
    """A short fingerprint of the merge spec: which spec produced an entry, without storing it."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _new_txn() -> str:
    """A staging folder name: sortable by time, unique without coordination."""
    return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"


# -- what a merge hands the journal ---------------------------------------------------------


@dataclass(frozen=True)
class Staging:
    """One merge's staging folder: where its files wait, invisible to readers, until the commit.

    Only the journal knows the layout (recovery validates entries against it), so the data
    phases are handed these folders rather than building paths of their own.
    """

    txn: str
    dir: str  # qualified: <table>/_rowmerge_log/staging/<txn>

    @property
    def data_dir(self) -> str:
        """The target's new files, in the table's partition layout."""
        return f"{self.dir}/{DATA_DIR}"

    @property
    def cdf_dir(self) -> str:
        """The change-feed files (one flat folder: the commit moves them into its partition)."""
        return f"{self.dir}/{CDF_DIR}"


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


# -- the entry ------------------------------------------------------------------------------


class StepNotDone(OSError):
    """A step of applying a committed entry did not happen (the storage refused it): the entry
    stays unapplied, and recovery tries again."""


def _ancestors(location: str) -> list[str]:
    """The folders above ``location`` (a qualified URI), nearest first, up to its root."""
    scheme, sep, rest = location.partition(":")
    if not sep:
        return []
    if rest.startswith("//"):
        authority, _, path = rest[2:].partition("/")
        prefix = f"{scheme}://{authority}"
    else:
        prefix, path = f"{scheme}:", rest
    parts = [p for p in path.split("/") if p]
    return [f"{prefix}/{'/'.join(parts[:i])}" for i in range(len(parts) - 1, -1, -1)]


class EntryInvalid(ValueError):
    """An entry's JSON does not describe a commit (the reason is the message)."""


class EntryTooNew(EntryInvalid):
    """An entry in a format newer than this release reads: not damage, an older reader.

    Told apart from damage so the message asks for an upgrade, not a restore from backup.
    """


@dataclass(frozen=True)
class FileEntry:
    """One data file of a commit: where it ends up, and where it was staged (if it was)."""

    path: str  # qualified, final
    size: int
    rows: int | None
    staged: str | None = None  # None: the file was already in place (version 0, fences)
    # Column statistics (filestats.FileSummary.to_json), like a Delta `add` action's `stats`:
    # only an aid to skipping, so a reader that finds them odd ignores them.
    stats: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "size": self.size, "rows": self.rows}
        if self.staged is not None:
            out = {"staged": self.staged, **out}
        if self.stats is not None:
            out["stats"] = self.stats
        return out


@dataclass(frozen=True)
class FeedFiles:
    """The change-feed part of a commit: files for one ``_commit_version`` partition."""

    table: str  # the change table's name, as the spec gave it
    location: str  # qualified
    partition: str  # e.g. _commit_version=3
    columns: dict[str, Any]  # the feed's schema (StructType JSON)
    files: tuple[FileEntry, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "location": self.location,
            "partition": self.partition,
            "columns": self.columns,
            "files": [f.as_json() for f in self.files],
        }


@dataclass(frozen=True)
class Entry:
    """One version of the table: what recovery needs to finish its commit on its own."""

    version: int
    table: str
    operation: str
    timestamp: str
    added: tuple[FileEntry, ...]
    removed: tuple[FileEntry, ...]
    metrics: dict[str, Any]
    txn: str | None = None
    read_version: int | None = None
    spec_digest: str | None = None
    partitions: tuple[str, ...] = ()
    new_columns: tuple[tuple[str, str], ...] = ()  # (name, type as DDL)
    cdf: FeedFiles | None = None
    reason: str | None = None  # FENCE only
    # A REPLACE TABLE that wrote no change rows (the model opted out): why. table_changes
    # refuses a range across it, since a consumer applying the feed would miss the replace.
    feed_skipped: str | None = None
    # A REPLACE TABLE that changes what the catalog holds (columns, partitioning, format): the
    # table as it is registered again over its folder (reshape.Shape as JSON; see reshape.py).
    catalog: dict[str, Any] | None = None

    def partition_layout(self, current: Sequence[str]) -> list[str]:
        """The partition columns this entry's files are laid out by: the catalog's it
        registers, else the table's ``current`` ones."""
        if self.catalog is not None:
            return [str(c) for c in self.catalog.get("partition_by") or ()]
        return list(current)

    @property
    def is_write(self) -> bool:
        """A version that staged files (a merge, or a full refresh committed as a version);
        the other operations only list files already in place."""
        return self.operation == "MERGE" or (self.operation == "REPLACE TABLE" and self.txn is not None)

    def moves(self) -> list[FileEntry]:
        """Every staged file, data then change feed, in the order apply moves them."""
        files = list(self.added) + (list(self.cdf.files) if self.cdf else [])
        return [f for f in files if f.staged is not None]

    def to_json(self) -> str:
        out: dict[str, Any] = {
            "format": ENTRY_FORMAT if self.catalog is not None else FIRST_ENTRY_FORMAT,
            "version": self.version,
            "table": self.table,
            "operation": self.operation,
            "timestamp": self.timestamp,
        }
        if self.is_write:
            out.update(
                txn=self.txn,
                read_version=self.read_version,
                spec_digest=self.spec_digest,
            )
        if self.reason is not None:
            out["reason"] = self.reason
        if self.feed_skipped is not None:
            out["feed_skipped"] = self.feed_skipped
        if self.catalog is not None:
            out["catalog"] = self.catalog
        out["added"] = [f.as_json() for f in self.added]
        out["removed"] = [f.as_json() for f in self.removed]
        if self.is_write:
            out["partitions"] = list(self.partitions)
            out["new_columns"] = [{"name": n, "type": t} for n, t in self.new_columns]
            out["cdf"] = self.cdf.as_json() if self.cdf else None
        out["metrics"] = self.metrics
        return json.dumps(out, indent=1)

    @staticmethod
    def parse(text: str, version: int) -> Entry:
        """The entry in ``text`` (the file of ``version``); EntryInvalid saying what is wrong."""
        try:
            raw = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EntryInvalid(f"is not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise EntryInvalid(f"holds a JSON {type(raw).__name__}, not an object")
        r = _Reader(raw)
        # The format first: a newer format may lay out every other key differently.
        entry_format = r.integer("format")
        if entry_format > ENTRY_FORMAT:
            raise EntryTooNew(
                f"was written by a newer rowmerge (entry format {entry_format}; this release reads "
                f"formats up to {ENTRY_FORMAT})"
            )
        if entry_format < FIRST_ENTRY_FORMAT:
            raise EntryInvalid(
                f"has format {entry_format!r}; this release reads formats {FIRST_ENTRY_FORMAT} to "
                f"{ENTRY_FORMAT}"
            )
        if r.integer("version") != version:
            raise EntryInvalid(
                f"says it is version {raw.get('version')!r}, but its file is version {version}"
            )
        operation = r.string("operation")
        if operation not in OPERATIONS:
            raise EntryInvalid(f"has unknown operation {operation!r}")
        # A staged write: every merge, and a full refresh committed as a version (version 0
        # of a table dbt built is a REPLACE TABLE that lists files already in place).
        merge = operation == "MERGE" or (operation == "REPLACE TABLE" and "txn" in raw)
        cdf = None
        if merge and raw.get("cdf") is not None:
            c = _Reader(r.mapping("cdf"), "cdf.")
            cdf = FeedFiles(
                table=c.string("table"),
                location=c.string("location"),
                partition=c.string("partition"),
                columns=c.mapping("columns"),
                files=c.files("files", staged=True),
            )
        new_columns: list[tuple[str, str]] = []
        if merge:
            for i, col in enumerate(r.items("new_columns")):
                cr = _Reader(col if isinstance(col, dict) else {}, f"new_columns[{i}].")
                new_columns.append((cr.string("name"), cr.string("type")))
        return Entry(
            version=version,
            table=r.string("table"),
            operation=operation,
            timestamp=r.string("timestamp"),
            added=r.files("added", staged=merge),
            removed=r.files("removed", staged=False),
            metrics=r.mapping("metrics"),
            txn=r.string("txn") if merge else None,
            read_version=r.integer("read_version") if merge else None,
            spec_digest=raw.get("spec_digest") if isinstance(raw.get("spec_digest"), str) else None,
            partitions=tuple(r.strings("partitions")) if merge else (),
            new_columns=tuple(new_columns),
            cdf=cdf,
            reason=raw.get("reason") if isinstance(raw.get("reason"), str) else None,
            feed_skipped=raw.get("feed_skipped") if isinstance(raw.get("feed_skipped"), str) else None,
            catalog=r.mapping("catalog") if merge and entry_format >= 2 and "catalog" in raw else None,
        )


class _Reader:
    """Typed access to one JSON object of an entry; every miss raises EntryInvalid naming the key."""

    def __init__(self, raw: dict[str, Any], prefix: str = "") -> None:
        self.raw = raw
        self.prefix = prefix

    def _get(self, key: str) -> Any:
        if key not in self.raw:
            raise EntryInvalid(f"has no `{self.prefix}{key}`")
        return self.raw[key]

    def string(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str) or not value:
            raise EntryInvalid(f"has `{self.prefix}{key}` = {value!r}, not a non-empty string")
        return value

    def integer(self, key: str) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise EntryInvalid(f"has `{self.prefix}{key}` = {value!r}, not a whole number >= 0")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key)
        if not isinstance(value, dict):
            raise EntryInvalid(f"has `{self.prefix}{key}` = {value!r}, not an object")
        return value

    def items(self, key: str) -> list[Any]:
        value = self._get(key)
        if not isinstance(value, list):
            raise EntryInvalid(f"has `{self.prefix}{key}` = {value!r}, not a list")
        return value

    def strings(self, key: str) -> list[str]:
        values = self.items(key)
        if not all(isinstance(v, str) and v for v in values):
            raise EntryInvalid(f"has `{self.prefix}{key}` with an item that is not a non-empty string")
        return values

    def files(self, key: str, staged: bool) -> tuple[FileEntry, ...]:
        out = []
        for i, item in enumerate(self.items(key)):
            if not isinstance(item, dict):
                raise EntryInvalid(f"has `{self.prefix}{key}[{i}]` = {item!r}, not an object")
            f = _Reader(item, f"{self.prefix}{key}[{i}].")
            rows = item.get("rows")
            if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
                raise EntryInvalid(f"has `{self.prefix}{key}[{i}].rows` = {rows!r}, not a row count")
            out.append(
                FileEntry(
                    path=f.string("path"),
                    size=f.integer("size"),
                    rows=rows,
                    staged=f.string("staged") if staged else None,
                    stats=item["stats"] if isinstance(item.get("stats"), dict) else None,
                )
            )
        return tuple(out)


# -- recovery's report ----------------------------------------------------------------------


@dataclass
class Recovery:
    """What ``recover`` did: versions rolled forward, uncommitted staging folders rolled back."""

    rolled_forward: list[int] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rolled_forward or self.rolled_back)

    def describe(self) -> str:
        if not self:
            return "nothing to recover"
        parts = []
        if self.rolled_forward:
            parts.append("rolled forward version(s) " + ", ".join(map(str, self.rolled_forward)))
        if self.rolled_back:
            parts.append(f"rolled back {len(self.rolled_back)} uncommitted staging folder(s)")
        return "; ".join(parts)


# -- the journal ----------------------------------------------------------------------------


def _fold(files: dict[str, FileEntry], entry: Entry) -> None:
    """Apply ``entry`` to ``files`` (path -> the entry of the file now at that path)."""
    for f in entry.removed:
        files.pop(f.path, None)
    for f in entry.added:
        files[f.path] = f


@dataclass
class Journal:
    """The journal of one table."""

    storage: Storage
    location: str  # qualified

    # -- layout -----------------------------------------------------------------------------
    @property
    def log_dir(self) -> str:
        return f"{self.location}/{LOG_DIR}"

    def staging_dir(self, txn: str) -> str:
        return f"{self.log_dir}/{STAGING_DIR}/{txn}"

    def staging(self, txn: str) -> Staging:
        return Staging(txn, self.staging_dir(txn))

    def entry_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{ENTRY_SUFFIX}"

    def applied_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{APPLIED_SUFFIX}"

    def checkpoint_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{CHECKPOINT_SUFFIX}"

    # -- reading ----------------------------------------------------------------------------
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
            found = _LOG_NAME.match(n)
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

    def snapshot(self) -> dict[str, FileInfo]:
        """Every data file of the table now, to prove at commit time that no one changed them.

        Refuses a folder that holds another table's journal (found by the same listing): that
        table's files would be this one's rows, and this table's commits would replace them.
        """
        hidden: list[str] = []
        files = self.storage.list_data_files(self.location, hidden)
        nested = sorted(h for h in hidden if h.rsplit("/", 1)[-1] == LOG_DIR)
        if nested:
            inner = nested[0].rsplit("/", 1)[0]
            raise UnsupportedTableError(
                f"The table at {self.location} holds another table's journal ({nested[0]}): the "
                f"table at {inner} lives inside this one's folder, so this table would read that "
                "table's files as its own rows and a commit here would rewrite them. Give each "
                "table a folder of its own (a location outside the other's). Nothing was changed."
            )
        return {f.path: f for f in files}  # qualified

    def check_placement(self, table: str) -> None:
        """Refuse a table whose folder lies inside another journaled table's folder.

        That table lists this one's files as its own (every folder below it), so a commit of
        either would rewrite or count the other's rows. One status per folder above.
        """
        for folder in _ancestors(self.location):
            log = f"{folder.rstrip('/')}/{LOG_DIR}"
            if self.storage.exists(log):
                raise UnsupportedTableError(
                    f"{table} is stored at {self.location}, inside the folder of another table "
                    f"that has a journal ({log}): that table reads this one's files as its own "
                    "rows, and its commits would rewrite them. Give each table a folder of its "
                    "own (a location outside the other's). Nothing was changed."
                )

    def check_bound(self, target: TargetTable) -> None:
        """:meth:`check_owner` against the newest version (none yet: any table may start it)."""
        versions = self.versions()
        if versions:
            self.check_owner(self.entry(versions[-1], target.name), target)

    def check_owner(self, entry: Entry, target: TargetTable) -> None:
        """Refuse a journal that another table wrote (``entry``: its newest version).

        Two catalog tables may read one folder (the same LOCATION); a merge into one must not
        rewrite files described by, and shaped for, the other. A renamed table is rebound
        explicitly (:meth:`rebind_entry`), never guessed.
        """
        if same_table(entry.table, target.name_parts):
            return
        raise UnsupportedTableError(
            f"{target.name} cannot use the journal in {self.log_dir}: it belongs to table "
            f"{entry.table} (version {entry.version} says so), and {target.qualified_name} is another "
            f"table reading the same folder {self.location}. A merge here would rewrite "
            f"{entry.table}'s files with only this table's columns. Give each table its own "
            f"location. If {entry.table} was renamed to {target.qualified_name}, record the new name "
            f"once: `dbt run-operation rowmerge_rebind --args '{{relation: {target.qualified_name}}}'` "
            "(Python: rebind(spark, table)). Nothing was changed."
        )

    # -- file statistics (recorded in the entries; see filestats) ---------------------------
    def file_summaries(
        self,
        target: TargetTable,
        files: Mapping[str, FileInfo],
        versions: Sequence[int] = (),
        pending: Sequence[Entry] = (),
        save_checkpoint: bool = False,
    ) -> dict[str, FileSummary]:
        """A summary of every file of ``files`` (a listing), without opening the files the
        journal describes.

        Like Delta's `add` actions, each entry records the statistics of the files it adds
        (version 0: of every file found), so folding ``versions`` gives the statistics of
        every file a commit left in place (``pending``: entries not written yet, folded last).
        Only files the journal does not know, or knows
        with another size (written by another engine, or before statistics were recorded),
        have their footers read.

        The fold starts from the newest statistics checkpoint (see :meth:`_recorded_files`);
        ``save_checkpoint`` (a merge, holding the lock) writes the one that is due.
        """
        fields = indexed_columns(target.schema.fields, target.partition_columns)
        recorded = self._recorded_files(versions, pending, save_checkpoint)
        out: dict[str, FileSummary] = {}
        for path, info in files.items():
            known = recorded.get(path)
            if known is not None and known.size == info.size and known.stats is not None:
                summary = parse_summary(known.rows, known.stats, fields)
                if summary is not None:
                    out[path] = summary
        missing = {p: info.size for p, info in files.items() if p not in out}
        if missing:
            out.update(summarize_files(self.storage, missing, target.file_format, fields))
        return out

    def _recorded_files(
        self, versions: Sequence[int], pending: Sequence[Entry], save_checkpoint: bool = False
    ) -> dict[str, FileEntry]:
        """The data files the entries of ``versions`` leave in place (path -> its entry).

        Folding every entry makes a merge's cost grow with the table's history (an hourly
        model has 720 versions after a month). So every CHECKPOINT_INTERVAL versions the fold
        is saved, as Delta saves its checkpoints; the fold starts from the newest checkpoint
        that is still valid and reads only the entries after it. A checkpoint is a cache: it
        names the SHA-256 of the entry it was folded up to and is used only if that entry is
        still the same file (a full refresh starts a new journal, whose entries differ), and
        one that is missing, damaged or stale only costs reading the entries again.
        Entries are read a few at a time (each read is a round trip on object stores); one that
        cannot be read only costs the footers of the files it added.
        """
        ordered = sorted(versions)
        due = (ordered[-1] // CHECKPOINT_INTERVAL) * CHECKPOINT_INTERVAL if ordered else 0
        out: dict[str, FileEntry] = {}
        start = -1
        # The newest checkpoint due, else the one before it (its writer may have failed).
        for mark in (due, due - CHECKPOINT_INTERVAL):
            if mark > 0 and mark in ordered:
                loaded = self._read_checkpoint(mark)
                if loaded is not None:
                    out, start = loaded, mark
                    break

        def read(version: int) -> tuple[str, Entry] | None:
            try:
                return self._read_entry_text(version)
            except Exception:  # noqa: BLE001 - statistics are an aid; recovery judges entries
                return None

        todo = [v for v in ordered if v > start]
        with ThreadPoolExecutor(max_workers=ENTRY_READ_THREADS) as pool:
            read_entries = list(pool.map(read, todo))
        complete = True  # every entry up to `due` was read (a checkpoint may be saved)
        for version, got in zip(todo, read_entries, strict=True):
            if got is None:
                complete = False  # (read only at `due`: a gap after it does not matter)
                continue
            _fold(out, got[1])
            if version == due > 0 and save_checkpoint and start < due and complete:
                self._save_checkpoint(due, got[0], out)
        for entry in pending:
            _fold(out, entry)
        return out

    def _read_checkpoint(self, version: int) -> dict[str, FileEntry] | None:
        """The fold saved for ``version``, if it is valid for this journal's entry ``version``."""
        try:
            raw = json.loads(self.storage.read_text(self.checkpoint_path(version)))
            r = _Reader(raw if isinstance(raw, dict) else {})
            if r.integer("format") != CHECKPOINT_FORMAT or r.integer("version") != version:
                return None
            entry_text = self.storage.read_text(self.entry_path(version))
            if r.string("entry_sha256") != hashlib.sha256(entry_text.encode()).hexdigest():
                return None  # folded from another journal's entries (before a full refresh)
            return {f.path: f for f in r.files("files", staged=False)}
        except Exception as exc:  # noqa: BLE001 - a cache: without it the entries are read
            logger.debug("rowmerge: statistics checkpoint %d not used: %s", version, exc)
            return None

    def _save_checkpoint(self, version: int, entry_text: str, files: Mapping[str, FileEntry]) -> None:
        """Save the fold up to ``version`` (best effort: a merge never fails for its cache)."""
        text = json.dumps(
            {
                "format": CHECKPOINT_FORMAT,
                "version": version,
                "entry_sha256": hashlib.sha256(entry_text.encode()).hexdigest(),
                # Where a file was staged is its commit's business, not the statistics'.
                "files": [replace(f, staged=None).as_json() for _, f in sorted(files.items())],
            }
        )
        path = self.checkpoint_path(version)
        try:
            if not self.storage.create_if_absent(path, text):  # one that was not valid
                self.storage.delete(path)
                self.storage.create_if_absent(path, text)
        except Exception as exc:  # noqa: BLE001
            logger.debug("rowmerge: statistics checkpoint %d not saved: %s", version, exc)

    # -- validation (before the commit point, and before recovery touches anything) ---------
    def problems(self, entry: Entry, partition_columns: Sequence[str]) -> list[str]:
        """Why ``entry`` is not a commit this journal may apply (empty: it may)."""
        out: list[str] = []
        if entry.version > MAX_VERSION:
            out.append(
                f"has version {entry.version}, past the largest a change feed can hold ({MAX_VERSION})"
            )
        if not entry.is_write:
            if entry.moves():
                out.append("lists staged files, which only a MERGE or REPLACE TABLE has")
            return out
        if entry.txn is None or not _TXN.match(entry.txn):
            out.append(f"has an invalid txn {entry.txn!r}")
            return out
        if entry.read_version != entry.version - 1:
            out.append(f"was planned on version {entry.read_version}, not {entry.version - 1}")
        data_staging = self.staging(entry.txn).data_dir
        parts = [c.lower() for c in partition_columns]
        for i, f in enumerate(entry.added):
            rel = _inside(f.path, self.location)
            if rel is None:
                out.append(
                    f"adds added[{i}] {f.path}, which is not a data file of the table at {self.location}"
                )
                continue
            if f.staged is None or _inside(f.staged, data_staging) != rel:
                out.append(f"stages added[{i}] at {f.staged}, not at {data_staging}/{rel}")
            out += _layout_problems(f"added[{i}]", rel, parts)
        for i, f in enumerate(entry.removed):
            if _inside(f.path, self.location) is None:
                out.append(
                    f"removes removed[{i}] {f.path}, which is not a data file of the table at {self.location}"
                )
        for p in entry.partitions:
            out += _layout_problems("a partition", f"{p}/x", parts)
        for name, ddl in entry.new_columns:
            if not name or not ddl:
                out.append("adds a column without a name or type")
        if entry.cdf is not None:
            out += self._feed_problems(entry, entry.cdf)
        return out

    def _feed_problems(self, entry: Entry, cdf: FeedFiles) -> list[str]:
        out: list[str] = []
        try:
            check_path_safe(parse_name(cdf.table))
        except ValueError as exc:
            out.append(f"names change table {cdf.table!r}, which is not a valid table name ({exc})")
        key, eq, value = cdf.partition.partition("=")
        if not eq or value != str(entry.version) or not key or "/" in cdf.partition:
            out.append(f"writes change-feed partition {cdf.partition!r}, not one for version {entry.version}")
        try:
            StructType.fromJson(cdf.columns)
        except Exception as exc:  # malformed schema JSON
            out.append(f"gives the change table columns that are not a schema ({exc})")
        feed_staging = self.staging(str(entry.txn)).cdf_dir
        for i, f in enumerate(cdf.files):
            rel = _inside(f.path, cdf.location)
            name = f.path.rsplit("/", 1)[-1]
            if rel != f"{cdf.partition}/{name}" or is_hidden(name):
                out.append(f"moves cdf.files[{i}] to {f.path}, not into {cdf.location}/{cdf.partition}/")
            if f.staged is None or _inside(f.staged, feed_staging) != name:
                out.append(f"stages cdf.files[{i}] at {f.staged}, not in {feed_staging}/")
        return out

    def check(self, entry: Entry, target: TargetTable, recovering: bool = True) -> None:
        """Raise unless ``entry`` may be applied as it stands (before any move).

        Checks what the entry says (JournalError if it does not describe a commit of this
        table), that no path it moves or deletes resolves outside its folder, and that the
        filesystem will let it move and delete those files. ``recovering=False``: the
        committing writer, before its commit point (it has just written the staged files, so
        they are not looked for, and a refusal is an error of its merge, not of the journal).
        """
        problems = self.problems(entry, entry.partition_layout(target.partition_columns))
        if problems:
            raise self._damaged(
                entry.version, target.name, "does not describe a commit of this table: " + "; ".join(problems)
            )
        self._check_inside(entry, target.name, recovering)
        self._check_removable(entry, target.name, recovering)
        if not recovering:
            return
        missing = [
            f.staged
            for f in entry.moves()
            if f.staged and not self.storage.exists(f.staged) and not self.storage.exists(f.path)
        ]
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise JournalError(
                f"Cannot finish the interrupted commit of version {entry.version} of {target.name}: "
                f"{len(missing)} staged file(s) are missing and not in place either ({shown}); was "
                f"{self.log_dir} edited by hand? Nothing was moved. Restore the files, or rebuild "
                "the table with `dbt run --full-refresh`."
            )

    def _check_inside(self, entry: Entry, table: str, recovering: bool) -> None:
        """Refuse an entry that would move or delete a file outside the folder it must be in,
        through a symbolic link on the way (local files; a path names one object elsewhere).

        Folders are resolved, not the file itself: deleting a link to a file removes the link.
        """
        real_roots: dict[str, str | None] = {}

        def real_root(root: str) -> str | None:
            if root not in real_roots:
                real_roots[root] = self.storage.real_path(root)
            return real_roots[root]

        outside: list[str] = []

        def check(path: str, root: str) -> None:
            folder, _, name = path.rpartition("/")
            real, real_top = self.storage.real_path(folder), real_root(root)
            if real is None or real_top is None:
                return
            if real != real_top and not real.startswith(real_top.rstrip("/") + "/"):
                outside.append(f"{path} (its folder is {real}, outside {real_top})")

        staging = self.staging(entry.txn).dir if entry.txn and _TXN.match(entry.txn) else None
        for f in entry.added:
            check(f.path, self.location)
        for f in entry.removed:
            check(f.path, self.location)
        if entry.cdf is not None:
            for f in entry.cdf.files:
                check(f.path, entry.cdf.location)
        for f in entry.moves():
            if f.staged and staging:
                check(f.staged, staging)
        if not outside:
            return
        shown = "; ".join(outside[:3]) + (f"; and {len(outside) - 3} more" if len(outside) > 3 else "")
        if recovering:
            raise JournalError(
                f"Cannot finish version {entry.version} of {table}: it would move or delete "
                f"{len(outside)} file(s) outside their table's folder, through a symbolic link: {shown}. "
                "row_level_merge never touches files outside a table's folder. Replace the link with a "
                f"real folder (or, if {self.log_dir} was edited by hand, restore it from a backup). "
                "Nothing was moved or deleted."
            )
        raise UnsupportedTableError(
            f"MERGE into {table} refused: it would replace or add {len(outside)} file(s) whose folder "
            f"is a symbolic link out of the table's folder: {shown}. row_level_merge never moves or "
            "deletes files outside a table's folder. Replace the link with a real folder inside the "
            "table's folder. Nothing was changed."
        )

    def _check_removable(self, entry: Entry, table: str, recovering: bool) -> None:
        """Refuse an entry whose replaced files the filesystem will not delete, or whose new
        files it will not let into their folders, where that can be told cheaply (local
        files, HDFS): found after the commit point, readers would see a replaced file's rows
        next to their new version until someone fixes the permissions."""
        problems = []
        for f in entry.removed:
            reason = self.storage.removal_problem(f.path)
            if reason:
                problems.append(f"{f.path}: {reason}")
        for folder in sorted({f.path.rsplit("/", 1)[0] for f in entry.moves()}):
            reason = self.storage.write_problem(folder)
            if reason:
                problems.append(f"{folder}: {reason}")
        if not problems:
            return
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        fix = (
            "Make those files deletable and their folders writable for this process (permissions, "
            "chattr -i, the object store's policy)"
        )
        if recovering:
            raise JournalError(
                f"Cannot finish the interrupted commit of version {entry.version} of {table}: the "
                f"filesystem will not let it replace or add these files: {shown}. {fix}, then run "
                "again (the next merge, or "
                f"`dbt run-operation rowmerge_recover --args '{{relation: {table}}}'`)."
            )
        raise StorageError(
            f"MERGE into {table} refused: the filesystem will not let it replace or add the files it "
            f"must ({shown}). {fix}, then run the model again. Nothing was changed."
        )

    # -- building entries -------------------------------------------------------------------
    def stage(self) -> Staging:
        """A new, empty staging folder for one merge (created by the first file written)."""
        return self.staging(_new_txn())

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
            timestamp=_iso(utc_now()),
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
    ) -> Entry:
        """The entry of a merge (or of a full refresh: ``operation`` REPLACE TABLE) planned as
        ``version``: everything recovery needs to finish it.

        ``added``: the data files staged in ``staging.data_dir``; ``removed``: (qualified path,
        size, rows) of each file the commit replaces; ``new_columns``: (name, type DDL) that
        schema evolution adds; ``feed``: the change-feed files staged in ``staging.cdf_dir``
        for ``changes``, whose columns are ``feed_columns``; ``timestamp``: the commit time
        (which the change rows repeat).
        """
        files = tuple(
            FileEntry(
                f"{self.location}/{_below(f.path, staging.data_dir)}",
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
            timestamp=_iso(timestamp),
            txn=staging.txn,
            read_version=version - 1,
            spec_digest=_spec_digest(spec),
            added=files,
            removed=tuple(FileEntry(path, size, rows) for path, size, rows in sorted(removed)),
            partitions=tuple(sorted(partitions)),
            new_columns=tuple(new_columns),
            cdf=cdf,
            metrics=dict(metrics),
            feed_skipped=feed_skipped,
            catalog=dict(catalog) if catalog is not None else None,
        )

    def commit_time(self, versions: Sequence[int]) -> datetime:
        """The timestamp the next commit takes: now, but never before the newest version's
        (a clock set back must not make commit timestamps go back: consumers select change
        rows by time, and ``as_of`` by timestamp picks the last version at or before it)."""
        now = utc_now()
        if not versions:
            return now
        try:
            newest = parse_iso(self.read_entry(versions[-1]).timestamp)
        except (EntryInvalid, ValueError):
            return now  # a damaged newest entry stops recovery or the commit anyway
        return max(now, newest + timedelta(milliseconds=1))

    # -- writing ----------------------------------------------------------------------------
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

    def check_unchanged(self, entry: Entry, snapshot: Mapping[str, FileInfo]) -> None:
        """Raise ConcurrentMergeError if a file the merge read was changed or removed meanwhile."""
        now = self.snapshot()
        changed = sorted(
            path
            for path, info in snapshot.items()
            if path not in now or (now[path].size, now[path].mtime) != (info.size, info.mtime)
        )
        if changed:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            raise ConcurrentMergeError(
                f"{entry.operation} into {entry.table} aborted: another writer changed "
                f"{len(changed)} of the table's files while the merge ran ({shown}). Nothing was "
                "changed; run the model again. Jobs that write this table without row_level_merge "
                "(insert_overwrite runs, manual jobs) must not run at the same time as a merge."
            )

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

    def rebind(self, target: TargetTable, previous: str) -> int:
        """Commit a version that makes ``target`` this journal's table from now on (it was
        ``previous``'s: the table was renamed). It lists every file of the table as it is now,
        with its statistics, as version 0 does: a managed table's files moved with its folder.
        Hold the lock."""
        found = self.initial_entry(target, "REBIND")
        return self._commit_marker(target.qualified_name, "REBIND", f"renamed from {previous}", found.added)

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

    def _commit_marker(
        self, table: str, operation: str, reason: str, files: tuple[FileEntry, ...] = ()
    ) -> int:
        """Commit a version of ``operation`` that changes no file (``files``: the files of the
        table, listed for their statistics), at the next free version."""
        while True:
            versions = self.versions()
            version = self.next_version(versions, table)
            entry = Entry(
                version=version,
                table=table,
                operation=operation,
                timestamp=_iso(self.commit_time(versions)),
                added=files,
                removed=(),
                metrics={},
                reason=reason,
            )
            if self.storage.create_if_absent(self.entry_path(version), entry.to_json()):
                self.storage.create_if_absent(self.applied_path(version), "")
                return version

    # -- roll forward -----------------------------------------------------------------------
    def apply(self, spark: SparkSession, entry: Entry, target: TargetTable, prepared: bool = False) -> None:
        """Roll ``entry`` forward on ``target``; repeatable. Call :meth:`check` first.

        ``prepared``: the committing writer has just added the entry's columns and checked its
        change table (before the commit point), so the catalog need not be asked again.
        """
        cdf = entry.cdf
        if prepared:
            feed_ident = sql_name(cdf.table) if cdf else None
        else:
            add_columns(spark, target.ident, entry.new_columns)
            feed_ident = self._feed_table(spark, entry, cdf) if cdf else None
        for i, f in enumerate(entry.moves()):
            assert f.staged is not None
            self._move(f.staged, f.path)
            fault_point(f"move_{i}")
        # New partitions become visible before any replaced file goes away, so a reader of
        # the catalog sees every row throughout (old and new versions side by side at worst).
        register_partitions(spark, target.ident, list(entry.partitions))
        if cdf and feed_ident:
            register_partitions(spark, feed_ident, [cdf.partition])
        fault_point("registered")
        for i, f in enumerate(entry.removed):
            self.remove_replaced(f.path, entry.version)
            fault_point(f"delete_{i}")
        fault_point("before_applied")
        marker = self.applied_path(entry.version)
        if not self.storage.create_if_absent(marker, "") and not self.storage.exists(marker):
            raise StepNotDone(f"could not create {marker}: the storage reported it not written")
        fault_point("applied")
        if entry.txn:
            self.discard(self.staging(entry.txn))
        spark.catalog.refreshTable(target.ident)
        if feed_ident:
            spark.catalog.refreshTable(feed_ident)

    def _move(self, staged: str, path: str) -> None:
        """Move a staged file into place. A rename the storage reports as not done is done all
        the same when an earlier replay moved it (the file is in place, not staged)."""
        if self.storage.rename(staged, path):
            return
        if self.storage.exists(path) and not self.storage.exists(staged):
            return
        raise StepNotDone(f"could not move {staged} to {path}: the storage reported the move as not done")

    def remove_replaced(self, path: str, version: int) -> None:
        """Delete a file ``version`` replaces. A delete the storage reports as not done (Hadoop
        returns false) is done if the file is gone (an earlier replay deleted it); a file that
        is still there stops the apply, which leaves the entry unapplied for recovery."""
        try:
            if self.storage.delete(path):
                return
            reason = "the storage reported it not deleted"
        except Exception as exc:  # noqa: BLE001 - pyarrow raises, Hadoop returns false
            reason = spark_reason(exc)
        if not self.storage.exists(path):
            return
        why = self.storage.removal_problem(path)
        raise StepNotDone(
            f"could not delete {path}, which version {version} replaces ({why or reason}); until it "
            "is gone, readers see its rows next to their new version"
        )

    def _feed_table(self, spark: SparkSession, entry: Entry, cdf: FeedFiles) -> str:
        """The change table that reads ``cdf.location``, created there if it was dropped."""
        ident = sql_name(cdf.table)
        schema = StructType.fromJson(cdf.columns)
        try:
            described = describe_table(spark, ident)
        except AnalysisException:
            key = cdf.partition.split("=", 1)[0]
            create_table_at(spark, ident, schema, [key], cdf.location)
            return ident
        key = cdf.partition.split("=", 1)[0]
        if [c.lower() for c in described.partition_columns] != [key.lower()]:
            raise self._damaged(
                entry.version,
                entry.table,
                f"names change table {cdf.table}, which is not a change feed (it is partitioned by "
                f"{list(described.partition_columns) or 'nothing'}, not {key})",
            )
        if self.storage.qualify(described.location.rstrip("/")) != cdf.location:
            raise JournalError(
                f"Cannot finish version {entry.version} of {entry.table}: its change rows belong in "
                f"{cdf.location}, but change table {cdf.table} now reads "
                f"{described.location}. Point {cdf.table} back at that location (or drop it: "
                "recovery recreates it there), then run again."
            )
        add_columns(spark, ident, column_ddl(schema.fields))
        return ident

    def recover(
        self,
        spark: SparkSession,
        target: TargetTable,
        reregister: Callable[[Entry], TargetTable] | None = None,
    ) -> Recovery:
        """Roll unapplied entries forward and orphan staging back (hold the lock).

        ``reregister``: registers the table again as an entry's ``catalog`` says (a full
        refresh that changed its shape; reshape.py), once the entry is checked and before it
        is applied; returns the table as registered then.
        """
        done = Recovery()
        versions, applied, strays = self.scan_log()
        if strays:
            raise JournalError(
                f"The journal of {target.name} holds {len(strays)} file(s) named like journal files "
                f"that rowmerge did not write: {', '.join(strays[:5])} in {self.log_dir} (journal "
                f"files are named by a {VERSION_DIGITS}-digit version). Recovery does not guess what "
                "they mean: move them out of that folder (or restore the journal from a backup), "
                "then run again. Nothing was changed."
            )
        newest = self.entry(versions[-1], target.name) if versions else None
        if newest is not None:
            self.check_owner(newest, target)
        for v in versions:
            if v in applied:
                continue
            entry = newest if newest is not None and v == newest.version else self.entry(v, target.name)
            self.check(entry, target)
            if entry.catalog is not None and reregister is not None:
                target = reregister(entry)
            try:
                self.apply(spark, entry, target)
            except FileNotFoundError as exc:
                raise JournalError(
                    f"Cannot finish the interrupted commit of version {v} of {target.name}: file "
                    f"{exc} vanished while it was being applied (is another process editing "
                    f"{self.log_dir}?). Run again; if this repeats, rebuild the table with --full-refresh."
                ) from None
            except StepNotDone as exc:
                raise JournalError(
                    f"Cannot finish the interrupted commit of version {v} of {target.name}: {exc}. "
                    "Fix that (permissions, chattr -i, the object store's policy), then run again: "
                    "the next merge, or `dbt run-operation rowmerge_recover --args "
                    f"'{{relation: {target.name}}}'`."
                ) from None
            done.rolled_forward.append(v)
        # Every entry is applied now, so no staging folder can be needed any more. Only the
        # newest entry's can be a leftover of a commit (a crash after its applied marker).
        newest_txn = newest.txn if newest is not None else None
        for txn in self.storage.list_names(f"{self.log_dir}/{STAGING_DIR}"):
            self.discard(self.staging(txn))
            if txn != newest_txn:
                done.rolled_back.append(txn)
        return done

    # -- history ----------------------------------------------------------------------------
    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        out = []
        versions, applied = self.listing()
        for v in reversed(versions):
            try:
                out.append(history_row(self.read_entry(v), v in applied))
            except EntryInvalid as exc:
                out.append(_unreadable_row(v, v in applied, str(exc)))
            if limit is not None and len(out) >= limit:
                break
        return out


def _below(path: str, folder: str) -> str:
    """``path`` relative to ``folder``, which holds it (a staged file's partition sub-path)."""
    return path.split(folder.rstrip("/") + "/", 1)[1]


def _inside(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` if it is a visible file below it (no ``..``, no hidden part)."""
    root = root.rstrip("/")
    if not path.startswith(root + "/"):
        return None
    rel = path[len(root) + 1 :]
    segments = rel.split("/")
    if any(s in ("", ".", "..") or is_hidden(s) for s in segments):
        return None
    return rel


def _layout_problems(what: str, rel: str, partition_columns: Sequence[str]) -> list[str]:
    """A data file's path below the table must be ``k1=v1/.../file`` with the table's partition keys."""
    folders = rel.split("/")[:-1]
    try:
        keys = [k.lower() for k, _ in partition_values("/".join(folders))] if folders else []
    except ValueError:
        keys = []
    if keys != list(partition_columns):
        want = "/".join(f"{c}=..." for c in partition_columns) or "no folder"
        return [f"places {what} at {rel!r}; this table's layout is {want}"]
    return []


def history_row(entry: Entry, applied: bool) -> dict[str, Any]:
    """One version as history reports it: the entry's metrics plus the counts users ask for."""
    m = entry.metrics
    inserted = m.get("numTargetRowsInserted", m.get("numOutputRows", 0))
    row = {
        "version": entry.version,
        "timestamp": entry.timestamp,
        "operation": entry.operation,
        "rows_inserted": inserted,
        "rows_updated": m.get("numTargetRowsUpdated", 0),
        "rows_deleted": m.get("numTargetRowsDeleted", 0),
        "files_added": len(entry.added),
        "files_removed": len(entry.removed),
        "metrics": m,
        "applied": applied,
    }
    if entry.feed_skipped:
        row["feed_skipped"] = entry.feed_skipped
    return row


def _unreadable_row(version: int, applied: bool, reason: str) -> dict[str, Any]:
    """A version whose entry is damaged: history still shows it (recovery refuses it)."""
    return {
        "version": version,
        "timestamp": "",
        "operation": "UNREADABLE",
        "rows_inserted": 0,
        "rows_updated": 0,
        "rows_deleted": 0,
        "files_added": 0,
        "files_removed": 0,
        "metrics": {"error": f"entry {reason}"},
        "applied": applied,
    }
