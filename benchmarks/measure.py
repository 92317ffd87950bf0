"""What one timed merge costs besides its own metrics: wall time, Spark jobs, process I/O, peak memory.

Measured the same way for every system, around the timed block only:

- ``seconds``: wall time (``time.perf_counter``).
- ``spark_jobs``: jobs Spark ran for the block: the block runs in its own job group and
  ``statusTracker().getJobIdsForGroup`` counts them (0 for delta-rs, which does not use Spark).
- ``read_bytes`` / ``written_bytes``: bytes that passed through read()/write() system calls of
  the benchmark's two processes, the Python driver and the Spark JVM (``rchar``/``wchar`` of
  ``/proc/<pid>/io``). Counts page-cache hits, metadata, logs and metastore I/O alike; it is
  what a system asks the OS for, not what hits the disk.
- ``py4j_calls``: commands sent to the JVM through py4j during the block (each a round trip:
  a socket message and a wake-up of both processes, what a tiny merge's fixed cost is partly
  made of), not counting the garbage-collection messages of py4j's finalizer thread.
- ``peak_rss_mb``: the high-water mark of resident memory (``VmHWM``) of each process during
  the block, after resetting it (``/proc/<pid>/clear_refs``). The JVM's includes heap it kept
  from earlier work (a JVM rarely returns heap); delta-rs works inside the Python process.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from py4j.protocol import MEMORY_COMMAND_NAME as MEMORY_COMMAND
from pyspark.sql import SparkSession


@dataclass
class Usage:
    seconds: float = 0.0
    spark_jobs: int = 0
    py4j_calls: int = 0
    read_bytes: int = 0
    written_bytes: int = 0
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    peak_rss_of_block: bool = True  # False: clear_refs refused, the peaks are the processes' lifetime ones


def jvm_pid(spark: SparkSession) -> int | None:
    try:
        return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    except Exception:
        return None


def _io(pid: int) -> tuple[int, int]:
    try:
        fields = dict(line.split(": ") for line in open(f"/proc/{pid}/io").read().splitlines())
        return int(fields["rchar"]), int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _reset_peak(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mb(pid: int) -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


@contextmanager
def _py4j_counted(spark: SparkSession, count: list[int]) -> Iterator[None]:
    """Add to ``count[0]`` the py4j commands sent while the block runs, from any thread (the
    engine writes the change feed from a thread of its own), except the garbage-collection
    messages py4j's finalizer thread sends. Nothing for a session without a py4j gateway
    (Spark Connect)."""
    client = getattr(getattr(spark.sparkContext, "_gateway", None), "_gateway_client", None)
    if client is None:
        yield
        return
    own = "send_command" in vars(client)
    send = client.send_command

    def counting(command: str, *args: Any, **kwargs: Any) -> Any:
        if not command.startswith(MEMORY_COMMAND):
            count[0] += 1
        return send(command, *args, **kwargs)

    client.send_command = counting
    try:
        yield
    finally:
        if own:
            client.send_command = send
        else:
            del client.send_command


@contextmanager
def measured(spark: SparkSession, label: str) -> Iterator[Usage]:
    """Measure the block; the returned :class:`Usage` is filled when the block ends."""
    usage = Usage()
    pids = {"python": os.getpid()}
    jvm = jvm_pid(spark)
    if jvm is not None:
        pids["jvm"] = jvm
    reset = {name: _reset_peak(pid) for name, pid in pids.items()}
    before = {name: _io(pid) for name, pid in pids.items()}
    sc = spark.sparkContext
    group = f"bench-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, label)
    start = time.perf_counter()
    calls = [0]
    try:
        with _py4j_counted(spark, calls):
            yield usage
    finally:
        usage.seconds = time.perf_counter() - start
        usage.py4j_calls = calls[0]
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        usage.spark_jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        for name, pid in pids.items():
            r, w = _io(pid)
            usage.read_bytes += r - before[name][0]
            usage.written_bytes += w - before[name][1]
            usage.peak_rss_mb[name] = _peak_mb(pid)
        usage.peak_rss_of_block = all(reset.values())
