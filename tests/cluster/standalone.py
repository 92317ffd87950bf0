"""A real Spark standalone cluster on loopback, from the PySpark distribution: one master and
N workers as separate JVM processes, on ports chosen free at run time. Started and stopped
by pid; nothing is left behind (the workers' scratch space is under ``root``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.connect_server import SPARK_HOME, free_port

START_TIMEOUT_S = 120


@dataclass
class StandaloneCluster:
    root: Path
    workers: int = 2
    master_url: str = ""
    ui_port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self, name: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped with everything it forks
        )
        self.procs.append(proc)

    def start(self) -> StandaloneCluster:
        port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for i in range(self.workers):
            work = self.root / f"worker{i}"
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(work),
            )  # fmt: skip
        self._wait_for_workers()
        return self

    def _state(self) -> dict[str, Any]:
        """The master's view of the cluster (its web UI's JSON), empty if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state: dict[str, Any] = json.load(r)
        except OSError:
            return {}
        return state

    def alive_workers(self) -> int:
        return sum(1 for w in self._state().get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> int:
        """Applications (drivers) that have registered with the master so far, running or ended."""
        state = self._state()
        return len(state.get("activeapps", [])) + len(state.get("completedapps", []))

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.alive_workers() == self.workers:
                return
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.5)
        logs = "\n".join(
            (self.root / f).read_text(errors="replace")[-2000:]
            for f in os.listdir(self.root)
            if f.endswith(".log")
        )
        self.stop()
        raise RuntimeError(f"standalone cluster did not come up with {self.workers} workers:\n{logs}")

    def stop(self) -> None:
        """Stop every process this cluster started (and what they forked), by process group."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
