"""The writer lock (lock.py) on the session's real Hadoop filesystem.

Owners on "another host" are written as lease files by hand: that is exactly what a writer
on another machine leaves behind. A dead local owner is a real process that has exited.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from dbt.adapters.rowmerge.merge import ConcurrentMergeError
from dbt.adapters.rowmerge.merge.lock import DEFAULT_LEASE_S, Owner, TableLock
from dbt.adapters.rowmerge.merge.storage import HadoopStorage, Storage
from dbt.adapters.rowmerge.merge.storage_arrow import ArrowStorage


@pytest.fixture(params=["hadoop", "arrow"])
def storage(spark, request) -> Storage:
    """Every lock test on both storages: Hadoop's (session mode) and pyarrow.fs (Connect)."""
    return HadoopStorage(spark) if request.param == "hadoop" else ArrowStorage()


@pytest.fixture
def log_dir(tmp_path: Path) -> str:
    return f"file:{tmp_path}/_rowmerge_log"


def lock_of(storage, log_dir: str, timeout_s: float = 0.0, operation: str = "MERGE") -> TableLock:
    return TableLock(storage, log_dir, "db.t", operation, timeout_s)


def lease_files(log_dir: str) -> list[str]:
    return sorted(os.listdir(log_dir.removeprefix("file:") + "/lock"))


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
