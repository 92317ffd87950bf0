"""Merge metrics: Delta's names (camelCase), one public serializable structure.

Every phase of ``run_merge`` runs inside :func:`timed`, which records its duration under
the phase's metric; counters are filled by the phase that knows them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from .calls import CallCounts

COUNTER_NAMES = (
    "numSourceRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsCopied",
    "numTargetRowsMatchedUpdated",
    "numTargetRowsMatchedDeleted",
    "numTargetRowsNotMatchedBySourceUpdated",
    "numTargetRowsNotMatchedBySourceDeleted",
    "numTargetFilesBeforeSkipping",
    "numTargetFilesAfterSkipping",
    "numTargetFilesAdded",
    "numTargetFilesRemoved",
    "numTargetBytesAdded",
    "numTargetBytesRemoved",
    "numTargetChangeFilesAdded",
    # Which path rewrote the files: 1 if the candidate files were rewritten in one pass
    # (no scan), and 1 in onePassFallback if that was tried and thrown away: then the files
    # it saw a clause act on were rewritten (scanTimeMs 0), or, if a target row met two
    # source rows, the scan decided.
    "onePass",
    "onePassFallback",
    # Candidate files (those statistics left to read) of a merge with a matched clause that it
    # did not rewrite: what tells the next merge whether to bet on the one-pass write.
    "numCandidateFilesUntouched",
    # 1 if the one-pass write joined the candidates and the source in a single task
    # (rewrite.single_task_join) rather than with the source broadcast.
    "onePassSingleTask",
    # 1 if the one-pass write with the source broadcast inserted the source rows whose keys lie
    # below or above all the files' ranges without a join (rewrite.inserts_by_statistics), and 1 in
    # onePassInsertsRechecked if some rows inside the ranges matched nothing, so a second write
    # found the inserts among them from the ids the write observed (rewrite.inside_inserts).
    "onePassInsertsByStatistics",
    "onePassInsertsRechecked",
    # 1 if no source row could match and one job read the source and wrote its inserts
    # (direct.py), and 1 in directInsertFallback if that was tried and some row could match
    # (or the job failed), so the write was discarded and the merge ran as usual.
    "directInsert",
    "directInsertFallback",
    # 1 if a direct write spread over the source's tasks (a large source) was thrown away for
    # leaving more than twice the files the usual path writes for its rows, or not tried
    # because the merge before had one thrown away (direct.scattered_before).
    "directInsertScattered",
    # Source rows whose keys lie outside all the files' ranges (on some key column), so they
    # could match nothing, when the merge counted them (0 otherwise): what tells the next merge
    # whether to bet on the direct write.
    "numSourceRowsOutsideRanges",
    # Auto-compaction after the merge (optimize.py): the OPTIMIZE version it committed (0:
    # none), and the files it replaced and wrote.
    "compactVersion",
    "numCompactedFilesRemoved",
    "numCompactedFilesAdded",
    # Round trips of the whole merge, compaction included (calls.py): py4j calls from the
    # driver's merge threads to its JVM (0 through Spark Connect), catalog calls, and
    # filesystem operations of the journal, lock, staging and footer reads (not Spark's own);
    # and the bytes of the journal's files it read (entries, checkpoints, the lock's files).
    "numPy4jCalls",
    "numCatalogCalls",
    "numFilesystemCalls",
    "numJournalBytesRead",
)
TIMER_NAMES = (
    "executionTimeMs",
    "materializeSourceTimeMs",
    "scanTimeMs",
    "rewriteTimeMs",
    "commitTimeMs",
    "compactTimeMs",
)


@dataclass
class MergeMetrics:
    """Counters and timers of one merge; ``as_dict`` is what history and dbt report."""

    values: dict[str, int] = field(default_factory=lambda: {name: 0 for name in COUNTER_NAMES + TIMER_NAMES})

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def __setitem__(self, name: str, value: int) -> None:
        if name not in self.values:
            raise KeyError(f"unknown merge metric {name!r}")
        self.values[name] = int(value)

    def add(self, name: str, value: int) -> None:
        self[name] = self.values[name] + int(value)

    def record_calls(self, counts: CallCounts) -> None:
        self["numPy4jCalls"] = counts.py4j
        self["numCatalogCalls"] = counts.catalog
        self["numFilesystemCalls"] = counts.filesystem
        self["numJournalBytesRead"] = counts.journal_bytes

    def as_dict(self) -> dict[str, int]:
        return dict(self.values)


@contextmanager
def timed(metrics: MergeMetrics, name: str) -> Iterator[None]:
    """Add the wall time of the block to timer ``name`` (even if it raises)."""
    start = time.monotonic()
    try:
        yield
    finally:
        metrics.add(name, round((time.monotonic() - start) * 1000))


@dataclass(frozen=True)
class MergeResult:
    """What ``run_merge`` returns: the committed version and the metrics."""

    version: int
    metrics: dict[str, int]
    target: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The dbt run line, e.g. ``MERGE 120 updated, 30 inserted, 4 deleted; 3 of 64 files rewritten``."""
        m = self.metrics
        return (
            f"MERGE {m['numTargetRowsUpdated']} updated, {m['numTargetRowsInserted']} inserted, "
            f"{m['numTargetRowsDeleted']} deleted; {m['numTargetFilesRemoved']} of "
            f"{m['numTargetFilesBeforeSkipping']} files rewritten"
        )


@dataclass(frozen=True)
class DryRunReport:
    """What ``dry_run`` returns: what the merge would do, measured without writing anything."""

    target: str
    source_rows: int
    files: int  # data files of the table
    bytes: int
    files_read: int  # after skipping by statistics
    files_rewritten: int  # files some clause acts on: the merge would replace them
    bytes_rewritten: int
    clauses: list[tuple[str, str, int]]  # (clause label, action, rows it would act on), in order
    seconds: float = 0.0

    def rows(self, action: str) -> int:
        return sum(n for _, a, n in self.clauses if a == action)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clauses"] = [{"clause": label, "action": a, "rows": n} for label, a, n in self.clauses]
        return out

    def summary(self) -> str:
        """The dbt run line, e.g. ``MERGE dry run: would update 120, insert 30, delete 4 rows;
        rewrite 3 of 64 files (12.1 MB of 250.3 MB); nothing written``."""
        return (
            f"MERGE dry run: {self.target} would update {self.rows('update')}, insert "
            f"{self.rows('insert')}, delete {self.rows('delete')} rows; rewrite {self.files_rewritten} of "
            f"{self.files} files ({_size(self.bytes_rewritten)} of {_size(self.bytes)}); nothing written"
        )


def _size(n: int) -> str:
    """Bytes for people: 512 bytes, 12.1 KB, 250.3 MB, 1.2 GB."""
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"
