"""What one timed merge costs besides its own metrics: wall time, Spark jobs, process I/O, peak memory.

Measured the same way for every system, around the timed block only:

- ``seconds``: wall time (``time.perf_counter``).
- ``spark_jobs``: jobs Spark ran for the block: the block runs in its own job group and
  ``statusTracker().getJobIdsForGroup`` counts them (0 for delta-rs, which does not use Spark).
- ``read_bytes`` / ``written_bytes``: bytes that passed through read()/write() system calls of
  the benchmark's two processes, the Python driver and the Spark JVM (``rchar``/``wchar`` of
  ``/proc/<pid>/io``). Counts page-cache hits, metadata, logs and metastore I/O alike; it is
  what a system asks the OS for, not what hits the disk.
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

from pyspark.sql import SparkSession


@dataclass
class Usage:
    seconds: float = 0.0
    spark_jobs: int = 0
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
    try:
        yield usage
    finally:
        usage.seconds = time.perf_counter() - start
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        usage.spark_jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        for name, pid in pids.items():
            r, w = _io(pid)
            usage.read_bytes += r - before[name][0]
            usage.written_bytes += w - before[name][1]
            usage.peak_rss_mb[name] = _peak_mb(pid)
        usage.peak_rss_of_block = all(reset.values())
