"""The writer lock (lock.py) on the session's real Hadoop filesystem.

Owners on "another host" are written as lease (or queue ticket) files by hand: that is exactly
what a writer on another machine leaves behind. A dead local owner is a real process that has
exited.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from dbt.adapters.rowmerge.merge import ConcurrentMergeError
from dbt.adapters.rowmerge.merge.lock import DEFAULT_LEASE_S, Owner, TableLock, Ticket
from dbt.adapters.rowmerge.merge.storage import HadoopStorage, Storage
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage


@pytest.fixture(params=["hadoop", "arrow"])
def storage(spark, request) -> Storage:
    """Every lock test on both storages: Hadoop's (session mode) and pyarrow.fs (Connect)."""
    return HadoopStorage(spark) if request.param == "hadoop" else ArrowStorage()


@pytest.fixture
def log_dir(tmp_path: Path) -> str:
    return f"file:{tmp_path}/_rowmerge_log"


def lock_of(
    storage, log_dir: str, timeout_s: float = 0.0, operation: str = "MERGE", lease_s: float | None = None
) -> TableLock:
    return TableLock(storage, log_dir, "db.t", operation, timeout_s, lease_s)


def lease_files(log_dir: str) -> list[str]:
    """The lock folder's files (without the checksum files Hadoop's local filesystem adds)."""
    folder = log_dir.removeprefix("file:") + "/lock"
    return sorted(n for n in os.listdir(folder) if not n.endswith(".crc")) if os.path.isdir(folder) else []


def ticket_files(log_dir: str) -> list[str]:
    return [n for n in lease_files(log_dir) if n.endswith(".ticket")]


def write_ticket(log_dir: str, number: int, owner: Owner, expires_at: float) -> str:
    """A queue ticket as a waiter leaves it (its name and content); returns the name."""
    folder = log_dir.removeprefix("file:") + "/lock"
    os.makedirs(folder, exist_ok=True)
    name = Ticket(number, owner.token).name
    with open(f"{folder}/{name}", "w") as fh:
        json.dump({"owner": asdict(owner), "expires_at": expires_at}, fh)
    return name


def dead_local_owner() -> Owner:
    """An owner on this machine whose process has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    me = Owner.this_process("MERGE", "db.t", 60.0)
    return Owner(**{**asdict(me), "pid": proc.pid, "process_start": "1", "token": "deadbeef0000"})


def wait_until(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def write_lease(log_dir: str, generation: int, owner: Owner, heartbeat: float | None = None) -> None:
    folder = log_dir.removeprefix("file:") + "/lock"
    os.makedirs(folder, exist_ok=True)
    with open(f"{folder}/{generation:020d}.json", "w") as fh:
        json.dump(asdict(owner), fh)
    if heartbeat is not None:
        with open(f"{folder}/{generation:020d}.heartbeat", "w") as fh:
            json.dump({"expires_at": heartbeat}, fh)


def remote_owner(acquired_ago_s: float, lease_s: float = 60.0) -> Owner:
    return Owner(
        host="other-host",
        pid=4242,
        operation="MERGE",
        table="db.t",
        token="remote",
        acquired_at=time.time() - acquired_ago_s,
        lease_s=lease_s,
    )


def test_lock_acquire_release_then_next_generation_cleans_up(storage, log_dir):
    with lock_of(storage, log_dir) as first:
        assert first.generation == 1
        assert lease_files(log_dir) == ["00000000000000000001.json"]
    assert lease_files(log_dir) == ["00000000000000000001.json", "00000000000000000001.released"]
    with lock_of(storage, log_dir) as second:
        assert second.generation == 2
        assert second.took_over is None
        # The released generation 1 is removed; the newest generation is never removed.
        assert lease_files(log_dir) == ["00000000000000000002.json"]


def test_lock_live_local_holder_blocks_and_error_names_it(storage, log_dir):
    with lock_of(storage, log_dir, operation="MERGE"):
        waiter = lock_of(storage, log_dir, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(ConcurrentMergeError) as info:
            waiter.acquire()
        assert time.monotonic() - started >= 0.5
    text = str(info.value)
    assert text.startswith(
        "MERGE on db.t gave up after waiting 0.5 s (lock_timeout_s) for the table's lock, held by "
        f"MERGE on db.t by pid {os.getpid()} on host {socket.gethostname()}, since "
    )
    assert "(a process that is still running on this machine). Run the model again once that writer " in text
    assert "has finished, or raise lock_timeout_s." in text
    assert text.endswith("/lock/00000000000000000001.json.")


def test_lock_waiter_gets_lock_when_holder_releases(storage, log_dir):
    holder = lock_of(storage, log_dir)
    holder.acquire()
    timer = threading.Timer(1.0, holder.release)
    timer.start()
    started = time.monotonic()
    with lock_of(storage, log_dir, timeout_s=30) as waiter:
        waited = time.monotonic() - started
        assert waiter.generation == 2 and waiter.took_over is None
    timer.join()
    assert 0.9 <= waited < 10


def test_lock_dead_local_holder_is_taken_over_at_once(storage, log_dir):
    proc = subprocess.Popen(["true"])
    proc.wait()
    me = Owner.this_process("MERGE", "db.t", 60.0)
    dead = Owner(**{**asdict(me), "pid": proc.pid, "process_start": "1"})
    write_lease(log_dir, 5, dead)
    started = time.monotonic()
    with lock_of(storage, log_dir, timeout_s=30) as lock:
        assert time.monotonic() - started < 5
        assert lock.generation == 6
        assert lock.took_over == dead
        assert lock.took_over_live is False  # certainly dead: no fence needed


def test_lock_expired_remote_holder_is_taken_over_and_marked_live(storage, log_dir):
    write_lease(log_dir, 3, remote_owner(acquired_ago_s=120))
    with lock_of(storage, log_dir, timeout_s=0) as lock:
        assert lock.generation == 4
        assert lock.took_over is not None and lock.took_over.host == "other-host"
        assert lock.took_over_live is True  # it may still run: the caller must fence


def test_lock_remote_holder_with_fresh_heartbeat_is_not_taken(storage, log_dir):
    write_lease(log_dir, 1, remote_owner(acquired_ago_s=600), heartbeat=time.time() + 30)
    with pytest.raises(ConcurrentMergeError) as info:
        lock_of(storage, log_dir, timeout_s=0.3).acquire()
    assert re.search(
        r"held by MERGE on db\.t by pid 4242 on host other-host, since [^(]+\(its lease runs (29|30) s more "
        r"unless renewed\)\.",
        str(info.value),
    ), str(info.value)


def test_lock_unreadable_lease_counts_as_held_until_its_mtime_expires(storage, log_dir):
    folder = log_dir.removeprefix("file:") + "/lock"
    os.makedirs(folder)
    Path(f"{folder}/{1:020d}.json").write_text("")  # a holder died while writing it
    with pytest.raises(ConcurrentMergeError, match="held by an unknown writer"):
        lock_of(storage, log_dir, timeout_s=0.3).acquire()
    old = time.time() - DEFAULT_LEASE_S - 5
    os.utime(f"{folder}/{1:020d}.json", (old, old))
    with lock_of(storage, log_dir) as lock:
        assert lock.generation == 2 and lock.took_over is None and lock.took_over_live


def test_lock_renew_extends_heartbeat(storage, log_dir):
    with lock_of(storage, log_dir) as lock:
        lock.renew()
        beat = json.loads(Path(log_dir.removeprefix("file:") + f"/lock/{1:020d}.heartbeat").read_text())
        assert beat["expires_at"] > time.time() + DEFAULT_LEASE_S - 5
        lock.check()  # still held


def test_lock_check_reports_a_lost_lock(storage, log_dir):
    lock = lock_of(storage, log_dir)
    lock.acquire()
    try:
        write_lease(log_dir, 2, remote_owner(acquired_ago_s=0))  # someone took it over
        with pytest.raises(ConcurrentMergeError) as info:
            lock.check()
        assert re.fullmatch(
            r"MERGE on db\.t aborted: this process lost the table's lock \(its lease expired and "
            r"MERGE on db\.t by pid 4242 on host other-host, since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
            r"took it over\)\. Nothing was changed; run the model again\.",
            str(info.value),
        ), str(info.value)
    finally:
        lock.release()
    # A lock that was lost does not mark the newer generation released.
    assert lease_files(log_dir) == ["00000000000000000001.json", "00000000000000000002.json"]


def test_lock_stale_listing_backs_off(storage, log_dir):
    write_lease(log_dir, 3, remote_owner(acquired_ago_s=0))
    lock = lock_of(storage, log_dir)
    # A waiter that listed long ago (when generation 1 was the newest) tries generation 2.
    assert lock._try_take(2) is False
    assert lease_files(log_dir) == ["00000000000000000003.json"]


def test_lock_threads_never_overlap(storage, log_dir):
    inside: list[int] = []
    overlaps: list[int] = []
    done: list[int] = []

    def worker(i: int) -> None:
        for _ in range(3):
            with lock_of(storage, log_dir, timeout_s=60):
                inside.append(i)
                if len(inside) > 1:
                    overlaps.append(i)
                time.sleep(0.02)
                inside.remove(i)
                done.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert overlaps == []
    assert len(done) == 12


def test_lock_zombie_local_holder_is_dead(storage, log_dir):
    """A holder that exited but was not reaped yet still answers kill(pid, 0): it is dead all the same."""
    proc = subprocess.Popen(["true"])  # not waited for: it stays a zombie until reaped
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.02)
        os.kill(proc.pid, 0)  # the situation of the bug: the kernel still knows the pid
        me = Owner.this_process("MERGE", "db.t", 60.0)
        zombie = Owner(**{**asdict(me), "pid": proc.pid, "process_start": None})
        write_lease(log_dir, 2, zombie)
        started = time.monotonic()
        with lock_of(storage, log_dir, timeout_s=5) as lock:
            assert time.monotonic() - started < 3
            assert lock.generation == 3 and lock.took_over == zombie and lock.took_over_live is False
    finally:
        proc.wait()


def top_generation(log_dir: str) -> int:
    """The highest lease generation on disk (0 if none)."""
    heads = [n[: -len(".json")] for n in lease_files(log_dir) if n.endswith(".json")]
    return max((int(h) for h in heads if h.isdigit()), default=0)


def test_lock_fast_reacquirer_does_not_starve_a_waiter(storage, log_dir):
    """A writer that takes the lock again right after releasing it, round after round, lets a
    writer that started waiting in between go first after at most one more turn of its own."""
    fast_generations: list[int] = []
    stop = threading.Event()
    first_turn = threading.Event()

    def fast() -> None:
        while not stop.is_set():
            with lock_of(storage, log_dir, timeout_s=60) as lock:  # a new lock per model run
                assert lock.generation is not None
                fast_generations.append(lock.generation)
                first_turn.set()
                time.sleep(0.1)

    thread = threading.Thread(target=fast)
    thread.start()
    try:
        assert first_turn.wait(30)
        waiting_from = top_generation(log_dir)  # held by the fast writer now (or just released)
        with lock_of(storage, log_dir, timeout_s=20) as slow:
            assert slow.generation is not None
            slow_generation = slow.generation
    finally:
        stop.set()
        thread.join()
    turns_while_waiting = [g for g in fast_generations if waiting_from < g < slow_generation]
    assert len(turns_while_waiting) <= 1, (waiting_from, slow_generation, fast_generations)


def test_lock_waiters_are_served_in_arrival_order(storage, log_dir):
    """Waiters that queued one after the other get the lock in that order, whichever polls first
    (a later waiter polls more often: its back-off is still short)."""
    holder = lock_of(storage, log_dir)
    holder.acquire()
    served: list[int] = []
    errors: list[BaseException] = []

    def waiter(i: int) -> None:
        try:
            with lock_of(storage, log_dir, timeout_s=60):  # each its own lock object: its own token
                served.append(i)
                time.sleep(0.05)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = []
    try:
        for i in range(4):
            th = threading.Thread(target=waiter, args=(i,))
            th.start()
            threads.append(th)
            wait_until(lambda n=i + 1: len(ticket_files(log_dir)) == n, f"waiter {i}'s ticket")
        tickets = ticket_files(log_dir)
        assert [Ticket.parse(n) for n in tickets] == sorted(Ticket.parse(n) for n in tickets)
    finally:
        holder.release()
        for th in threads:
            th.join()
    assert errors == []
    assert served == [0, 1, 2, 3]
    assert ticket_files(log_dir) == []  # each removed its ticket once it held the lock


def test_lock_ticket_names_are_never_generations(storage, log_dir):
    """Tickets share the lock folder with the leases: neither this release nor an older one
    (whose rules are spelled out below) reads one as a generation or cleans it up as an old one."""
    write_lease(log_dir, 6, remote_owner(acquired_ago_s=0))
    write_lease(log_dir, 7, remote_owner(acquired_ago_s=0))
    name = write_ticket(log_dir, 3, remote_owner(acquired_ago_s=0), time.time() + 60)
    assert name == f"wait-{3:020d}-remote.ticket"
    names = lease_files(log_dir)
    # An older release: generations are <digits>.json, and cleanup removes <digits>.* below its own.
    assert [n for n in names if n.endswith(".json") and n[: -len(".json")].isdigit()] == [
        f"{6:020d}.json",
        f"{7:020d}.json",
    ]
    assert name not in [n for n in names if n.split(".", 1)[0].isdigit()]
    lock = lock_of(storage, log_dir)
    assert lock._generations() == [6, 7]
    lock._cleanup(7)
    assert lease_files(log_dir) == [f"{7:020d}.json", name]
    assert Ticket.parse(name) == Ticket(3, "remote")
    assert Ticket.parse(f"{3:020d}.json") is None and Ticket.parse("wait-x-remote.ticket") is None


def test_lock_free_lock_with_only_stale_tickets_is_taken_at_once(storage, log_dir):
    """Tickets of a crashed local waiter and of a remote one that stopped renewing are ignored
    (no wait at all: lock_timeout_s 0) and removed."""
    write_lease(log_dir, 1, remote_owner(acquired_ago_s=0))
    Path(log_dir.removeprefix("file:") + f"/lock/{1:020d}.released").write_text("")
    write_ticket(log_dir, 1, dead_local_owner(), time.time() + 3600)  # dead, though not expired
    write_ticket(log_dir, 2, remote_owner(acquired_ago_s=120), time.time() - 1)  # expired
    with lock_of(storage, log_dir, timeout_s=0) as lock:
        assert lock.generation == 2 and lock.took_over is None
        assert lease_files(log_dir) == [f"{2:020d}.json"]


def test_lock_crashed_waiters_do_not_block_the_next_waiter(storage, log_dir):
    """A waiter queued behind two stale tickets gets the lock as soon as the holder releases it,
    long before the dead waiter's ticket would expire."""
    holder = lock_of(storage, log_dir)
    holder.acquire()
    dead = write_ticket(log_dir, 1, dead_local_owner(), time.time() + 3600)
    expired = write_ticket(log_dir, 2, remote_owner(acquired_ago_s=120), time.time() - 1)
    got: list[TableLock] = []

    def waiter() -> None:
        with lock_of(storage, log_dir, timeout_s=60) as lock:
            got.append(lock)
            assert lock.generation == 2

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        wait_until(lambda: len(ticket_files(log_dir)) == 3, "the waiter's ticket")
        mine = Ticket.parse(ticket_files(log_dir)[-1])
        assert mine is not None and mine.number == 3  # behind both stale tickets
    finally:
        holder.release()
        released = time.monotonic()
        thread.join(60)
    assert got and time.monotonic() - released < 30  # the dead ticket would block for an hour
    assert dead not in lease_files(log_dir) and expired not in lease_files(log_dir)
    assert ticket_files(log_dir) == []


def test_lock_live_ticket_keeps_a_free_lock_for_its_waiter(storage, log_dir):
    """A free lock is not taken past a live waiter that queued earlier; the error says why."""
    write_ticket(log_dir, 1, remote_owner(acquired_ago_s=5), time.time() + 60)
    with pytest.raises(ConcurrentMergeError) as info:
        lock_of(storage, log_dir, timeout_s=0.3).acquire()
    assert re.fullmatch(
        r"MERGE on db\.t gave up after waiting 0\.3 s \(lock_timeout_s\) for the table's lock: it is "
        r"free, but 1 writer that queued for it earlier \(first in line: MERGE on db\.t by pid 4242 on "
        r"host other-host, waiting since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\) goes first\. Run the model "
        r"again once they have finished, or raise lock_timeout_s\.",
        str(info.value),
    ), str(info.value)
    assert ticket_files(log_dir) == [Ticket(1, "remote").name]  # its own ticket is gone
    assert [n for n in lease_files(log_dir) if n.endswith(".json")] == []


def test_lock_waiter_that_times_out_removes_its_ticket(storage, log_dir):
    """While it waits its ticket is there; when it gives up, the ticket is gone and the error
    names the holder and the writer queued before it."""
    errors: list[ConcurrentMergeError] = []

    def waiter() -> None:
        try:
            lock_of(storage, log_dir, timeout_s=2).acquire()
        except ConcurrentMergeError as exc:
            errors.append(exc)

    with lock_of(storage, log_dir):
        queued = write_ticket(log_dir, 1, remote_owner(acquired_ago_s=5), time.time() + 60)
        thread = threading.Thread(target=waiter)
        thread.start()
        wait_until(lambda: len(ticket_files(log_dir)) == 2, "the waiter's ticket")
        thread.join(30)
    assert ticket_files(log_dir) == [queued]
    assert len(errors) == 1
    text = str(errors[0])
    assert text.startswith(
        "MERGE on db.t gave up after waiting 2 s (lock_timeout_s) for the table's lock, held by "
        f"MERGE on db.t by pid {os.getpid()} on host {socket.gethostname()}, since "
    )
    assert re.search(
        r"\(a process that is still running on this machine\), and behind 1 writer that queued for it "
        r"earlier \(first in line: MERGE on db\.t by pid 4242 on host other-host, waiting since [^)]+\)\. "
        r"Run the model again once those writers have finished, or raise lock_timeout_s\. ",
        text,
    ), text
    assert text.endswith("/lock/00000000000000000001.json.")


def test_lock_waiter_renews_its_ticket_while_waiting(storage, log_dir):
    """A waiter with a 1 s lease keeps its ticket from expiring for the 3 s it waits."""
    errors: list[ConcurrentMergeError] = []

    def waiter() -> None:
        try:
            lock_of(storage, log_dir, timeout_s=3, lease_s=1.0).acquire()
        except ConcurrentMergeError as exc:
            errors.append(exc)

    with lock_of(storage, log_dir):
        thread = threading.Thread(target=waiter)
        thread.start()
        wait_until(lambda: len(ticket_files(log_dir)) == 1, "the waiter's ticket")
        path = log_dir.removeprefix("file:") + "/lock/" + ticket_files(log_dir)[0]
        expiries: list[float] = []
        while thread.is_alive():
            try:
                ticket = json.loads(Path(path).read_text())
            except (OSError, ValueError):  # being rewritten, or removed as the waiter gave up
                continue
            assert ticket["expires_at"] > time.time(), "the waiter let its ticket expire"
            expiries.append(ticket["expires_at"])
            time.sleep(0.02)
        thread.join()
    assert len(errors) == 1 and ticket_files(log_dir) == []
    assert len(set(expiries)) >= 4  # rewritten at least every quarter lease (0.25 s) over ~3 s


class CountingStorage:
    """A storage that records which of its operations the lock calls."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        self.calls.append(name)
        return getattr(self.inner, name)


def test_lock_uncontended_acquire_costs_no_queue_operation(storage, log_dir):
    """With no one waiting, taking the lock touches no ticket: the listing it needs anyway is
    the only look at the queue."""
    counting = CountingStorage(storage)
    with TableLock(counting, log_dir, "db.t", "MERGE", 0):  # type: ignore[arg-type]
        pass
    # Acquire: list, create generation 1, list again (stale-listing check), clean up. Release.
    acquire = ["list_names", "create_if_absent", "list_names", "list_names"]
    assert counting.calls == [*acquire, "create_if_absent"]
    counting.calls.clear()
    with TableLock(counting, log_dir, "db.t", "MERGE", 0):  # type: ignore[arg-type]
        pass
    assert counting.calls.count("list_names") == 3
    assert "write_text" not in counting.calls and counting.calls.count("create_if_absent") == 2
    assert ticket_files(log_dir) == []


WAITER_SCRIPT = """
import sys
from dbt.adapters.rowmerge.merge.lock import TableLock
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage

TableLock(ArrowStorage(), sys.argv[1], "db.t", "MERGE", 600).acquire()
"""


def test_lock_killed_waiter_process_does_not_block_the_next_waiter(storage, log_dir):
    """A real waiter process, killed while queued, leaves its ticket behind; the writer queued
    after it gets the lock once the holder releases it, within its 30 s lock_timeout_s although
    the dead waiter's ticket runs 60 s (a lease) more: its death is what lets the next one pass."""
    holder = lock_of(storage, log_dir)
    holder.acquire()
    proc = subprocess.Popen([sys.executable, "-c", WAITER_SCRIPT, log_dir], cwd=Path(__file__).parents[2])
    got: list[int] = []
    try:
        wait_until(lambda: len(ticket_files(log_dir)) == 1, "the waiter process's ticket", timeout_s=60)
        proc.kill()
        proc.wait()
        (crashed,) = ticket_files(log_dir)

        def next_waiter() -> None:
            with lock_of(storage, log_dir, timeout_s=30) as lock:
                assert lock.generation is not None
                got.append(lock.generation)

        thread = threading.Thread(target=next_waiter)
        thread.start()
        wait_until(lambda: len(ticket_files(log_dir)) == 2, "the next waiter's ticket")
        assert ticket_files(log_dir)[0] == crashed  # the crashed waiter is first in line
    finally:
        holder.release()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    thread.join(60)
    assert got == [2]
    assert ticket_files(log_dir) == []


def test_lock_waiter_says_who_holds_the_lock_when_it_starts_waiting_and_every_interval(
    storage, log_dir, monkeypatch
):
    """A merge waiting for a table's lock tells the user at once (holder, since when, how long
    it will wait), and again every WAIT_NOTICE_S while it waits; an uncontended one says nothing."""
    from dbt.adapters.rowmerge.merge import lock as lock_module
    from dbt.adapters.rowmerge.merge.notices import warnings_to

    monkeypatch.setattr(lock_module, "WAIT_NOTICE_S", 0.5)
    told: list[str] = []
    holder = lock_of(storage, log_dir)
    with warnings_to(told.append, told.append):
        holder.acquire()
        assert told == []
        timer = threading.Timer(3.5, holder.release)
        timer.start()
        with lock_of(storage, log_dir, timeout_s=30):
            pass
        timer.join()
    first = re.escape(f"MERGE on db.t: waiting for the table's lock, held by {holder.owner.describe()}; ")
    assert re.fullmatch(first + r"gives up in (29|30) s \(lock_timeout_s\)", told[0]), told
    assert "since " in told[0] and " UTC" in told[0]
    assert len(told) >= 3, told
    later = r"MERGE on db\.t: still waiting after \d+ s for the table's lock, held by .*; gives up in \d+ s.*"
    assert all(re.fullmatch(later, t) for t in told[1:]), told
