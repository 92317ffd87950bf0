"""What a journal checks before a commit point, and before recovery touches anything."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import ConcurrentMergeError, JournalError, StorageError, UnsupportedTableError
from ..sqltext import check_path_safe, parse_name, same_table
from ..storage import FileInfo, is_hidden
from ..table import TargetTable, struct_from_json
from .entry import Entry, FeedFiles
from .layout import (
    LOG_DIR,
    MAX_VERSION,
    RETAINED_DIR,
    TXN,
    VERSION_DIGITS,
    ancestors,
    inside,
    layout_problems,
    placed,
)
from .snapshots import Snapshots


class Checks(Snapshots):
    """The table's files now, whose journal this is, and whether an entry may be applied."""

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
        for folder in ancestors(self.location):
            log = f"{folder.rstrip('/')}/{LOG_DIR}"
            if self.storage.exists(log):
                raise UnsupportedTableError(
                    f"{table} is stored at {self.location}, inside the folder of another table "
                    f"that has a journal ({log}): that table reads this one's files as its own "
                    "rows, and its commits would rewrite them. Give each table a folder of its "
                    "own (a location outside the other's). Nothing was changed."
                )

    def check_bound(self, target: TargetTable) -> None:
        """:meth:`check_newest` against the journal as it is (none yet: any table may start it)."""
        versions = self.versions()
        if versions:
            self.check_newest(versions, self.entry(versions[-1], target.name), target)

    def check_newest(self, versions: Sequence[int], newest: Entry, target: TargetTable) -> None:
        """:meth:`check_owner` against ``newest`` (the entry of ``versions[-1]``), and refuse a
        table whose folder :meth:`moved` (a FENCE or a VACUUM names no files: older entries are
        read until one does)."""
        self.check_owner(newest, target)
        moved = self.moved(versions, newest, target)
        if moved is not None:
            self.refuse_moved(*moved, target)

    def moved(self, versions: Sequence[int], newest: Entry, target: TargetTable) -> tuple[Entry, str] | None:
        """The entry that says where the table's files are and the folder it names, if that
        folder is not the table's (None: the files are where the journal says).

        The newest entry that places the files (``newest``, the entry of ``versions[-1]``,
        already read, if it does; else an older one) names none below the table's folder. A
        folder moved or copied after it left every entry naming the old folder, so when the
        entry that placed the files before it names some here, the newer one is an edited
        entry — if it is a write not yet applied, which recovery judges (:meth:`problems`
        names the path). Any other entry naming another folder after one naming this folder
        is a move: a REBIND recorded a move away and the folder came back (copied back, or
        ``SET LOCATION`` to the old place), or an applied entry that no recovery reads again.
        """
        placed = newest if _places(newest) else self.newest_with_files(versions[:-1], target.name)
        if placed is None:
            return None
        folder = self.moved_from(placed, target)
        if folder is None:
            return None
        return None if self._edited(placed, versions, target) else (placed, folder)

    def _edited(self, placed: Entry, versions: Sequence[int], target: TargetTable) -> bool:
        """Whether ``placed`` (naming no file below the table's folder) is left to recovery as
        an edited entry: an unapplied write after an entry naming this folder's files. Reads
        that entry and lists the log only on this rare path."""
        if not placed.is_write:
            return False
        before = self.newest_with_files([v for v in versions if v < placed.version], target.name)
        here = before is not None and _names_files(before) and self.moved_from(before, target) is None
        return here and placed.version not in self.listing()[1]

    def newest_with_files(self, versions: Sequence[int], table: str) -> Entry | None:
        """The newest entry of ``versions`` that says where the table's files are (names data
        files, or is a REBIND: an empty table rebound names none); None if none does, or if a
        damaged entry comes first (recovery judges those)."""
        for version in reversed(versions):
            try:
                entry = self.entry(version, table)
            except JournalError:
                return None
            if _places(entry):
                return entry
        return None

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

    def moved_from(self, entry: Entry, target: TargetTable) -> str | None:
        """The folder ``entry``'s files were in, if not this one: the table's folder was moved
        or copied (``ALTER TABLE … SET LOCATION``, a copied warehouse) after ``entry``. Only
        when none of its paths lies below this folder: an entry naming one path elsewhere among
        others here was edited, and :meth:`problems` names that path."""
        paths = [f.path for f in (*entry.added, *entry.removed)]
        below = self.location.rstrip("/") + "/"
        if not paths or any(p.startswith(below) for p in paths):
            return None
        folder = paths[0].rsplit("/", 1)[0]
        for _ in target.partition_columns:
            if "=" in folder.rsplit("/", 1)[-1]:
                folder = folder.rsplit("/", 1)[0]
        return folder

    def refuse_moved(self, entry: Entry, before: str, target: TargetTable) -> None:
        """Refuse a journal whose entry names files in another folder (``before``) than the table's.

        Its versions describe that folder's files: a commit here would be judged against
        them, a recovery would move them, and ``as_of``/``restore`` would read them — the rows
        of another copy of the table, or of none. :meth:`rebind` records the new place.
        """
        raise UnsupportedTableError(
            f"{target.name} is stored at {self.location}, but its journal ({self.log_dir}) names "
            f"files at {before} (version {entry.version}): the table's folder was moved or "
            "copied there without its journal knowing (ALTER TABLE … SET LOCATION, a copied "
            "warehouse; or its location is now written another way, as s3:// for s3a://). "
            "Its versions describe the files of the other folder, so a merge, "
            "optimize, restore or time-travel read would act on them. Record the new place once: "
            f"`dbt run-operation rowmerge_rebind --args '{{relation: {target.qualified_name}}}'` "
            "(Python: rebind(spark, table)); versions from then on can be read and restored, "
            "earlier ones cannot. Nothing was changed."
        )

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
        if entry.txn is None or not TXN.match(entry.txn):
            out.append(f"has an invalid txn {entry.txn!r}")
            return out
        if entry.read_version != entry.version - 1:
            out.append(f"was planned on version {entry.read_version}, not {entry.version - 1}")
        data_staging = self.staging(entry.txn).data_dirs
        parts = [c.lower() for c in partition_columns]
        for i, f in enumerate(entry.added):
            rel = inside(f.path, self.location)
            if rel is None:
                out.append(
                    f"adds added[{i}] {f.path}, which is not a data file of the table at {self.location}"
                )
                continue
            if entry.operation == "RESTORE":
                out += self._restore_problems(entry, i, f.staged, rel)
            elif f.staged is None or all(_placed(inside(f.staged, d)) != rel for d in data_staging):
                out.append(f"stages added[{i}] at {f.staged}, not at {data_staging[0]}/{rel}")
            out += layout_problems(f"added[{i}]", rel, parts)
        for i, f in enumerate(entry.removed):
            if inside(f.path, self.location) is None:
                out.append(
                    f"removes removed[{i}] {f.path}, which is not a data file of the table at {self.location}"
                )
        for p in entry.partitions:
            out += layout_problems("a partition", f"{p}/x", parts)
        for name, ddl in entry.new_columns:
            if not name or not ddl:
                out.append("adds a column without a name or type")
        if entry.cdf is not None:
            out += self._feed_problems(entry, entry.cdf)
        return out

    def _restore_problems(self, entry: Entry, i: int, staged: str | None, rel: str) -> list[str]:
        """A RESTORE brings ``added[i]`` back from the folder of the version that retained it:
        ``retained/<k>/<its path below the table>``, for a ``k`` before the restore."""
        found = inside(staged, f"{self.log_dir}/{RETAINED_DIR}") if staged else None
        k, _, below_k = (found or "").partition("/")
        if not (k.isdigit() and len(k) == VERSION_DIGITS and int(k) < entry.version and below_k == rel):
            return [f"brings added[{i}] back from {staged}, not from a version's retained/<k>/{rel}"]
        return []

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
            struct_from_json(cdf.columns)
        except Exception as exc:  # malformed schema JSON
            out.append(f"gives the change table columns that are not a schema ({exc})")
        feed_staging = self.staging(str(entry.txn)).cdf_dir
        for i, f in enumerate(cdf.files):
            rel = inside(f.path, cdf.location)
            name = f.path.rsplit("/", 1)[-1]
            if rel != f"{cdf.partition}/{name}" or is_hidden(name):
                out.append(f"moves cdf.files[{i}] to {f.path}, not into {cdf.location}/{cdf.partition}/")
            if f.staged is None or inside(f.staged, feed_staging) != name:
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

        staging = self.staging(entry.txn).dir if entry.txn and TXN.match(entry.txn) else None
        retained = f"{self.log_dir}/{RETAINED_DIR}"
        for f in entry.added:
            check(f.path, self.location)
        for f in entry.removed:
            check(f.path, self.location)
        if entry.cdf is not None:
            for f in entry.cdf.files:
                check(f.path, entry.cdf.location)
        for f in entry.moves():
            if f.staged and f.staged.startswith(retained + "/"):
                check(f.staged, retained)
            elif f.staged and staging:
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


def _placed(staged: str | None) -> str | None:
    """Where a data file staged at ``staged`` (relative to its staging folder) goes in the table."""
    return placed(staged) if staged is not None else None


def _names_files(entry: Entry) -> bool:
    """Whether ``entry`` names any data file (an empty table's REBIND names none)."""
    return bool(entry.added or entry.removed)


def _places(entry: Entry) -> bool:
    """Whether ``entry`` says where the table's files are: it names some, or it is a REBIND
    (which lists every file of the table, none for an empty one)."""
    return entry.operation == "REBIND" or _names_files(entry)
