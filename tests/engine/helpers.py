"""Helpers for engine tests: build tables file by file, read rows and file listings."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

from dbt.adapters.rowmerge.merge import MergeResult, run_merge
from dbt.adapters.rowmerge.merge.rewrite import SINGLE_TASK_ROWS

T = TypeVar("T")


def create_table(
    spark: SparkSession,
    name: str,
    schema: str,
    files: Sequence[Sequence[tuple[Any, ...]]],
    partition_by: Sequence[str] = (),
    fmt: str = "parquet",
) -> None:
    """Create ``name`` (a managed table) with one data file per inner list (per partition value,
    if partitioned), all written by Spark in one job.

    One job writes every file into a scratch folder inside the table's, partitioned by the
    file's index (and by the table's partition columns), then each file is moved into place:
    the same files a ``saveAsTable`` and one ``insertInto`` per file would leave, for one job
    instead of one per file (engine tests build hundreds of tables).
    """
    if not files or any(not rows for rows in files):
        _create_table_file_by_file(spark, name, schema, files, partition_by, fmt)
        return
    parts = f" PARTITIONED BY ({', '.join(f'`{c}`' for c in partition_by)})" if partition_by else ""
    spark.sql(f"CREATE TABLE {name} ({schema}) USING {fmt}{parts}")
    root = table_dir(spark, name)
    columns = spark.createDataFrame([], schema).schema
    data = [(*row, i) for i, rows in enumerate(files) for row in rows]
    scratch = os.path.join(root, f"_scratch_{uuid.uuid4().hex}")
    (
        spark.createDataFrame(data, columns.add(FILE_INDEX, "integer"))
        .coalesce(1)
        .write.format(fmt)
        .partitionBy(FILE_INDEX, *partition_by)
        .save(scratch)
    )
    for folder, _, names in os.walk(scratch):
        rel = os.path.relpath(folder, scratch).split(os.sep)
        if not rel[0].startswith(FILE_INDEX + "="):
            continue
        index = int(rel[0].split("=", 1)[1])
        dest = os.path.join(root, *rel[1:])
        os.makedirs(dest, exist_ok=True)
        for n in names:  # part-00000-<uuid>.c000.snappy.parquet and its hidden .crc
            crc = n.startswith(".")
            base = n[1:] if crc else n
            if not base.startswith("part-"):
                continue
            moved = f"part-{index:05d}-{base.split('-', 2)[2]}"
            os.rename(os.path.join(folder, n), os.path.join(dest, "." + moved if crc else moved))
    shutil.rmtree(scratch)
    if partition_by:
        spark.sql(f"ALTER TABLE {name} RECOVER PARTITIONS")
    spark.catalog.refreshTable(name)


FILE_INDEX = "__file_index"


def _create_table_file_by_file(
    spark: SparkSession,
    name: str,
    schema: str,
    files: Sequence[Sequence[tuple[Any, ...]]],
    partition_by: Sequence[str],
    fmt: str,
) -> None:
    """``saveAsTable`` then one ``insertInto`` per file (an empty list still writes a file)."""
    first = True
    for rows in files:
        df = spark.createDataFrame(list(rows), schema).coalesce(1)
        if first:
            writer = df.write.format(fmt)
            if partition_by:
                writer = writer.partitionBy(*partition_by)
            writer.saveAsTable(name)
            first = False
        else:
            df.write.insertInto(name)
    spark.catalog.refreshTable(name)


def source_view(spark: SparkSession, name: str, schema: str, rows: Sequence[tuple[Any, ...]]) -> str:
    spark.createDataFrame(list(rows), schema).createOrReplaceTempView(name)
    return name


def sorted_rows(data: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """``data`` as sorted tuples, None sorting first (so rows holding NULLs compare)."""
    return sorted((tuple(r) for r in data), key=lambda t: tuple((v is not None, v) for v in t))


def rows(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    """All rows of ``name`` as sorted tuples (None sorts first)."""
    spark.catalog.refreshTable(name)
    return sorted_rows(spark.table(name).collect())


def table_dir(spark: SparkSession, name: str) -> str:
    loc = [r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect() if r[0] == "Location"][0][1]
    return urlparse(loc).path


def file_snapshot(spark: SparkSession, name: str) -> dict[str, tuple[int, int]]:
    """Visible data files of ``name``: path -> (size, mtime_ns)."""
    root = table_dir(spark, name)
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        for f in filenames:
            if not f.startswith(("_", ".")):
                p = os.path.join(dirpath, f)
                st = os.stat(p)
                out[p] = (st.st_size, st.st_mtime_ns)
    return out


def merge(
    spark: SparkSession,
    target: str,
    source: str,
    clauses: list[dict[str, Any]],
    on: str = "t.id = s.id",
    **extra: Any,
) -> MergeResult:
    """Run a merge with the short aliases ``t`` (target) and ``s`` (source)."""
    spec = {
        "version": 1,
        "target": target,
        "source": source,
        "target_alias": "t",
        "source_alias": "s",
        "on": on,
        "clauses": clauses,
        **extra,
    }
    return run_merge(spark, spec)


def spark_job_ids(spark: SparkSession, run: Callable[[], T]) -> tuple[T, list[int]]:
    """(``run()``, the ids of the Spark jobs it ran, in order), from a job group of its own."""
    sc = spark.sparkContext
    group = f"counted_{uuid.uuid4().hex}"
    sc.setJobGroup(group, "counted")
    try:
        result = run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return result, sorted(sc.statusTracker().getJobIdsForGroup(group))


def spark_jobs(spark: SparkSession, run: Callable[[], T]) -> tuple[T, int]:
    """(``run()``, the Spark jobs it ran), counted in a job group of its own."""
    result, ids = spark_job_ids(spark, run)
    return result, len(ids)


def target_scans(spark: SparkSession, folder: str, run: Callable[[], T]) -> tuple[T, int]:
    """(``run()``, how many times the SQL executions it ran scan data files of ``folder``:
    scan nodes of their physical plans (the final plan of an adaptive one) whose location is
    ``folder`` or a folder below it, its journal's excepted), from the session's SQL status
    store."""
    store = spark._jsparkSession.sharedState().statusStore()
    bus = spark.sparkContext._jsc.sc().listenerBus()

    def ids() -> dict[int, Any]:
        bus.waitUntilEmpty(60_000)
        listed = store.executionsList()
        return {int(listed.apply(i).executionId()): listed.apply(i) for i in range(listed.size())}

    before = set(ids())
    result = run()
    root = urlparse(folder).path.rstrip("/")
    scans = 0
    for eid, execution in ids().items():
        if eid in before:
            continue
        text = str(execution.physicalPlanDescription())
        tree, _, details = text.partition("\n\n")
        tree = tree.split("== Initial Plan ==")[0]  # the final plan of an adaptive one
        executed = {int(n) for n in re.findall(r"Scan \S+ .*\((\d+)\)\s*$", tree, flags=re.M)}
        for node in re.split(r"\n(?=\(\d+\) )", details):
            head = re.match(r"\((\d+)\) Scan ", node)
            location = re.search(r"^Location: .*?\[(.*)\]$", node, flags=re.M)
            if not head or not location or int(head.group(1)) not in executed:
                continue
            paths = [urlparse(p.strip()).path for p in location.group(1).split(",")]
            if any((p == root or p.startswith(root + "/")) and "/_rowmerge_log/" not in p for p in paths):
                scans += 1
    return result, scans


UPSERT = [
    {"when": "matched", "action": "update", "set": "*"},
    {"when": "not_matched", "action": "insert", "values": "*"},
]


# -- added for the engine suite: state snapshots and catalog views --------------------------


def table_state(spark: SparkSession, name: str) -> tuple[list[tuple[Any, ...]], dict[str, tuple[int, int]]]:
    """Rows and visible data files of ``name`` (what an error must leave exactly as it was)."""
    return rows(spark, name), file_snapshot(spark, name)


def partitions(spark: SparkSession, name: str) -> list[str]:
    """``SHOW PARTITIONS`` of ``name``, sorted."""
    return sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {name}").collect())


def new_files(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """Paths in ``after`` that were not in ``before``."""
    return sorted(p for p in after if p not in before)


def kept_files(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """Paths present before and after with the same size and mtime (untouched files)."""
    return sorted(p for p, st in before.items() if after.get(p) == st)


def files_of(spark: SparkSession, name: str, where: str) -> list[str]:
    """Data files holding the rows of ``name`` that satisfy ``where`` (sorted paths)."""
    spark.catalog.refreshTable(name)
    found = spark.table(name).where(where).select("_metadata.file_path").distinct().collect()
    return sorted(unquote(urlparse(r[0]).path) for r in found)


def folder_digest(root: str) -> dict[str, str] | None:
    """Every file under the folder ``root`` (relative path -> sha256), the journal included but
    not the writer lease (taking the lock is not a change); None if there is no folder."""
    if not os.path.exists(root):
        return None
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if os.path.basename(dirpath) == "_rowmerge_log":
            dirnames[:] = [d for d in dirnames if d != "lock"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Set ``conf`` in the shared session for the block, then restore what was there (a key
    that was not set is unset again)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@contextmanager
def single_task_rows(limit: int) -> Iterator[None]:
    """Merges in this block join in a single task up to ``limit`` rows (0: never)."""
    token = SINGLE_TASK_ROWS.set(limit)
    try:
        yield
    finally:
        SINGLE_TASK_ROWS.reset(token)
