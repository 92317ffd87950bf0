"""One version of a table, as its journal file holds it: the format, parsed and written.

Entries are published whole (``Storage.create_if_absent``), so an entry that cannot be read
as one was damaged after it was written (:class:`EntryInvalid`), unless a newer release
wrote it (:class:`EntryTooNew`, which asks for an upgrade instead).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .retention import Retention

# Format 2 is format 1 plus `catalog` (a full refresh that registers the table again,
# reshape.py); format 3 adds the OPTIMIZE operation (optimize.py); format 4, an entry whose
# apply keeps the files it replaces (retention.py) — a release that does not know retention
# would delete them — and the RESTORE operation (restore.py), which moves retained files
# back; its `expired` (the retained folders its apply deletes) and the VACUUM operation
# (vacuum.py) too. An entry is written in the lowest format that holds it, so an older release refuses
# only the entries it would misread (asking for an upgrade) and reads every other one.
# `cluster_by` and `retention` are optional in every format: a release that does not know
# them ignores them.
FIRST_ENTRY_FORMAT = 1
ENTRY_FORMAT = 4
OPERATIONS = (
    "MERGE",
    "CREATE TABLE",
    "REPLACE TABLE",
    "CONVERT",
    "FENCE",
    "REBIND",
    "OPTIMIZE",
    "RESTORE",
    "VACUUM",
)
# Operations that stage files of their own and replace others (the rest list files in place).
# A RESTORE's data files are "staged" in the retained folders it brings them back from.
WRITES = ("MERGE", "OPTIMIZE", "RESTORE")


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
class FeedExpiry:
    """Change-feed versions a VACUUM drops from a change table (partitions and their files)."""

    table: str  # the change table's name, as the spec gave it
    location: str  # qualified
    versions: tuple[int, ...]

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "location": self.location, "versions": list(self.versions)}


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
    # The table's clustering columns (optimize.py): set by the model's `cluster_by` or by an
    # optimize given one, and carried from entry to entry so every later compaction keeps it.
    cluster_by: tuple[str, ...] | None = None
    # The table's retention from this version on (retention.py), carried from entry to entry;
    # None: none stored (the default applies).
    retention: Retention | None = None
    restored: int | None = None  # RESTORE only: the version whose rows it brings back
    # The versions whose retained folders this version's apply deletes: they fell out of
    # retention (retention.py) when it committed, or a vacuum expired them.
    expired: tuple[int, ...] = ()
    # VACUUM only: the base (base.py) it commits, as (its version, the SHA-256 of its text);
    # its apply deletes the entries that base folds.
    base: tuple[int, str] | None = None
    feed_expired: FeedExpiry | None = None  # VACUUM only: change-feed versions it drops

    @property
    def retains(self) -> bool:
        """Applying this version moves the files it replaces into its ``retained/`` folder
        instead of deleting them."""
        return bool(self.removed) and self.retention is not None and self.retention.on

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
        return self.operation in WRITES or (self.operation == "REPLACE TABLE" and self.txn is not None)

    @property
    def format(self) -> int:
        """The lowest entry format that holds this entry."""
        if self.retains or self.expired or self.operation in ("RESTORE", "VACUUM"):
            return 4
        if self.operation == "OPTIMIZE":
            return 3
        return 2 if self.catalog is not None else FIRST_ENTRY_FORMAT

    def moves(self) -> list[FileEntry]:
        """Every staged file, data then change feed, in the order apply moves them."""
        files = list(self.added) + (list(self.cdf.files) if self.cdf else [])
        return [f for f in files if f.staged is not None]

    def to_json(self) -> str:
        out: dict[str, Any] = {
            "format": self.format,
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
        if self.restored is not None:
            out["restored"] = self.restored
        if self.feed_skipped is not None:
            out["feed_skipped"] = self.feed_skipped
        if self.catalog is not None:
            out["catalog"] = self.catalog
        if self.cluster_by is not None:
            out["cluster_by"] = list(self.cluster_by)
        if self.retention is not None:
            out["retention"] = self.retention.as_json()
        if self.expired:
            out["expired"] = list(self.expired)
        if self.base is not None:
            out["base"] = {"version": self.base[0], "sha256": self.base[1]}
        if self.feed_expired is not None:
            out["feed_expired"] = self.feed_expired.as_json()
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
        r = Reader(raw)
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
        merge = operation in WRITES or (operation == "REPLACE TABLE" and "txn" in raw)
        cdf = None
        if merge and raw.get("cdf") is not None:
            c = Reader(r.mapping("cdf"), "cdf.")
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
                cr = Reader(col if isinstance(col, dict) else {}, f"new_columns[{i}].")
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
            cluster_by=tuple(r.strings("cluster_by")) if "cluster_by" in raw else None,
            retention=_retention(r, entry_format),
            restored=r.integer("restored") if operation == "RESTORE" else None,
            expired=_expired(r, version) if entry_format >= 4 else (),
            base=_base(r, version) if operation == "VACUUM" and "base" in raw else None,
            feed_expired=_feed_expired(r, version)
            if operation == "VACUUM" and "feed_expired" in raw
            else None,
        )


def _feed_expired(r: Reader, version: int) -> FeedExpiry:
    f = Reader(r.mapping("feed_expired"), "feed_expired.")
    versions = f.items("versions")
    if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < version for k in versions):
        raise EntryInvalid(
            f"has `feed_expired.versions` = {versions!r}, not a list of versions before {version}"
        )
    return FeedExpiry(f.string("table"), f.string("location"), tuple(versions))


def _base(r: Reader, version: int) -> tuple[int, str]:
    b = Reader(r.mapping("base"), "base.")
    found = b.integer("version"), b.string("sha256")
    if found[0] >= version:
        raise EntryInvalid(f"commits the base of version {found[0]}, not one before {version}")
    return found


def _expired(r: Reader, version: int) -> tuple[int, ...]:
    """The retained folders an entry deletes: versions before its own, each once."""
    if "expired" not in r.raw:
        return ()
    found = r.items("expired")
    if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < version for k in found):
        raise EntryInvalid(f"has `expired` = {found!r}, not a list of versions before {version}")
    if len(set(found)) != len(found):
        raise EntryInvalid(f"has `expired` = {found!r}, which names a version twice")
    return tuple(found)


def _retention(r: Reader, entry_format: int) -> Retention | None:
    """The stored retention. In a format-4 entry it decides what apply does with the replaced
    files, so a malformed one is damage; in an older format a release that wrote it only
    carried it (it removed nothing), and an odd one is ignored."""
    if "retention" not in r.raw:
        return None
    found = Retention.from_json(r.raw["retention"])
    if found is None and entry_format >= 4:
        raise EntryInvalid(
            f'has `retention` = {r.raw["retention"]!r}, not {{"versions": <whole number >= 0>, '
            '"hours": <number >= 0>}'
        )
    return found


class Reader:
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
            f = Reader(item, f"{self.prefix}{key}[{i}].")
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


def fold(files: dict[str, FileEntry], entry: Entry) -> None:
    """Apply ``entry`` to ``files`` (path -> the entry of the file now at that path).

    A REBIND lists every file of the table where it is now: the paths before it were the
    folder's before it moved (a rename, a new location), and no later version has them."""
    if entry.operation == "REBIND":
        files.clear()
    for f in entry.removed:
        files.pop(f.path, None)
    for f in entry.added:
        files[f.path] = f


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


def unreadable_row(version: int, applied: bool, reason: str) -> dict[str, Any]:
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
