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

Waiting writers are served in arrival order, so a model that re-takes the lock right after
releasing it never starves a slower one that polls. A writer that must wait (the lease is
held, or it is free but others queued first) creates a ticket in the same folder::

    wait-<number>-<token>.ticket   who waits (an owner, as in a lease) and when its ticket expires

``<number>`` is one more than the highest ticket number listed, so a ticket that existed when
a writer arrived is always ahead of it; writers that arrive at the same moment may draw the
same number and are ordered by their lock's token. Every name is unique (the number and the
token), so creating a ticket never contends, and ``create_if_absent`` only serves to publish
it whole, which object stores do too. The names neither start with a digit nor end in
``.json``: no reader of generations (this one or an older release) takes them for one.

The waiter rewrites its ticket's expiry (one lease on) at least every quarter lease from its
poll loop, and removes the ticket once it holds the lease, times out or fails. When the lease
can be taken, only the writer of the oldest live ticket takes it; a writer with no ticket
takes it only if no live ticket exists, so the uncontended path reads nothing more than the
listing it needs anyway. A ticket whose owner is provably dead (the same test as for a
holder) or whose expiry passed is ignored, and removed by whoever finds it: a crashed waiter
never blocks the queue. A waiter that finds its own ticket gone (it paused past its expiry)
queues again at the end.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from .errors import ConcurrentMergeError
from .notices import progress
from .storage import Storage

LOCK_DIR = "lock"
LEASE_SUFFIX = ".json"
HEARTBEAT_SUFFIX = ".heartbeat"
RELEASED_SUFFIX = ".released"
TICKET_PREFIX = "wait-"
TICKET_SUFFIX = ".ticket"
GENERATION_DIGITS = 20
DEFAULT_LEASE_S = 60.0
# Advanced: the lease length, for clusters with long driver pauses (and for tests).
LEASE_ENV = "ROWMERGE_LOCK_LEASE_S"
POLL_S = (0.2, 2.0)  # first and longest wait between looks at a held lock
# A writer that waits for the lock says so when it starts waiting and again this often.
WAIT_NOTICE_S = 30.0


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

    def describe(self, waiting: bool = False) -> str:
        """Who it is and since when it holds the lease (or, for a ticket, waits for it)."""
        since = datetime.fromtimestamp(self.acquired_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        state = "waiting since" if waiting else "since"
        return f"{self.operation} on {self.table} by pid {self.pid} on host {self.host}, {state} {since}"


@dataclass(frozen=True)
class Lease:
    """The state of one generation as a waiter sees it."""

    generation: int
    owner: Owner | None  # None: its file could not be read (a holder that died writing it)
    expires_at: float
    released: bool


@dataclass(frozen=True, order=True)
class Ticket:
    """A place in the queue, from its name: earlier numbers first, equal numbers by token."""

    number: int
    token: str

    @property
    def name(self) -> str:
        return f"{TICKET_PREFIX}{self.number:0{GENERATION_DIGITS}d}-{self.token}{TICKET_SUFFIX}"

    @staticmethod
    def parse(name: str) -> Ticket | None:
        if not (name.startswith(TICKET_PREFIX) and name.endswith(TICKET_SUFFIX)):
            return None
        number, sep, token = name[len(TICKET_PREFIX) : -len(TICKET_SUFFIX)].partition("-")
        return Ticket(int(number), token) if sep and number.isdigit() and token else None


@dataclass(frozen=True)
class Waiter:
    """One ticket's content as another writer sees it."""

    ticket: Ticket
    owner: Owner | None  # None: its file could not be read (being rewritten, or torn)
    expires_at: float

    def gone(self) -> bool:
        """Its owner no longer waits: provably dead, or it stopped renewing the ticket."""
        return time.time() > self.expires_at or (self.owner is not None and self.owner.is_dead())

    def describe(self) -> str:
        return self.owner.describe(waiting=True) if self.owner else "an unknown writer"


@dataclass(frozen=True)
class Listing:
    """One listing of the lock folder: lease generations and queue tickets, both in order."""

    generations: list[int]
    tickets: list[Ticket]


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
        moved_away: Callable[[], bool] | None = None,
    ) -> None:
        self.storage = storage
        # True while the journal folder, this lock's with it, is parked elsewhere (a full
        # refresh registering the table again, reshape.py): asked only when no generation is
        # listed, which is also how a brand-new journal looks.
        self._moved_away = moved_away or (lambda: False)
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
        self._ticket: Ticket | None = None  # this writer's place in the queue while it waits
        self._ticket_due = 0.0  # when the ticket's expiry must be rewritten next
        self._waiting_since: float | None = None  # the ticket's owner.acquired_at
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- layout -----------------------------------------------------------------------------
    def _file(self, generation: int, suffix: str) -> str:
        return f"{self.dir}/{generation:0{GENERATION_DIGITS}d}{suffix}"

    def _list(self) -> Listing:
        names = self.storage.list_names(self.dir)
        generations = sorted(
            int(n[: -len(LEASE_SUFFIX)])
            for n in names
            if n.endswith(LEASE_SUFFIX) and n[: -len(LEASE_SUFFIX)].isdigit()
        )
        tickets = sorted(t for t in map(Ticket.parse, names) if t is not None)
        return Listing(generations, tickets)

    def _generations(self) -> list[int]:
        return self._list().generations

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
        started = time.monotonic()
        deadline = started + self.timeout_s
        wait = POLL_S[0]
        self._waiting_since = None
        told = None  # when the user was last told this writer waits (None: not yet)
        seen = 0  # the highest generation listed so far: generations never go back
        try:
            while True:
                listing = self._list()
                top = listing.generations[-1] if listing.generations else 0
                if (top < seen or top == 0) and self._moved_away():
                    # The folder is away for a moment, the holder's lease with it: write
                    # nothing here (it would be in the way of its return); look again.
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._timeout_error(None, False, [])
                    time.sleep(min(POLL_S[0], left))
                    continue
                seen = top
                lease = self._lease(top) if top else None
                free = lease is None or self._may_take(lease)
                if free and self._first_ahead(listing.tickets) is None:
                    if self._try_take(top + 1):
                        if lease is not None and not lease.released:
                            self.took_over = lease.owner
                            self.took_over_live = lease.owner is None or not lease.owner.is_dead()
                            self.took_over_path = self._file(top, LEASE_SUFFIX)
                        self._leave_queue()
                        self._cleanup(top + 1)
                        self._start_renewal()
                        return
                    continue  # someone else won that generation: look again at once
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._timeout_error(lease, free, listing.tickets)
                now = time.monotonic()
                if told is None or now - told >= WAIT_NOTICE_S:
                    waited = 0.0 if told is None else now - started
                    progress(self._wait_notice(lease, free, listing.tickets, waited, left))
                    told = now
                nap = min(wait, left, self.owner.lease_s / 4)
                self._keep_place(listing.tickets, nap)
                time.sleep(nap)
                wait = min(wait * 2, POLL_S[1])
        finally:
            if self.generation is None:  # timed out or failed: leave the queue
                self._leave_queue()

    # -- the queue --------------------------------------------------------------------------
    def _ticket_path(self, ticket: Ticket) -> str:
        return f"{self.dir}/{ticket.name}"

    def _waiter(self, ticket: Ticket) -> Waiter | None:
        """What a ticket says, or None if it is gone already."""
        path = self._ticket_path(ticket)
        try:
            data = json.loads(self.storage.read_text(path))
            return Waiter(ticket, Owner(**data["owner"]), float(data["expires_at"]))
        except Exception:  # removed just now, being rewritten, or torn
            status = self.storage.status(path)
            if status is None:
                return None
            return Waiter(ticket, None, status.mtime / 1000 + DEFAULT_LEASE_S)

    def _live_ahead(self, tickets: list[Ticket], first_only: bool) -> list[Waiter]:
        """Live waiters queued before this writer (all tickets if it has none), oldest first;
        tickets of dead or expired waiters met on the way are removed."""
        live: list[Waiter] = []
        for ticket in tickets:
            if self._ticket is not None and ticket >= self._ticket:
                break
            waiter = self._waiter(ticket)
            if waiter is None:
                continue
            if waiter.gone():
                self._discard(ticket)
                continue
            live.append(waiter)
            if first_only:
                break
        return live

    def _first_ahead(self, tickets: list[Ticket]) -> Waiter | None:
        ahead = self._live_ahead(tickets, first_only=True) if tickets else []
        return ahead[0] if ahead else None

    def _discard(self, ticket: Ticket) -> None:
        try:
            self.storage.delete(self._ticket_path(ticket))
        except Exception:  # another writer removed it first, or storage hiccup: it stays ignored
            pass

    def _keep_place(self, tickets: list[Ticket], nap: float) -> None:
        """Join the queue, or renew this writer's ticket if it would be due during ``nap``."""
        now = time.time()
        if self._ticket is None or self._ticket not in tickets:
            # First wait, or the ticket was removed as expired (this writer paused past it):
            # queue behind every ticket listed.
            ticket = Ticket(max((t.number for t in tickets), default=0) + 1, self.owner.token)
            self.storage.create_if_absent(self._ticket_path(ticket), self._ticket_text(now))
            self._ticket = ticket
        elif now + nap >= self._ticket_due:
            self.storage.write_text(self._ticket_path(self._ticket), self._ticket_text(now))
        else:
            return
        self._ticket_due = now + self.owner.lease_s / 4

    def _ticket_text(self, now: float) -> str:
        if self._waiting_since is None:
            self._waiting_since = now
        owner = Owner(**{**asdict(self.owner), "acquired_at": self._waiting_since})
        return json.dumps({"owner": asdict(owner), "expires_at": now + self.owner.lease_s})

    def _leave_queue(self) -> None:
        """Remove this writer's ticket (it holds the lease, or gave up). If that fails the
        ticket expires by itself; release() tries once more."""
        if self._ticket is None:
            return
        try:
            self.storage.delete(self._ticket_path(self._ticket))
        except Exception:
            return
        self._ticket = None

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
        self._leave_queue()  # only if removing the ticket failed when the lease was taken
        self._ticket = None  # if it still fails, the ticket expires by itself
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

    @contextmanager
    def moving(self) -> Iterator[None]:
        """Renewal paused while the journal folder, and this lock with it, moves (a full
        refresh that registers its table again parks the journal beside the table's folder;
        see reshape.py): a heartbeat written mid-move would recreate the folder at its old
        place. The lease is renewed first, so the pause runs on a whole lease; after it the
        lease is renewed at the new place (see :meth:`relocate`) and checked."""
        self.check()  # a writer that lost its lease must not move anything
        self.renew()
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        try:
            yield
        finally:
            if self.generation is not None and not self._lost:
                self._start_renewal()
        self.check()

    def relocate(self, log_dir: str) -> None:
        """The journal folder (holding this lock) now lives at ``log_dir``: the lease is
        renewed there, so the catalog calls that follow run on a whole lease."""
        self.dir = f"{log_dir}/{LOCK_DIR}"
        self.renew()

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

    def _wait_notice(
        self, lease: Lease | None, free: bool, tickets: list[Ticket], waited: float, left: float
    ) -> str:
        """What a waiting writer tells the user: who holds the lock, since when, and how long
        this writer will wait (said when it starts waiting and every WAIT_NOTICE_S)."""
        if free:
            ahead = self._live_ahead(tickets, first_only=True) if tickets else []
            whom = f"queued behind {ahead[0].describe()}" if ahead else "queued behind an earlier writer"
        else:
            # describe() says since when: "MERGE on db.t by pid 7 on host h, since ... UTC"
            whom = f"held by {lease.owner.describe() if lease and lease.owner else 'an unknown writer'}"
        state = "waiting" if waited == 0 else f"still waiting after {waited:.0f} s"
        return (
            f"{self.owner.operation} on {self.table}: {state} for the table's lock, {whom}; gives up "
            f"in {left:.0f} s (lock_timeout_s)"
        )

    def _timeout_error(self, lease: Lease | None, free: bool, tickets: list[Ticket]) -> ConcurrentMergeError:
        gave_up = (
            f"{self.owner.operation} on {self.table} gave up after waiting {self.timeout_s:g} s "
            "(lock_timeout_s) for the table's lock"
        )
        ahead = self._live_ahead(tickets, first_only=False) if tickets else []
        queued = ""
        if ahead:
            writers = "1 writer" if len(ahead) == 1 else f"{len(ahead)} writers"
            queued = f"{writers} that queued for it earlier (first in line: {ahead[0].describe()})"
        if free and ahead:
            return ConcurrentMergeError(
                f"{gave_up}: it is free, but {queued} go{'es' if len(ahead) == 1 else ''} first. "
                "Run the model again once they have finished, or raise lock_timeout_s."
            )
        holder = lease.owner.describe() if lease and lease.owner else "an unknown writer"
        if lease and lease.owner and lease.owner.on_this_machine():
            state = "a process that is still running on this machine"
        else:
            left = max(0, round(lease.expires_at - time.time())) if lease else 0
            state = f"its lease runs {left} s more unless renewed"
        behind = f", and behind {queued}" if ahead else ""
        finished = "those writers have" if ahead else "that writer has"
        path = self._file(lease.generation, LEASE_SUFFIX) if lease else self.dir
        return ConcurrentMergeError(
            f"{gave_up}, held by {holder} ({state}){behind}. Run the model again once {finished} "
            "finished, or raise lock_timeout_s. If that process no longer runs and the lease never "
            f"expires, delete {path}."
        )
