"""Pure helpers of the storage layer: which names a listing hides, local paths, filesystems."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge.storage import _fs_root, is_hidden, local_path


@pytest.mark.parametrize(
    ("name", "hidden"),
    [
        ("_rowmerge_log", True),
        ("_SUCCESS", True),
        (".part-0.parquet.crc", True),
        ("_commit_version=3", False),  # a partition folder whose column starts with _
        ("p=1", False),
        ("part-00000.snappy.parquet", False),
    ],
)
def test_is_hidden_follows_spark(name: str, hidden: bool) -> None:
    assert is_hidden(name) is hidden


def test_local_path_of_file_uris() -> None:
    assert local_path("file:/tmp/a b/x.json") == "/tmp/a b/x.json"
    assert local_path("file:///tmp/x") == "/tmp/x"
    assert local_path("hdfs://nn:8020/w/x") is None
    assert local_path("s3a://bucket/x") is None


def test_fs_root_compares_scheme_and_authority() -> None:
    assert _fs_root("hdfs://nn:8020/a/b") == "hdfs://nn:8020"
    assert _fs_root("s3a://bucket/a") == "s3a://bucket"
    assert _fs_root("file:/tmp/a") == "file://"
    assert _fs_root("s3a://other/a") != _fs_root("s3a://bucket/a")
