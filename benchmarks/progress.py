"""A benchmark run that spans sittings: the code it times, its finished cases saved as it goes,
and a clean stop between two cases.

`make bench` at 10M rows with 5 repetitions takes one to two hours and the 50M grid several;
a machine is ours for a few hours at a time, and the next sitting may be on a new one. So
``run.py`` saves every finished case to ``<out>/progress-<mode>.json`` (timings and hashes, no
tables: a few hundred KB), ``--resume`` goes on from it after checking that the same code is
timed the same way, and ``--minutes`` (or a ``STOP`` file beside it) ends a sitting between two
cases. The file can be committed between sittings, so a new machine goes on where the last
one stopped. A case's ratios do not depend on the sitting that timed it: its three systems
run interleaved within it, on fresh copies of the same files. The report says how many
sittings the run took.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What a run times: the engine and adapter, the benchmark's own code, the pinned versions.
# Results and progress files under benchmarks/results/ are not code: committing them between
# two sittings must not stop the run from going on.
CODE_PATHS = ("dbt", "benchmarks", "pyproject.toml")
NOT_CODE = "benchmarks/results/"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def code_id(root: Path = ROOT) -> str:
    """A digest of the committed code a run times (``CODE_PATHS`` at HEAD, results left out),
    with ``+changes`` if the working tree differs from it there; ``""`` outside a git checkout."""
    try:
        # -z: paths as they are (not quoted), one NUL after each
        listing = _git(root, "ls-tree", "-r", "-z", "HEAD", "--", *CODE_PATHS)
        dirty = _git(root, "status", "--porcelain", "-z", "--untracked-files=no", "--", *CODE_PATHS)
    except (OSError, subprocess.CalledProcessError):
        return ""
    kept = [item for item in listing.split("\0") if item and not item.split("\t", 1)[-1].startswith(NOT_CODE)]
    digest = hashlib.sha1("\n".join(kept).encode()).hexdigest()[:12]
    return digest + ("+changes" if any(not p.startswith(NOT_CODE) for p in _changed_paths(dirty)) else "")


def _changed_paths(status: str) -> list[str]:
    """The paths ``git status --porcelain -z`` names: a rename's or copy's two paths both."""
    items, out = status.split("\0"), []
    i = 0
    while i < len(items):
        item = items[i]
        if item:
            out.append(item[3:])
            if item[0] in "RC":  # the path it came from follows
                i += 1
                out.append(items[i])
        i += 1
    return out


class Stopped(Exception):
    """The sitting ended between two cases (``--minutes`` passed, or the STOP file appeared)."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


@dataclass
class Progress:
    """The finished cases of one run, saved after each; ``params`` is what a resumed run must
    ask for again (mode, code, sizes, cases, repetitions)."""

    path: Path
    params: dict[str, Any]
    # each finished case as {"key": [case, rows, files asked for], "record": its record} (a
    # record's own "files" is what the table got: a partitioned one has more)
    records: list[dict[str, Any]] = field(default_factory=list)
    sittings: list[dict[str, Any]] = field(default_factory=list)
    deadline: float | None = None
    warmup_due: bool = True
    _clock: float = field(default_factory=time.monotonic)

    @classmethod
    def open(
        cls,
        out: Path,
        params: dict[str, Any],
        machine: str,
        *,
        resume: bool,
        minutes: float | None,
        warmup: bool,
    ) -> Progress:
        """A new run (an earlier progress file is replaced), or with ``resume`` the saved one,
        refused with SystemExit if there is none, or if it was asked for other code or another
        way of timing it. A finished run's file stays (marked finished): resumed, it only
        writes its report again, so a make target of two runs goes on with the second."""
        path = out / f"progress-{params['mode']}.json"  # `make bench` and the scale curve share out
        (out / "STOP").unlink(missing_ok=True)
        progress = cls(path, params, warmup_due=warmup)
        if resume and not path.is_file():
            raise SystemExit(
                f"--resume: there is no run to go on with ({path} does not exist); run without --resume"
            )
        if resume:
            saved = json.loads(path.read_text())
            if "+changes" in str(params.get("code")):
                raise SystemExit(
                    f"--resume: the working tree has uncommitted changes to {', '.join(CODE_PATHS)}"
                )
            if saved["params"] != params:
                was = saved["params"]
                differ = sorted(k for k in {*was, *params} if was.get(k) != params.get(k))
                then = ", ".join(f"{k}={was.get(k)!r}" for k in differ)
                now = ", ".join(f"{k}={params.get(k)!r}" for k in differ)
                raise SystemExit(
                    f"--resume: {path} is a run of {then}; this one asks for {now}: "
                    "run without --resume to start again"
                )
            progress.records = saved["records"]
            progress.sittings = saved["sittings"]
        progress.deadline = None if minutes is None else time.monotonic() + minutes * 60
        progress.sittings.append(
            {"machine": machine, "started": _now(), "ended": _now(), "cases": 0, "seconds": 0}
        )
        progress.save()
        return progress

    def done(self, case: str, rows: int, files: int) -> dict[str, Any] | None:
        """The saved record of ``case`` asked for at that size, if an earlier sitting finished it."""
        return next((r["record"] for r in self.records if r["key"] == [case, rows, files]), None)

    def check(self) -> None:
        """Raise Stopped if the sitting is over: before a case starts, never inside one."""
        late = self.deadline is not None and time.monotonic() > self.deadline
        if late or (self.path.parent / "STOP").exists():
            raise Stopped(
                f"stopped after {len(self.records)} finished case(s); go on with --resume ({self.path})"
            )

    def take_warmup(self) -> bool:
        """Whether the next case runs a warm-up first: once per sitting (a new JVM is cold)."""
        due, self.warmup_due = self.warmup_due, False
        return due

    def add(self, case: str, rows: int, files: int, record: dict[str, Any]) -> None:
        self.records.append({"key": [case, rows, files], "record": record})
        self.sittings[-1]["cases"] += 1
        self.save()

    def save(self) -> None:
        last = self.sittings[-1]
        last["ended"] = _now()
        last["seconds"] = round(time.monotonic() - self._clock)
        doc = {"params": self.params, "records": self.records, "sittings": self.sittings}
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        tmp.replace(self.path)

    def seconds(self) -> int:
        """The run's duration: the sittings' time, not the gaps between them."""
        self.save()
        return sum(s["seconds"] for s in self.sittings)

    def dates(self) -> str:
        first, last = self.sittings[0]["started"][:10], self.sittings[-1]["ended"][:10]
        return first if first == last else f"{first}..{last}"

    def finish(self) -> None:
        """The run is whole and reported (a resumed finished run only reports again)."""
        self.sittings[-1]["finished"] = True
        self.save()
        (self.path.parent / "STOP").unlink(missing_ok=True)
