"""File statistics as of a version, folded from the entries, and the checkpoints that cache them."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from .. import calls
from ..filestats import FileSummary, indexed_columns, parse_summary, summarize_files
from ..storage import FileInfo
from ..table import TargetTable
from .entry import Entry, FileEntry, Reader, fold
from .log import LogReader

logger = logging.getLogger("rowmerge")

ENTRY_READ_THREADS = 8  # entries read at once when gathering file statistics
# Every CHECKPOINT_INTERVAL versions, the file statistics folded from entries 0..v are saved
# (see Checkpoints.file_summaries), so a merge reads one checkpoint and the entries after it, not
# every entry the table ever had.
CHECKPOINT_SUFFIX = ".stats.json"
CHECKPOINT_INTERVAL = 20
CHECKPOINT_FORMAT = 1


class Checkpoints(LogReader):
    """Statistics of every file a version leaves in place (recorded in the entries; see filestats)."""

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
            read_entries = list(pool.map(calls.joined(read), todo))
        complete = True  # every entry up to `due` was read (a checkpoint may be saved)
        for version, got in zip(todo, read_entries, strict=True):
            if got is None:
                complete = False  # (read only at `due`: a gap after it does not matter)
                continue
            fold(out, got[1])
            if version == due > 0 and save_checkpoint and start < due and complete:
                self._save_checkpoint(due, got[0], out)
        for entry in pending:
            fold(out, entry)
        return out

    def _read_checkpoint(self, version: int) -> dict[str, FileEntry] | None:
        """The fold saved for ``version``, if it is valid for this journal's entry ``version``."""
        try:
            raw = json.loads(self.storage.read_text(self.checkpoint_path(version)))
            r = Reader(raw if isinstance(raw, dict) else {})
            if r.integer("format") != CHECKPOINT_FORMAT or r.integer("version") != version:
                return None
            entry_text = self._read_entry_text(version)[0]
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
