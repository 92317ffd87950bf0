"""Phase 9: commit through a journal under the table location, and recover from crashes.

Layout (``_``-prefixed, so Spark, Hive, Trino and DuckDB never read it as data)::

    <table>/_rowmerge_log/staging/<txn>/data/...   rewritten and inserted files, before the commit
    <table>/_rowmerge_log/staging/<txn>/cdf/...    change-feed files, before the commit
    <table>/_rowmerge_log/<version>.json           the entry; creating it (create-if-absent) commits
    <table>/_rowmerge_log/<version>.applied        written once every step of the entry is done
    <table>/_rowmerge_log/<version>.stats.json     file statistics as of that version (a cache)
    <table>/_rowmerge_log/retained/<version>/...   files that version replaced, while retained
    <table>/_rowmerge_log/<version>.base.json      the versions up to it, folded by a vacuum
    <table>/_rowmerge_log/lock/                    the writer lease (see ``lock``)

Version 0 describes the table as dbt created it (or as the first write found it). A writer
plans version ``read + 1`` while holding the lock and creates exactly that entry, so a writer
that lost its lock cannot commit over a newer version. Before the entry is created, the
entry is validated exactly as recovery will validate it, so nothing that can be checked is
left to fail after the commit point. After it, every step is idempotent and they run in an
order that never hides a row from readers: add columns if absent, move each staged file
into place if still staged, add new partitions if absent, then delete each replaced file if
still there (or, when the table retains them, move it into ``retained/<version>/``), then
mark the entry applied. ``recover`` replays an unapplied entry any number
of times; staging without an entry is rolled back.

The journal owns its entries end to end: it hands a writer its staging folders, builds the
entry from what the data phases staged there, and serializes, parses and validates it. It
takes plain values from those phases and imports none of them. It does not know what an
operation means beyond the files it adds and removes.

Recovery never guesses: an entry that cannot be trusted stops it with a JournalError that says
what to do, and is never discarded (its commit may be partly applied, and dropping it would
let the next writer reuse its version). It never follows a path outside the table's (or its
change table's) location, and checks that every staged file is present before it moves any.

The parts, each building on the one before (one class, :class:`Journal`, in layers):

* ``layout``: where the files are, and shared values;
* ``entry``: the entry format (parse, write, history rows);
* ``base``: the record of the versions a vacuum folded, which readers start from;
* ``log``: reading the log (listing, entries, history);
* ``retention``: how long replaced files are kept in ``retained/<version>/``;
* ``checkpoint``: file statistics folded from the entries, and their checkpoints;
* ``snapshots``: any version's files, and where each lives now;
* ``checks``: ownership, placement, and validation of an entry before it is applied;
* ``commit``: building entries and the commit point;
* ``apply``: rolling forward and recovery.
"""

from .apply import Journal, Recovery, StepNotDone
from .checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_INTERVAL
from .commit import ChangeTable, Written
from .entry import (
    ENTRY_FORMAT,
    FIRST_ENTRY_FORMAT,
    OPERATIONS,
    Entry,
    EntryInvalid,
    EntryTooNew,
    FeedFiles,
    FileEntry,
    history_row,
)
from .layout import (
    APPLIED_SUFFIX,
    CDF_DIR,
    CHECKPOINT_SUFFIX,
    DATA_DIR,
    ENTRY_SUFFIX,
    LOG_DIR,
    MAX_VERSION,
    STAGING_DIR,
    VERSION_DIGITS,
    Staging,
    parse_iso,
    utc_now,
)
from .retention import DEFAULT_RETENTION, Retention
from .snapshots import Snapshot

__all__ = [
    "APPLIED_SUFFIX",
    "CDF_DIR",
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_INTERVAL",
    "CHECKPOINT_SUFFIX",
    "DEFAULT_RETENTION",
    "DATA_DIR",
    "ENTRY_FORMAT",
    "ENTRY_SUFFIX",
    "FIRST_ENTRY_FORMAT",
    "LOG_DIR",
    "MAX_VERSION",
    "OPERATIONS",
    "STAGING_DIR",
    "VERSION_DIGITS",
    "ChangeTable",
    "Entry",
    "EntryInvalid",
    "EntryTooNew",
    "FeedFiles",
    "FileEntry",
    "Journal",
    "Recovery",
    "Retention",
    "StepNotDone",
    "Snapshot",
    "Staging",
    "Written",
    "history_row",
    "parse_iso",
    "utc_now",
]
