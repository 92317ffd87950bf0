"""The staging folder's layout: the journal validates what the data phases wrote against it."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge.journal.layout import ROUTED_DATA, Staging
from dbt.adapters.rowmerge.merge.rewrite import DATA, KIND


def test_the_data_writes_own_folder_among_its_outputs_is_the_journals() -> None:
    """With the change feed on, the data write leaves the table's files in the folder of its
    partition column's ``data`` value; the journal accepts them there and nowhere else new."""
    assert f"{KIND}={DATA}" == ROUTED_DATA
    s = Staging("1-abc", "file:/t/_rowmerge_log/staging/1-abc")
    assert s.data_dirs == (
        "file:/t/_rowmerge_log/staging/1-abc/data",
        f"file:/t/_rowmerge_log/staging/1-abc/rows/{ROUTED_DATA}",
    )


def test_a_staged_file_is_placed_by_the_folder_it_is_in() -> None:
    s = Staging("1-abc", "file:/t/_rowmerge_log/staging/1-abc")
    assert s.data_path(f"{s.data_dir}/p=1/part-0.parquet") == "p=1/part-0.parquet"
    assert s.data_path(f"{s.routed_data_dir}/p=1/part-0.parquet") == "p=1/part-0.parquet"
    with pytest.raises(ValueError, match="not a staged data file"):
        s.data_path(f"{s.feed_rows_dir}/__rowmerge_kind=insert/part-0.parquet")
