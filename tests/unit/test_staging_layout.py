"""The staging folder's layout: the journal validates what the data phases wrote against it."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge.journal.layout import ROUTED_DATA, TASK_GROUP, Staging
from dbt.adapters.rowmerge.merge.journal.layout import placed as placed_path
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


def test_a_file_staged_in_a_task_groups_folder_takes_the_group_into_its_name() -> None:
    """A write that kept touched files apart (rewrite.task_groups) staged each group's files
    in a folder of its own, where one task's files of two groups share a name: placed in the
    table, the group folder goes and the name takes the group (no two files collide)."""
    s = Staging("1-abc", "file:/t/_rowmerge_log/staging/1-abc")
    name = "part-00001-6f1c.c000.snappy.parquet"
    assert s.data_path(f"{s.data_dir}/{TASK_GROUP}=0/{name}") == f"g0-{name}"
    assert s.data_path(f"{s.data_dir}/{TASK_GROUP}=12/p=1/q=a/{name}") == f"p=1/q=a/g12-{name}"
    assert s.data_path(f"{s.routed_data_dir}/{TASK_GROUP}=3/p=1/{name}") == f"p=1/g3-{name}"
    # the rows of no touched file (inserts): the NULL group
    assert s.data_path(f"{s.data_dir}/{TASK_GROUP}=__HIVE_DEFAULT_PARTITION__/{name}") == f"gn-{name}"
    placed = {
        s.data_path(f"{s.data_dir}/{TASK_GROUP}={g}/{name}") for g in ("0", "1", "__HIVE_DEFAULT_PARTITION__")
    }
    assert len(placed) == 3
    # a folder of that name that this engine does not write is left as it is (the entry's
    # checks then refuse a file staged elsewhere than where it is placed)
    assert placed_path(f"{TASK_GROUP}=x/{name}") == f"{TASK_GROUP}=x/{name}"
    assert placed_path(f"p=1/{TASK_GROUP}=1/{name}") == f"p=1/{TASK_GROUP}=1/{name}"
