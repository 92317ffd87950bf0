"""One writer per table: a lease under the journal, renewed while the merge runs.

Layout, under ``<table>/_rowmerge_log/lock/``::

    <generation>.json        who took the lease (written once, never changed)
    <generation>.heartbeat   when it expires (rewritten by the holder's renewal thread)
    <generation>.released    the holder is done

The holder is the process that created the highest generation. A writer takes the lease by
creating ``<top + 1>.json`` with create-if-absent, so of several waiters exactly one wins a
generation; it then re-lists, and backs off if an even higher generation exists (it acted on
a stale listing). Generations are never deleted while they are the highest, only older ones
are cleaned up, so "the highest generation" never goes back in time.

The top generation can be taken once it is released, once its holder is provably dead (same
machine and PID namespace, process gone), or once its lease expired (holder on another
machine, or unknown). A holder on this machine that is alive is never overtaken, however long
it takes: the waiter fails after ``lock_timeout_s`` naming it. A holder whose lease expired
may still be alive (a long pause), so after such a takeover the caller fences the journal
(see ``Journal.fence``): the old holder can then no longer commit.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from .errors import ConcurrentMergeError
from .storage import Storage

LOCK_DIR = "lock"
LEASE_SUFFIX = ".json"
HEARTBEAT_SUFFIX = ".heartbeat"
RELEASED_SUFFIX = ".released"
GENERATION_DIGITS = 20
DEFAULT_LEASE_S = 60.0
# Advanced: the lease length, for clusters with long driver pauses (and for tests).
LEASE_ENV = "ROWMERGE_LOCK_LEASE_S"
POLL_S = (0.2, 2.0)  # first and longest wait between looks at a held lock


def _read_first(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: state, ppid, ... (None if no such process)."""
    text = _read_first(f"/proc/{pid}/stat")
    return None if text is None else text.rsplit(")", 1)[-1].split()


def _process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a reused PID apart."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _is_zombie(pid: int) -> bool:
    """A process that exited but was not reaped yet: ``kill(pid, 0)`` still succeeds on it."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] in ("Z", "X")


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


@dataclass(frozen=True)
class Owner:
    """Who holds (or held) a lease: enough to name it and to tell whether it is still alive."""

    host: str
    pid: int
    operation: str
    table: str
    token: str  # unique per lock object: two threads of one process are different owners
    acquired_at: float  # epoch seconds, holder's clock
    lease_s: float
    boot_id: str | None = None
    pid_namespace: str | None = None
    process_start: str | None = None

    @staticmethod
    def this_process(operation: str, table: str, lease_s: float) -> Owner:
        pid = os.getpid()
        return Owner(
            host=socket.gethostname(),
            pid=pid,
            operation=operation,
            table=table,
            token=uuid.uuid4().hex[:12],
            acquired_at=time.time(),
            lease_s=lease_s,
            boot_id=_read_first("/proc/sys/kernel/random/boot_id"),
            pid_namespace=_pid_namespace(),
            process_start=_process_start(pid),
        )

    def on_this_machine(self) -> bool:
        """Same host, boot and PID namespace: its PID means the same process as ours would."""
        return (
            self.host == socket.gethostname()
            and self.boot_id == _read_first("/proc/sys/kernel/random/boot_id")
            and self.pid_namespace == _pid_namespace()
        )

    def is_dead(self) -> bool:
        """True only when it is certain: a process of this machine that no longer runs."""
        if not self.on_this_machine():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # exists, owned by someone else
        if _is_zombie(self.pid):
            return True  # exited; only its parent has not collected it yet
        return self.process_start is not None and _process_start(self.pid) != self.process_start

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.acquired_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{self.operation} on {self.table} by pid {self.pid} on host {self.host}, since {since}"


@dataclass(frozen=True)
class Lease:
    """The state of one generation as a waiter sees it."""

    generation: int
    owner: Owner | None  # None: its file could not be read (a holder that died writing it)
    expires_at: float
    released: bool


def _lease_s() -> float:
    raw = os.environ.get(LEASE_ENV)
    return float(raw) if raw else DEFAULT_LEASE_S


class TableLock:
    """The writer lease of one table; use as a context manager around a merge or recovery."""

    def __init__(
        self,
        storage: Storage,
        log_dir: str,
        table: str,
        operation: str,
        timeout_s: float,
        lease_s: float | None = None,
    ) -> None:
        self.storage = storage
        self.dir = f"{log_dir}/{LOCK_DIR}"
        self.table = table
        self.timeout_s = timeout_s
        self.owner = Owner.this_process(operation, table, lease_s if lease_s is not None else _lease_s())
        self.generation: int | None = None
        # Set when the lease was taken from a holder that had not released it: who it was
        # (None if its lease file could not be read), and whether it may still be running,
        # in which case the caller must fence the journal before writing.
        self.took_over: Owner | None = None
        self.took_over_live: bool = False
        self.took_over_path: str | None = None
        self._expires_at = 0.0
        self._lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- layout -----------------------------------------------------------------------------
    def _file(self, generation: int, suffix: str) -> str:
        return f"{self.dir}/{generation:0{GENERATION_DIGITS}d}{suffix}"

    def _generations(self) -> list[int]:
        return sorted(
            int(n[: -len(LEASE_SUFFIX)])
            for n in self.storage.list_names(self.dir)
            if n.endswith(LEASE_SUFFIX) and n[: -len(LEASE_SUFFIX)].isdigit()
        )

    def _lease(self, generation: int) -> Lease:
        path = self._file(generation, LEASE_SUFFIX)
        owner: Owner | None = None
        try:
            owner = Owner(**json.loads(self.storage.read_text(path)))
        except Exception:  # torn or foreign content
            owner = None
        status = self.storage.status(path)
        lease_s = owner.lease_s if owner else DEFAULT_LEASE_S
        expires = owner.acquired_at + lease_s if owner else (status.mtime / 1000 if status else 0) + lease_s
        beat_path = self._file(generation, HEARTBEAT_SUFFIX)
        beat = self.storage.status(beat_path)
        if beat is not None:
            try:
                expires = max(expires, float(json.loads(self.storage.read_text(beat_path))["expires_at"]))
            except Exception:  # being rewritten right now: the holder was alive just now
                expires = max(expires, beat.mtime / 1000 + lease_s)
        released = self.storage.exists(self._file(generation, RELEASED_SUFFIX))
        return Lease(generation, owner, expires, released)

    # -- acquire / release ------------------------------------------------------------------
    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        wait = POLL_S[0]
        while True:
            generations = self._generations()
            top = generations[-1] if generations else 0
            lease = self._lease(top) if top else None
            if lease is None or self._may_take(lease):
                if self._try_take(top + 1):
                    if lease is not None and not lease.released:
                        self.took_over = lease.owner
                        self.took_over_live = lease.owner is None or not lease.owner.is_dead()
                        self.took_over_path = self._file(top, LEASE_SUFFIX)
                    self._cleanup(top + 1)
                    self._start_renewal()
                    return
                continue  # someone else won that generation: look again at once
            if time.monotonic() >= deadline:
                raise self._timeout_error(lease)
            time.sleep(wait)
            wait = min(wait * 2, POLL_S[1])

    @staticmethod
    def _may_take(lease: Lease) -> bool:
        if lease.released:
            return True
        owner = lease.owner
        if owner is not None and owner.on_this_machine():
            return owner.is_dead()  # a live process here keeps its lock, however long it takes
        return time.time() > lease.expires_at

    def _try_take(self, generation: int) -> bool:
        self.owner = Owner(**{**asdict(self.owner), "acquired_at": time.time()})
        if not self.storage.create_if_absent(
            self._file(generation, LEASE_SUFFIX), json.dumps(asdict(self.owner))
        ):
            return False
        if self._generations()[-1] != generation:
            # We acted on a stale listing and a newer generation exists: not ours.
            self.storage.delete(self._file(generation, LEASE_SUFFIX))
            return False
        self.generation = generation
        self._expires_at = self.owner.acquired_at + self.owner.lease_s
        return True

    def _cleanup(self, mine: int) -> None:
        """Remove older generations (never the newest, which defines who holds the lock)."""
        for name in self.storage.list_names(self.dir):
            head = name.split(".", 1)[0]
            if head.isdigit() and int(head) < mine:
                self.storage.delete(f"{self.dir}/{name}")

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        if self.generation is not None and not self._lost:
            self.storage.create_if_absent(self._file(self.generation, RELEASED_SUFFIX), "")
        self.generation = None

    def __enter__(self) -> TableLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def took_over_from(self) -> str:
        """The holder this lock was taken from, for the fence entry and the log."""
        if self.took_over is not None:
            return self.took_over.describe()
        return f"an unknown writer (its lease {self.took_over_path} could not be read)"

    # -- while held -------------------------------------------------------------------------
    def _start_renewal(self) -> None:
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="rowmerge-lock", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        every = self.owner.lease_s / 4
        while not self._stop.wait(every):
            try:
                self.renew()
            except Exception:  # transient storage error: try again; check() reports expiry
                pass
            if self._lost:
                return

    def renew(self) -> None:
        """Extend the lease (the renewal thread calls this every quarter lease)."""
        assert self.generation is not None
        if self._generations()[-1] != self.generation:
            self._lost = True
            return
        expires = time.time() + self.owner.lease_s
        self.storage.write_text(
            self._file(self.generation, HEARTBEAT_SUFFIX), json.dumps({"expires_at": expires})
        )
        self._expires_at = expires

    def lost(self) -> bool:
        """True if another writer has taken the lease over (a cheap listing; never raises)."""
        if self._lost:
            return True
        try:
            generations = self._generations()
        except Exception:  # storage unreachable: cannot tell; check() decides before commit
            return False
        return self.generation is None or not generations or generations[-1] != self.generation

    def check(self) -> None:
        """Raise unless this process still holds the lock (called right before the commit point)."""
        assert self.generation is not None
        generations = self._generations()
        if self._lost or not generations or generations[-1] != self.generation:
            self._lost = True
            newer = self._lease(generations[-1]) if generations else None
            who = newer.owner.describe() if newer and newer.owner else "another writer"
            raise ConcurrentMergeError(
                f"{self.owner.operation} on {self.table} aborted: this process lost the table's lock "
                f"(its lease expired and {who} took it over). Nothing was changed; run the model again."
            )
        if time.time() > self._expires_at:
            raise ConcurrentMergeError(
                f"{self.owner.operation} on {self.table} aborted: the table's lock could not be renewed "
                "before its lease expired (storage unreachable?). Nothing was changed; run the model again."
            )

    def _timeout_error(self, lease: Lease | None) -> ConcurrentMergeError:
        holder = lease.owner.describe() if lease and lease.owner else "an unknown writer"
        if lease and lease.owner and lease.owner.on_this_machine():
            state = "a process that is still running on this machine"
        else:
            left = max(0, round(lease.expires_at - time.time())) if lease else 0
            state = f"its lease runs {left} s more unless renewed"
        path = self._file(lease.generation, LEASE_SUFFIX) if lease else self.dir
        return ConcurrentMergeError(
            f"{self.owner.operation} on {self.table} gave up after waiting {self.timeout_s:g} s "
            f"(lock_timeout_s) for the table's lock, held by {holder} ({state}). Run the model "
            "again once that writer has finished, or raise lock_timeout_s. If that process no "
            f"longer runs and the lease never expires, delete {path}."
        )
