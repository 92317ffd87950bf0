"""Parquet writer settings taken from the files a write replaces: no dictionary where their
writer gave it up.

Spark's Parquet writer (parquet-mr) starts every column of every file with a dictionary and,
where the values are too many to pay (keys, amounts, ids), gives it up when the column's first
page ends (20,000 rows), encoding again as plain what it had written. In a file of a table's
usual size that first page is most of the column, so a rewrite pays a dictionary lookup for
every value and a second encoding, and writes plain anyway. Profiled on the benchmark's table
(2M rows in 32 files, 24 columns, 17 of them plain in every file) that was a quarter of the
time of writing the rows: the whole-table upsert's write job spent more CPU than the full
rewrite's scan, shuffle and write together.

The files a rewrite replaces show how the writer decided for each column, on the same kind of
rows. Where it gave the dictionary up in every replaced file, the write is told not to try
one (Parquet's per-column ``parquet.enable.dictionary#<column>``): it writes what it would have
ended with, sooner (the same bytes, on the benchmark's files). Only decisions the writer made
on a whole first page count: a row group of parquet-mr (or parquet-java) with at least
:data:`FIRST_PAGE_ROWS` rows. A smaller file (a tiny insert) gives up a dictionary of a few
distinct values because its values are few, and other writers give it up by other rules
(DuckDB at some 50,000 distinct values a row group, where parquet-mr keeps one), so neither
says anything. Any replaced file that keeps the column in a dictionary keeps the write trying
one; so does every write whose inserts may outnumber the rows it rewrites
(:func:`.rewrite.write_changes`: new rows are the replaced files' kind of rows only so far).
A write that replaces no file (an insert) follows the table's largest file, when it inserts
no more than that file holds (:func:`insert_options`): a small insert is where the attempt
costs most, as it spends a first page of every column on it (profiled on the benchmark's
24,000-row insert: half of its task's time). Compaction leaves the writer to choose: what a
write made plain is decided afresh when compaction rewrites it, should the column's values
have become few.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.types import StructField

from .storage import Storage, footer_metadata

logger = logging.getLogger(__name__)

DICTIONARY_OPTION = "parquet.enable.dictionary"
# The writers whose decisions are read (footers' created_by), and the rows of their first page
# (parquet.page.row.count.limit's default): a row group this large saw a whole first page.
WRITERS = ("parquet-mr", "parquet-java")
FIRST_PAGE_ROWS = 20_000


def without_dictionary(footers: Sequence[bytes], fields: Sequence[StructField]) -> list[str]:
    """The names (as ``fields`` spell them: the write's columns) of the top-level columns whose
    dictionary the writer gave up in every footer of ``footers`` (Parquet tails:
    ``Storage.parquet_tails``): no row group stores the column with a dictionary page, and some
    row group of a writer of :data:`WRITERS` with at least :data:`FIRST_PAGE_ROWS` rows stores it
    plain. A column some non-empty file lacks, or holds nested, is left out. Only values count
    towards a first page: a row group whose column is mostly NULL (a column added since, say)
    decides nothing, as the writer saw too few values to give a dictionary up for them.
    """
    # A dot would be read as a path into a struct by the writer's per-column setting.
    names = {f.name.lower(): f.name for f in fields if "." not in f.name}
    candidates = set(names)
    decided: set[str] = set()  # given up on a whole first page somewhere
    for footer in footers:
        meta = footer_metadata(footer)
        if meta.num_rows == 0:
            continue  # an empty file says nothing
        ours = (meta.created_by or "").startswith(WRITERS)
        seen = set()
        for c in range(meta.num_columns):
            leaf = meta.schema.column(c)
            name = leaf.path.lower()
            if leaf.name != leaf.path or name not in candidates:
                continue
            seen.add(name)
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                if group.column(c).has_dictionary_page:
                    candidates.discard(name)
                    break
                if ours and _values(group.column(c), group.num_rows) >= FIRST_PAGE_ROWS:
                    decided.add(name)
        candidates &= seen
        if not candidates:
            break
    return [names[n] for n in sorted(candidates & decided)]


def _values(chunk: Any, rows: int) -> int:
    """The non-NULL values of a column chunk (pyarrow's ColumnChunkMetaData) of ``rows`` rows;
    0 when its statistics do not say."""
    stats = chunk.statistics
    if stats is None or not stats.has_null_count or stats.null_count is None:
        return 0
    return rows - int(stats.null_count)


def options_like(
    storage: Storage,
    files: Mapping[str, int],
    file_format: str,
    fields: Sequence[StructField],
    tails: Mapping[str, bytes] | None = None,
) -> dict[str, str]:
    """Writer options for a Parquet write of ``fields`` whose rows come from the ``files``
    (path -> bytes: the files a rewrite replaces, or the change rows a feed is stamped from),
    in ``file_format``: Parquet's dictionary off for the columns whose dictionary the writer
    gave up in all of them (:func:`without_dictionary`).

    Only their footers are read (a few KB each, a few at a time), unless ``tails`` holds them
    already (by qualified path: :meth:`.storage.Storage.count_rows` keeps them); a file whose
    tail it lacks (one pyarrow could not read) leaves every column trying a dictionary. An
    option only changes how fast a file is written, so a footer that cannot be read leaves
    every column as Parquet's default has it rather than failing the write."""
    if file_format != "parquet" or not files:
        return {}
    try:
        if tails is None:
            tails = storage.parquet_tails(files)
        else:
            tails = {p: tails[p] if p in tails else tails[storage.qualify(p)] for p in files}
        plain = without_dictionary([tails[p] for p in sorted(tails)], fields) if tails else []
    except Exception as exc:  # noqa: BLE001 - a speed-up only: write as Parquet would
        logger.debug("rowmerge: column encodings of the replaced files not read: %s", exc)
        return {}
    return _options(plain)


def insert_options(
    storage: Storage,
    table_files: Mapping[str, int],
    file_format: str,
    fields: Sequence[StructField],
    rows: int | None = None,
    source_bytes: int | None = None,
) -> dict[str, str]:
    """Writer options for a write that only inserts (it replaces no file) into a table of
    ``table_files`` (path -> bytes): as :func:`options_like` says for the table's largest file,
    the one most likely to hold whole first pages (one footer read).

    New rows are the table's kind of rows only as far as its files can tell, and a wrong guess
    costs size (a column whose inserted values are few, stored plain until compaction rewrites
    it), so the options apply only to inserts no larger than that file: ``rows`` at most its
    rows (counted, or Spark's estimate where the direct write does not count them first,
    :mod:`.direct`), or, where Spark cannot estimate the rows, the source's estimated
    ``source_bytes`` at most the file's bytes (a file source's estimate is its files' size).
    A larger insert, or one whose size is unknown, keeps Parquet's default. (The time a
    dictionary attempt costs is bounded by the first page of each file written: it is a small
    insert's time that it dominates.)"""
    if file_format != "parquet" or not table_files or (rows is None and source_bytes is None):
        return {}
    path, size = max(table_files.items(), key=lambda kv: (kv[1], kv[0]))
    if rows is None and not 0 <= (source_bytes or 0) <= size:
        return {}
    try:
        tail = storage.parquet_tail(path, size)
        fits = rows is None or rows <= int(footer_metadata(tail).num_rows)
        plain = without_dictionary([tail], fields) if fits else []
    except Exception as exc:  # noqa: BLE001 - a speed-up only: write as Parquet would
        logger.debug("rowmerge: column encodings of %s not read: %s", path, exc)
        return {}
    return _options(plain)


def _options(plain: Sequence[str]) -> dict[str, str]:
    return {f"{DICTIONARY_OPTION}#{name}": "false" for name in plain}
