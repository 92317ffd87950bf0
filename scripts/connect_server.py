"""A Spark Connect server from the PySpark distribution, on a free loopback port.

Used by ``make demo CONNECT=1`` (scripts/demo.py --connect) and by tests/connect: the server
is a separate JVM (``spark-submit --class ...SparkConnectServer``, which ships in PySpark's
jars) with its own warehouse and Derby metastore under ``root``; the client side (dbt and the
merge engine) talks to it over gRPC only. Started and stopped by process group, so nothing is
left behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ConnectServer:
    root: Path
    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=dict)
    java_opts: str = ""  # extra options of the server's JVM
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def settings(self) -> dict[str, str]:
        root = self.root.resolve()
        return {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.warehouse.dir": str(root / "warehouse"),
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true"
            ),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={root} {self.java_opts}".strip(),
            **self.conf,
        }

    def start(self) -> ConnectServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        args = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master]
        for key, value in self.settings().items():
            args += ["--conf", f"{key}={value}"]
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        log = open(self.root / "connect-server.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            args, env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait()
        return self

    def _wait(self) -> None:
        """Until the gRPC port accepts connections (the server opens it last)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        tail = (self.root / "connect-server.log").read_text(errors="replace")[-4000:]
        self.stop()
        raise RuntimeError(f"the Spark Connect server did not start on port {self.port}:\n{tail}")

    def stop(self) -> None:
        """Stop the server (and what it forked) by its process group."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
