"""Count what a merge asks of the JVM, the catalog and the filesystem.

A small merge's time is mostly not Spark jobs but round trips: each py4j call from the driver
to its JVM, each catalog call (a metastore request when the catalog is Hive), each filesystem
call (a request when the table lives on an object store). Their counts, unlike their times,
are exact on a busy machine and do not depend on where the table lives, so a regression shows
in them first; :mod:`.metrics` reports them per merge (``numPy4jCalls``, ``numCatalogCalls``,
``numFilesystemCalls``), with the bytes of the journal it read (``numJournalBytesRead``: entries,
statistics checkpoints, the lock's files), which must not grow with the table's history.

:func:`counting` opens a count for the block; the engine's catalog helpers
(:mod:`.table`) and storage operations (:mod:`.storage`) add to the open count, and py4j calls
are counted where py4j sends them (the session's gateway client, wrapped once). A count follows
the context it was opened in: threads the engine starts for the merge (the change feed's
writer, footer reads) join it through :func:`joined`; other threads (the lock's renewer,
py4j's own finalizer thread, another model's merge in a dbt thread) are not counted.
Through Spark Connect there is no py4j; its count stays 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class CallCounts:
    """Calls made while a count is open; safe to add to from several threads."""

    py4j: int = 0
    catalog: int = 0
    filesystem: int = 0
    journal_bytes: int = 0  # of the small text files read (ASCII JSON): journal, checkpoints, lock
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str, n: int = 1) -> None:
        with self._guard:
            setattr(self, kind, getattr(self, kind) + n)


_open: ContextVar[CallCounts | None] = ContextVar("rowmerge_call_counts", default=None)
# Inside a storage operation: the operations it is built from are not counted again.
_in_storage: ContextVar[bool] = ContextVar("rowmerge_in_storage", default=False)
_wrap_guard = threading.Lock()
_WRAPPED = "_rowmerge_counts_py4j"  # set on our wrapper of a py4j client's send_command
_sending = threading.local()  # inside one of our wrappers (so an inner one does not count again)


@contextmanager
def counting(spark: Any) -> Iterator[CallCounts]:
    """Count the block's calls (nested counts: the outer one sees the inner one's calls too)."""
    _count_py4j(spark)
    outer = _open.get()
    counts = CallCounts()
    token = _open.set(counts)
    try:
        yield counts
    finally:
        _open.reset(token)
        if outer is not None:
            outer.add("py4j", counts.py4j)
            outer.add("catalog", counts.catalog)
            outer.add("filesystem", counts.filesystem)
            outer.add("journal_bytes", counts.journal_bytes)


def catalog_call() -> None:
    """One catalog request (describe, exists, refresh, alter, resolving a table by name)."""
    counts = _open.get()
    if counts is not None:
        counts.add("catalog")


@contextmanager
def filesystem_call() -> Iterator[bool]:
    """One filesystem operation: counted unless it runs inside another one (the block gets
    whether it was counted)."""
    if _in_storage.get():
        yield False
        return
    counts = _open.get()
    if counts is not None:
        counts.add("filesystem")
    token = _in_storage.set(True)
    try:
        yield True
    finally:
        _in_storage.reset(token)


def journal_read(text: str) -> None:
    """A small text file of ``len(text)`` characters was read (a journal entry, a statistics
    checkpoint, a lease)."""
    counts = _open.get()
    if counts is not None:
        counts.add("journal_bytes", len(text))


def joined(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` adding to the count open here, in whichever thread it runs (pool workers and
    threads start without the caller's context)."""
    counts = _open.get()
    if counts is None:
        return fn

    def run(*args: Any, **kwargs: Any) -> T:
        token = _open.set(counts)
        try:
            return fn(*args, **kwargs)
        finally:
            _open.reset(token)

    return run


def _count_py4j(spark: Any) -> None:
    """Wrap the session's py4j client, so each command it sends adds to the open count.

    Someone else may wrap ``send_command`` too (a profiler, a benchmark's counter) and later put
    back what they found, unwrapping us; so the wrapper is installed again whenever the client's
    outermost ``send_command`` is not ours, and a wrapper called from inside another of ours
    does not count the command again.
    """
    gateway = getattr(getattr(spark, "_sc", None), "_gateway", None)  # None through Connect
    client = getattr(gateway, "_gateway_client", None)
    if client is None or getattr(client.send_command, _WRAPPED, False):
        return
    with _wrap_guard:
        send = client.send_command
        if getattr(send, _WRAPPED, False):
            return

        def counted_send(*args: Any, **kwargs: Any) -> Any:
            if getattr(_sending, "active", False):
                return send(*args, **kwargs)
            counts = _open.get()
            if counts is not None:
                counts.add("py4j")
            _sending.active = True
            try:
                return send(*args, **kwargs)
            finally:
                _sending.active = False

        setattr(counted_send, _WRAPPED, True)
        client.send_command = counted_send
