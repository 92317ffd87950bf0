"""Where a journal keeps its files, and the small values every part of it shares.

Only the journal knows this layout (recovery validates entries against it), so the data
phases are handed staging folders (:class:`Staging`) rather than building paths of their own.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..storage import Storage, is_hidden
from ..table import HIVE_DEFAULT_PARTITION, partition_values

LOG_DIR = "_rowmerge_log"
STAGING_DIR = "staging"
RETAINED_DIR = "retained"  # files replaced by a version, kept while retention lasts (retention.py)
DATA_DIR = "data"
CDF_DIR = "cdf"
FEED_ROWS_DIR = "rows"
# The data write's folder for the table's files among its outputs (rewrite.KIND = rewrite.DATA).
ROUTED_DATA = "__rowmerge_kind=data"
# A data write that keeps touched files apart (rewrite.task_groups) stages each group's files in
# a folder of this partition column (visible: the listing skips hidden names), whose files of
# one task share their names; placed in the table, the group goes into the name (placed()).
TASK_GROUP = "rowmerge-task-group"
ENTRY_SUFFIX = ".json"
APPLIED_SUFFIX = ".applied"
CHECKPOINT_SUFFIX = ".stats.json"  # a statistics checkpoint (checkpoint.py)
BASE_SUFFIX = ".base.json"  # the record of the versions a vacuum folded (base.py)
VERSION_DIGITS = 20
# A version is a change feed's _commit_version (BIGINT): the largest one a commit may take.
MAX_VERSION = 2**63 - 1
# Names in the log folder: <20 digits><suffix>; a digit-named file of another width was not
# written by a journal, and recovery stops on it instead of guessing (see Journal.scan_log).
LOG_NAME = re.compile(r"^(\d+)(\.json|\.applied|\.stats\.json|\.base\.json)$")
TXN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]*$")


def utc_now() -> datetime:
    """Now, at millisecond precision (what the journal stores and the change feed repeats)."""
    now = datetime.now(timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def parse_iso(text: str) -> datetime:
    """A journal timestamp (written by :func:`iso`) as an aware UTC datetime."""
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds")


def spec_digest(raw: Mapping[str, Any]) -> str:
    """A short fingerprint of the merge spec: which spec produced an entry, without storing it."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def new_txn() -> str:
    """A staging folder name: sortable by time, unique without coordination."""
    return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"


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
    def feed_rows_dir(self) -> str:
        """Where a data write that also emits the change feed's rows puts each output, in a
        folder of its own: the change rows wait there to be stamped into :attr:`cdf_dir`, the
        table's new files stay there (:attr:`routed_data_dir`)."""
        return f"{self.dir}/{FEED_ROWS_DIR}"

    @property
    def routed_data_dir(self) -> str:
        """The table's new files of a data write that also emitted the feed's rows, in the
        table's partition layout: staged there instead of :attr:`data_dir` (no move, which on
        an object store is a copy of every file)."""
        return f"{self.feed_rows_dir}/{ROUTED_DATA}"

    @property
    def data_dirs(self) -> tuple[str, str]:
        """The folders the table's new files may be staged in."""
        return (self.data_dir, self.routed_data_dir)

    def data_path(self, staged: str) -> str:
        """Where a staged data file goes in the table, relative to its folder: its path below
        the folder of :attr:`data_dirs` it is in (:func:`placed`)."""
        for folder in self.data_dirs:
            if staged.startswith(folder.rstrip("/") + "/"):
                return placed(below(staged, folder))
        raise ValueError(f"{staged} is not a staged data file of {self.dir}")

    @property
    def cdf_dir(self) -> str:
        """The change-feed files (one flat folder: the commit moves them into its partition)."""
        return f"{self.dir}/{CDF_DIR}"


def ancestors(location: str) -> list[str]:
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


def below(path: str, folder: str) -> str:
    """``path`` relative to ``folder``, which holds it (a staged file's partition sub-path)."""
    return path.split(folder.rstrip("/") + "/", 1)[1]


def placed(rel: str) -> str:
    """A staged data file's path below its staging folder as placed in the table.

    A write that kept touched files apart staged them in a folder per task group (a number:
    ``rowmerge-task-group=3/<partition folders>/part-00001-<job>.c000.snappy.parquet``), where
    a task's files of different groups have the same name: in the table the group folder goes
    and the name takes the group (``<partition folders>/g3-part-00001-...``; ``gn-`` for the
    rows of no touched file). Any other path stays as it is."""
    head, sep, rest = rel.partition("/")
    if not sep or not head.startswith(TASK_GROUP + "="):
        return rel
    value = head[len(TASK_GROUP) + 1 :]
    tag = "n" if value == HIVE_DEFAULT_PARTITION else value
    if not tag.isdigit() and tag != "n":
        return rel  # not a group this engine writes: left for the entry's checks to refuse
    folder, _, name = rest.rpartition("/")
    return f"{folder}/g{tag}-{name}" if folder else f"g{tag}-{name}"


def inside(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` if it is a visible file below it (no ``..``, no hidden part)."""
    root = root.rstrip("/")
    if not path.startswith(root + "/"):
        return None
    rel = path[len(root) + 1 :]
    segments = rel.split("/")
    if any(s in ("", ".", "..") or is_hidden(s) for s in segments):
        return None
    return rel


def layout_problems(what: str, rel: str, partition_columns: Sequence[str]) -> list[str]:
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


@dataclass
class JournalFiles:
    """The journal of one table: where its files are (the base each part of it builds on)."""

    storage: Storage
    location: str  # qualified

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

    def base_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{BASE_SUFFIX}"

    def retained_dir(self, version: int) -> str:
        """Where the files ``version`` replaced are kept (retention.py)."""
        return f"{self.log_dir}/{RETAINED_DIR}/{version:0{VERSION_DIGITS}d}"

    def retained_path(self, version: int, path: str) -> str:
        """Where ``path``, a file of the table that ``version`` replaced, is kept: at the same
        place below ``retained/<version>/`` as below the table (its partition folders too)."""
        rel = inside(path, self.location)
        if rel is None:
            raise ValueError(f"{path} is not a data file of the table at {self.location}")
        return f"{self.retained_dir(version)}/{rel}"
