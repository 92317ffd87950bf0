"""HadoopStorage against real files: row counts from Parquet and ORC footers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import storage as storage_module
from dbt.adapters.rowmerge.merge.storage import HadoopStorage


def _write(
    spark: SparkSession, folder: Path, fmt: str, rows_per_file: list[int]
) -> tuple[dict[str, int], dict[str, int]]:
    """One file per entry of ``rows_per_file``: (qualified path -> size, path -> rows)."""
    st = HadoopStorage(spark)
    sizes: dict[str, int] = {}
    rows: dict[str, int] = {}
    for i, n in enumerate(rows_per_file):
        out = folder / f"f{i}"
        df = spark.range(n).selectExpr("id", "cast(id as string) as v").coalesce(1)
        df.write.format(fmt).save(str(out))
        (info,) = st.list_data_files(str(out))
        sizes[info.path], rows[info.path] = info.size, n
    return sizes, rows


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_count_rows_reads_each_footer(spark: SparkSession, tmp_path: Path, fmt: str) -> None:
    sizes, rows = _write(spark, tmp_path, fmt, [0, 1, 7, 2500])
    assert HadoopStorage(spark).count_rows(sizes, fmt) == rows


def test_count_rows_many_files_in_parallel_and_unqualified_paths(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage_module, "FOOTER_THREADS", 2)
    sizes, rows = _write(spark, tmp_path, "parquet", [3, 4, 5, 6, 7])
    unqualified = {p.removeprefix("file:"): s for p, s in sizes.items()}
    assert all(not p.startswith("file:") for p in unqualified)
    # Keyed by qualified path, whatever form the caller used.
    assert HadoopStorage(spark).count_rows(unqualified, "parquet") == rows


def test_count_rows_of_a_zero_byte_file_is_zero(spark: SparkSession, tmp_path: Path) -> None:
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    st = HadoopStorage(spark)
    assert st.count_rows({str(empty): os.path.getsize(empty)}, "parquet") == {st.qualify(str(empty)): 0}


def test_count_rows_rejects_other_formats(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot count rows of 'csv' files"):
        HadoopStorage(spark).count_rows({str(tmp_path / "x.csv"): 10}, "csv")


def test_a_file_deleted_meanwhile_reads_as_absent(spark: SparkSession, tmp_path: Path) -> None:
    """A lock waiter stats lease files that the new holder is deleting at the same moment
    (CI once died on ``exists`` seeing the file and ``getFileStatus`` not): a file that
    vanishes mid-call reads as absent, never as an error."""
    import threading

    st = HadoopStorage(spark)
    folder = tmp_path / "lock"
    target = folder / "00001.released"
    stop = threading.Event()

    folder.mkdir()

    def churn() -> None:
        while not stop.is_set():
            target.write_text("")
            target.unlink()

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    seen = set()
    try:
        for _ in range(400):
            seen.add(st.exists(str(target)))
            st._hadoop_status(str(target))  # the path other filesystems take: never an error
            assert set(st.list_names(str(folder))) <= {"00001.released"}
    finally:
        stop.set()
        worker.join()
    assert seen == {True, False}  # the churn really ran under the calls


@pytest.mark.parametrize(
    "path",
    [
        "file:/tmp/w/db.db/t/part-0.parquet",
        "file:/tmp/w/t/p=a b/x%20y/_c=1/f.parquet",  # spaces, escapes, a data folder named _x=
        "file:/tmp/w/t/p=é:ü/f",
        "file:///tmp/w/t/f",  # not taken as is: Hadoop drops the empty authority
        "file:/tmp/w//t/f",
        "file:/tmp/w/./t/../f",
        "file:/tmp/w/t/",
        "/tmp/w/t/f",
    ],
)
def test_qualify_agrees_with_hadoop(spark: SparkSession, path: str) -> None:
    """The shortcut for plain local URIs returns exactly what Hadoop's makeQualified does."""
    st = HadoopStorage(spark)
    jp = st._path(path)
    assert st.qualify(path) == str(st._fs(jp).makeQualified(jp).toString())


def test_listed_paths_are_qualified_also_under_an_unqualified_root(
    spark: SparkSession, tmp_path: Path
) -> None:
    sizes, _ = _write(spark, tmp_path, "parquet", [3])
    (path,) = sizes
    st = HadoopStorage(spark)
    relative = os.path.relpath(tmp_path / "f0", os.getcwd())
    (info,) = st.list_data_files(relative)
    assert info.path == path == st.qualify(path)
    assert st._hadoop_data_files(relative) == [info]


def _hadoop_names(st: HadoopStorage, path: str) -> list[str]:
    """What Hadoop's own listing of ``path`` gives (the path list_names shortcuts locally)."""
    jp = st._path(path)
    fs = st._fs(jp)
    if not fs.exists(jp):
        return []
    return sorted(str(s.getPath().getName()) for s in fs.listStatus(jp))


@pytest.mark.parametrize("form", ["file:{}", "file://{}", "{}"])
def test_local_names_agree_with_hadoops_listing(spark: SparkSession, tmp_path: Path, form: str) -> None:
    """list_names reads a local folder with os.scandir (a journal of 1,000 versions: well under
    a millisecond against 0.1-0.2 s through Hadoop), and must list exactly what Hadoop does,
    whatever form the path takes (a scheme-less path is qualified first)."""
    folder = tmp_path / "log dir %20 é"
    (folder / "sub").mkdir(parents=True)
    for name in ("00000000000000000001.json", "00000000000000000001.applied", "a b%41.json", "_x"):
        (folder / name).write_text("{}")
    st = HadoopStorage(spark)
    # Hadoop's local filesystem writes a checksum file beside what it creates, and hides it
    st.write_text(f"file:{folder}/made_by_hadoop.json", "{}")
    (folder / ".stray.json.crc").write_text("")
    path = form.format(folder)
    names = st.list_names(path)
    assert names == _hadoop_names(st, path)
    assert {"sub", "a b%41.json", "made_by_hadoop.json"} <= set(names)
    assert not [n for n in names if n.endswith(".crc")]
    absent = form.format(tmp_path / "absent")
    assert st.list_names(absent) == [] == _hadoop_names(st, absent)
    one = form.format(folder / "_x")
    assert st.list_names(one) == ["_x"] == _hadoop_names(st, one)


# The table's data files in _tree (beside the one Hadoop writes), and the files a listing skips.
TREE_DATA_FILES = (
    "part-0.parquet",
    "p=a b/part-1.parquet",
    "p=x%3Ay/f 2.parquet",
    "p=é/ü.parquet",
    "_c=1/part-3.parquet",
    "p=a b/q=2/part-4.parquet",
)
TREE_OTHER_FILES = (
    "_SUCCESS",
    "p=é/_SUCCESS",
    "_rowmerge_log/00000000000000000001.json",
    "_rowmerge_log/retained/3/old.parquet",
)


def _tree(spark: SparkSession, root: Path) -> None:
    """A table folder as merges leave it: partition folders (one named like a hidden folder but
    holding data, ``_c=1``), Spark's checksum files and markers, the journal, a nested journal,
    an empty folder and names with spaces, escapes and accents."""
    st = HadoopStorage(spark)
    for folder in ("p=a b", "p=x%3Ay", "p=é", "_c=1", "p=a b/q=2", "empty", "_rowmerge_log/retained/3"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for name in TREE_DATA_FILES + TREE_OTHER_FILES:
        (root / name).write_bytes(b"x" * (len(name) * 7))
    st.write_text(f"file:{root}/p=a b/written_by_hadoop.parquet", "data")  # with its .crc beside it
    (root / "p=é" / "_rowmerge_log").mkdir()  # another table's journal, below this one
    (root / "p=é" / ".hidden").mkdir()


@pytest.mark.parametrize("form", ["file:{}", "file://{}", "{}"])
def test_local_listing_and_status_agree_with_hadoops(spark: SparkSession, tmp_path: Path, form: str) -> None:
    """list_data_files and status read a local table with os.scandir and os.stat (a merge asks
    about absent paths, whose FileNotFoundException PySpark converts with dozens of py4j round
    trips, and Hadoop makes four calls per listed file); they must report exactly the files,
    paths, sizes, times and nested hidden folders Hadoop's own listing does."""
    root = tmp_path / "t b%20"
    _tree(spark, root)
    st = HadoopStorage(spark)
    path = form.format(root)
    hidden: list[str] = []
    hadoop_hidden: list[str] = []
    listed = st.list_data_files(path, hidden)
    assert listed == st._hadoop_data_files(path, hadoop_hidden)
    assert (
        sorted(hidden)
        == sorted(hadoop_hidden)
        == [f"file:{root}/p=é/.hidden", f"file:{root}/p=é/_rowmerge_log"]
    )
    names = {f.path.removeprefix(f"file:{root}/") for f in listed}
    assert names == {*TREE_DATA_FILES, "p=a b/written_by_hadoop.parquet"}
    for f in listed:
        assert st.status(f.path) == f == st._hadoop_status(f.path)
    for other in (root, root / "empty", root / "absent", root / "part-0.parquet" / "below_a_file"):
        p = form.format(other)
        assert st.status(p) == st._hadoop_status(p)
        assert st.exists(p) == other.exists()
    absent = form.format(tmp_path / "absent")
    assert st.list_data_files(absent) == [] == st._hadoop_data_files(absent)
    one = form.format(root / "part-0.parquet")
    assert st.list_data_files(one) == st._hadoop_data_files(one) == [st.status(one)]
