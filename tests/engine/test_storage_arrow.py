"""ArrowStorage (pyarrow.fs, the storage of a Spark Connect client) against HadoopStorage and
real files: the same paths, listings, footers and the same atomic create-if-absent.

The journal, lock and recovery tests run on both storages (tests/engine/test_journal.py,
test_lock.py); this file checks the operations one by one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import UnsupportedTableError
from dbt.adapters.rowmerge.merge import storage_arrow as arrow_module
from dbt.adapters.rowmerge.merge.storage import STORAGE_CONF, HadoopStorage, storage_for
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage
from tests.engine.helpers import session_conf

TRICKY = ["plain", "a b", "50%", "x#y", "q?r", "é:ü", "[1]", "a+b&c=d", "it's", "tab\tx", "日本"]


@pytest.fixture
def arrow() -> ArrowStorage:
    return ArrowStorage()


@pytest.mark.parametrize(
    "path",
    [
        "file:/tmp/w/db.db/t/part-0.parquet",
        "file:/tmp/w/t/p=a b/x%20y/_c=1/f.parquet",
        "file:/tmp/w/t/p=é:ü/f",
        "file:///tmp/w/t/f",
        "file:/tmp/w//t/f",
        "file:/tmp/w/./t/../f",
        "file:/tmp/w/t/",
        "/tmp/w/t/f",
        "/tmp/w/t/p=a#b/c?d/[e]/f g",
    ],
)
def test_paths_agree_with_hadoop(spark: SparkSession, arrow: ArrowStorage, path: str) -> None:
    hadoop = HadoopStorage(spark)
    qualified = hadoop.qualify(path)
    assert arrow.qualify(path) == qualified
    url = hadoop.to_spark_path(qualified)  # the engine encodes qualified paths only
    assert arrow.to_spark_path(qualified) == url
    assert arrow.from_spark_path(url) == hadoop.from_spark_path(url) == qualified


def test_spark_file_paths_of_partition_folders_round_trip(
    spark: SparkSession, arrow: ArrowStorage, tmp_path: Path
) -> None:
    """What ``_metadata.file_path`` reports for files under partition values with spaces,
    escapes and non-ASCII decodes to the listed path and encodes back to the same text:
    otherwise a merge's file filter would match nothing."""
    out = str(tmp_path / "t")
    data = [(i, v) for i, v in enumerate(TRICKY)]
    spark.createDataFrame(data, "id long, p string").write.partitionBy("p").parquet(out)
    urls = {r[0] for r in spark.read.parquet(out).select(F.col("_metadata.file_path")).collect()}
    listed = {f.path for f in arrow.list_data_files(out)}
    assert len(urls) == len(listed) == len(TRICKY)
    assert {arrow.from_spark_path(u) for u in urls} == listed
    assert {arrow.to_spark_path(p) for p in listed} == urls


def test_listing_matches_hadoop_and_skips_hidden_names(
    spark: SparkSession, arrow: ArrowStorage, tmp_path: Path
) -> None:
    out = tmp_path / "t"
    spark.range(30).selectExpr("id", "id % 3 as _c").write.partitionBy("_c").parquet(str(out))
    (out / "_rowmerge_log").mkdir()
    (out / "_rowmerge_log" / "00000.json").write_text("{}")
    (out / ".hidden").write_text("x")
    hadoop = [(f.path, f.size) for f in HadoopStorage(spark)._hadoop_data_files(str(out))]
    mine = [(f.path, f.size) for f in arrow.list_data_files(str(out))]
    assert mine == hadoop and len(mine) >= 3
    assert all("/_c=" in p and p.endswith(".parquet") for p, _ in mine)
    assert arrow.list_data_files(str(tmp_path / "absent")) == []
    assert arrow.list_names(f"file:{out}") == HadoopStorage(spark).list_names(f"file:{out}")
    assert arrow.list_names(str(tmp_path / "absent")) == []


def test_status_read_write_and_delete(arrow: ArrowStorage, tmp_path: Path) -> None:
    path = f"file:{tmp_path}/d/e/x.json"
    assert arrow.status(path) is None and not arrow.exists(path)
    arrow.write_text(path, "héllo")  # creates the folders
    info = arrow.status(path)
    assert info is not None and info.path == path and info.size == len("héllo".encode())
    assert info.mtime > 0 and arrow.read_text(path) == "héllo"
    assert arrow.delete(path) is True and arrow.delete(path) is False
    arrow.write_text(f"file:{tmp_path}/d/e/y", "")
    with pytest.raises(OSError, match="non-empty directory"):
        arrow.delete(f"file:{tmp_path}/d")
    assert arrow.delete(f"file:{tmp_path}/d", recursive=True) is True
    assert not (tmp_path / "d").exists()


def test_rename_is_idempotent_and_refuses_a_different_target(arrow: ArrowStorage, tmp_path: Path) -> None:
    src, dst = tmp_path / "stage" / "f", tmp_path / "table" / "p=1" / "f"
    src.parent.mkdir()
    src.write_text("abc")
    assert arrow.rename(str(src), str(dst)) is True
    assert dst.read_text() == "abc" and not src.exists()
    assert arrow.rename(str(src), str(dst)) is False  # a replay of the same move
    with pytest.raises(FileNotFoundError):
        arrow.rename(str(tmp_path / "none"), str(tmp_path / "none2"))
    src.write_text("abc")  # a copy-based move that died after the copy: finished
    assert arrow.rename(str(src), str(dst)) is False and not src.exists()
    src.write_text("other content")
    with pytest.raises(FileExistsError, match="exists with different content"):
        arrow.rename(str(src), str(dst))


def test_rename_of_a_local_file_moves_its_checksum(arrow: ArrowStorage, tmp_path: Path) -> None:
    """A Connect client's merge moves Spark-written files as HadoopStorage does: the
    ``.<name>.crc`` Hadoop wrote beside a staged file goes along (not left in staging, where it
    would outlive its file), a stale one at the target goes away."""
    (tmp_path / "stage").mkdir()
    (tmp_path / "t").mkdir()
    (tmp_path / "stage" / "f.parquet").write_text("abc")
    (tmp_path / "stage" / ".f.parquet.crc").write_bytes(b"crc of f")
    (tmp_path / "t" / ".g.parquet.crc").write_bytes(b"stale")
    (tmp_path / "stage" / "g.parquet").write_text("g")
    assert arrow.rename(f"file:{tmp_path}/stage/f.parquet", f"file:{tmp_path}/t/f.parquet") is True
    assert arrow.rename(f"file:{tmp_path}/stage/g.parquet", f"file:{tmp_path}/t/g.parquet") is True
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [".f.parquet.crc", "f.parquet", "g.parquet"]
    assert (tmp_path / "t" / ".f.parquet.crc").read_bytes() == b"crc of f"


def test_create_if_absent_has_exactly_one_winner(arrow: ArrowStorage, tmp_path: Path) -> None:
    path = f"file:{tmp_path}/log/00000000000000000001.json"
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        if arrow.create_if_absent(path, f"writer {i}" * 1000):
            winners.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(winners) == 1
    assert arrow.read_text(path) == f"writer {winners[0]}" * 1000
    assert [p.name for p in (tmp_path / "log").iterdir()] == ["00000000000000000001.json"]


def test_create_if_absent_off_the_local_shortcut_publishes_whole_files(
    arrow: ArrowStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path every non-local filesystem takes (hidden temporary file, then a move): the
    file appears whole, an existing one is never replaced, no temporary file is left."""
    monkeypatch.setattr(arrow_module, "local_path", lambda qualified: None)
    path = f"file:{tmp_path}/log/entry.json"
    assert arrow.create_if_absent(path, "first") is True
    assert arrow.create_if_absent(path, "second") is False
    assert arrow.read_text(path) == "first"
    assert [p.name for p in (tmp_path / "log").iterdir()] == ["entry.json"]


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_footers_agree_with_hadoop(
    spark: SparkSession, arrow: ArrowStorage, tmp_path: Path, fmt: str
) -> None:
    hadoop = HadoopStorage(spark)
    sizes: dict[str, int] = {}
    for i, n in enumerate([0, 1, 7, 2500]):
        out = tmp_path / f"f{i}"
        spark.range(n).selectExpr("id", "cast(id as string) v").coalesce(1).write.format(fmt).save(str(out))
        (info,) = hadoop.list_data_files(str(out))
        sizes[info.path] = info.size
    sizes[f"file:{tmp_path}/empty"] = 0
    (tmp_path / "empty").write_bytes(b"")
    assert arrow.count_rows(sizes, fmt) == hadoop.count_rows(sizes, fmt)
    assert sorted(arrow.count_rows(sizes, fmt).values()) == [0, 0, 1, 7, 2500]
    if fmt == "parquet":
        assert arrow.parquet_tails(sizes) == hadoop.parquet_tails(sizes)
    with pytest.raises(ValueError, match="cannot count rows of 'csv' files"):
        arrow.count_rows(sizes, "csv")


def test_storage_for_follows_the_session_conf(spark: SparkSession) -> None:
    assert isinstance(storage_for(spark), HadoopStorage)
    with session_conf(spark, {STORAGE_CONF: "arrow", "spark.rowmerge.storage.s3.region": "eu-west-1"}):
        chosen = storage_for(spark)
        assert isinstance(chosen, ArrowStorage) and chosen._options == {"s3": {"region": "eu-west-1"}}
    with session_conf(spark, {STORAGE_CONF: "ftp"}):
        with pytest.raises(UnsupportedTableError, match=r"spark.rowmerge.storage='ftp' is not a storage"):
            storage_for(spark)


def test_unknown_scheme_is_named(arrow: ArrowStorage) -> None:
    with pytest.raises(ValueError, match=r"no filesystem for `ftp:` paths.*method: session"):
        arrow.status("ftp://host/x")
