"""Benchmark: row_level_merge against a full table rewrite and delta-rs, same files, same run.

Generates a web_returns-shaped Parquet table (``webreturns.py``), then runs each case
(``cases.py``: Delta Lake's 16-case merge grid, the merges it lacks, the dbt-shaped scenarios)
on every system (``peers.py``). Each repetition starts from a fresh copy of the table (copying,
registering and converting are not timed); the median of ``--repeat`` timed runs is reported,
after one untimed warm-up run of every system on the first case (the JVM, the Python imports
and delta-rs's runtime are then warm; later cases start from fresh copies of their own files
anyway, so a warm-up per case only added time). Every system must end with the identical
table: a hash over all columns of all rows is compared after the first and after the last
repetition of every case, and a mismatch fails the case (and the run's exit code).
Results go to ``--out`` as JSON, a markdown table and a chart (``report.py``).

    python benchmarks/run.py --rows N --files F [--cases a,b] [--repeat 3] [--scale] [--out DIR]

``--cases`` takes case names or the groups ``grid``, ``extra``, ``dbt``, ``all`` (default).
``--scale`` runs instead the (0.05, 0.01, 0.1) upsert and the 100-row upsert at ``--scale-rows``
(default 1M, 10M, 50M rows), one repetition per point, with the file size of ``--rows`` /
``--files`` kept at every point, and draws the scale chart. ``--sizes 1000000:16,...`` runs the
selected cases at each ``rows:files`` size in turn, with each case's spread and the size target
(report.py); ``--sizes-from results.json`` adds the selected cases of an earlier run of the same
commit with as many repetitions or more (``make bench-sizes``: the grid at 1M and 2M rows, 5
repetitions, with the 10M grid of ``make bench``, which would otherwise be timed twice).

A run longer than a sitting: ``--minutes M`` (or a STOP file in ``--out``) ends it between two
cases, exit code 3; ``--resume`` goes on from the cases it finished (``progress.py``, which
also says what a resumed run must keep the same).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

import cases as case_list  # noqa: E402
import report  # noqa: E402
from cases import Case  # noqa: E402
from measure import Usage, measured  # noqa: E402
from peers import SOURCE_VIEW, SYSTEMS, Done, Job, table_hash  # noqa: E402
from progress import Progress, Stopped, code_id  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from webreturns import BaseTable, generate, write_source  # noqa: E402

SYSTEM_ORDER = ("row_level_merge", "full_rewrite", "delta_rs")
# The exit code of a sitting that ended before the run was whole (--minutes, STOP): not a
# success, so that `make bench-scale` does not go on to its second run.
STOPPED = 3
# Counters both engines report that must agree (updates may differ: row_level_merge does not
# count an update that changes nothing, see skip_unchanged_updates).
SAME_COUNTERS = ("inserted", "deleted")


def spark_session(work: Path, driver_memory: str) -> SparkSession:
    builder = (
        SparkSession.builder.master(os.environ.get("BENCH_MASTER", "local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={work / 'metastore_db'};create=true",
        )
        # BENCH_JAVA_OPTS: extra driver JVM options, e.g. a Flight Recorder profile of a run.
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dderby.system.home={work} {os.environ.get('BENCH_JAVA_OPTS', '')}".strip(),
        )
        .enableHiveSupport()
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class SystemRuns:
    """One system's timed repetitions of one case (and its hashes and error, if any)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    hashes: list[list[int]] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        if not self.runs:
            return {"error": self.error, "hashes": self.hashes}
        seconds = [r["seconds"] for r in self.runs]
        phases: dict[str, list[int]] = {}
        for r in self.runs:
            for k, v in r["phases_ms"].items():
                phases.setdefault(k, []).append(v)
        return {
            "seconds": round(statistics.median(seconds), 3),
            "seconds_all": [round(s, 3) for s in seconds],
            "spark_jobs": statistics.median(r["spark_jobs"] for r in self.runs),
            "py4j_calls": statistics.median(r.get("py4j_calls", 0) for r in self.runs),
            "read_bytes": int(statistics.median(r["read_bytes"] for r in self.runs)),
            "written_bytes": int(statistics.median(r["written_bytes"] for r in self.runs)),
            "peak_rss_mb": {
                k: max(r["peak_rss_mb"].get(k, 0.0) for r in self.runs) for k in self.runs[0]["peak_rss_mb"]
            },
            "phases_ms": {k: int(statistics.median(v)) for k, v in phases.items()},
            "counters": self.runs[-1]["counters"],
            "metrics": self.runs[-1]["metrics"],
            "hashes": self.hashes,
            "error": self.error,
        }


def run_case(
    spark: SparkSession,
    case: Case,
    base: BaseTable,
    source_dir: Path,
    source_rows: int,
    work: Path,
    repeat: int,
    warmup: bool,
) -> dict[str, Any]:
    """All systems on one case: warm-up, ``repeat`` timed runs, hash checks; the case's record."""
    spark.read.format("parquet").load(str(source_dir)).createOrReplaceTempView(SOURCE_VIEW)
    clauses = case.clause_list(base)
    systems = {name: SYSTEMS[name]() for name in SYSTEM_ORDER}
    results = {name: SystemRuns() for name in SYSTEM_ORDER}
    total = repeat + (1 if warmup else 0)
    check_at = {0, total - 1}
    slug = "".join(ch if ch.isalnum() else "_" for ch in case.name)
    for rep in range(total):
        for name, system in systems.items():
            res = results[name]
            if res.error:
                continue
            job = Job(spark, case, base, clauses, source_dir, work / "runs" / name / slug, f"bench.t_{slug}")
            try:
                system.prepare(job)
                with measured(spark, f"{case.name} {name}") as usage:
                    done: Done = system.merge()
                system.after(done)
                if rep in check_at:
                    res.hashes.append(list(table_hash(system.result(), base.columns)))
                if rep >= total - repeat:
                    res.runs.append(_run_record(usage, done))
            except Exception:
                res.error = traceback.format_exc(limit=8)
                print(f"\n!!!!! {case.name}: {name} FAILED\n{res.error}", file=sys.stderr, flush=True)
            finally:
                system.cleanup()
    problems = _problems(case, results)
    for p in problems:
        print(f"\n!!!!! {case.name}: {p}", file=sys.stderr, flush=True)
    return {
        "case": case.name,
        "group": case.group,
        "delta_name": case.delta_name,
        "description": case.description,
        "table": case.table,
        "rows": base.rows,
        "files": len(base.files),
        "table_bytes": base.bytes,
        "source_rows": source_rows,
        "on": case.on,
        "clauses": clauses,
        "change_data_feed": case.change_data_feed,
        "identical": not problems,
        "problems": problems,
        "systems": {name: r.summary() for name, r in results.items()},
    }


def _run_record(usage: Usage, done: Done) -> dict[str, Any]:
    return {**asdict(usage), "counters": done.counters, "phases_ms": done.phases_ms, "metrics": done.metrics}


def _problems(case: Case, results: dict[str, SystemRuns]) -> list[str]:
    """Why the case failed: an error, a table that differs, or a counter Delta's checks forbid."""
    out = [f"{name} raised an error" for name, r in results.items() if r.error]
    hashes = {name: r.hashes for name, r in results.items() if r.hashes}
    reference = next((h[0] for h in hashes.values()), None)
    for name, hs in hashes.items():
        for h in hs:
            if h != reference:
                out.append(
                    f"RESULT MISMATCH: {name} ended with (rows, xxhash64 sum, murmur3 sum) = {h}, "
                    f"{next(iter(hashes))} with {reference}"
                )
                break
    for name in ("row_level_merge", "delta_rs"):
        for r in results[name].runs[-1:]:
            for counter in case.expect_zero:
                value = r["counters"].get(counter)
                if value not in (None, 0):
                    out.append(f"{name}: {counter} = {value}, expected 0 for this case")
    ours, theirs = results["row_level_merge"].runs, results["delta_rs"].runs
    if ours and theirs:
        for counter in SAME_COUNTERS:
            a, b = ours[-1]["counters"].get(counter), theirs[-1]["counters"].get(counter)
            if a is not None and b is not None and a != b:
                out.append(f"counters disagree: {counter} row_level_merge={a}, delta_rs={b}")
    return out


def run_cases(
    spark: SparkSession, cases: list[Case], rows: int, files: int, work: Path, repeat: int, progress: Progress
) -> list[dict[str, Any]]:
    """Each case at ``rows`` in ``files`` files, or its record from an earlier sitting; raises
    Stopped between two cases when the sitting is over."""
    bases: dict[str, BaseTable] = {}
    sources: dict[str, tuple[Path, int]] = {}
    records = []
    for case in cases:
        earlier = progress.done(case.name, rows, files)
        if earlier is not None:
            records.append(earlier)
            print(report.case_line(earlier) + "  [an earlier sitting]", flush=True)
            continue
        progress.check()
        if case.table not in bases:
            started = time.monotonic()
            bases[case.table] = generate(spark, case.table, rows, files, work / "base" / case.table)
            b = bases[case.table]
            print(
                f"table {case.table}: {b.rows:,} rows in {len(b.files)} files, {b.bytes / 1e6:.1f} MB "
                f"({time.monotonic() - started:.1f} s)",
                flush=True,
            )
        base = bases[case.table]
        if case.source_key not in sources:
            path = work / "sources" / case.source_key.replace("/", "__")
            sources[case.source_key] = (path, write_source(spark, case.source, base, path))
        source_dir, source_rows = sources[case.source_key]
        started = time.monotonic()
        record = run_case(spark, case, base, source_dir, source_rows, work, repeat, progress.take_warmup())
        records.append(record)
        progress.add(case.name, rows, files, record)
        print(report.case_line(record) + f"  [{time.monotonic() - started:.0f} s]", flush=True)
    return records


def _commit() -> str:
    """HEAD's short hash, with ``+changes`` if the working tree differs from it."""
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        )
    except OSError:
        return ""
    return head.strip() + ("+changes" if dirty.stdout.strip() else "")


def machine() -> str:
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError):
        mem_gb = 0
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem_gb} GiB, Python {platform.python_version()}"


def versions() -> dict[str, str]:
    from importlib.metadata import version

    def _version(pkg: str) -> str:
        try:
            return version(pkg)
        except Exception:
            return "?"

    return {p: _version(p) for p in ("pyspark", "deltalake", "pyarrow", "dbt-rowmerge")}


def meta(args: argparse.Namespace, progress: Progress, spark: SparkSession) -> dict[str, Any]:
    return {
        "rows": args.rows,
        "files": args.files,
        "repeat": args.repeat,
        "warmup": not args.no_warmup,
        "machine": machine(),
        "master": spark.sparkContext.master,
        "driver_memory": args.driver_memory,
        "versions": versions(),
        "commit": args.commit,
        "code": args.code,
        "date": progress.dates(),
        "duration_s": progress.seconds(),
        "sittings": len(progress.sittings),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--cases", default="all", help="case names or groups (grid, extra, dbt, all)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions per case and system")
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed warm-up run before the first case"
    )
    parser.add_argument("--scale", action="store_true", help="run the scale curve instead of the cases")
    parser.add_argument("--scale-rows", default="1000000,10000000,50000000")
    parser.add_argument("--sizes", default="", help="rows:files,... : run the cases at each size")
    parser.add_argument(
        "--sizes-from",
        type=Path,
        default=None,
        help="with --sizes: a results.json of this commit whose selected cases are one more size",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results", help="where results are written")
    parser.add_argument("--work", type=Path, default=ROOT / "work", help="scratch space for tables")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on from <out>/progress-<mode>.json: skip the cases an earlier sitting finished (same code, "
        "same run asked for)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="end the sitting between two cases after this long (or when <out>/STOP exists); "
        "go on later with --resume",
    )
    args = parser.parse_args(argv)
    args.commit = _commit()  # the code that runs: taken now, not when the run ends
    args.code = code_id()

    # Refused before Spark starts (and before hours of runs): another commit's results to add,
    # or a run to resume that asked for other code.
    args.out.mkdir(parents=True, exist_ok=True)
    earlier = sizes_from(args) if args.sizes and args.sizes_from else []
    progress = Progress.open(
        args.out,
        run_params(args),
        machine(),
        resume=args.resume,
        minutes=args.minutes,
        warmup=not args.no_warmup,
    )
    work: Path = args.work.resolve()
    for sub in ("base", "sources", "runs", "warehouse", "metastore_db"):
        shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    spark = spark_session(work, args.driver_memory)
    spark.sql("CREATE DATABASE IF NOT EXISTS bench")

    try:
        if args.sizes:
            records = run_sizes(spark, args, work, progress) + earlier
        elif args.scale:
            records = run_scale(spark, args, work, progress)
        else:
            records = run_cases(
                spark, case_list.select(args.cases), args.rows, args.files, work, args.repeat, progress
            )
    except Stopped as stopped:
        print(str(stopped), flush=True)
        return STOPPED
    about = meta(args, progress, spark)
    if args.sizes:
        if earlier:
            about["sizes_from"] = {"path": str(args.sizes_from), "rows": sorted({r["rows"] for r in earlier})}
        report.write_sizes(args.out, about, records)
        print((args.out / "sizes.md").read_text())
    elif args.scale:
        report.write_scale(args.out, about, records)
        print((args.out / "scale.md").read_text())
    else:
        report.write_results(args.out, about, records)
        print((args.out / "results.md").read_text())
    progress.finish()
    failed = [r["case"] for r in records if not r["identical"]]
    if failed:
        print(f"\n!!!!! FAILED CASES ({len(failed)}): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def run_params(args: argparse.Namespace) -> dict[str, Any]:
    """What a resumed run must ask for again: the same code, timed the same way."""
    mode = "sizes" if args.sizes else "scale" if args.scale else "cases"
    params: dict[str, Any] = {"mode": mode, "code": args.code, "cases": args.cases, "repeat": args.repeat}
    params.update(
        {"sizes": args.sizes}
        if args.sizes
        else {"rows": args.rows, "files": args.files, "scale_rows": args.scale_rows}
        if args.scale
        else {"rows": args.rows, "files": args.files}
    )
    return {**params, "versions": versions(), "driver_memory": args.driver_memory}


def run_sizes(
    spark: SparkSession, args: argparse.Namespace, work: Path, progress: Progress
) -> list[dict[str, Any]]:
    """The selected cases at each ``rows:files`` of ``--sizes``, ``--repeat`` timed runs each (the
    warm-up, if any, before the first case of the sitting only)."""
    cases = case_list.select(args.cases)
    records = []
    for size in args.sizes.split(","):
        rows, _, files = size.partition(":")
        records += run_cases(spark, cases, int(rows), int(files), work, args.repeat, progress)
        for sub in ("base", "sources", "runs"):
            shutil.rmtree(work / sub, ignore_errors=True)
    return records


def sizes_from(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The selected cases of ``args.sizes_from`` (a run.py results.json), if that run timed this
    commit at least ``args.repeat`` times per case; otherwise SystemExit saying what to run."""
    path: Path = args.sizes_from
    if not path.is_file():
        raise SystemExit(f"--sizes-from {path}: no such file; run `make bench` first")
    doc = json.loads(path.read_text())
    # The code it timed (results committed since do not change it), or for a run older than
    # that record, the commit.
    what, mine = ("code", args.code) if doc["meta"].get("code") else ("commit", args.commit)
    found, runs = doc["meta"].get(what), doc["meta"].get("repeat", 0)
    if found != mine or "+changes" in str(found) or runs < args.repeat:
        raise SystemExit(
            f"--sizes-from {path}: it timed {what} {found} {runs} times per case; this run needs "
            f"{what} {mine} (no uncommitted changes) at least {args.repeat} times: run `make bench` "
            "on this code first"
        )
    wanted = {c.name for c in case_list.select(args.cases)}
    records = [r for r in doc["cases"] if r["case"] in wanted]
    missing = wanted - {r["case"] for r in records}
    if missing:
        raise SystemExit(f"--sizes-from {path}: it has no run of {', '.join(sorted(missing))}")
    return records


def run_scale(
    spark: SparkSession, args: argparse.Namespace, work: Path, progress: Progress
) -> list[dict[str, Any]]:
    """The scale curve: each SCALE case at each size, one timed run (a warm-up before the
    sitting's first case)."""
    rows_per_file = args.rows / args.files
    cases = case_list.select(",".join(case_list.SCALE))
    records = []
    for rows in (int(r) for r in args.scale_rows.split(",")):
        files = max(1, round(rows / rows_per_file))
        for r in run_cases(spark, cases, rows, files, work, 1, progress):
            records.append(r)
        for sub in ("base", "sources", "runs"):
            shutil.rmtree(work / sub, ignore_errors=True)
    return records


if __name__ == "__main__":
    sys.exit(main())
