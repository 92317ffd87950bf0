"""HadoopStorage against real files: row counts from Parquet and ORC footers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import storage as storage_module
from dbt.adapters.rowmerge.merge.errors import UnreadableFileError
from dbt.adapters.rowmerge.merge.storage import HadoopStorage
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage


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


def test_count_rows_can_keep_the_tails_it_read_the_rows_from(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One read of each footer gives both the rows and the tail (encodings.py reads the rest);
    a file that is not Parquet is refused by name, as without them."""
    sizes, rows = _write(spark, tmp_path, "parquet", [0, 7, 2500])
    st = HadoopStorage(spark)
    for threads in (8, 1):  # in the caller's thread, and a few at a time
        monkeypatch.setattr(storage_module, "FOOTER_THREADS", threads)
        tails: dict[str, bytes] = {}
        assert st.count_rows(sizes, "parquet", tails) == rows
        assert tails == {p: st.parquet_tail(p, size) for p, size in sizes.items() if size > 0}
        assert sorted(rows[p] for p in tails) == [0, 7, 2500]  # an empty Parquet file has a footer
    stray = tmp_path / "notes.csv"
    stray.write_text("a,b\n1,2\n")
    with pytest.raises(UnreadableFileError, match="notes.csv"):
        st.count_rows({**sizes, str(stray): os.path.getsize(stray)}, "parquet", {})
    # a footer pyarrow cannot parse (an encrypted one, say) is counted by the reader without
    # tails, and its tail is not kept
    with monkeypatch.context() as m:
        m.setattr(storage_module, "footer_metadata", lambda tail: 1 / 0)
        read: list[str] = []
        m.setattr(HadoopStorage, "footer_rows", lambda self, p, fmt: read.append(p) or rows[p])
        kept_none: dict[str, bytes] = {}
        assert st.count_rows(sizes, "parquet", kept_none) == rows
        assert kept_none == {} and sorted(read) == sorted(p for p, size in sizes.items() if size > 0)
    # ORC keeps no tails
    orc_sizes, orc_rows = _write(spark, tmp_path / "orc", "orc", [3])
    kept: dict[str, bytes] = {}
    assert st.count_rows(orc_sizes, "orc", kept) == orc_rows and kept == {}


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


# -- paths and renames of local files without the JVM --------------------------------------------

# Names a partition value or a user's folder may hold: escapes, URI delimiters, non-ASCII that
# java.net.URI keeps, and non-ASCII it escapes (no-break, ideographic and figure spaces, a C1
# control, a line separator).
PATH_NAMES = [
    "plain",
    "a b",
    "50%",
    "x#y",
    "q?r",
    "é:ü",
    "[1]",
    "a+b&c=d",
    "it's",
    "tab\tx",
    "日本",
    "a\xa0b",
    "c\x85d",
    "e\u2028f",
    "g\u3000h",
    "i\u2007j",
    "%2F",
    "~!*()",
    "a;b,c$@",
]


@pytest.mark.parametrize("name", PATH_NAMES)
def test_spark_paths_of_local_files_agree_with_hadoops(spark: SparkSession, name: str) -> None:
    """A local path's URL-encoded form (what ``_metadata.file_path`` reports) and back, worked
    out here, is exactly what Hadoop's Path and Spark's SparkPath make of it (non-ASCII kept,
    but for what Java takes for a space or a control character); ArrowStorage, a Spark Connect
    client's, encodes the same."""
    st = HadoopStorage(spark)
    qualified = f"file:/tmp/w/t/p={name}/part-0.parquet"
    assert st.qualify(qualified) == qualified
    url = st._jvm_to_spark_path(qualified)
    assert storage_module.local_to_spark_path(qualified) == st.to_spark_path(qualified) == url
    assert ArrowStorage().to_spark_path(qualified) == url
    assert storage_module.local_from_spark_path(url) == qualified
    assert (
        st.from_spark_path(url)
        == st._jvm_from_spark_path(url)
        == ArrowStorage().from_spark_path(url)
        == qualified
    )


@pytest.mark.parametrize("url", ["file:///tmp/w/t/f", "file:/tmp/w//t/f", "file:/tmp/w/./f", "hdfs://nn/t/f"])
def test_spark_paths_not_plainly_local_are_left_to_the_jvm(spark: SparkSession, url: str) -> None:
    assert storage_module.local_from_spark_path(url) is None
    assert storage_module.local_to_spark_path(url) is None


def _hadoop_write(st: HadoopStorage, path: str, text: str) -> None:
    """A file written through Hadoop's local filesystem, which writes its checksum beside it."""
    jp = st._path(path)
    out = st._fs(jp).create(jp, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


def _hadoop_read(st: HadoopStorage, path: str) -> str:
    """``path`` read through Hadoop's local filesystem, which verifies the checksum file."""
    jp = st._path(path)
    stream = st._fs(jp).open(jp)
    try:
        return str(st._io_utils().toString(stream, "UTF-8"))
    finally:
        stream.close()


def test_local_rename_moves_the_checksum_and_replays(spark: SparkSession, tmp_path: Path) -> None:
    """A staged file moved into place without the JVM, as Hadoop's local filesystem moves it:
    its checksum goes along (Hadoop still verifies the file), a stale checksum at the target
    goes away, a replay of the same move says False, and a different file in the way or a
    missing source is refused."""
    st = HadoopStorage(spark)
    src, dst = f"file:{tmp_path}/staging/a b.parquet", f"file:{tmp_path}/t/p=1/a b.parquet"
    _hadoop_write(st, src, "hello")
    (tmp_path / "t" / "p=1").mkdir(parents=True)
    (tmp_path / "t" / "p=1" / ".a b.parquet.crc").write_bytes(b"stale")  # from a file once there
    assert (tmp_path / "staging" / ".a b.parquet.crc").exists()
    assert st.rename(src, dst) is True
    assert sorted(os.listdir(tmp_path / "staging")) == []
    assert sorted(os.listdir(tmp_path / "t" / "p=1")) == [".a b.parquet.crc", "a b.parquet"]
    assert _hadoop_read(st, dst) == "hello"  # the checksum moved with it
    assert st.rename(src, dst) is False  # a replay
    with pytest.raises(FileNotFoundError):
        st.rename(f"file:{tmp_path}/none", f"file:{tmp_path}/none2")
    _hadoop_write(st, src, "other text")
    with pytest.raises(FileExistsError, match="exists with different content"):
        st.rename(src, dst)
    _hadoop_write(st, src, "hellO")  # a copy that died after the copy: finished by deleting
    assert st.rename(src, dst) is False
    assert not os.path.exists(tmp_path / "staging" / "a b.parquet")
    assert not os.path.exists(tmp_path / "staging" / ".a b.parquet.crc")
    # a file without a checksum at a target holding a stale one: the stale one goes
    (tmp_path / "plain").write_text("x")
    (tmp_path / "t" / "p=1" / ".x.crc").write_bytes(b"stale")
    assert st.rename(f"file:{tmp_path}/plain", f"file:{tmp_path}/t/p=1/x") is True
    assert sorted(os.listdir(tmp_path / "t" / "p=1")) == [".a b.parquet.crc", "a b.parquet", "x"]
    assert _hadoop_read(st, f"file:{tmp_path}/t/p=1/x") == "x"
    # a folder in the way is refused, never taken for a finished copy (whatever its size)
    (tmp_path / "t" / "p=1" / "d").mkdir()
    (tmp_path / "sized").write_bytes(b"0" * os.path.getsize(tmp_path / "t" / "p=1" / "d"))
    with pytest.raises(FileExistsError, match="exists with different content"):
        st.rename(f"file:{tmp_path}/sized", f"file:{tmp_path}/t/p=1/d")
    assert (tmp_path / "sized").exists()


def test_a_merge_moves_its_local_files_without_py4j_calls_per_file(spark: SparkSession, db: str) -> None:
    """The py4j calls of a merge do not grow with the files it replaces: renames and path
    conversions of local files run here, and the read chooses the files in one SQL text."""
    from tests.engine.helpers import UPSERT, create_table, merge, rows, source_view

    counts = []
    for n in (2, 12):
        t = f"{db}.t{n}"
        create_table(spark, t, "id long, v string", [[(2 * i, "a"), (2 * i + 1, "b")] for i in range(n)])
        src = source_view(spark, f"{db}_s{n}", "id long, v string", [(2 * i, "A") for i in range(n)])
        m = merge(spark, t, src, UPSERT, auto_compact=False).metrics
        assert (m["numTargetFilesRemoved"], m["numTargetRowsUpdated"]) == (n, n)
        assert rows(spark, t)[:2] == [(0, "A"), (1, "b")]
        counts.append(m["numPy4jCalls"])
    # 10 files more cost 206 calls when each was renamed (about ten calls a move) and its path
    # converted (three, three times) through the JVM, and the read chose the files with a
    # literal each (about four): now the 12 files cost no more than the 2 (419 against 450).
    assert counts[1] - counts[0] <= 10, counts
