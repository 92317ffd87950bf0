"""session.py: a second process on an embedded Derby metastore gets one clear error, and the
JVM's console output goes to a file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from dbt.adapters.rowmerge import session

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def _url(name: str) -> dict[str, str]:
    return {session.DERBY_URL_KEY: f"jdbc:derby:;databaseName={name};create=true"}


def test_derby_taken_by_another_process_is_one_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "metastore_db"
    db.mkdir()
    # as Derby does while a process has the database booted: a lock on dbex.lck
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db / "dbex.lck")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        problem = session.derby_in_use(_url(str(db)))
        assert problem is not None
        assert problem.startswith(f"The embedded Hive metastore (Derby) at {db} is in use by another process")
        assert "`method: connect`" in problem and "spark.hadoop.hive.metastore.uris" in problem
        # the other URL forms name the same database
        assert session.derby_in_use({session.DERBY_URL_KEY: f"jdbc:derby:{db};create=true"}) == problem
        relative = {
            session.DERBY_URL_KEY: "jdbc:derby:;databaseName=metastore_db;create=true",
            "spark.driver.extraJavaOptions": f"-Xss4m -Dderby.system.home={tmp_path}",
        }
        assert session.derby_in_use(relative) == problem
    finally:
        holder.kill()
        holder.wait()
    # released (the process ended): free again, and the lock file left behind does not matter
    assert session.derby_in_use(_url(str(db))) is None


def test_derby_not_booted_or_not_derby_is_no_problem(tmp_path: Path) -> None:
    assert session.derby_in_use(_url(str(tmp_path / "never_booted"))) is None
    assert session.derby_in_use({session.DERBY_URL_KEY: "jdbc:mysql://db:3306/metastore"}) is None
    assert session.derby_in_use({session.DERBY_URL_KEY: "jdbc:derby:memory:ms;create=true"}) is None


def test_jvm_output_goes_to_the_file_and_ours_comes_back(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "spark.log"
    before = os.fstat(2)
    with session._jvm_output_to(str(log)):
        # a child started now (as PySpark starts Spark's JVM) keeps the file for its life
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.stderr.write('from the child\\n')"]
        )
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
    child.wait()
    deadline = time.monotonic() + 5
    while "from the child" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.read_text() == "from the child\n"
