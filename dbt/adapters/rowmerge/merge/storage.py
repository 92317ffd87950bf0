"""Filesystem operations behind one small interface, implemented on the session JVM's Hadoop.

Going through Hadoop (not ``os``) means every filesystem Spark can write to — local, HDFS,
s3a, abfs, gs — works with Spark's own configuration and credentials. The journal and the
lock need exactly these operations: list, stat, rename, delete, read/write small text, and
one that must be atomic, ``create_if_absent`` (the commit point). It publishes a file whole
or not at all, so a reader never sees half an entry: the text is written to a hidden
temporary file next to the target, which is then linked (``file:``, ``link(2)``: atomic, fails
if the name exists) or renamed into place (HDFS and ABFS rename atomically and refuse an
existing target; object stores copy, which is whole but not exclusive, so they are
single-writer only). Hadoop's own ``create(overwrite=false)`` is not used for this: the local
filesystem implements it as check-then-create, and on HDFS a writer that dies mid-write
leaves a torn file under the final name.
"""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import stat
import struct
import sys
import unicodedata
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from pyspark.sql import SparkSession

from . import calls
from .errors import UnreadableFileError, spark_reason
from .lean_columns import jvm_class

FOOTER_THREADS = 8  # concurrent footer reads (they wait on I/O, mostly on object stores)
# Filesystems whose permissions Hadoop's FileSystem.access answers for real (object stores
# report every object writable; only the request itself tells).
PERMISSION_SCHEMES = ("hdfs", "viewfs", "webhdfs", "swebhdfs")


def is_hidden(name: str) -> bool:
    """Spark's rule for names a table listing skips: ``.x``, and ``_x`` unless it is a
    partition folder (``_commit_version=3`` is data; ``_rowmerge_log`` is not)."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


@dataclass(frozen=True)
class FileInfo:
    path: str  # fully qualified URI string, as Hadoop prints it
    size: int
    mtime: int  # milliseconds since the epoch, as the filesystem reports it


# The operations that touch the filesystem (the rest only rewrite paths), each counted as one
# filesystem call of the merge (calls.py), whatever it is built from.
FILESYSTEM_OPERATIONS = (
    "status",
    "list_data_files",
    "list_names",
    "rename",
    "move_folder",
    "delete",
    "create_if_absent",
    "write_text",
    "read_text",
    "footer_rows",
    "parquet_tail",
    "exists",
    "removal_problem",
    "write_problem",
    "real_path",
)


def _counted(operation: Any) -> Any:
    reads_text = operation.__name__ == "read_text"

    @functools.wraps(operation)
    def counted(*args: Any, **kwargs: Any) -> Any:
        with calls.filesystem_call() as outermost:
            result = operation(*args, **kwargs)
        if reads_text and outermost:
            calls.journal_read(result)
        return result

    return counted


class Storage(ABC):
    """What the engine needs from a filesystem. Paths are qualified URI strings.

    Every implementation's :data:`FILESYSTEM_OPERATIONS` are counted (calls.py) without the
    implementation doing anything for it: a new storage cannot forget to.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in FILESYSTEM_OPERATIONS:
            if name in cls.__dict__:
                setattr(cls, name, _counted(cls.__dict__[name]))

    @abstractmethod
    def qualify(self, path: str) -> str:
        """The fully qualified form of ``path`` (scheme and authority added)."""

    @abstractmethod
    def from_spark_path(self, url: str) -> str:
        """A URL-encoded ``_metadata.file_path`` value as a qualified path."""

    @abstractmethod
    def to_spark_path(self, path: str) -> str:
        """A qualified path as ``_metadata.file_path`` reports it (URL-encoded)."""

    @abstractmethod
    def status(self, path: str) -> FileInfo | None:
        """Size and mtime of a file, or None if it does not exist."""

    @abstractmethod
    def list_data_files(self, root: str, hidden_dirs: list[str] | None = None) -> list[FileInfo]:
        """All visible files under ``root`` (recursive), skipping hidden names at any level; paths
        qualified. ``hidden_dirs``, if given, collects the qualified path of every hidden folder
        found in a visible folder below ``root`` (not ``root``'s own: another table's journal
        inside this one is found there, at no extra listing)."""

    @abstractmethod
    def list_names(self, path: str) -> list[str]:
        """Names directly under directory ``path`` (empty if it does not exist)."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst``; False if that already happened (an idempotent replay)."""

    @abstractmethod
    def move_folder(self, src: str, dst: str) -> None:
        """Move the folder ``src`` (and all below it) to ``dst``, which must not exist.

        A full refresh that registers its table again parks the journal this way (see
        reshape.py); FileExistsError if ``dst`` exists, OSError if the move did not happen.
        """

    @abstractmethod
    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete ``path``; False if it did not exist."""

    @abstractmethod
    def create_if_absent(self, path: str, text: str) -> bool:
        """Atomically create ``path`` holding ``text``; False if it already exists."""

    @abstractmethod
    def write_text(self, path: str, text: str) -> None:
        """Create or overwrite ``path`` (not atomic: readers may see it partly written)."""

    @abstractmethod
    def read_text(self, path: str) -> str:
        """The whole content of a small file."""

    @abstractmethod
    def footer_rows(self, path: str, file_format: str) -> int:
        """Rows of one non-empty Parquet (``parquet``) or ORC (``orc``) file, from its footer."""

    def count_rows(
        self, sizes: Mapping[str, int], file_format: str, tails: dict[str, bytes] | None = None
    ) -> dict[str, int]:
        """Rows in each Parquet/ORC file of ``sizes`` (path -> bytes), by qualified path, from
        footers; a file of 0 bytes holds no rows.

        Only footers are read (a few KB per file), never data, so counting the files a merge
        replaces costs milliseconds however large they are; remote footers are fetched a few
        at a time. ``tails``: for Parquet, the rows are read from each file's tail
        (:meth:`parquet_tail`), which is kept there by qualified path, for a caller that reads
        more of the footer than the rows (:mod:`.encodings`) without reading it twice; a tail
        pyarrow cannot read (an encrypted footer) is not kept, and the file's rows come from
        :meth:`footer_rows` as without ``tails``.
        """
        if file_format not in ("parquet", "orc"):
            raise ValueError(f"cannot count rows of {file_format!r} files")
        qualified = {self.qualify(p): size for p, size in sizes.items()}
        rows = {p: 0 for p, size in qualified.items() if size == 0}
        todo = sorted(p for p, size in qualified.items() if size != 0)

        def rows_of(path: str) -> int:
            if tails is not None and file_format == "parquet":
                try:
                    tail = self.parquet_tail(path, qualified[path])
                    held = int(footer_metadata(tail).num_rows)
                except Exception:  # noqa: BLE001 - the reader below counts it, or says why not
                    pass
                else:
                    tails[path] = tail
                    return held
            return self.footer_rows(path, file_format)

        if len(todo) <= FOOTER_THREADS:
            rows.update((p, self._rows_of_data_file(p, file_format, rows_of)) for p in todo)
        else:
            with ThreadPoolExecutor(FOOTER_THREADS) as pool:
                counted = calls.joined(lambda p: self._rows_of_data_file(p, file_format, rows_of))
                rows.update(zip(todo, pool.map(counted, todo), strict=True))
        return rows

    def _rows_of_data_file(self, path: str, file_format: str, rows_of: Callable[[str], int]) -> int:
        """``rows_of(path)`` (rows from the file's footer), or the error that names a file which
        is not a data file."""
        try:
            return int(rows_of(path))
        except Exception as exc:  # noqa: BLE001 - pyarrow, py4j: any reader's refusal
            if not self.exists(path):
                raise  # gone meanwhile: a concurrent writer, which the commit's check reports
            raise UnreadableFileError(path, file_format, spark_reason(exc)) from None

    @abstractmethod
    def parquet_tail(self, path: str, size: int) -> bytes:
        """The end of a Parquet file of ``size`` bytes: its footer, the footer's length and the
        magic (what statistics are read from); ValueError if it is not a Parquet file."""

    def parquet_tails(self, sizes: Mapping[str, int]) -> dict[str, bytes]:
        """:meth:`parquet_tail` of every file of ``sizes`` (path -> bytes), a few at a time."""
        todo = sorted(p for p, size in sizes.items() if size > 0)
        if len(todo) <= 1:
            return {p: self.parquet_tail(p, sizes[p]) for p in todo}
        with ThreadPoolExecutor(min(FOOTER_THREADS, len(todo))) as pool:
            tails = pool.map(calls.joined(lambda p: self.parquet_tail(p, sizes[p])), todo)
            return dict(zip(todo, tails, strict=True))

    def exists(self, path: str) -> bool:
        return self.status(path) is not None

    def _local(self, path: str) -> tuple[str, str] | None:
        """(qualified path, OS path) of a local ``path``; None for another filesystem's, told
        by its scheme without qualifying it (for Hadoop, py4j calls)."""
        scheme = path.split("/", 1)[0]
        if ":" in scheme and not scheme.startswith("file:"):
            return None
        qualified = self.qualify(path)
        local = local_path(qualified)
        return (qualified, local) if local is not None else None

    def local_file(self, path: str) -> str | None:
        """The OS path of a local ``path``; None on another filesystem."""
        found = self._local(path)
        return found[1] if found is not None else None

    def removal_problem(self, path: str) -> str | None:
        """Why the filesystem would refuse to delete (or move away) the file ``path``; None if it
        would not, or if that cannot be told cheaply (object stores: only the delete tells).

        Asked before a commit point, so that a file the commit must replace is known to go.
        """
        local = self.local_file(path)
        return local_removal_problem(local) if local is not None else None

    def write_problem(self, folder: str) -> str | None:
        """Why the filesystem would refuse to create a file in ``folder`` (None: see
        :meth:`removal_problem`)."""
        local = self.local_file(folder)
        return local_write_problem(local) if local is not None else None

    def real_path(self, path: str) -> str | None:
        """The path ``path`` resolves to once symbolic links are followed (local files only;
        None elsewhere, where a path names exactly one object)."""
        local = self.local_file(path)
        return os.path.realpath(local) if local is not None else None

    def same_filesystem(self, a: str, b: str) -> bool:
        """True if a rename from ``a`` to ``b`` stays within one filesystem."""
        return _fs_root(self.qualify(a)) == _fs_root(self.qualify(b))


# The operations Storage itself implements (from the others, which count on their own).
for _name in FILESYSTEM_OPERATIONS:
    _method = Storage.__dict__.get(_name)
    if _method is not None and not getattr(_method, "__isabstractmethod__", False):
        setattr(Storage, _name, _counted(_method))


# Linux inode flags (chattr): an immutable file cannot be deleted or renamed, even by root; in
# an append-only folder files can be created but not removed.
_IMMUTABLE_FL, _APPEND_FL = 0x10, 0x20
_FS_IOC_GETFLAGS = (2 << 30) | (struct.calcsize("l") << 16) | (ord("f") << 8) | 1  # _IOR('f', 1, long)


def _inode_flags(path: str) -> int:
    """The chattr flags of ``path`` (0 where they cannot be read: not Linux, no permission, a
    filesystem without them)."""
    if not sys.platform.startswith("linux"):
        return 0
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return 0
    try:
        return int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)
    except OSError:
        return 0
    finally:
        os.close(fd)


def _may_write(folder: str) -> bool:
    effective = os.access in os.supports_effective_ids
    return os.access(folder, os.W_OK | os.X_OK, effective_ids=effective)


def local_removal_problem(path: str) -> str | None:
    """Why the OS would refuse to delete or rename the local file ``path`` (None: it would not,
    or the file is gone): an immutable or append-only file or folder, a folder this process
    may not write, or a sticky folder (``/tmp``-like) holding another user's file."""
    folder = os.path.dirname(path) or "."
    try:
        st, folder_st = os.lstat(path), os.stat(folder)
    except OSError:
        return None
    if _inode_flags(path) & (_IMMUTABLE_FL | _APPEND_FL):
        return "the file is immutable or append-only (chattr +i/+a; lsattr shows it)"
    if _inode_flags(folder) & (_IMMUTABLE_FL | _APPEND_FL):
        return f"its folder {folder} is immutable or append-only (chattr +i/+a)"
    if not _may_write(folder):
        return f"this process (uid {os.geteuid()}) may not write to its folder {folder}"
    euid = os.geteuid()
    if folder_st.st_mode & stat.S_ISVTX and euid != 0 and euid not in (st.st_uid, folder_st.st_uid):
        return (
            f"its folder {folder} is sticky (chmod +t) and the file belongs to another user "
            f"(uid {st.st_uid}; this process runs as uid {euid})"
        )
    return None


def local_write_problem(folder: str) -> str | None:
    """Why the OS would refuse to create a file in the local folder ``folder`` (created with its
    parents if missing: the nearest folder that exists decides)."""
    while not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    if _inode_flags(folder) & _IMMUTABLE_FL:
        return f"folder {folder} is immutable (chattr +i)"
    if not _may_write(folder):
        return f"this process (uid {os.geteuid()}) may not write to folder {folder}"
    return None


def _plainly_qualified_local(path: str) -> bool:
    """True if ``path`` is a ``file:/...`` URI that Hadoop's ``makeQualified`` returns unchanged:
    one slash after the scheme, no empty, ``.`` or ``..`` segment, no trailing slash."""
    if not path.startswith("file:/") or path.startswith("file://") or path.endswith("/"):
        return False
    return all(seg not in ("", ".", "..") for seg in path[len("file:/") :].split("/"))


# What java.net.URI leaves unquoted in a path (Hadoop's Path.toUri): unreserved, punctuation,
# ":@/"; every other ASCII character (space, %, #, ?, [, ], ...) is %-escaped, and so is a
# non-ASCII character that Java takes for a space or a control character; other non-ASCII is
# kept.
URI_PATH_SAFE = "/-_.!~*'(),;:$&+=@"


def uri_quoted(path: str) -> str:
    """``path`` %-escaped as ``java.net.URI`` quotes a path (UTF-8 bytes; the non-ASCII
    characters :func:`uri_keeps` kept as they are)."""
    return "".join(
        ch if ord(ch) > 127 and uri_keeps(ch) else quote(ch, safe=URI_PATH_SAFE)  # noqa: PLR2004
        for ch in path
    )


def uri_keeps(ch: str) -> bool:
    """Whether ``java.net.URI`` keeps the non-ASCII ``ch`` as it is in a path: not a control
    character (``Character.isISOControl``) nor a space (``Character.isSpaceChar``)."""
    return not 0x80 <= ord(ch) <= 0x9F and unicodedata.category(ch) not in ("Zs", "Zl", "Zp")  # noqa: PLR2004


def local_from_spark_path(url: str) -> str | None:
    """``from_spark_path`` of a ``file:/`` URL as Hadoop's ``Path`` decodes it, without the
    JVM (three py4j calls a path, three paths a touched file per merge); None where the answer
    would not be plainly qualified (the JVM decides)."""
    if not url.startswith("file:/") or url.startswith("file://"):
        return None
    path = "file:" + unquote(url[len("file:") :])
    return path if _plainly_qualified_local(path) else None


def local_to_spark_path(path: str) -> str | None:
    """``to_spark_path`` of a plainly qualified ``file:/`` path as Hadoop's ``Path.toUri``
    encodes it, without the JVM; None for any other path (the JVM decides)."""
    if not _plainly_qualified_local(path):
        return None
    return "file:" + uri_quoted(path[len("file:") :])


def local_rename(src: str, dst: str, local_src: str, local_dst: str) -> bool | None:
    """``rename`` of a local file without the JVM (about ten py4j calls a file, two files a
    touched file per merge), as Hadoop's local filesystem moves it: its checksum file
    (``.<name>.crc``) goes along, a stale one at ``dst`` is removed. None if the OS cannot move
    it in one step (another device): HadoopStorage then lets Hadoop copy it; pyarrow's local
    filesystem cannot, so ArrowStorage raises."""
    if not os.path.exists(local_src):
        if os.path.exists(local_dst):
            return False  # already moved: an idempotent replay
        raise FileNotFoundError(src)
    if os.path.exists(local_dst):
        if os.path.isfile(local_dst) and os.path.getsize(local_dst) == os.path.getsize(local_src):
            _remove_with_checksum(local_src)  # a copy that died after the copy: finish it
            return False
        raise FileExistsError(f"cannot move {src}: {dst} exists with different content")
    os.makedirs(os.path.dirname(local_dst), exist_ok=True)
    try:
        os.rename(local_src, local_dst)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return None
        if not os.path.exists(local_src) and os.path.exists(local_dst):
            return False  # another process finished the same replay first
        raise OSError(f"could not move {src} to {dst}") from exc
    checksum, stale = checksum_of(local_src), checksum_of(local_dst)
    if os.path.exists(checksum):
        os.replace(checksum, stale)
    elif os.path.exists(stale):
        os.remove(stale)
    return True


def checksum_of(path: str) -> str:
    """The checksum file Hadoop's local filesystem keeps beside the file ``path``
    (``.<name>.crc``; a local path or a pyarrow one)."""
    return posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.crc")


def _remove_with_checksum(local: str) -> None:
    os.remove(local)
    checksum = checksum_of(local)
    if os.path.exists(checksum):
        os.remove(checksum)


def _fs_root(qualified: str) -> str:
    scheme, sep, rest = qualified.partition(":")
    if not sep:
        return ""
    authority = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
    return f"{scheme}://{authority}"


def local_path(qualified: str) -> str | None:
    """The OS path of a ``file:`` URI, or None for any other filesystem."""
    if not qualified.startswith("file:"):
        return None
    rest = qualified[len("file:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        rest = rest[rest.find("/") :] if "/" in rest else "/"
    return rest


def _local_status(qualified: str, local: str) -> FileInfo | None:
    """``status`` of a local path without the JVM, as Hadoop's local filesystem reports it
    (``File.length`` and ``File.lastModified``: stat's size and mtime in whole milliseconds).

    Why not Hadoop: an absent path costs it a FileNotFoundException, which PySpark converts
    with dozens of py4j round trips (a merge asks about five absent paths: the folders above
    its table, for another table's journal), and a present one four calls."""
    try:
        st = os.stat(local)
    except OSError as exc:
        if exc.errno in _ABSENT_ERRNOS:
            return None
        raise  # permission denied: a path this process cannot see is not taken for absent
    return FileInfo(qualified, st.st_size, st.st_mtime_ns // 1_000_000)


# What stat reports for a path that names nothing (Hadoop's File.exists is false for these).
_ABSENT_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG)


def _local_data_files(root: str, local: str, hidden_dirs: list[str] | None) -> list[FileInfo]:
    """``list_data_files`` of a local folder without the JVM: the same files, paths, sizes and
    times as Hadoop's listing (test_storage compares the two), from one os.scandir per folder
    where Hadoop makes four py4j calls per file, so a merge's fixed cost stops growing with
    the table's file count."""
    if not os.path.isdir(local):
        if not os.path.exists(local):
            return []
        status = _local_status(root, local)
        return [status] if status is not None and not is_hidden(os.path.basename(local)) else []
    out: list[FileInfo] = []
    stack = [(root, local)]
    while stack:
        here, folder = stack.pop()
        try:
            with os.scandir(folder) as found:
                entries = list(found)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed while being listed: nothing under it
        for e in entries:
            path = f"{here}/{e.name}"
            try:
                is_dir = e.is_dir()
                if is_hidden(e.name):
                    if hidden_dirs is not None and here != root and is_dir:
                        hidden_dirs.append(path)
                    continue
                if is_dir:
                    stack.append((path, e.path))
                else:
                    st = e.stat()
                    out.append(FileInfo(path, st.st_size, st.st_mtime_ns // 1_000_000))
            except OSError as exc:
                if exc.errno in _ABSENT_ERRNOS:
                    continue  # deleted since the folder was read, or a dangling link
                raise
    return sorted(out, key=lambda f: f.path)


def listed_names(names: Iterable[str]) -> list[str]:
    """``names`` as Hadoop's local filesystem lists them: sorted, its checksum files
    (``.<name>.crc``) hidden."""
    return sorted(n for n in names if not (n.startswith(".") and n.endswith(".crc")))


def _local_names(folder: str) -> list[str]:
    """The names in a local folder, as Hadoop's local filesystem lists them (its checksum
    files ``.<name>.crc`` hidden; nothing for an absent folder; a file lists as itself).

    Why not Hadoop: its local listStatus builds a FileStatus for every child (a stat and a
    permission lookup each), about 0.1-0.2 s for a journal of 1,000 versions, and a merge lists
    its journal folder twice; os.scandir reads the names in well under a millisecond, so a
    merge's fixed cost stops growing with the table's history."""
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries]
    except (FileNotFoundError, NotADirectoryError):
        if os.path.isfile(folder):
            return [os.path.basename(folder)]
        return []
    return listed_names(names)


class HadoopStorage(Storage):
    """Hadoop FileSystem access for one Spark session."""

    def __init__(self, spark: SparkSession) -> None:
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        self._jvm: Any = jvm
        self._conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        # Looked up once per process (lean_columns.jvm_class): each step of
        # ``jvm.org.apache...`` is a reflection round trip that searches the JVM's class
        # loaders (about a millisecond each), and so is each lookup of a static method.
        self._path_class: Any = jvm_class(jvm, "org.apache.hadoop.fs.Path")
        self._spark_path: Any = jvm_class(jvm, "org.apache.spark.paths.SparkPath")

    def _path(self, path: str) -> Any:
        return self._path_class(path)

    def _io_utils(self) -> Any:
        return jvm_class(self._jvm, "org.apache.commons.io.IOUtils")

    def _fs(self, jpath: Any) -> Any:
        return jpath.getFileSystem(self._conf)

    def qualify(self, path: str) -> str:
        if _plainly_qualified_local(path):  # what Hadoop would return as is, without 3 py4j calls
            return path
        jp = self._path(path)
        return str(self._fs(jp).makeQualified(jp).toString())

    def from_spark_path(self, url: str) -> str:
        local = local_from_spark_path(url)
        return local if local is not None else self._jvm_from_spark_path(url)

    def to_spark_path(self, path: str) -> str:
        local = local_to_spark_path(path)
        return local if local is not None else self._jvm_to_spark_path(path)

    def _jvm_from_spark_path(self, url: str) -> str:
        sp = self._spark_path.fromUrlString(url)
        return self.qualify(str(sp.toPath().toString()))

    def _jvm_to_spark_path(self, path: str) -> str:
        return str(self._spark_path.fromPath(self._path(path)).urlEncoded())

    def status(self, path: str) -> FileInfo | None:
        local = self._local(path)
        if local is not None:
            return _local_status(*local)
        return self._hadoop_status(path)

    def _hadoop_status(self, path: str) -> FileInfo | None:
        jp = self._path(path)
        try:
            st = self._fs(jp).getFileStatus(jp)
        except Exception as exc:
            if _vanished(exc):  # absent, or deleted by another process just now
                return None
            raise
        return FileInfo(str(st.getPath().toString()), int(st.getLen()), int(st.getModificationTime()))

    def list_data_files(self, root: str, hidden_dirs: list[str] | None = None) -> list[FileInfo]:
        local = self._local(root)
        if local is not None:
            return _local_data_files(*local, hidden_dirs)
        return self._hadoop_data_files(root, hidden_dirs)

    def _hadoop_data_files(self, root: str, hidden_dirs: list[str] | None = None) -> list[FileInfo]:
        jroot = self._path(root)
        fs = self._fs(jroot)
        jroot = fs.makeQualified(jroot)  # so every listed path comes back qualified
        if not fs.exists(jroot):
            return []
        out: list[FileInfo] = []
        stack = [jroot]
        while stack:
            here = stack.pop()
            try:
                listed = fs.listStatus(here)
            except Exception as exc:
                if _vanished(exc):
                    continue  # removed while being listed: nothing under it
                raise
            for st in listed:
                jp = st.getPath()
                path = str(jp.toString())
                if is_hidden(path.rsplit("/", 1)[-1]):
                    if hidden_dirs is not None and here is not jroot and st.isDirectory():
                        hidden_dirs.append(path)
                    continue
                if st.isDirectory():
                    stack.append(jp)
                else:
                    out.append(FileInfo(path, int(st.getLen()), int(st.getModificationTime())))
        return sorted(out, key=lambda f: f.path)

    def list_names(self, path: str) -> list[str]:
        local = self.local_file(path)
        if local is not None:
            return _local_names(local)
        jp = self._path(path)
        fs = self._fs(jp)
        try:
            return sorted(str(st.getPath().getName()) for st in fs.listStatus(jp))
        except Exception as exc:
            # Absent, or removed while being listed (the local filesystem then reports an
            # I/O error rather than "not found"): either way there is nothing under it.
            if _vanished(exc) or not fs.exists(jp):
                return []
            raise

    def rename(self, src: str, dst: str) -> bool:
        local_src, local_dst = self.local_file(src), self.local_file(dst)
        if local_src is not None and local_dst is not None and not os.path.isdir(local_src):
            moved = local_rename(src, dst, local_src, local_dst)
            if moved is not None:
                return moved
        js, jd = self._path(src), self._path(dst)
        fs = self._fs(js)
        if not fs.exists(js):
            if fs.exists(jd):
                return False  # already moved: an idempotent replay
            raise FileNotFoundError(src)
        if fs.exists(jd):
            # A copy-based rename (object stores) that died after the copy: finish it.
            there = fs.getFileStatus(jd)
            if there.isFile() and there.getLen() == fs.getFileStatus(js).getLen():
                fs.delete(js, False)
                return False
            raise FileExistsError(f"cannot move {src}: {dst} exists with different content")
        fs.mkdirs(jd.getParent())
        if not fs.rename(js, jd):
            if not fs.exists(js) and fs.exists(jd):
                return False  # another process finished the same replay first
            raise OSError(f"could not move {src} to {dst}")
        return True

    def move_folder(self, src: str, dst: str) -> None:
        js, jd = self._path(src), self._path(dst)
        fs = self._fs(js)
        if fs.exists(jd):
            raise FileExistsError(f"cannot move {src}: {dst} exists")
        fs.mkdirs(jd.getParent())
        if not fs.rename(js, jd) or fs.exists(js) or not fs.exists(jd):
            raise OSError(f"could not move {src} to {dst}")

    def delete(self, path: str, recursive: bool = False) -> bool:
        jp = self._path(path)
        return bool(self._fs(jp).delete(jp, recursive))

    def removal_problem(self, path: str) -> str | None:
        """Local files as :meth:`Storage.removal_problem` checks them; on HDFS, write permission
        on the file's folder (one ``FileSystem.access`` call to the NameNode)."""
        qualified = self.qualify(path)
        if local_path(qualified) is not None:
            return super().removal_problem(qualified)
        if qualified.split(":", 1)[0].lower() not in PERMISSION_SCHEMES:
            return None
        return self.access_problem(str(self._path(qualified).getParent().toString()))

    def write_problem(self, folder: str) -> str | None:
        qualified = self.qualify(folder)
        if local_path(qualified) is not None:
            return super().write_problem(qualified)
        if qualified.split(":", 1)[0].lower() not in PERMISSION_SCHEMES:
            return None
        return self.access_problem(qualified)

    def access_problem(self, folder: str) -> str | None:
        """Why Hadoop's permission check refuses this user writing in ``folder`` (None: it does
        not, the folder does not exist yet, or the filesystem cannot tell)."""
        jp = self._path(folder)
        write = jvm_class(self._jvm, "org.apache.hadoop.fs.permission.FsAction").WRITE
        try:
            self._fs(jp).access(jp, write)
        except Exception as exc:  # noqa: BLE001 - only a refusal is an answer
            java = getattr(exc, "java_exception", None)
            if java is not None and "AccessControlException" in str(java.getClass().getName()):
                return f"this user may not write to its folder {folder} ({java.getMessage()})"
            return None
        return None

    def create_if_absent(self, path: str, text: str) -> bool:
        qualified = self.qualify(path)
        local = local_path(qualified)
        if local is not None:
            return create_local_if_absent(local, text)
        jp = self._path(qualified)
        fs = self._fs(jp)
        if fs.exists(jp):
            return False
        tmp = self._path(f"{jp.getParent().toString()}/.{jp.getName()}.{uuid.uuid4().hex}.tmp")
        try:
            self.write_text(str(tmp.toString()), text)
            return bool(fs.rename(tmp, jp))  # False if the name exists by now
        finally:
            if fs.exists(tmp):  # written in part (a full disk), or not renamed
                fs.delete(tmp, False)

    def write_text(self, path: str, text: str) -> None:
        jp = self._path(path)
        stream = self._fs(jp).create(jp, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def read_text(self, path: str) -> str:
        local = self._local(path)
        if local is not None:  # journal entries, leases: read here, not through the JVM
            with open(local[1], "rb") as f:
                return f.read().decode("utf-8")
        jp = self._path(path)
        stream = self._fs(jp).open(jp)
        try:
            return str(self._io_utils().toString(stream, "UTF-8"))
        finally:
            stream.close()

    def footer_rows(self, path: str, file_format: str) -> int:
        """A local Parquet file's by pyarrow, here (no py4j round trips); others by the JVM's
        Parquet/ORC readers (py4j gives each Python thread its own connection)."""
        if file_format == "parquet":
            local = self.local_file(path)
            if local is not None:
                import pyarrow.parquet as pq

                return int(pq.ParquetFile(local).metadata.num_rows)
            return self._parquet_rows(path)
        return self._orc_rows(path)

    def parquet_tail(self, path: str, size: int) -> bytes:
        local = self.local_file(path)
        if local is not None:
            with open(local, "rb") as fh:
                return read_parquet_tail(size, lambda pos, n: (fh.seek(pos), fh.read(n))[1])
        jp = self._path(path)
        stream = self._fs(jp).open(jp)
        io = self._io_utils()

        def read(pos: int, n: int) -> bytes:
            stream.seek(pos)
            return bytes(io.toByteArray(stream, n))

        try:
            return read_parquet_tail(size, read)
        finally:
            stream.close()

    def _parquet_rows(self, path: str) -> int:
        jvm = self._jvm
        source = jvm_class(jvm, "org.apache.parquet.hadoop.util.HadoopInputFile").fromPath(
            self._path(path), self._conf
        )
        reader = jvm_class(jvm, "org.apache.parquet.hadoop.ParquetFileReader").open(source)
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()

    def _orc_rows(self, path: str) -> int:
        jvm = self._jvm
        orc = jvm_class(jvm, "org.apache.orc.OrcFile")
        options = orc.readerOptions(self._conf)
        reader = orc.createReader(self._path(path), options)
        try:
            return int(reader.getNumberOfRows())
        finally:
            reader.close()


def read_parquet_tail(size: int, read: Any) -> bytes:
    """Footer + length + magic of a Parquet file, via ``read(position, length) -> bytes``."""
    if size < 12:
        raise ValueError(f"a Parquet file has at least 12 bytes, not {size}")
    end = read(size - 8, 8)
    if len(end) != 8 or end[4:] != b"PAR1":
        raise ValueError("no Parquet magic at the end of the file")
    length = int.from_bytes(end[:4], "little")
    if not 0 < length <= size - 12:
        raise ValueError(f"footer length {length} does not fit a file of {size} bytes")
    return read(size - 8 - length, length) + end


def footer_metadata(tail: bytes) -> Any:
    """pyarrow's metadata of a Parquet file from its tail (:meth:`Storage.parquet_tail`: footer,
    length and magic), read as a whole file holding nothing else."""
    import pyarrow as pa  # imported where needed, as the engine does elsewhere
    import pyarrow.parquet as pq

    return pq.read_metadata(pa.BufferReader(b"PAR1" + tail))


def _vanished(exc: BaseException) -> bool:
    """True for the JVM's "no such file": a check-then-act on a path another writer (a lock
    waiter cleaning old generations, a replay) may delete at any moment must read it as absent."""
    java = getattr(exc, "java_exception", None)
    return java is not None and str(java.getClass().getName()) == "java.io.FileNotFoundException"


def create_local_if_absent(path: str, text: str) -> bool:
    """Write a private temporary file, then hard-link it into place (atomic, never torn).

    The temporary file goes whatever happens, also when writing it fails (a full disk).
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


STORAGE_CONF = "spark.rowmerge.storage"  # auto (default), hadoop or arrow


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session: a client with no JVM behind it."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def storage_for(spark: SparkSession) -> Storage:
    """The storage the engine uses for ``spark``'s tables: Hadoop's filesystems through the
    session's JVM, or ``pyarrow.fs`` (:mod:`.storage_arrow`) for a Spark Connect session, which
    has no JVM here. ``spark.rowmerge.storage`` (``auto``, ``hadoop``, ``arrow``) overrides it."""
    from .errors import UnsupportedTableError
    from .storage_arrow import ArrowStorage  # its module imports this one

    connect = is_connect(spark)
    choice = str(spark.conf.get(STORAGE_CONF, "auto") or "auto").strip().lower()
    if choice not in ("auto", "hadoop", "arrow"):
        raise UnsupportedTableError(
            f"{STORAGE_CONF}={choice!r} is not a storage; use auto (the default), hadoop or arrow"
        )
    if choice == "hadoop" and connect:
        raise UnsupportedTableError(
            f"{STORAGE_CONF}=hadoop needs the session's JVM, and a Spark Connect client has none; "
            "use auto or arrow (pyarrow.fs)"
        )
    if choice == "arrow" or connect:
        return ArrowStorage.from_conf(spark.conf.getAll)
    return HadoopStorage(spark)
