"""Filesystem operations through the session JVM's Hadoop FileSystem.

Going through Hadoop (not ``os``) means every filesystem Spark can write to — local, HDFS,
s3a, abfs, gs — works with Spark's own configuration and credentials. The interface is
small on purpose: list, exists, rename, delete, create-if-absent and read of small text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

# Names every engine skips when listing data files (Spark, Hive and Trino do the same).
HIDDEN_PREFIXES = ("_", ".")


@dataclass(frozen=True)
class FileInfo:
    path: str  # fully qualified URI string, as Hadoop prints it
    size: int
    mtime: int


class Storage:
    """Hadoop FileSystem access for one Spark session."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        self._jvm: Any = jvm
        self._conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, jpath: Any) -> Any:
        return jpath.getFileSystem(self._conf)

    def qualify(self, path: str) -> str:
        jp = self._path(path)
        return str(self._fs(jp).makeQualified(jp).toString())

    def from_spark_path(self, url: str) -> str:
        """``_metadata.file_path`` values are URL-encoded; turn one into a Hadoop path string."""
        sp = self._jvm.org.apache.spark.paths.SparkPath.fromUrlString(url)
        return self.qualify(str(sp.toPath().toString()))

    def exists(self, path: str) -> bool:
        jp = self._path(path)
        return bool(self._fs(jp).exists(jp))

    def list_data_files(self, root: str) -> list[FileInfo]:
        """All visible files under ``root`` (recursive), skipping ``_``/``.`` names at any level."""
        jroot = self._path(root)
        fs = self._fs(jroot)
        if not fs.exists(jroot):
            return []
        out: list[FileInfo] = []
        stack = [jroot]
        while stack:
            for st in fs.listStatus(stack.pop()):
                name = st.getPath().getName()
                if name.startswith(HIDDEN_PREFIXES):
                    continue
                if st.isDirectory():
                    stack.append(st.getPath())
                else:
                    out.append(
                        FileInfo(
                            str(st.getPath().toString()), int(st.getLen()), int(st.getModificationTime())
                        )
                    )
        return sorted(out, key=lambda f: f.path)

    def mkdirs(self, path: str) -> None:
        jp = self._path(path)
        self._fs(jp).mkdirs(jp)

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` (parent created); False if ``src`` is gone and ``dst`` exists."""
        js, jd = self._path(src), self._path(dst)
        fs = self._fs(js)
        if not fs.exists(js):
            if fs.exists(jd):
                return False  # already moved: an idempotent replay
            raise FileNotFoundError(src)
        fs.mkdirs(jd.getParent())
        if not fs.rename(js, jd):
            raise OSError(f"could not move {src} to {dst}")
        return True

    def delete(self, path: str, recursive: bool = False) -> bool:
        jp = self._path(path)
        return bool(self._fs(jp).delete(jp, recursive))

    def create_if_absent(self, path: str, text: str) -> bool:
        """Write ``text`` to a new file; False if the file already exists (atomic on HDFS/local)."""
        jp = self._path(path)
        fs = self._fs(jp)
        try:
            stream = fs.create(jp, False)
        except Exception as exc:  # py4j wraps FileAlreadyExistsException
            if "FileAlreadyExists" in str(exc) or fs.exists(jp):
                return False
            raise
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        return True

    def read_text(self, path: str) -> str:
        jp = self._path(path)
        fs = self._fs(jp)
        stream = fs.open(jp)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def list_names(self, path: str) -> list[str]:
        jp = self._path(path)
        fs = self._fs(jp)
        if not fs.exists(jp):
            return []
        return sorted(str(st.getPath().getName()) for st in fs.listStatus(jp))
