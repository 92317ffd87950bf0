"""The undo campaign: random merges with the change feed on, restores at random points, and
proof that time travel and restore are exact (README "Time travel and undo").

``python -m tests.reliability.undo_campaign --merges 200 --restores 20 --seed 1`` runs it on a
partitioned and an unpartitioned table in a local Spark session of its own; the pytest suite
(test_undo_campaign.py) runs it on the shared session at a smaller size.

Each table starts with a few files of rows and retention that keeps every version. Each merge
is one of: an upsert, a conditional upsert (update only when the source's ``n`` is larger), a
CDC merge whose source ``op = 'D'`` deletes, an upsert with a NOT MATCHED BY SOURCE delete or
update restricted by a condition (so the table never empties), or inserts only; one merge in the
middle adds a column ``w`` by schema evolution (later sources have it or not). After every version
(a merge, an auto-compaction ``OPTIMIZE`` or a restore) the rows are saved, and:

* a merge's rows equal a plain-Python model of its clauses, and its change rows are exactly the
  keyed difference between the rows before and after (pre/post image for a changed key, delete,
  insert); an ``OPTIMIZE`` version keeps the rows and has no change rows;
* a restore of a random earlier version (one a merge or a restore made, whose rows differ from
  the current ones; at least one from before the evolution) gives exactly that version's rows
  (``w`` NULL where the version predates it), commits one version, and its change rows, applied
  to the rows before it (deletes and pre-images first), give the restored rows; they are also the
  keyed difference (``unique_key`` is ``id``), and the result's counts are theirs; then ``as_of``
  reads back the restored version, up to four versions between it and the restore, and the
  restore;
* at the end ``as_of(v)`` equals the saved rows for every version ``v``, with the table's columns.

Rows are compared as canonical tuples over ``COLUMNS`` (``w`` last), as sorted multisets, so a
lost, duplicated or changed row fails. The data and every choice come from the seed (the
summary's digest of the rows after each step is the same on every run of a seed); no choice
depends on a version number, which also counts the versions auto-compaction made.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dbt.adapters.rowmerge.merge import as_of, history, restore, run_merge
from tests.differential.fuzz import start_spark
from tests.engine.helpers import create_table

Row = tuple[Any, ...]

# Canonical row: every column the table ever has, the evolved one last.
COLUMNS = ("id", "part", "v", "n", "w")
EVOLVED = "w"
BASE_DDL = "id long, part int, v string, n long"
KEYS = 300  # ids are drawn from range(KEYS)
PARTS = 4  # part = id % PARTS (a row never changes partition)
INITIAL_ROWS = 150
INITIAL_FILES = 4
RETAIN_VERSIONS = 100_000  # every version stays readable
VALUES = ("a", "b", "c", "d", "e", None)
WORDS = ("x", "y", "z", None)
KINDS = ("upsert", "conditional", "cdc", "nmbs", "insert")
KIND_WEIGHTS = (3, 1, 3, 2, 1)
CHANGE_TYPE, COMMIT_VERSION = "_change_type", "_commit_version"
DELETE, INSERT, PRE, POST = "delete", "insert", "update_preimage", "update_postimage"
SHOWN = 10  # differences printed per mismatch

UPSERT = [
    {"when": "matched", "action": "update", "set": "*"},
    {"when": "not_matched", "action": "insert", "values": "*"},
]


class CampaignMismatch(AssertionError):
    """A version read back, restored or fed differently from what was saved."""


class CampaignError(RuntimeError):
    """The engine raised during the campaign; the message names the operation, to replay it."""


@dataclass
class Summary:
    """What one campaign did; every count is of a check that passed."""

    kind: str  # partitioned | unpartitioned
    merges: int = 0
    merge_kinds: Counter[str] = field(default_factory=Counter)
    noop_merges: int = 0  # merges that changed no row and committed no version
    optimize_versions: int = 0  # auto-compaction versions after a merge
    restores: int = 0
    versions: int = 0  # versions of the table at the end (0 to versions - 1)
    evolved_at: int | None = None  # the version that added `w`
    versions_checked: int = 0  # distinct versions whose as_of equalled the saved rows at the end
    as_of_reads: int = 0  # as_of reads compared, after restores and at the end
    between_checked: int = 0  # of those, versions between a restore's target and the restore
    restores_across_evolution: int = 0  # restores of a version from before `w` was added
    restores_within_restore: int = 0  # restores of a version between an earlier restore and its target
    feed_rows_checked: int = 0  # change rows compared (merges, optimizes and restores)
    max_rows: int = 0
    min_rows: int = KEYS
    seconds: float = 0.0
    # SHA-256 of the rows after each step (merge or restore), in order: the same for a seed
    # whatever the version numbers (compaction) and the timing were
    digest: str = ""

    def line(self) -> str:
        kinds = ",".join(f"{k}={self.merge_kinds[k]}" for k in KINDS)
        return (
            f"{self.kind}: merges={self.merges} ({kinds}; no-op {self.noop_merges}) "
            f"optimizes={self.optimize_versions} restores={self.restores} versions={self.versions} "
            f"evolved_at={self.evolved_at} (restored across it {self.restores_across_evolution}, "
            f"into an earlier restore's span {self.restores_within_restore}) "
            f"as_of_versions_checked={self.versions_checked} "
            f"as_of_reads={self.as_of_reads} (between restore and target {self.between_checked}) "
            f"feed_rows_checked={self.feed_rows_checked} rows={self.min_rows}..{self.max_rows} "
            f"digest={self.digest[:12]} in {self.seconds:.0f}s"
        )


def canonical(data: Iterable[Row]) -> list[Row]:
    """Rows sorted with None first, so lists of rows compare as multisets."""
    return sorted(data, key=lambda t: tuple((v is not None, v) for v in t))


def difference(expected: Sequence[Row], actual: Sequence[Row]) -> str:
    """The first rows one side has more often than the other."""
    want, got = Counter(expected), Counter(actual)
    missing = canonical((want - got).elements())
    extra = canonical((got - want).elements())
    return (
        f"{len(expected)} row(s) expected, {len(actual)} found; missing {len(missing)}: "
        f"{missing[:SHOWN]}; unexpected {len(extra)}: {extra[:SHOWN]}"
    )


def check_equal(what: str, expected: Sequence[Row], actual: Sequence[Row]) -> None:
    if canonical(expected) != canonical(actual):
        raise CampaignMismatch(f"{what}: {difference(expected, actual)}")


def read_canonical(df: Any) -> list[Row]:
    """``df``'s rows over COLUMNS (a column it lacks reads as None), sorted."""
    present = [c for c in COLUMNS if c in df.columns]
    picked = df.select(*[F.col(c) if c in present else F.lit(None).alias(c) for c in COLUMNS])
    return canonical(tuple(r) for r in picked.collect())


def keyed_diff(before: Sequence[Row], after: Sequence[Row]) -> list[Row]:
    """The change rows (row + change type) that turn ``before`` into ``after``, by ``id``."""
    old = {r[0]: r for r in before}
    new = {r[0]: r for r in after}
    out: list[Row] = []
    for k in sorted(old.keys() | new.keys()):
        if k not in new:
            out.append((*old[k], DELETE))
        elif k not in old:
            out.append((*new[k], INSERT))
        elif old[k] != new[k]:
            out += [(*old[k], PRE), (*new[k], POST)]
    return canonical(out)


def applied(before: Sequence[Row], feed: Sequence[Row]) -> list[Row]:
    """``before`` with ``feed`` applied as the README says: deletes and pre-images first."""
    out = Counter(before)
    for *row, change in feed:
        if change in (DELETE, PRE):
            if out[tuple(row)] <= 0:
                raise CampaignMismatch(f"the feed removes a row the state does not hold: {tuple(row)}")
            out[tuple(row)] -= 1
    for *row, change in feed:
        if change in (INSERT, POST):
            out[tuple(row)] += 1
    return canonical(out.elements())


@dataclass
class Merge:
    """One random merge: the clauses, the source rows and what the model expects."""

    kind: str
    clauses: list[dict[str, Any]]
    source_ddl: str
    source_rows: list[Row]
    expected: dict[int, Row]
    extra: dict[str, Any]


class Campaign:
    """One table, its saved versions and the model of its rows."""

    def __init__(
        self, spark: SparkSession, database: str, seed: int, partitioned: bool, log: Any = None
    ) -> None:
        self.spark = spark
        self.partitioned = partitioned
        kind = "partitioned" if partitioned else "unpartitioned"
        # The data and the choices come from `rng`; which versions a restore reads back in
        # between from `checks`: compaction makes versions of its own, so the data stays the
        # same whatever the version numbers are.
        self.rng = random.Random(f"undo:{seed}:{kind}")
        self.checks = random.Random(f"undo-checks:{seed}:{kind}")
        self.table = f"{database}.undo_{kind}_{uuid.uuid4().hex[:8]}"
        self.feed = f"{self.table}__changes"
        self.view = f"undo_{kind}_{uuid.uuid4().hex[:8]}"
        self.summary = Summary(kind)
        self.saved: dict[int, list[Row]] = {}
        self.model: dict[int, Row] = {}
        self.version = 0
        self.evolved = False
        self.first = True
        self.kinds: list[str] = []  # the first merges: each kind once, in a random order
        # The version each step made: the table's creation (0), each merge that committed (not
        # the OPTIMIZE after it) and each restore; a restore picks a step, never a version number.
        self.steps: list[int] = [0]
        self.evolved_step: int | None = None
        self.spans: list[tuple[int, int]] = []  # (restored step, restore step) of each restore
        self.log = log or (lambda _msg: None)
        self.last = "creating the table"  # the operation under way, for an error's message

    # -- reading -------------------------------------------------------------------------

    def rows(self) -> list[Row]:
        self.spark.catalog.refreshTable(self.table)
        return read_canonical(self.spark.table(self.table))

    def feed_rows(self, version: int) -> list[Row]:
        """The change rows of ``version`` over COLUMNS, then the change type."""
        self.spark.catalog.refreshTable(self.feed)
        # as the table_changes macro reads it: abs() keeps Spark from pushing the filter to the
        # Hive metastore (whose grammar rejects names starting with `_`); Spark still prunes
        df = self.spark.table(self.feed).where(F.abs(F.col(COMMIT_VERSION)) == version)
        present = [c for c in COLUMNS if c in df.columns]
        cols = [F.col(c) if c in present else F.lit(None).alias(c) for c in COLUMNS]
        rows = canonical(tuple(r) for r in df.select(*cols, CHANGE_TYPE).collect())
        self.summary.feed_rows_checked += len(rows)
        return rows

    def check_as_of(self, version: int) -> None:
        df = as_of(self.spark, self.table, version=version)
        columns = self.spark.table(self.table).columns
        if df.columns != columns:
            raise CampaignMismatch(
                f"{self.table} as of version {version} has columns {df.columns}, the table {columns}"
            )
        check_equal(f"{self.table} as of version {version}", self.saved[version], read_canonical(df))
        self.summary.as_of_reads += 1

    # -- the table -----------------------------------------------------------------------

    def create(self) -> None:
        ids = sorted(self.rng.sample(range(KEYS), INITIAL_ROWS))
        rows = [self.new_row(i, with_w=False)[:4] for i in ids]
        files = [rows[f::INITIAL_FILES] for f in range(INITIAL_FILES)]
        create_table(
            self.spark, self.table, BASE_DDL, files, partition_by=["part"] if self.partitioned else ()
        )
        self.model = {r[0]: (*r, None) for r in rows}
        self.saved[0] = self.rows()
        check_equal("the table as created", list(self.model.values()), self.saved[0])

    def new_row(self, key: int, with_w: bool) -> Row:
        r = self.rng
        n = None if r.random() < 0.08 else r.randrange(100)
        return (key, key % PARTS, r.choice(VALUES), n, r.choice(WORDS) if with_w else None)

    def note_size(self) -> None:
        size = len(self.model)
        self.summary.max_rows = max(self.summary.max_rows, size)
        self.summary.min_rows = min(self.summary.min_rows, size)

    # -- merges --------------------------------------------------------------------------

    def plan(self, evolve: bool) -> Merge:
        """A random merge of a random kind over the current rows (``evolve``: the upsert that adds ``w``)."""
        r = self.rng
        if evolve:
            kind = "upsert"
        elif self.kinds:
            kind = self.kinds.pop()
        else:
            kind = r.choices(KINDS, KIND_WEIGHTS)[0]
        if len(self.model) < 60 and kind in ("cdc", "nmbs"):
            kind = "insert"  # keep the table from emptying
        with_w = evolve or (self.evolved and (kind == "cdc" or r.random() < 0.6))
        # keys drawn from the whole range: the fuller the table, the more of them match (so
        # inserts and deletes balance, and the source is never empty)
        source: list[Row] = []
        for key in r.sample(range(KEYS), r.randint(3, 25)):
            if key in self.model and not evolve and r.random() < 0.25:  # an update that changes nothing
                keep = self.model[key]
                source.append(keep if with_w else (*keep[:4], None))
            else:
                source.append(self.new_row(key, with_w))
        r.shuffle(source)
        ops: list[str] = []
        if kind == "cdc":
            ops = [
                "D" if (row[0] in self.model and r.random() < 0.4) or r.random() < 0.1 else "U"
                for row in source
            ]
        expected = dict(self.model)
        nmbs: dict[str, Any] | None = None
        if kind == "upsert":
            clauses = UPSERT
        elif kind == "conditional":
            clauses = [
                {"when": "matched", "condition": "s.n > t.n", "action": "update", "set": "*"},
                {"when": "not_matched", "action": "insert", "values": "*"},
            ]
        elif kind == "cdc":
            clauses = [
                {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
                {"when": "matched", "action": "update", "set": "*"},
                {"when": "not_matched", "condition": "s.op <> 'D'", "action": "insert", "values": "*"},
            ]
        elif kind == "nmbs":
            m = r.choice((7, 11, 13))
            nmbs = {"when": "not_matched_by_source", "condition": f"t.id % {m} = {r.randrange(m)}"}
            if r.random() < 0.5:
                nmbs["action"] = "delete"
            elif self.evolved and r.random() < 0.5:
                nmbs.update(action="update", set={EVOLVED: "'gone'"})
            else:
                nmbs.update(action="update", set={"n": "t.n + 1"})
            clauses = UPSERT + [nmbs]
        else:
            clauses = [{"when": "not_matched", "action": "insert", "values": "*"}]
        # the model: what the clauses do, row by row
        in_source = {row[0] for row in source}
        for i, row in enumerate(source):
            key = row[0]
            t = self.model.get(key)
            if not with_w:
                row = (*row[:4], t[4] if t else None)
            if t is None:
                if kind != "cdc" or ops[i] != "D":
                    expected[key] = row
            elif kind == "cdc" and ops[i] == "D":
                del expected[key]
            elif kind in ("upsert", "nmbs", "cdc") or (
                kind == "conditional" and row[3] is not None and t[3] is not None and row[3] > t[3]
            ):
                expected[key] = row
        if nmbs is not None:
            m, k = (int(x) for x in nmbs["condition"].replace("t.id %", "").split("="))
            for key, t in self.model.items():
                if key in in_source or key % m != k:
                    continue
                if nmbs["action"] == "delete":
                    del expected[key]
                elif EVOLVED in nmbs["set"]:
                    expected[key] = (*t[:4], "gone")
                else:
                    expected[key] = (*t[:3], None if t[3] is None else t[3] + 1, t[4])
        ddl = BASE_DDL + (", w string" if with_w else "")
        rows = [row if with_w else row[:4] for row in source]
        if kind == "cdc":
            ddl += ", op string"
            rows = [(*row, op) for row, op in zip(rows, ops, strict=True)]
        extra: dict[str, Any] = {}
        # `*` with a source that lacks `w` keeps it (update) or writes NULL (insert) only with
        # schema evolution; a CDC source always has `w` (evolution would add its `op` column).
        if evolve or (self.evolved and not with_w):
            extra["schema_evolution"] = True
        return Merge(kind, clauses, ddl, rows, expected, extra)

    def merge(self, evolve: bool = False) -> None:
        m = self.plan(evolve)
        before = self.saved[self.version]
        self.spark.createDataFrame(m.source_rows, m.source_ddl).createOrReplaceTempView(self.view)
        spec: dict[str, Any] = {
            "version": 1,
            "target": self.table,
            "source": self.view,
            "target_alias": "t",
            "source_alias": "s",
            "on": "t.id = s.id AND t.part = s.part" if self.partitioned else "t.id = s.id",
            "clauses": m.clauses,
            "change_data_feed": {"table": self.feed},
            **m.extra,
        }
        if self.first:  # stored with the table: later versions keep it
            spec["retain_versions"] = RETAIN_VERSIONS
            self.first = False
        what = f"{self.table} merge {self.summary.merges + 1} ({m.kind})"
        self.last = f"{what} at version {self.version}: spec {spec}; source ({m.source_ddl}) {m.source_rows}"
        result = run_merge(self.spark, spec)
        self.spark.catalog.dropTempView(self.view)
        self.summary.merges += 1
        self.summary.merge_kinds[m.kind] += 1
        after = self.rows()
        check_equal(f"{what}: rows against the model of its clauses", list(m.expected.values()), after)
        self.model = m.expected
        self.note_size()
        if evolve:
            self.evolved = True
            if EVOLVED not in self.spark.table(self.table).columns:
                raise CampaignMismatch(f"{what}: schema evolution did not add column {EVOLVED}")
        if result.version == self.version:
            if after != before:
                raise CampaignMismatch(f"{what} committed no version but changed rows")
            self.summary.noop_merges += 1
            return
        if result.version != self.version + 1:
            raise CampaignMismatch(f"{what} committed version {result.version}, expected {self.version + 1}")
        if evolve:
            self.summary.evolved_at = result.version
            self.evolved_step = len(self.steps)
        self.steps.append(result.version)
        feed = self.feed_rows(result.version)
        check_equal(f"{what}: change rows of version {result.version}", keyed_diff(before, after), feed)
        check_equal(
            f"{what}: its change rows applied to version {self.version}", after, applied(before, feed)
        )
        newest = history(self.spark, self.table, limit=1)[0]["version"]
        compactions = (
            history(self.spark, self.table, limit=newest - result.version) if newest > result.version else []
        )
        for entry in compactions:
            if entry["operation"] != "OPTIMIZE" or entry["version"] <= result.version:
                raise CampaignMismatch(f"{what}: unexpected version after it: {entry}")
            if self.feed_rows(entry["version"]):
                raise CampaignMismatch(f"{what}: OPTIMIZE version {entry['version']} has change rows")
        self.summary.optimize_versions += newest - result.version
        for v in range(result.version, newest + 1):
            self.saved[v] = after
        self.version = newest

    # -- restores ------------------------------------------------------------------------

    def restore(self) -> None:
        """Restore the version of a random earlier step whose rows differ from the current ones."""
        current = self.saved[self.version]
        candidates = [i for i, v in enumerate(self.steps) if self.saved[v] != current]
        if not candidates:
            raise CampaignMismatch(f"{self.table}: no earlier version differs from version {self.version}")
        pool = candidates
        if self.evolved_step is not None and not self.summary.restores_across_evolution:
            pool = [i for i in candidates if i < self.evolved_step] or candidates
        elif self.spans and self.rng.random() < 0.3:  # undo (part of) an earlier restore
            pool = [i for i in candidates if any(t < i < r for t, r in self.spans)] or candidates
        step = self.rng.choice(pool)
        target = self.steps[step]
        what = (
            f"{self.table} restore {self.summary.restores + 1} of version {target} at version {self.version}"
        )
        self.last = what
        result = restore(self.spark, self.table, version=target, unique_key="id")
        if result.version != self.version + 1 or result.restored != target:
            raise CampaignMismatch(f"{what}: committed {result.version} restoring {result.restored}")
        newest = history(self.spark, self.table, limit=1)[0]
        if (newest["version"], newest["operation"]) != (result.version, "RESTORE"):
            raise CampaignMismatch(f"{what}: the newest version is {newest}")
        self.summary.restores += 1
        after = self.rows()
        check_equal(f"{what}: the table after it", self.saved[target], after)
        feed = self.feed_rows(result.version)
        check_equal(
            f"{what}: its change rows applied to version {self.version}", after, applied(current, feed)
        )
        check_equal(f"{what}: its change rows", keyed_diff(current, after), feed)
        counts = Counter(row[-1] for row in feed)
        found = (result.rows_deleted, result.rows_inserted, result.rows_updated, result.rows_updated)
        if found != (counts[DELETE], counts[INSERT], counts[PRE], counts[POST]):
            raise CampaignMismatch(f"{what}: result counts {found}, change rows {dict(counts)}")
        self.saved[result.version] = after
        if self.evolved_step is not None and step < self.evolved_step:
            self.summary.restores_across_evolution += 1
        if any(t < step < r for t, r in self.spans):
            self.summary.restores_within_restore += 1
        self.spans.append((step, len(self.steps)))
        self.steps.append(result.version)
        self.model = {r[0]: r for r in after}
        self.note_size()
        # the versions between the restored one and the restore, the restore itself
        between = list(range(target + 1, self.version + 1))
        for v in [target, *sorted(self.checks.sample(between, min(4, len(between)))), result.version]:
            self.check_as_of(v)
            if target < v <= self.version:
                self.summary.between_checked += 1
        self.version = result.version

    # -- the whole campaign --------------------------------------------------------------

    def run(self, merges: int, restores: int) -> Summary:
        try:
            return self._run(merges, restores)
        except CampaignMismatch:
            raise
        except Exception as exc:
            raise CampaignError(f"{type(exc).__name__} in {self.last}: {exc}") from exc

    def _run(self, merges: int, restores: int) -> Summary:
        began = time.monotonic()
        self.create()
        # restores after random merges (never before the first, always followed by one), at
        # most one after each
        points = set(self.rng.sample(range(1, merges), min(restores, merges - 1)))
        evolve_at = merges // 2 + 1
        if points and max(points) < evolve_at < merges:  # one restore at least crosses the evolution
            points.remove(max(points))
            points.add(self.rng.randrange(evolve_at, merges))
        self.kinds = self.rng.sample(KINDS, len(KINDS))
        for i in range(1, merges + 1):
            self.merge(evolve=i == evolve_at)
            if i in points:
                self.restore()
            if i % 20 == 0:
                self.log(f"{self.summary.kind}: {i} merges, version {self.version}")
        self.last = "reading every version back"
        for v in range(self.version + 1):
            self.check_as_of(v)
            self.summary.versions_checked += 1
        self.summary.versions = self.version + 1
        self.summary.digest = hashlib.sha256(repr([self.saved[v] for v in self.steps]).encode()).hexdigest()
        self.summary.seconds = time.monotonic() - began
        return self.summary


def run_campaign(
    spark: SparkSession,
    database: str,
    merges: int,
    restores: int,
    seed: int,
    partitioned: bool,
    log: Any = None,
) -> Summary:
    """Run the campaign on a new table in ``database``; raises CampaignMismatch at the first
    difference, else returns what it checked."""
    return Campaign(spark, database, seed, partitioned, log).run(merges, restores)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merges", type=int, default=200)
    parser.add_argument("--restores", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("partitioned", "unpartitioned"), help="run one table kind")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rowmerge_undo_"))
    try:
        return _main(start_spark(root), args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _main(spark: SparkSession, args: argparse.Namespace) -> int:
    database = "undo_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {database}")
    failed = False
    for partitioned in (True, False):
        kind = "partitioned" if partitioned else "unpartitioned"
        if args.only and args.only != kind:
            continue
        try:
            summary = run_campaign(
                spark, database, args.merges, args.restores, args.seed, partitioned, log=print
            )
        except (CampaignMismatch, CampaignError) as exc:
            failed = True
            what = "MISMATCH" if isinstance(exc, CampaignMismatch) else "ERROR"
            print(f"{what} {kind} (seed {args.seed}): {exc}", flush=True)
            continue
        print(summary.line(), flush=True)
    spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
