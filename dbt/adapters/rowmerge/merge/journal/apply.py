"""Rolling a committed entry forward, and recovery: every step repeatable, in an order that
never hides a row from readers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.utils import AnalysisException

from .. import faults
from ..errors import JournalError, spark_reason
from ..table import (
    COMMIT_VERSION,
    TargetTable,
    add_columns,
    catalog_sql,
    column_ddl,
    create_table_at,
    describe_table,
    quote,
    refresh_table,
    register_partitions,
    sql_name,
    struct_from_json,
    table_exists,
)
from .base import sha256
from .commit import Writer
from .entry import Entry, FeedExpiry, FeedFiles, FileEntry
from .layout import (
    APPLIED_SUFFIX,
    BASE_SUFFIX,
    CHECKPOINT_SUFFIX,
    ENTRY_SUFFIX,
    LOG_NAME,
    STAGING_DIR,
    VERSION_DIGITS,
)


class StepNotDone(OSError):
    """A step of applying a committed entry did not happen (the storage refused it): the entry
    stays unapplied, and recovery tries again."""


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


class Journal(Writer):
    """The journal of one table."""

    def apply(
        self,
        spark: SparkSession,
        entry: Entry,
        target: TargetTable,
        prepared: bool = False,
        steps: str = "",
        feed_entry: Any = None,
    ) -> None:
        """Roll ``entry`` forward on ``target``; repeatable. Call :meth:`check` first.

        ``prepared``: the committing writer has just added the entry's columns and checked its
        change table (before the commit point), so the catalog need not be asked again;
        ``feed_entry``: that change table's catalog entry as the writer read it then.
        ``steps``: a prefix for the names of its steps (faults.py), so a test can stop the apply
        of a compaction that follows a merge apart from the merge's own.
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
            faults.fault_point(f"{steps}move_{i}")
        # New partitions become visible before any replaced file goes away, so a reader of
        # the catalog sees every row throughout (old and new versions side by side at worst).
        register_partitions(spark, target.ident, list(entry.partitions))
        if cdf and feed_ident:
            register_partitions(spark, feed_ident, [cdf.partition], feed_entry if prepared else None)
        faults.fault_point(f"{steps}registered")
        for i, f in enumerate(entry.removed):
            if entry.retains:
                self.retain_replaced(f, entry.version)
            else:
                self.remove_replaced(f.path, entry.version)
            faults.fault_point(f"{steps}delete_{i}")
        # Folders of versions out of retention go last: no reader of the table needs them.
        for i, k in enumerate(entry.expired):
            self.storage.delete(self.retained_dir(k), recursive=True)
            faults.fault_point(f"{steps}expire_{i}")
        if entry.base is not None:
            self._fold(entry, steps)
        if entry.feed_expired is not None:
            self._drop_feed_versions(spark, entry.feed_expired, steps)
        faults.fault_point(f"{steps}before_applied")
        marker = self.applied_path(entry.version)
        if not self.storage.create_if_absent(marker, "") and not self.storage.exists(marker):
            raise StepNotDone(f"could not create {marker}: the storage reported it not written")
        faults.fault_point(f"{steps}applied")
        if entry.txn:
            self.discard(self.staging(entry.txn))
        # The change table needs no refresh: its version's partition is new, so no listing the
        # session holds can miss the files in it (register_partitions).
        refresh_table(spark, target.ident, files_at=target.location)

    def folded_by(self, b: int) -> dict[str, list[str]]:
        """The log's files a base of version ``b`` stands for, by suffix: every entry, marker,
        checkpoint and base of an older version, and version ``b``'s own but its base."""
        doomed: dict[str, list[str]] = {}
        for name in self.storage.list_names(self.log_dir):
            found = LOG_NAME.match(name)
            if not found or len(found.group(1)) != VERSION_DIGITS:
                continue
            version, suffix = int(found.group(1)), found.group(2)
            if version < b or (version == b and suffix != BASE_SUFFIX):
                doomed.setdefault(suffix, []).append(name)
        return doomed

    def _fold(self, entry: Entry, steps: str) -> None:
        """Delete what the base ``entry`` commits stands for: the entries it folds first (once
        they are gone no reader can take one for a version), then their applied markers and
        statistics checkpoints, and older bases. Only after checking that the base is the
        file the entry names: without it those entries would be the only record left."""
        assert entry.base is not None
        b, digest = entry.base
        path = self.base_path(b)
        try:
            text: str | None = self.storage.read_text(path)
        except Exception:  # noqa: BLE001 - missing or unreadable: the same refusal
            text = None
        if text is None or sha256(text) != digest:
            raise JournalError(
                f"Cannot finish version {entry.version} of {entry.table}: the base it commits, {path}, "
                f"is {'missing' if text is None else 'not the file it names'}, so the entries it folds "
                "are kept. Put that file back from a backup (or the entries it folded were not deleted "
                "yet: move the damaged base out of the folder and run again). Nothing else was changed."
            )
        doomed = self.folded_by(b)
        for suffix in (ENTRY_SUFFIX, APPLIED_SUFFIX, CHECKPOINT_SUFFIX, BASE_SUFFIX):
            for name in sorted(doomed.get(suffix, ())):
                self.storage.delete(f"{self.log_dir}/{name}")
            faults.fault_point(f"{steps}fold{suffix.replace('.', '_')}")

    def _drop_feed_versions(self, spark: SparkSession, expiry: FeedExpiry, steps: str) -> None:
        """Drop the change-feed versions a VACUUM expires: from the catalog first (readers of
        the change table stop seeing them at once), then their folders. Repeatable: a version
        already gone is skipped; a change table dropped since needs no catalog step."""
        specs = [f"PARTITION ({quote(COMMIT_VERSION)} = {k})" for k in expiry.versions]
        ident = sql_name(expiry.table)
        if specs and table_exists(spark, ident):
            for i in range(0, len(specs), 100):
                catalog_sql(spark, f"ALTER TABLE {ident} DROP IF EXISTS {', '.join(specs[i : i + 100])}")
        faults.fault_point(f"{steps}feed_dropped")
        for k in expiry.versions:
            self.storage.delete(f"{expiry.location}/{COMMIT_VERSION}={k}", recursive=True)
        faults.fault_point(f"{steps}feed_deleted")

    def _move(self, staged: str, path: str) -> None:
        """Move a staged file into place. A rename the storage reports as not done is done all
        the same when an earlier replay moved it (the file is in place, not staged)."""
        if self.storage.rename(staged, path):
            return
        if self.storage.exists(path) and not self.storage.exists(staged):
            return
        raise StepNotDone(f"could not move {staged} to {path}: the storage reported the move as not done")

    def retain_replaced(self, f: FileEntry, version: int) -> None:
        """Move a file ``version`` replaces out of the table into ``retained/<version>/``.

        Repeatable: a file already moved (an earlier replay) is done, and so is one that is
        gone from both places (someone deleted it: the table is right without it, and reading
        an older version that needs it will say the file is missing). A move the storage
        refuses stops the apply, as a refused delete does.
        """
        kept = self.retained_path(version, f.path)
        try:
            if self.storage.rename(f.path, kept) or self.storage.exists(kept):
                return
            reason = "the storage reported the move as not done"
        except FileNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001 - pyarrow raises, Hadoop returns false
            reason = spark_reason(exc)
        if not self.storage.exists(f.path):
            return
        why = self.storage.removal_problem(f.path)
        raise StepNotDone(
            f"could not move {f.path}, which version {version} replaces, to {kept} ({why or reason}); "
            "until it is moved, readers see its rows next to their new version"
        )

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
        schema = struct_from_json(cdf.columns)
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
            self.check_newest(versions, newest, target)
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
