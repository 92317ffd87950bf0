"""Parquet writer settings taken from the files a write replaces: no dictionary where they had none.

Parquet's writer starts every column of every file with a dictionary and gives it up, where
the values are too many to pay (keys, amounts, ids), when the column chunk's first page ends,
encoding again as plain what it had written. In a file of a table's usual size that first
page is most of the chunk, so a rewrite pays a dictionary lookup for every value and a
second encoding, and writes plain anyway. Profiled on the benchmark's table (2M rows in 32
files, 24 columns, 17 of them plain in every file), that was a quarter of the time of
writing the rows: the whole-table upsert's write job spent more CPU than the full rewrite's
scan, shuffle and write together.

The files a write replaces show how the writer ended for each column. Where no row group of
any of them has a dictionary page, the write is told not to try one (Parquet's per-column
``parquet.enable.dictionary#<column>``): it writes what it would have ended with, sooner
(the same bytes, on the benchmark's files). A column that some replaced file keeps in a
dictionary keeps trying, as does every column of a write that replaces no file (inserts)
or only files that are not Parquet; a column whose rows change character (ids that become a
handful of values) is written plain in the files that replace plain ones, which costs their
size, never a value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pyspark.sql.types import StructField

from .storage import Storage

logger = logging.getLogger(__name__)

DICTIONARY_OPTION = "parquet.enable.dictionary"


def without_dictionary(footers: Sequence[bytes], fields: Sequence[StructField]) -> list[str]:
    """The names (as ``fields`` spell them: the write's columns) of the top-level columns that
    no row group of any footer in ``footers`` (Parquet tails: ``Storage.parquet_tails``)
    stores with a dictionary page. A column some footer lacks, or holds nested, is left out;
    footers of empty files say nothing (none but those: no column).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    # A dot would be read as a path into a struct by the writer's per-column setting.
    names = {f.name.lower(): f.name for f in fields if "." not in f.name}
    plain = set(names)
    informed = False
    for footer in footers:
        meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
        if meta.num_row_groups == 0 or meta.num_rows == 0:
            continue  # an empty file says nothing
        informed = True
        seen = set()
        for c in range(meta.num_columns):
            leaf = meta.schema.column(c)
            name = leaf.path.lower()
            if leaf.name != leaf.path or name not in plain:
                continue
            seen.add(name)
            if any(meta.row_group(g).column(c).has_dictionary_page for g in range(meta.num_row_groups)):
                plain.discard(name)
        plain &= seen
        if not plain:
            break
    return [names[n] for n in sorted(plain)] if informed else []


def rewrite_options(
    storage: Storage, replaced: Mapping[str, int], file_format: str, fields: Sequence[StructField]
) -> dict[str, str]:
    """Writer options for a write of ``fields`` that replaces the files ``replaced`` (path ->
    bytes): Parquet's dictionary off for the columns they all store without one.

    Only their footers are read (a few KB each, a few at a time). An option only changes how
    fast the file is written, so a footer that cannot be read leaves every column as Parquet's
    default has it rather than failing the write."""
    if file_format != "parquet" or not replaced:
        return {}
    try:
        tails = storage.parquet_tails(replaced)
        plain = without_dictionary([tails[p] for p in sorted(tails)], fields) if tails else []
    except Exception as exc:  # noqa: BLE001 - a speed-up only: write as Parquet would
        logger.debug("rowmerge: column encodings of the replaced files not read: %s", exc)
        return {}
    return {f"{DICTIONARY_OPTION}#{name}": "false" for name in plain}
