"""The engine's filesystem operations on ``pyarrow.fs``: for a client without a JVM.

A Spark Connect client holds no JVM, so the Hadoop FileSystem that :class:`.HadoopStorage`
drives is out of reach; the data files, the journal and the lock files must still be listed,
moved, deleted, read and created atomically from the dbt process. ``pyarrow.fs`` does that for
every filesystem a Spark table lives on (``file:``, ``hdfs:``, ``s3a:``/``s3:``, ``gs:``,
``abfs[s]:``) and is already a dependency of PySpark's Connect client.

Paths stay the qualified URI strings Spark reports (``file:/x``, ``s3a://bucket/x``); each is
mapped to its pyarrow filesystem and that filesystem's own path only here. ``_metadata``'s
URL-encoded file paths are produced and parsed the way Hadoop's ``Path`` does it, so a path
written by one storage is found by the other.

The commit point, :meth:`ArrowStorage.create_if_absent`, is atomic and exclusive where the
filesystem can be: a hard link on ``file:`` (as on Hadoop), a rename on HDFS (it refuses an
existing name). Object stores get the same whole-or-nothing publication (write a hidden
temporary file, then move it) but a check-then-move that two writers can race: as with Hadoop's
s3a, they are single-writer only (see the README's "Running on a cluster").

Options for a filesystem's pyarrow constructor come from the session's runtime
configuration, ``spark.rowmerge.storage.<scheme>.<option>`` (for example
``spark.rowmerge.storage.s3.region``, ``...s3.endpoint_override``); credentials otherwise come
from each filesystem's usual environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_*).
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Mapping
from threading import Lock
from typing import Any
from urllib.parse import unquote

from pyarrow import fs as pafs

from .storage import (
    FileInfo,
    Storage,
    checksum_of,
    create_local_if_absent,
    is_hidden,
    listed_names,
    local_path,
    local_rename,
    read_parquet_tail,
    uri_quoted,
)

OPTION_PREFIX = "spark.rowmerge.storage."
_SCHEMES = {
    "file": "local",
    "hdfs": "hdfs",
    "viewfs": "hdfs",
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "abfs": "abfs",
    "abfss": "abfs",
}


def _split(qualified: str) -> tuple[str, str, str]:
    """(scheme, authority, path) of a URI string; scheme '' for a plain OS path."""
    scheme, sep, rest = qualified.partition(":")
    if not sep or "/" in scheme or len(scheme) < 2:  # no scheme (or a Windows drive letter)
        return "", "", qualified
    if rest.startswith("//"):
        authority, _, path = rest[2:].partition("/")
        return scheme.lower(), authority, "/" + path
    return scheme.lower(), "", rest


def _normalized(path: str) -> str:
    out = posixpath.normpath(path) if path else "/"
    return "/" + out.lstrip("/") if out.startswith("//") else out


class ArrowStorage(Storage):
    """:class:`.Storage` on ``pyarrow.fs``; ``options``: scheme -> keyword arguments for that
    filesystem's pyarrow constructor (``s3``, ``gcs``, ``abfs``, ``hdfs``)."""

    def __init__(self, options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._options = {k.lower(): dict(v) for k, v in (options or {}).items()}
        self._filesystems: dict[tuple[str, str], pafs.FileSystem] = {}
        self._guard = Lock()

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> ArrowStorage:
        """Options from ``spark.rowmerge.storage.<scheme>.<option>`` entries of a session conf."""
        options: dict[str, dict[str, Any]] = {}
        for key, value in conf.items():
            if key.startswith(OPTION_PREFIX) and key.count(".") >= 4:
                scheme, _, option = key[len(OPTION_PREFIX) :].partition(".")
                options.setdefault(scheme.lower(), {})[option] = value
        return cls(options)

    # -- paths --------------------------------------------------------------------------------

    def qualify(self, path: str) -> str:
        scheme, authority, rest = _split(path)
        if not scheme:
            return "file:" + _normalized(posixpath.abspath(rest))
        if scheme == "file":
            return "file:" + _normalized(rest)
        return f"{scheme}://{authority}{_normalized(rest)}"

    def from_spark_path(self, url: str) -> str:
        scheme, authority, rest = _split(url)
        decoded = unquote(rest)
        if not scheme:
            return self.qualify(decoded)
        prefix = f"{scheme}://{authority}" if authority or scheme != "file" else f"{scheme}:"
        return self.qualify(prefix + decoded)

    def to_spark_path(self, path: str) -> str:
        scheme, authority, rest = _split(self.qualify(path))
        encoded = uri_quoted(rest)
        if scheme == "file":
            return "file:" + encoded
        return f"{scheme}://{authority}{encoded}"

    def _resolve(self, path: str) -> tuple[pafs.FileSystem, str, str]:
        """(filesystem, its path for ``path``, the qualified prefix to put back on its paths)."""
        qualified = self.qualify(path)
        scheme, authority, rest = _split(qualified)
        kind = _SCHEMES.get(scheme)
        if kind is None:
            raise ValueError(
                f"{qualified}: the pyarrow storage has no filesystem for `{scheme}:` paths (it knows "
                f"{', '.join(sorted(_SCHEMES))}); use `method: session` (Hadoop's filesystems) for it"
            )
        fs = self._filesystem(kind, scheme, authority)
        if kind == "local":
            return fs, local_path(qualified) or rest, "file:"
        if kind in ("hdfs",):
            return fs, rest, f"{scheme}://{authority}"
        if kind == "abfs":  # container@account.dfs.core.windows.net -> container/...
            container = authority.split("@", 1)[0]
            return fs, container + rest, f"{scheme}://{authority}"
        return fs, authority + rest, f"{scheme}://{authority}"  # s3, gcs: bucket/key

    def _filesystem(self, kind: str, scheme: str, authority: str) -> pafs.FileSystem:
        key = (kind, authority if kind in ("hdfs", "abfs") else "")
        with self._guard:
            if key not in self._filesystems:
                self._filesystems[key] = self._make(kind, scheme, authority)
            return self._filesystems[key]

    def _make(self, kind: str, scheme: str, authority: str) -> pafs.FileSystem:
        opts = {**self._options.get(kind, {}), **self._options.get(scheme, {})}
        if kind == "local":
            return pafs.LocalFileSystem()
        if kind == "hdfs":
            host, _, port = authority.partition(":")
            return pafs.HadoopFileSystem(host or "default", int(port or 0), **opts)
        if kind == "s3":
            return pafs.S3FileSystem(**opts)
        if kind == "gcs":
            return pafs.GcsFileSystem(**opts)
        account = authority.split("@", 1)[1].split(".", 1)[0] if "@" in authority else authority
        return pafs.AzureFileSystem(account_name=opts.pop("account_name", account), **opts)

    def _info(self, path: str) -> pafs.FileInfo:
        fs, p, _ = self._resolve(path)
        return fs.get_file_info(p)

    # -- operations ---------------------------------------------------------------------------

    def status(self, path: str) -> FileInfo | None:
        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
        return FileInfo(self.qualify(path), int(info.size or 0), int(mtime))

    def list_data_files(self, root: str, hidden_dirs: list[str] | None = None) -> list[FileInfo]:
        fs, p, prefix = self._resolve(root)
        qualified_root = self.qualify(root)
        out: list[FileInfo] = []
        stack = [(p, qualified_root)]
        while stack:
            here, qualified = stack.pop()
            try:
                infos = fs.get_file_info(pafs.FileSelector(here, allow_not_found=True))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for info in infos:
                child = f"{qualified}/{info.base_name}"
                if is_hidden(info.base_name):
                    if hidden_dirs is not None and here != p and info.type == pafs.FileType.Directory:
                        hidden_dirs.append(child)
                    continue
                if info.type == pafs.FileType.Directory:
                    stack.append((info.path, child))
                elif info.type == pafs.FileType.File:
                    mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
                    out.append(FileInfo(child, int(info.size or 0), int(mtime)))
        return sorted(out, key=lambda f: f.path)

    def list_names(self, path: str) -> list[str]:
        fs, p, _ = self._resolve(path)
        try:
            infos = fs.get_file_info(pafs.FileSelector(p, allow_not_found=True))
        except (FileNotFoundError, NotADirectoryError):
            return []  # removed while being listed: nothing under it
        return listed_names(i.base_name for i in infos)

    def rename(self, src: str, dst: str) -> bool:
        fs, s, _ = self._resolve(src)
        there_fs, d, _ = self._resolve(dst)
        local = isinstance(fs, pafs.LocalFileSystem) and isinstance(there_fs, pafs.LocalFileSystem)
        if local and not os.path.isdir(s):
            # As HadoopStorage moves a local file: its .crc goes along, a stale one is removed
            # (a staged file's checksum left in staging would be taken for an orphan).
            moved = local_rename(src, dst, s, d)
            if moved is not None:
                return moved
        here, there = fs.get_file_info([s, d])
        if here.type == pafs.FileType.NotFound:
            if there.type != pafs.FileType.NotFound:
                return False  # already moved: an idempotent replay
            raise FileNotFoundError(src)
        if there.type != pafs.FileType.NotFound:
            # A copy-based move (object stores) that died after the copy: finish it.
            if there.size == here.size:
                fs.delete_file(s)
                return False
            raise FileExistsError(f"cannot move {src}: {dst} exists with different content")
        fs.create_dir(posixpath.dirname(d), recursive=True)
        try:
            fs.move(s, d)
        except OSError:
            here, there = fs.get_file_info([s, d])
            if here.type == pafs.FileType.NotFound and there.type != pafs.FileType.NotFound:
                return False  # another process finished the same replay first
            raise OSError(f"could not move {src} to {dst}") from None
        return True

    def move_folder(self, src: str, dst: str) -> None:
        fs, s, _ = self._resolve(src)
        _, d, _ = self._resolve(dst)
        if fs.get_file_info(d).type != pafs.FileType.NotFound:
            raise FileExistsError(f"cannot move {src}: {dst} exists")
        fs.create_dir(posixpath.dirname(d), recursive=True)
        fs.move(s, d)  # raises where the filesystem cannot move a folder (most object stores)
        here, there = fs.get_file_info([s, d])
        if here.type != pafs.FileType.NotFound or there.type == pafs.FileType.NotFound:
            raise OSError(f"could not move {src} to {dst}")

    def delete(self, path: str, recursive: bool = False) -> bool:
        fs, p, _ = self._resolve(path)
        info = fs.get_file_info(p)
        try:
            if info.type == pafs.FileType.NotFound:
                return False
            if info.type == pafs.FileType.Directory:
                if not recursive and fs.get_file_info(pafs.FileSelector(p)):
                    raise OSError(f"{path} is a non-empty directory (not deleted recursively)")
                fs.delete_dir(p)
            else:
                fs.delete_file(p)
                if isinstance(fs, pafs.LocalFileSystem):
                    self._delete_checksum(fs, p)
        except FileNotFoundError:
            return False  # deleted by another process just now
        return True

    @staticmethod
    def _delete_checksum(fs: pafs.FileSystem, p: str) -> None:
        """Hadoop's local filesystem writes ``.<name>.crc`` beside each file Spark writes and
        deletes it with the file; do the same, so a replaced file leaves nothing behind (a
        folder a refresh must find empty, reshape.py)."""
        try:
            fs.delete_file(checksum_of(p))
        except (FileNotFoundError, OSError):
            pass

    def create_if_absent(self, path: str, text: str) -> bool:
        qualified = self.qualify(path)
        local = local_path(qualified)
        if local is not None:
            return create_local_if_absent(local, text)
        fs, p, _ = self._resolve(qualified)
        if fs.get_file_info(p).type != pafs.FileType.NotFound:
            return False
        parent, name = posixpath.split(p)
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
        fs.create_dir(parent, recursive=True)
        with fs.open_output_stream(tmp) as out:
            out.write(text.encode("utf-8"))
        try:
            if fs.get_file_info(p).type != pafs.FileType.NotFound:
                return False
            fs.move(tmp, p)  # HDFS refuses an existing name; object stores copy (see module doc)
            return True
        except OSError:
            if fs.get_file_info(p).type != pafs.FileType.NotFound:
                return False  # another writer created it first
            raise
        finally:
            if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                fs.delete_file(tmp)

    def write_text(self, path: str, text: str) -> None:
        fs, p, _ = self._resolve(path)
        fs.create_dir(posixpath.dirname(p), recursive=True)
        with fs.open_output_stream(p) as out:
            out.write(text.encode("utf-8"))

    def read_text(self, path: str) -> str:
        fs, p, _ = self._resolve(path)
        with fs.open_input_stream(p) as stream:
            return bytes(stream.read()).decode("utf-8")

    def footer_rows(self, path: str, file_format: str) -> int:
        """By pyarrow's Parquet/ORC readers (no data read)."""
        return self._parquet_rows(path) if file_format == "parquet" else self._orc_rows(path)

    def _parquet_rows(self, path: str) -> int:
        import pyarrow.parquet as pq

        fs, p, _ = self._resolve(path)
        with fs.open_input_file(p) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)

    def _orc_rows(self, path: str) -> int:
        import pyarrow.orc as orc

        fs, p, _ = self._resolve(path)
        with fs.open_input_file(p) as fh:
            return int(orc.ORCFile(fh).nrows)

    def parquet_tail(self, path: str, size: int) -> bytes:
        fs, p, _ = self._resolve(path)
        with fs.open_input_file(p) as fh:
            return read_parquet_tail(size, lambda pos, n: bytes(fh.read_at(n, pos)))
