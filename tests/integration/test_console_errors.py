"""What a user sees when a merge fails on an error the engine explains (issue 29 item 5).

A constraint that a merged row breaks, and a value that does not fit its column, are found
inside Spark tasks: Spark's JVM logs each failed task with its Java stack trace (about 180
lines on the console before dbt's one-line message, on 38dd25b). Run as a user runs dbt — a
process of its own, whose Spark session the adapter starts — the console shows dbt's lines
and the engine's message; the Java side is in logs/spark.log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROFILE = """
console:
  target: local
  outputs:
    local:
      type: rowmerge
      method: session
      host: localhost
      schema: console_it
      threads: 1
      server_side_parameters:
        spark.master: "local[2]"
        spark.sql.shuffle.partitions: "2"
        spark.sql.session.timeZone: "UTC"
        spark.sql.warehouse.dir: "{home}/warehouse"
        spark.hadoop.javax.jdo.option.ConnectionURL: "jdbc:derby:;databaseName={home}/ms;create=true"
        spark.driver.extraJavaOptions: "-Dderby.system.home={home}"
"""

MODEL = """
{{{{ config(materialized='incremental', incremental_strategy='row_level_merge', unique_key='id') }}}}
{{% if var('step', 1) == 1 %}}
select cast(1 as int) as id, cast(10 as int) as qty
{{% else %}}
select cast(1 as int) as id, {value} as qty
{{% endif %}}
"""

CONTRACT = """
version: 2
models:
  - name: guarded
    config:
      contract: {enforced: true}
      on_schema_change: fail
    columns:
      - name: id
        data_type: int
      - name: qty
        data_type: int
        constraints:
          - type: not_null
"""

# Two dbt commands in one process (one Spark start-up), as `scripts/demo.py --in-process` does.
RUNNER = """
import sys
from dbt.cli.main import dbtRunner
runner = dbtRunner()
for args in (["run"], ["run", "--vars", "{step: 2}"]):
    result = runner.invoke(args + ["--project-dir", sys.argv[1], "--profiles-dir", sys.argv[1]])
    print(f"[exit {int(not result.success)}]", flush=True)
"""

_JAVA_FRAME = re.compile(r"^\s*(at [\w$.<>]+\(|Caused by: |\.\.\. \d+ more)")
_SPARK_LOG = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")


@pytest.fixture(scope="module")
def failed_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    home = tmp_path_factory.mktemp("console")
    (home / "models").mkdir()
    (home / "dbt_project.yml").write_text(
        "name: console\nversion: '1.0'\nprofile: console\nmodel-paths: ['models']\n"
    )
    (home / "profiles.yml").write_text(PROFILE.format(home=home))
    # not_null broken by a merged row; a value that does not fit an INT column
    (home / "models" / "guarded.sql").write_text(MODEL.format(value="cast(null as int)"))
    (home / "models" / "schema.yml").write_text(CONTRACT)
    (home / "models" / "narrow.sql").write_text(MODEL.format(value="'not a number'"))
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(home)],
        cwd=home,
        env={**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    return proc.stdout + proc.stderr, home


@pytest.mark.slow
def test_explained_errors_show_no_java_on_the_console(failed_runs: tuple[str, Path]) -> None:
    out, home = failed_runs
    assert "[exit 0]" in out and "[exit 1]" in out, out[-5000:]
    text = " ".join(out.split())
    guarded = "MERGE into console_it.guarded failed: a row it writes violates constraint not_null(qty)"
    assert guarded in text, out[-5000:]
    assert "console_it.narrow" in text and "qty" in text and "not a number" in text, out[-5000:]
    lines = out.splitlines()
    assert [line for line in lines if _JAVA_FRAME.match(line)] == [], out[-5000:]
    assert [line for line in lines if _SPARK_LOG.match(line)] == [], out[-5000:]
    assert not any("TASK_WRITE_FAILED" in line or "Aborting task" in line for line in lines)
    # the Java side is kept, beside dbt's log
    spark_log = (home / "logs" / "spark.log").read_text(errors="replace")
    assert "ERROR" in spark_log
