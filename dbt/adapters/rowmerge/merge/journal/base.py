"""The base: the record of the versions a vacuum folded, which their entries no longer are.

A journal that keeps every entry grows by one per merge forever (an hourly model: 8,760 a
year). Vacuum folds the entries of versions older than retention into one file,
``<version>.base.json``: the table's files as of that version (with their statistics), and
what later versions still need from the ones before (the files version 0 found, the
clustering and retention in force, the change tables written). Then it deletes those
entries. Unlike a statistics checkpoint (a cache, never trusted alone), a base replaces the
entries it folds, so it is written and read back before the VACUUM entry that commits it
names its SHA-256, and it counts only once that entry exists and matches: a base left by a
vacuum that crashed before its commit is ignored (and replaced by the next vacuum).

Readers see the base as the table's oldest version: a version ``b`` whose entry lists every
file of the table then as added (``as_entry``), so every fold of the journal (statistics,
``as_of``, restore, history) starts from it unchanged. History shows it as one row,
operation ``BASE``, standing for the versions it folded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .entry import Entry, EntryInvalid, FileEntry, Reader
from .retention import Retention

BASE_FORMAT = 1
BASE_OPERATION = "BASE"  # history's name for the versions a base stands for


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Base:
    """The versions ``first`` to ``version`` of a table, folded by the vacuum that committed
    ``vacuum_version``."""

    version: int
    vacuum_version: int
    table: str
    timestamp: str  # version's commit time
    files: tuple[FileEntry, ...]  # the table's files at ``version``, with their statistics
    created: tuple[str, ...]  # those of them version 0 found (compaction's idle files)
    first: int  # the oldest version folded (0, or the version of the base before)
    first_timestamp: str
    folded: int  # how many versions it stands for
    rows: int  # the table's rows at ``version``
    cluster_by: tuple[str, ...] | None = None
    retention: Retention | None = None
    feed_tables: tuple[str, ...] = ()  # every change table the folded versions wrote to
    feed_table: str | None = None  # the one the newest version that changed rows wrote to
    feed_kept_from: int = 0  # the oldest version whose change rows a vacuum kept (0: all)
    # folded full refreshes that wrote no change rows: a feed read across one must still fail
    feed_skipped: tuple[int, ...] = ()

    def to_json(self) -> str:
        out: dict[str, Any] = {
            "format": BASE_FORMAT,
            "version": self.version,
            "vacuum_version": self.vacuum_version,
            "table": self.table,
            "timestamp": self.timestamp,
            "first": self.first,
            "first_timestamp": self.first_timestamp,
            "folded": self.folded,
            "rows": self.rows,
            "created": list(self.created),
            "feed_tables": list(self.feed_tables),
            "feed_table": self.feed_table,
            "feed_kept_from": self.feed_kept_from,
            "feed_skipped": list(self.feed_skipped),
        }
        if self.cluster_by is not None:
            out["cluster_by"] = list(self.cluster_by)
        if self.retention is not None:
            out["retention"] = self.retention.as_json()
        out["files"] = [f.as_json() for f in self.files]
        return json.dumps(out, indent=1)

    @staticmethod
    def parse(text: str, version: int) -> Base:
        """The base in ``text`` (the file of ``version``); EntryInvalid saying what is wrong."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise EntryInvalid(f"is not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise EntryInvalid(f"holds a JSON {type(raw).__name__}, not an object")
        r = Reader(raw)
        if r.integer("format") != BASE_FORMAT:
            raise EntryInvalid(
                f"has format {raw.get('format')!r}; this release reads base format {BASE_FORMAT}"
            )
        if r.integer("version") != version:
            raise EntryInvalid(
                f"says it is version {raw.get('version')!r}, but its file is version {version}"
            )
        feed_table = raw.get("feed_table")
        retention = Retention.from_json(raw["retention"]) if "retention" in raw else None
        if "retention" in raw and retention is None:
            raise EntryInvalid(f"has `retention` = {raw['retention']!r}, not a retention")
        return Base(
            version=version,
            vacuum_version=r.integer("vacuum_version"),
            table=r.string("table"),
            timestamp=r.string("timestamp"),
            files=r.files("files", staged=False),
            created=tuple(r.strings("created")),
            first=r.integer("first"),
            first_timestamp=r.string("first_timestamp"),
            folded=r.integer("folded"),
            rows=r.integer("rows"),
            cluster_by=tuple(r.strings("cluster_by")) if "cluster_by" in raw else None,
            retention=retention,
            feed_tables=tuple(r.strings("feed_tables")),
            feed_table=feed_table if isinstance(feed_table, str) and feed_table else None,
            feed_kept_from=r.integer("feed_kept_from"),
            feed_skipped=_versions(raw.get("feed_skipped", []), version),
        )

    def as_entry(self) -> Entry:
        """The base as the oldest version of the journal: every file it holds, added."""
        return Entry(
            version=self.version,
            table=self.table,
            operation=BASE_OPERATION,
            timestamp=self.timestamp,
            added=self.files,
            removed=(),
            metrics={
                "foldedVersions": self.folded,
                "firstVersion": self.first,
                "firstTimestamp": self.first_timestamp,
                "vacuumVersion": self.vacuum_version,
                "numFiles": len(self.files),
                "numOutputRows": self.rows,
                "numOutputBytes": sum(f.size for f in self.files),
                "feedKeptFrom": self.feed_kept_from,
                "feedSkippedVersions": list(self.feed_skipped),
            },
            cluster_by=self.cluster_by,
            retention=self.retention,
        )


def _versions(raw: Any, version: int) -> tuple[int, ...]:
    """``feed_skipped``: versions at or below the base's, each once."""
    if not isinstance(raw, list) or any(
        isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= version for v in raw
    ):
        raise EntryInvalid(f"has `feed_skipped` = {raw!r}, not a list of versions up to {version}")
    if len(set(raw)) != len(raw):
        raise EntryInvalid(f"has `feed_skipped` = {raw!r}, naming a version twice")
    return tuple(sorted(raw))
