"""Run the integration dbt project end to end: one ``dbt build`` per batch, then the history.

    python scripts/demo.py [--work-dir DIR] [--keep-going] [--connect] [--in-process]

Wipes the work directory (default ``integration_project/target``), then for batch 0 (the
first run: seeds loaded, every table created), 1 and 2 (row-level merges) runs
``dbt build --vars '{batch: N}'`` (seeds only in batch 0: they hold every batch), which runs
each model and then the project's tests of it, streaming dbt's output; then one
``dbt build --empty`` of the merge models and the snapshot (which must skip every merge);
finally ``dbt run-operation rowmerge_history`` for orders_cdc. Every dbt invocation pays Spark's
start-up once; ``--in-process`` runs them all through dbt's Python API in this process
instead, so Spark starts once (the tests on a cluster and through Connect use it).

Everything the run writes goes under the work directory: dbt's target files and logs,
Spark's warehouse and the Derby metastore (``ROWMERGE_DEMO_HOME``, read by profiles.yml).
After each ``dbt build`` its run_results.json is kept as ``run_results_batch_<N>.json``;
at the end a summary prints every model's run line per batch and is written to
``demo_summary.json``. Exits non-zero if any dbt command fails.

``--connect`` runs the same project through Spark Connect (profile target ``connect``,
``method: connect``): dbt and the merge engine are Connect clients with no JVM, and the
Spark session lives in a Spark Connect server started from the PySpark distribution on a
free loopback port (warehouse and metastore under the work directory), stopped at the end.
With ``ROWMERGE_CONNECT_URL=sc://host:port`` set, that server is used instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "integration_project"
BATCHES = (0, 1, 2)


def dbt_executable() -> str:
    """The dbt next to this interpreter (the venv's), else whatever is on PATH."""
    candidate = Path(sys.executable).parent / "dbt"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("dbt")
    if found is None:
        sys.exit("demo: no dbt executable next to " + sys.executable + " or on PATH")
    return found


def run_dbt(
    dbt: str | None, args: list[str], work_dir: Path, env: dict[str, str], lines: list[str] | None = None
) -> int:
    """Run one dbt command against the integration project, streaming its output (kept in
    ``lines``); ``dbt`` None: in this process (see ``--in-process``)."""
    flags = [
        *args,
        "--project-dir",
        str(PROJECT),
        "--profiles-dir",
        str(PROJECT),
        "--target-path",
        str(work_dir),
        "--log-path",
        str(work_dir / "logs"),
    ]
    if env.get("ROWMERGE_DEMO_TARGET"):
        flags += ["--target", env["ROWMERGE_DEMO_TARGET"]]
    if not sys.stdout.isatty():
        flags.append("--no-use-colors")
    print(f"\n$ dbt {' '.join(args)}", flush=True)
    started = time.monotonic()
    if dbt is None:
        rc = _run_dbt_here(flags, lines)
        print(f"[dbt {args[0]} exited {rc} after {time.monotonic() - started:.1f}s]", flush=True)
        return rc
    with subprocess.Popen(
        [dbt, *flags],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if lines is not None:
                lines.append(line.rstrip("\n"))
        rc = proc.wait()
    print(f"[dbt {args[0]} exited {rc} after {time.monotonic() - started:.1f}s]", flush=True)
    return rc


def _run_dbt_here(flags: list[str], lines: list[str] | None) -> int:
    """One dbt command through dbt's Python API, in this process: its Spark session (and,
    on a cluster, its executors) stays up for the next command. dbt prints its output
    itself; the messages of its log events are also kept in ``lines``."""
    from dbt.cli.main import dbtRunner

    def keep(event: Any) -> None:
        if lines is not None and event.info.msg:
            lines.append(str(event.info.msg))

    cwd = os.getcwd()
    os.chdir(PROJECT)
    try:
        result = dbtRunner(callbacks=[keep]).invoke(flags)
    finally:
        os.chdir(cwd)
    sys.stdout.flush()
    if result.exception is not None:
        print(f"dbt raised: {result.exception!r}", flush=True)
    return 0 if result.success else 1


def model_results(run_results: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per model or snapshot of a run_results.json: status, run line, metrics."""
    rows = []
    for result in run_results.get("results", []):
        unique_id = result.get("unique_id", "")
        if not unique_id.startswith(("model.", "snapshot.")):
            continue
        response = result.get("adapter_response") or {}
        rows.append(
            {
                "model": unique_id.split(".")[-1],
                "status": result.get("status"),
                "message": response.get("_message") or result.get("message"),
                "code": response.get("code"),
                "metrics": response.get("metrics") or {},
                "execution_time": round(result.get("execution_time") or 0.0, 2),
            }
        )
    return sorted(rows, key=lambda row: row["model"])


def print_summary(summary: dict[str, Any]) -> None:
    print("\n" + "=" * 78)
    print("dbt-rowmerge integration demo: run line per model per batch")
    print("=" * 78)
    for batch in summary["batches"]:
        print(f"\nbatch {batch['batch']}  ({'create' if batch['batch'] == 0 else 'merge'})")
        for row in batch["models"]:
            line = f"[{row['message']} in {row['execution_time']:.2f}s]"
            print(f"  {row['model']:<22} {row['status']:<7} {line}")
        for step, rc in batch["exit_codes"].items():
            if rc != 0:
                print(f"  !! dbt {step} exited {rc}")
    if summary.get("history"):
        print("\nrowmerge_history of orders_cdc (change_data_feed=true):")
        for line in summary["history"]:
            print(f"  {line}")
    print(f"\ntotal {summary['seconds']:.1f}s; {'OK' if summary['ok'] else 'FAILED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=PROJECT / "target",
        help="where dbt and Spark write (wiped first; default integration_project/target)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="run the later batches even after a dbt command failed",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run every dbt command in this process (one Spark start-up in all) instead of one "
        "dbt process per command, as a user would",
    )
    parser.add_argument(
        "--batches",
        type=int,
        choices=range(1, len(BATCHES) + 1),
        default=len(BATCHES),
        help="run only the first N batches (2: create every table, then one round of merges)",
    )
    parser.add_argument(
        "--connect",
        action="store_true",
        help="run through Spark Connect (a server started here unless ROWMERGE_CONNECT_URL is set)",
    )
    args = parser.parse_args(argv)
    work_dir: Path = args.work_dir.resolve()

    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    env = dict(os.environ)
    env["ROWMERGE_DEMO_HOME"] = str(work_dir)
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
    env.setdefault("PYTHONUNBUFFERED", "1")
    if not args.connect:
        return run_batches(args, work_dir, env)
    from connect_server import ConnectServer

    env["ROWMERGE_DEMO_TARGET"] = "connect"
    if env.get("ROWMERGE_CONNECT_URL"):
        return run_batches(args, work_dir, env)
    print("starting a Spark Connect server ...", flush=True)
    server = ConnectServer(work_dir / "connect_server").start()
    print(f"Spark Connect server at {server.url}", flush=True)
    env["ROWMERGE_CONNECT_URL"] = server.url
    try:
        return run_batches(args, work_dir, env)
    finally:
        if args.in_process:
            # dbt's Connect session lives in this process: close it while its server is up.
            from dbt.adapters.rowmerge.session import stop_remote_sessions

            stop_remote_sessions()
        server.stop()


def run_batches(args: argparse.Namespace, work_dir: Path, env: dict[str, str]) -> int:
    """Every batch, the --empty runs and the history; the summary; the exit code."""
    started = time.monotonic()
    dbt = None if args.in_process else dbt_executable()
    if dbt is None:
        os.environ.update(env)  # what profiles.yml reads, for the dbt commands of this process

    summary: dict[str, Any] = {"work_dir": str(work_dir), "batches": [], "ok": True}
    batches = BATCHES[: args.batches]
    for batch in batches:
        print(f"\n##### batch {batch} #####", flush=True)
        vars_arg = f"{{batch: {batch}}}"
        entry: dict[str, Any] = {"batch": batch, "exit_codes": {}, "models": []}
        summary["batches"].append(entry)
        # One `dbt build` per batch, as a user runs it: every model, then the tests that read it.
        # The seeds hold every batch (models pick theirs with var('batch')): loaded once.
        cmd = ["build", "--vars", vars_arg]
        if batch != batches[0]:
            cmd += ["--exclude-resource-type", "seed"]
        rc = run_dbt(dbt, cmd, work_dir, env)
        entry["exit_codes"]["build"] = rc
        results_path = work_dir / "run_results.json"
        if results_path.exists():
            kept = work_dir / f"run_results_batch_{batch}.json"
            shutil.copyfile(results_path, kept)
            entry["models"] = model_results(json.loads(kept.read_text()))
        if rc != 0:
            summary["ok"] = False
            if not args.keep_going:
                break

    if summary["ok"]:
        # `dbt build --empty` reads no rows: every merge model and the snapshot (with no rows
        # every customer would look deleted) must be skipped, tables unchanged (the history
        # below still ends at the last batch's version). One command, as a user would run it.
        print("\n##### --empty run (changes nothing) #####", flush=True)
        last = f"{{batch: {batches[-1]}}}"
        # Only the merge models and the snapshot: a `table` model inheriting the project-wide
        # strategy would be rebuilt empty, and tests of empty tables say nothing.
        merges = "config.materialized:incremental,config.incremental_strategy:row_level_merge"
        cmd = ["build", "--empty", "--vars", last, "--select", merges, "resource_type:snapshot"]
        rc = run_dbt(dbt, [*cmd, "--resource-type", "model", "--resource-type", "snapshot"], work_dir, env)
        results_path = work_dir / "run_results.json"
        models = model_results(json.loads(results_path.read_text())) if results_path.exists() else []
        summary["empty_run"] = {"exit_code": rc, "models": sorted(models, key=lambda row: row["model"])}
        summary["ok"] = rc == 0

    if summary["ok"]:
        history: list[str] = []
        relation = "{relation: rowmerge_it.orders_cdc}"
        rc = run_dbt(dbt, ["run-operation", "rowmerge_history", "--args", relation], work_dir, env, history)
        marker = "version | timestamp"
        shown = [line.split("  ", 1)[-1].strip() for line in history]
        start = next((i for i, t in enumerate(shown) if t.startswith(marker)), len(shown))
        summary["history"] = [t for t in shown[start:] if "|" in t]
        summary["ok"] = rc == 0

    summary["seconds"] = round(time.monotonic() - started, 1)
    (work_dir / "demo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print_summary(summary)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
