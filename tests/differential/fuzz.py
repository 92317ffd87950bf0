"""``make fuzz N=5000 SEED=7``: run N random merges against the DuckDB oracle in one Spark session.

Case ``i`` of seed ``S`` is the same case the fixed-seed test builds (``case_rng(S, i)``), so
``--seed 20261123 --start 17 --n 1`` replays case 17 of ``make test``. A mismatch is shrunk
greedily (drop clauses, source rows, target rows while the mismatch persists) and printed with
its spec, rows, the oracle's SQL and a ``Case(...)`` to paste into test_regressions.py.
``--jobs K`` runs K merges at once in the session, each on its own tables, as dbt's threads
do (a small merge waits on Spark's scheduling more than on the two cores). Exit status 1 if
any case mismatched.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
from pyspark.sql import SparkSession

from tests.conftest import spark_conf
from tests.differential.cases import Case, Outcome
from tests.differential.compare import (
    COMPACTED,
    DIRECT,
    DIRECT_FALLBACK,
    DIRECT_SPREAD,
    LARGE_SOURCE,
    MERGED,
    ONE_PASS_BROADCAST,
    ONE_PASS_LOST,
    ONE_PASS_RECHECKED,
    ONE_PASS_SCANNED,
    ONE_PASS_SINGLE_TASK,
    check,
    reproduction,
)
from tests.differential.generator import generate
from tests.differential.oracle import OracleError
from tests.differential.test_differential import case_rng

TABLES_PER_DATABASE = 200


def start_spark(root: Path) -> SparkSession:
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in spark_conf(root).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # The engine probes expressions and catches the analysis errors; PySpark logs each one.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return session


def smaller(case: Case) -> Iterator[Case]:
    """Cases one step smaller than ``case`` (each still a valid spec)."""
    for i in range(len(case.clauses)):
        if len(case.clauses) > 1:
            yield dataclasses.replace(case, clauses=case.clauses[:i] + case.clauses[i + 1 :])
    for i in range(len(case.source_rows)):
        yield dataclasses.replace(case, source_rows=case.source_rows[:i] + case.source_rows[i + 1 :])
    for f, rows in enumerate(case.target_files):
        for i in range(len(rows)):
            files = [list(r) for r in case.target_files]
            del files[f][i]
            files = [r for r in files if r] or [[]]
            yield dataclasses.replace(case, target_files=files)


class Runner:
    """One Spark session and DuckDB connection; a fresh database every few hundred tables."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.con = duckdb.connect()
        self.db = ""
        self.used = TABLES_PER_DATABASE
        self.serial = 0

    def _database(self) -> str:
        if self.used >= TABLES_PER_DATABASE:
            if self.db:
                self.spark.sql(f"DROP DATABASE IF EXISTS {self.db} CASCADE")
            self.db = "fuzz_" + uuid.uuid4().hex[:8]
            self.spark.sql(f"CREATE DATABASE {self.db}")
            self.used = 0
        self.used += 1
        return self.db

    def check(self, case: Case) -> tuple[list[str], Outcome, Outcome]:
        self.serial += 1
        return check(self.spark, case, self._database(), f"c{self.serial}", self.con)

    def shrink(self, case: Case, budget: int = 60) -> Case:
        current, n = case, 0
        improved = True
        while improved and n < budget:
            improved = False
            for candidate in smaller(current):
                n += 1
                try:
                    problems, _, _ = self.check(candidate)
                except OracleError:
                    continue
                if problems:
                    current, improved = candidate, True
                    break
                if n >= budget:
                    break
        return current

    def close(self) -> None:
        if self.db:
            self.spark.sql(f"DROP DATABASE IF EXISTS {self.db} CASCADE")
        self.con.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="number of cases")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=0, help="index of the first case")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument(
        "--jobs", type=int, default=1, help="merges run at once in the one session (as dbt threads do)"
    )
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="rowmerge_fuzz_"))
    spark = start_spark(root)
    runners = [Runner(spark) for _ in range(args.jobs)]
    counts: collections.Counter[str] = collections.Counter()
    mismatched: list[int] = []
    lock = threading.Lock()
    began = time.monotonic()

    def one(runner: Runner, i: int) -> None:
        case = generate(case_rng(args.seed, i), f"seed{args.seed}_case{i}")
        try:
            problems, expected, actual = runner.check(case)
        except OracleError as exc:
            with lock:
                counts["oracle_error"] += 1
                print(f"=== ORACLE ERROR {case.name}: {exc}\n{case.to_python()}", flush=True)
            return
        report = ""
        if problems:
            small = case if args.no_shrink else runner.shrink(case)
            p2, e2, a2 = runner.check(small)
            report = reproduction(small, p2 or problems, e2, a2)
        with lock:
            counts[expected.error or ("changes" if expected.changes else "no_change")] += 1
            if problems:
                mismatched.append(i)
                print(report, flush=True)
            done = sum(counts.values())
            if done % 50 == 0:
                rate = done / (time.monotonic() - began)
                print(f"... {done}/{args.n} cases, {len(mismatched)} mismatched, {rate:.2f}/s", flush=True)

    def work(k: int) -> None:
        for i in range(args.start + k, args.start + args.n, args.jobs):
            one(runners[k], i)

    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(work, range(args.jobs)))
    finally:
        for runner in runners:
            runner.close()
        spark.stop()
    elapsed = time.monotonic() - began
    outcome = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    mismatched.sort()
    print(
        f"fuzz seed={args.seed} start={args.start} n={args.n}: {len(mismatched)} mismatched "
        f"{mismatched[:20]}; outcomes {outcome}; compacted after {len(COMPACTED)} of "
        f"{len(MERGED)} merges; one pass in a single task {len(ONE_PASS_SINGLE_TASK)}, with the source "
        f"broadcast {len(ONE_PASS_BROADCAST)} (inserts rechecked {len(ONE_PASS_RECHECKED)}), "
        f"thrown away {len(ONE_PASS_LOST) + len(ONE_PASS_SCANNED)} "
        f"(then scanned {len(ONE_PASS_SCANNED)}); written directly {len(DIRECT)}, by the source's own "
        f"tasks {len(DIRECT_SPREAD)} (bet lost {len(DIRECT_FALLBACK)}); {len(LARGE_SOURCE)} cases as large "
        f"sources (not broadcast), {len(set(LARGE_SOURCE) & set(MERGED))} of them merged; {elapsed:.0f}s"
    )
    return 1 if mismatched or counts["oracle_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
