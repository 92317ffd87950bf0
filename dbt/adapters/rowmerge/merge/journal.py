"""Phase 6: commit through a journal under the table location, and recover from crashes.

Layout (``_``-prefixed, so Spark, Hive, Trino and DuckDB never read it as data)::

    <table>/_rowmerge_log/staging/<txn>/...   new files, written before the commit point
    <table>/_rowmerge_log/<version>.json      the entry; creating it (create-if-absent) commits
    <table>/_rowmerge_log/<version>.applied   written once every step of the entry is done

After the commit point every step is idempotent (move staged file if still staged, delete
removed file if still there, add partition if absent), so ``recover`` can replay an
unapplied entry any number of times. Staging folders with no entry are rolled back.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from pyspark.sql import SparkSession

from .errors import ConcurrentMergeError
from .storage import Storage

LOG_DIR = "_rowmerge_log"
STAGING_DIR = "staging"
ENTRY_SUFFIX = ".json"
APPLIED_SUFFIX = ".applied"
VERSION_DIGITS = 20
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Test hook: the name of a commit step after which the process dies (os._exit), to prove
# that recovery leaves the table exactly before or after the merge.
FAULT_ENV = "ROWMERGE_FAULT_AFTER"


def fault_point(step: str) -> None:
    """Die hard right after ``step`` if the test hook asks for it."""
    wanted = os.environ.get(FAULT_ENV)
    if wanted and wanted == step:
        os._exit(137)


def spec_digest(raw: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Journal:
    """The journal of one table."""

    storage: Storage
    location: str

    @property
    def log_dir(self) -> str:
        return f"{self.location}/{LOG_DIR}"

    def staging_dir(self, txn: str) -> str:
        return f"{self.log_dir}/{STAGING_DIR}/{txn}"

    def entry_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{ENTRY_SUFFIX}"

    def applied_path(self, version: int) -> str:
        return f"{self.log_dir}/{version:0{VERSION_DIGITS}d}{APPLIED_SUFFIX}"

    @staticmethod
    def new_txn() -> str:
        return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"

    def _names(self) -> list[str]:
        return self.storage.list_names(self.log_dir)

    def versions(self) -> list[int]:
        return sorted(
            int(n[: -len(ENTRY_SUFFIX)])
            for n in self._names()
            if n.endswith(ENTRY_SUFFIX) and n[: -len(ENTRY_SUFFIX)].isdigit()
        )

    def current_version(self) -> int:
        versions = self.versions()
        return versions[-1] if versions else 0

    def read_entry(self, version: int) -> dict[str, Any]:
        entry: dict[str, Any] = json.loads(self.storage.read_text(self.entry_path(version)))
        return entry

    def is_applied(self, version: int) -> bool:
        return self.storage.exists(self.applied_path(version))

    # -- commit ---------------------------------------------------------------------------

    def final_path(self, txn: str, staged: str) -> str:
        """Where a staged file goes: same partition sub-path under the table location."""
        rel = staged.split(f"/{LOG_DIR}/{STAGING_DIR}/{txn}/", 1)[1]
        return f"{self.location}/{rel}"

    def commit(self, entry: dict[str, Any]) -> int:
        """Create the next entry (the commit point); return its version."""
        for path in (f["path"] for f in entry["removed"]):
            if not self.storage.exists(path):
                raise ConcurrentMergeError(
                    f"MERGE into {entry['table']} aborted: file {path} was removed by another "
                    "writer while the merge ran. Nothing was changed; run the model again."
                )
        version = self.current_version() + 1
        entry = dict(entry, version=version)
        fault_point("before_entry")
        if not self.storage.create_if_absent(self.entry_path(version), json.dumps(entry, indent=1)):
            raise ConcurrentMergeError(
                f"MERGE into {entry['table']} aborted: another writer committed version {version} "
                "at the same time. Nothing was changed; run the model again."
            )
        fault_point("after_entry")
        return version

    def apply(self, spark: SparkSession, entry: Mapping[str, Any]) -> None:
        """Roll ``entry`` forward; every step is safe to repeat."""
        table = entry["table"]
        existing = {f.name.lower() for f in spark.table(table).schema.fields}
        new_cols = [c for c in entry.get("new_columns", []) if c["name"].lower() not in existing]
        if new_cols:
            cols = ", ".join(f"`{c['name']}` {c['type']}" for c in new_cols)
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({cols})")
        for i, f in enumerate(entry["added"]):
            self.storage.rename(f["staged"], f["path"])
            fault_point(f"after_move_{i}")
        for i, f in enumerate(entry["removed"]):
            self.storage.delete(f["path"])
            fault_point(f"after_delete_{i}")
        register_partitions(spark, table, entry.get("partitions", []))
        fault_point("before_applied")
        self.storage.create_if_absent(self.applied_path(int(entry["version"])), "")
        self.storage.delete(self.staging_dir(entry["txn"]), recursive=True)
        spark.catalog.refreshTable(table)

    def recover(self, spark: SparkSession) -> list[int]:
        """Roll unapplied entries forward and staging without an entry back; return replayed versions."""
        replayed = []
        txns = set()
        for v in self.versions():
            entry = self.read_entry(v)
            txns.add(entry.get("txn"))
            if not self.is_applied(v):
                self.apply(spark, entry)
                replayed.append(v)
        for txn in self.storage.list_names(f"{self.log_dir}/{STAGING_DIR}"):
            if txn not in txns:
                self.storage.delete(self.staging_dir(txn), recursive=True)
        return replayed

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        out = []
        for v in reversed(self.versions()):
            e = self.read_entry(v)
            out.append(
                {
                    "version": v,
                    "timestamp": e["timestamp"],
                    "operation": e["operation"],
                    "metrics": e.get("metrics", {}),
                    "applied": self.is_applied(v),
                }
            )
            if limit is not None and len(out) >= limit:
                break
        return out


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def register_partitions(spark: SparkSession, table: str, partitions: list[str]) -> None:
    """Add partition directories a merge created to the catalog (no-op if already there)."""
    if not partitions:
        return
    if any(HIVE_DEFAULT_PARTITION in p for p in partitions):
        spark.sql(f"ALTER TABLE {table} RECOVER PARTITIONS")
        return
    specs = []
    for rel in partitions:
        kvs = [seg.split("=", 1) for seg in rel.strip("/").split("/")]
        specs.append(
            "PARTITION (" + ", ".join(f"`{unquote(k)}` = {_sql_string(unquote(v))}" for k, v in kvs) + ")"
        )
    # One statement per batch keeps the metastore round trips low.
    for i in range(0, len(specs), 100):
        spark.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS {' '.join(specs[i : i + 100])}")
