"""Phase 7: write the new files — rewritten touched files (copy-on-write) plus inserts.

Only touched files are read here (a ``_metadata.file_path`` filter prunes the listing).
Their rows are joined with the (broadcast) source, target preserved, and each is kept,
updated or dropped by the clause that acts on it; copied rows keep their values. Inserts
are the source rows the scan found matching no target row (an insert-only merge, which has
no scan, finds them by joining the pruned target with the source once), so a matched source
row whose matched clauses do not act is never inserted. Both go out in one write job into
the commit's staging folder, partitioned like the table. With the change feed on, that job
also writes the feed's rows (:func:`feed_rows`).
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any
from uuid import uuid4

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField

from .encodings import insert_options, options_like
from .filestats import FileSummary, indexed_columns, summarize_files
from .journal.layout import TASK_GROUP
from .key_gaps import rewrite_groups
from .outputs import (
    DELETE,
    FILE,
    INSERT,
    NO_ACTION,
    POSTIMAGE,
    PREFIX,
    PREIMAGE,
    ROW,
    SRC_ID,
    acting,
    chosen,
    clause_index,
    decide,
    enforce_constraints,
    insert_values,
    insert_values_sql,
    inserts,
    old_value,
    output_value,
    q,
)
from .plan import MergePlan
from .scan import ScanResult, Skipping, target_frame
from .source import MaterializedSource
from .storage import Storage

UPDATED = PREFIX + "updated"  # true on a rewritten row an update clause wrote
_UPD, _DEL = PREFIX + "acts_update", PREFIX + "acts_delete"  # flags the one-pass write observes
_INS = PREFIX + "inserted"  # true on a source row a not_matched clause inserts (single_task_rows)
_SID = PREFIX + "matched_sid"  # the source row a rewritten row matched (OnePass.inserts_by_statistics)
# With the change feed on, the write sends each row to one output, a folder of this
# partition column: the table's new files (DATA), or a change type of the feed (see feed_rows).
KIND = PREFIX + "kind"
DATA = "data"
# Spark sorts each task's rows by the partition columns before a partitioned write, unless
# this session setting lets a task keep several files open: then the write with the feed
# keeps its files and its change types open side by side (up to this many; past it Spark
# sorts the rest), and copies no row into a sorter.
CONCURRENT_WRITERS_CONF = "spark.sql.maxConcurrentOutputFileWriters"
CONCURRENT_WRITERS = 16
# Spark shuffles a single-partition side of a join that it estimates above this session
# setting (128 MB), to spread it over tasks; the single-task join must stay in its one task.
SINGLE_PARTITION_CONF = "spark.sql.maxSinglePartitionBytes"
SINGLE_PARTITION_DEFAULT = "134217728b"  # how the session reads Spark's default, 128m
NO_SINGLE_PARTITION_LIMIT = f"{2**63 - 1}b"  # every estimate, also "unknown" (Long.MaxValue)
_settings_lock = threading.Lock()
# (id(session), setting) -> (merges writing with it, whether they set it)
_settings_users: dict[tuple[int, str], tuple[int, bool]] = {}

# Inserts into an unpartitioned table go into files of about this many rows.
ROWS_PER_INSERT_FILE = 1_000_000
# A one-pass merge whose candidate files and source hold at most this many rows together
# joins them in a single task (see single_task_join). One task gives up the parallelism of a
# task per file, so the limit is a small merge's size: a file or two of a table of millions of
# rows (the benchmark's 10M-row table has 156,000 per file). A context variable, so a test (the
# differential fuzz runs merges in threads) can send one merge down either path.
SINGLE_TASK_ROWS: ContextVar[int] = ContextVar("rowmerge_single_task_rows", default=250_000)
# The one-pass write with the source broadcast takes its inserts from statistics when at most
# this many source rows have keys inside the files' ranges (see inserts_by_statistics): the
# write collects the ids of those that matched, and a set of this many stays small in a task.
STATISTICS_INSERT_ROWS = 250_000


@dataclass(frozen=True)
class TouchedJoin:
    """Rows of the touched files joined with the source, with the clause that acts on each
    (the columns of :func:`.outputs.decide`)."""

    plan: MergePlan
    rows: DataFrame

    def acts(self, action: str) -> Column:
        """True where a clause with ``action`` really acts on the row (of either kind)."""
        p = self.plan
        return acting(p, "matched", action) | acting(p, "not_matched_by_source", action)


def touched_join(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    touched: list[str],
    acts: bool = True,
) -> TouchedJoin:
    """The rows of ``touched`` files, target preserved, joined with the (broadcast) source.

    ``acts``: whether :meth:`TouchedJoin.acts` tells updates that change nothing from the
    others (the no-op check costs a comparison of every value the update writes).
    """
    target = target_frame(spark, plan, touched)
    joined = target.alias(plan.ta).join(source.join_side().alias(plan.sa), plan.on, "left_outer")
    return TouchedJoin(plan, decide(plan, joined, ["matched", "not_matched_by_source"], acts))


def task_groups(
    touched: Sequence[str], skipping: Skipping | None, storage: Storage, shuffled: bool = False
) -> list[list[str]]:
    """The ``touched`` files (Spark's paths) in groups whose files a task of the rewrite may
    read together (:func:`.key_gaps.rewrite_groups`), by every file's key range from
    ``skipping`` (None, or no range known: one group). The ranges are laid out only when two
    or more files are touched.

    Spark packs small files into one task, and a task writes one file (per partition) from
    all the rows it read: two touched files with an untouched one between them in key order
    would become one file whose range holds the untouched file's keys. With more than one
    group the write puts each file's rows in files of their own (:func:`_task_group`).

    ``shuffled``: the rewrite joins the source without broadcasting it (see
    :func:`rewritten_rows`), so its tasks do not read files at all but hash slices of every
    touched file's rows; each file is then a group of its own, which the write gathers back
    into one task (a file's rows stay in files of their own, its key range kept)."""
    if shuffled and len(touched) > 1:
        return [[p] for p in touched]
    spans = skipping.key_spans() if skipping is not None and len(touched) > 1 else None
    if not spans:
        return [list(touched)]
    qualified = {storage.from_spark_path(p): p for p in touched}
    groups = rewrite_groups(list(qualified), spans, posixpath.dirname)
    return [[qualified[p] for p in g] for g in groups]


def _grouped(groups: Sequence[Sequence[str]] | None) -> bool:
    return groups is not None and len(groups) > 1


def _task_group() -> Column:
    """The task group of a row in a write whose touched files fall in more than one group of
    key neighbours (:func:`task_groups`): its file's own, a non-negative 63-bit hash of the
    file's path (NULL for a row of no file, an insert). A partition column of the write, so a
    task that read several files writes each file's rows to files of their own, without a
    shuffle or a second scan (a scan per group costs Spark tens of milliseconds each to plan)
    and without a lookup per row (a map of the touched files is searched entry by entry).
    Files that may share a task no longer do in such a write; the one-group write, the usual
    one, packs them as before, and compaction packs small files in key order."""
    file = F.col(FILE)
    return F.when(file.isNotNull(), F.xxhash64(file).bitwiseAND(F.lit(2**63 - 1))).alias(TASK_GROUP)


def shuffled_join(source: MaterializedSource, single: bool = False) -> bool:
    """Whether the rewrite joins the source through a shuffle: it is too large to broadcast
    (``source.broadcastable``) and the join is not the single-task one (``single``:
    :func:`single_task`). Such a join's tasks hold hash slices of every touched file's rows, so
    :func:`task_groups` makes each file a group of its own and :func:`rewritten_rows` gathers
    each file's rows back into one task."""
    return not (single or source.broadcastable)


def single_task(source: MaterializedSource, candidate_rows: int) -> bool:
    """Whether a one-pass merge joins its candidates and source in one task (see
    :func:`single_task_join`): when both together are small enough for one task."""
    return candidate_rows + source.num_rows <= SINGLE_TASK_ROWS.get()


def single_task_join(
    spark: SparkSession, plan: MergePlan, source: MaterializedSource, touched: list[str]
) -> DataFrame:
    """The rows of ``touched`` files FULL OUTER JOIN the source, each side in one partition.

    A small merge pays for Spark jobs more than for rows. The broadcast join reads the touched
    files twice (once for the rewrite, once for the ids of the source rows that matched, which
    the inserts leave out) and broadcasts the source twice, each a job of its own. Here both
    sides are coalesced to a single partition, which satisfies the join's distribution, so
    Spark adds no exchange: the target rows (source side NULL for the unmatched) and the
    inserts (target side NULL) come out of the write job itself.

    Two things keep Spark from planning it otherwise. The sort-merge hint: the rewrite keeps
    only rows with a target row, which turns its join into a left outer one, and Spark would
    broadcast a small source for that, a job again. And the sizes Spark sees: it keeps
    single-partition sides in their partition only if its estimate of each is at most
    ``spark.sql.maxSinglePartitionBytes`` (128 MB). It estimates the candidates as the whole
    table, so the write is planned under :func:`single_partitions_kept`, which lifts the
    limit. The source it may not know the size of at all (a checkpoint of a view), and no
    limit lifts "unknown": the source is limited to twice its rows, which a LIMIT's estimate
    is computed from. That cuts nothing (its count is exact). The candidates are not limited
    (by the journal's row count) for the same reason: a LIMIT takes the rows out of the
    Parquet reader's batches one at a time, a third of the task's time for a file.
    """
    target = target_frame(spark, plan, touched).coalesce(1)
    src = source.df.coalesce(1).limit(2 * source.num_rows + 1)
    return target.alias(plan.ta).hint("merge").join(src.alias(plan.sa), plan.on, "full_outer")


@dataclass
class OnePass:
    """What the one-pass write observes while it rewrites every candidate file (see
    :func:`.scan.one_pass_applies`): the joined rows that hold a target row, the rows clauses
    updated and deleted, and the files (``_metadata.file_path``) where some clause acted."""

    # A name of its own: merges of other tables may run at the same time in this session.
    observation: Observation = field(default_factory=lambda: Observation(f"{PREFIX}one_pass_{uuid4().hex}"))
    # The candidates hold this many rows (per the journal) and are joined with the source in
    # one task (single_task_join), not with the source broadcast; the caller decides both
    # (single_task).
    candidate_rows: int = 0
    single_task: bool = False
    # The write inserts the source rows whose keys lie outside the files' ranges, without a
    # join, and observes which source rows the candidates matched (see inserts_by_statistics).
    inserts_by_statistics: bool = False
    _got: dict[str, Any] | None = field(default=None, repr=False)

    def observe(self, rows: DataFrame) -> DataFrame:
        """``rows`` (with the file and the clause flags of each joined row, and with
        ``inserts_by_statistics`` the id of the source row it matched), observed."""
        upd, dele = F.col(_UPD), F.col(_DEL)
        sources = [F.collect_set(F.col(_SID)).alias("sources")] if self.inserts_by_statistics else []
        return rows.observe(
            self.observation,
            F.count(F.col(FILE)).alias("joined"),  # rows with a target row
            F.sum(upd.cast("long")).alias("updated"),
            F.sum(dele.cast("long")).alias("deleted"),
            F.collect_set(F.when(upd | dele, F.col(FILE))).alias("acted"),
            *sources,
        )

    def matched_sources(self) -> int:
        """How many source rows matched a candidate's row, once the write has run (with
        ``inserts_by_statistics``)."""
        return len(self.matched_ids())

    def matched_ids(self) -> list[int]:
        """The ids (``SRC_ID``) of the source rows that matched a candidate's row, once the
        write has run (with ``inserts_by_statistics``). Exact: every joined row passes the
        observation before any is dropped, and the write counts on it only when all of the
        candidates' rows did (``result``'s joined rows equal the candidates' rows)."""
        return list(self._observed().get("sources") or ())

    def _observed(self) -> dict[str, Any]:
        """What the write observed, fetched once (up to STATISTICS_INSERT_ROWS ids)."""
        if self._got is None:
            self._got = self.observation.get
        return self._got

    def result(self) -> tuple[int, int, int, set[str]]:
        """(joined rows, updated, deleted, acted-on files), once the write has run."""
        got = self._observed()
        return (
            int(got["joined"] or 0),
            int(got["updated"] or 0),
            int(got["deleted"] or 0),
            set(got["acted"] or ()),
        )


def rewritten_rows(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    touched: list[str],
    one_pass: OnePass | None = None,
    feed: bool = False,
    grouped: bool = False,
) -> DataFrame:
    """All rows of the touched files after the merge (deleted rows dropped, or with ``feed``
    routed to the feed only); ``one_pass``
    observes the join on the way. With ``feed``, also the change rows of the clauses that
    act, each row with its output in :data:`KIND` (see :func:`feed_rows`). ``grouped``: each
    row also holds its task group (:func:`_task_group`)."""
    # The rewrite itself writes an update's values whether or not they change anything;
    # only the one-pass write and the change feed tell which updates really act.
    tj = touched_join(spark, plan, source, touched, acts=one_pass is not None or feed)
    values = [output_value(plan, f.name).alias(f.name) for f in plan.output_fields]
    # Rows an update writes are checked against the constraints (copied rows were checked
    # when they were written).
    updating = chosen(plan, "matched", "update") | chosen(plan, "not_matched_by_source", "update")
    flags = [updating.alias(UPDATED)] if plan.constraints else []
    file = F.col(f"`{plan.ta}`.`{FILE}`").alias(FILE)
    row = F.col(f"`{plan.ta}`.`{ROW}`").alias(ROW)
    # Without a matched clause there is no cardinality rule: a target row matched by several
    # source rows appears several times in the join but is copied once. A lone unconditional
    # delete may match one several times too: its feed reports the row deleted once. (A
    # one-pass write that meets a row twice is thrown away: see OnePass.)
    once = not plan.spec.enforces_cardinality and (not plan.matched or feed) and one_pass is None
    if one_pass is not None or feed:
        # Only what the write and the observation read goes below the observation (no
        # optimizer rule prunes columns through it); deleted rows leave after it.
        acting_now = [tj.acts("update").alias(_UPD), tj.acts("delete").alias(_DEL)]
        olds = _old_values(plan) if feed else []
        by_statistics = one_pass is not None and one_pass.inserts_by_statistics
        sid = [F.col(q(plan.sa, SRC_ID)).alias(_SID)] if by_statistics else []
        out = tj.rows.select(*values, file, *([row] if once else []), *flags, *acting_now, *olds, *sid)
        if one_pass is not None:
            out = one_pass.observe(out)
        if by_statistics:
            out = out.drop(_SID)
        if not feed:
            out = out.where(~F.col(_DEL)).drop(_UPD, _DEL)
    else:
        out = tj.rows.where(~tj.acts("delete")).select(*values, file, row, *flags)
    if plan.constraints:
        out = enforce_constraints(plan, out, F.col(UPDATED)).drop(UPDATED)
    if once:
        out = out.dropDuplicates([FILE, ROW])
    if shuffled_join(source):
        # A shuffled join leaves every touched file's rows spread over all its tasks, and each
        # task would write a file of every file it holds a slice of (touched files x shuffle
        # partitions of them, key ranges overlapping). Gathered by file, one task writes each
        # file's rows (task_groups made each file a group of its own): one more exchange of
        # the touched rows, a file count that stays the table's. In as many partitions as
        # files, a number Spark keeps: by column alone, adaptive execution coalesces the
        # partitions of a small rewrite into one task, which writes every file on one core.
        out = out.repartition(max(len(touched), 1), F.col(FILE))
    carried = []
    if grouped:
        out = out.withColumn(TASK_GROUP, _task_group())
        carried = [TASK_GROUP]
    out = out.drop(FILE, ROW)
    return _routed(plan, out, carried=carried) if feed else out


def single_task_rows(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    touched: list[str],
    one_pass: OnePass,
    feed: bool = False,
    grouped: bool = False,
) -> DataFrame:
    """Every row a one-pass merge writes when it joins in a single task
    (:func:`single_task_join`): the touched files' rows after the merge and the inserts, out
    of one projection of the one join, observed by ``one_pass``; with ``feed``, with their
    change rows (see :func:`rewritten_rows`).

    A union of the rewritten rows and the inserts would compute the join (and read the
    touched files) once for each. Here each joined row is routed by whether it holds a target
    row: those are rewritten (the matched clauses decide), the source rows that matched
    nothing are inserted (the not_matched clauses decide), each kind's conditions evaluated
    only on its own rows. The rows leave in the join's key order, inserts among them;
    ``grouped``: each with its task group (:func:`_task_group`).
    """
    joined = single_task_join(spark, plan, source, touched)
    present = F.col(q(plan.ta, FILE)).isNotNull()
    rows = decide(plan, joined, ["matched"], acts=True, only={"matched": present})
    # The target side first, under names of the engine's own: the not_matched clauses are
    # resolved against the source alone (an unqualified name may be a target column too), so
    # they are evaluated on the source's columns beside these.
    names = [f.name for f in plan.output_fields]
    rewritten = [output_value(plan, n).alias(_new(i)) for i, n in enumerate(names)]
    flags = [
        F.col(q(plan.ta, FILE)).alias(FILE),
        acting(plan, "matched", "update").alias(_UPD),
        acting(plan, "matched", "delete").alias(_DEL),
        *([chosen(plan, "matched", "update").alias(UPDATED)] if plan.constraints else []),
        *(_old_values(plan) if feed else []),
    ]
    sides = rows.select(*rewritten, *flags, f"`{plan.sa}`.*").alias(plan.sa)
    present = F.col(FILE).isNotNull()
    sides = decide(plan, sides, ["not_matched"], only={"not_matched": ~present})
    inserted = ~present & (clause_index("not_matched") != NO_ACTION)
    texts = insert_values_sql(plan)
    if texts is not None:  # one round trip per column, not five
        values = [
            F.expr(f"CASE WHEN {q(FILE)} IS NOT NULL THEN {q(_new(i))} ELSE {text} END AS {q(n)}")
            for i, (n, text) in enumerate(zip(names, texts, strict=True))
        ]
    else:
        values = [
            F.when(present, F.col(_new(i))).otherwise(new).alias(n)
            for i, (n, new) in enumerate(zip(names, insert_values(plan), strict=True))
        ]
    # An update's rows and every insert are checked against the constraints.
    checked = [(F.col(UPDATED) | inserted).alias(UPDATED)] if plan.constraints else []
    olds = [F.col(_old(i)) for i in range(len(names))] if feed else []
    out = sides.select(*values, F.col(FILE), *checked, F.col(_UPD), F.col(_DEL), inserted.alias(_INS), *olds)
    out = one_pass.observe(out)
    if plan.constraints:
        out = enforce_constraints(plan, out, F.col(UPDATED)).drop(UPDATED)
    carried = []
    if grouped:
        out = out.withColumn(TASK_GROUP, _task_group())
        carried = [TASK_GROUP]
    if feed:
        return _routed(plan, out, f"{q(FILE)} IS NOT NULL", carried)
    kept = (present & ~F.col(_DEL)) | F.col(_INS)
    return out.where(kept).drop(FILE, _UPD, _DEL, _INS)


def _new(i: int) -> str:
    return f"{PREFIX}new_{i}"


def _old_values(plan: MergePlan) -> list[Column]:
    """The target row's values before the merge, named for :func:`_routed`."""
    return [old_value(plan, f.name).alias(_old(i)) for i, f in enumerate(plan.output_fields)]


# Where :func:`_routed` sends a row's copies, by number (NULL, a copied row's, is DATA's too).
_ROUTE = PREFIX + "route"
_ROUTES = {DATA: 0, DELETE: 1, PREIMAGE: 2, POSTIMAGE: 3, INSERT: 4}
_OLD_KINDS = (DELETE, PREIMAGE)  # the outputs that hold the target row's values before the merge


def _route_list(*kinds: str) -> str:
    """SQL text: the numbers of ``kinds``' routes, as an array or as an IN list."""
    return ", ".join(str(_ROUTES[k]) for k in kinds)


def _routed(
    plan: MergePlan, rows: DataFrame, present: str | None = None, carried: Sequence[str] = ()
) -> DataFrame:
    """``rows`` (output values, the :data:`_UPD`/:data:`_DEL` flags and the old values of
    :func:`_old_values`) as the rows the write with the change feed writes, each with its
    output in :data:`KIND`: a deleted row to the feed only, an updated one to the table's
    files and twice to the feed (pre- and post-image), a copied one to the files only.
    ``present`` (SQL text): whether a row holds a target row; where it does not, the
    :data:`_INS` flag says whether it is inserted (to the files and the feed) or dropped.
    ``carried``: columns the table's files' rows keep (the feed's rows hold NULL there).

    Most rows of a touched file are copied, so a copied row should cost what it costs without
    the feed: only a row with change rows gets an array (of route numbers), a copied row's is
    NULL, which ``explode_outer`` passes on as the one row it is; one projection then takes
    each column's old or new value by route. Building every row into a struct inside an array
    and taking it apart again (the routing before this one) cost each copied row about a
    microsecond more (measured: 468k rows, 1 % updated, in three touched files). The routing
    is SQL text: built from Column objects it cost a py4j round trip per column.
    """
    names = [f.name for f in plan.output_fields]
    route = q(_ROUTE)
    cases = [
        f"WHEN {q(_DEL)} THEN array({_route_list(DELETE)})",
        f"WHEN {q(_UPD)} THEN array({_route_list(DATA, PREIMAGE, POSTIMAGE)})",
    ]
    if present is not None:  # NULL for a row it copies and for a source row nothing inserts
        cases.append(f"WHEN {present} THEN NULL WHEN {q(_INS)} THEN array({_route_list(DATA, INSERT)})")
    spread = rows.selectExpr("*", f"explode_outer(CASE {' '.join(cases)} END) AS {route}")
    if present is not None:
        spread = spread.where(f"{route} IS NOT NULL OR ({present})")
    old_routes = _route_list(*_OLD_KINDS)
    values = [
        f"CASE WHEN {route} IN ({old_routes}) THEN {q(_old(i))} ELSE {q(n)} END AS {q(n)}"
        for i, n in enumerate(names)
    ]
    data = _route_list(DATA)
    kept = [f"CASE WHEN coalesce({route}, {data}) = {data} THEN {q(c)} END AS {q(c)}" for c in carried]
    kinds = " ".join(f"WHEN {n} THEN '{kind}'" for kind, n in _ROUTES.items() if kind != DATA)
    return spread.selectExpr(*values, *kept, f"CASE {route} {kinds} ELSE '{DATA}' END AS {q(KIND)}")


def feed_rows(rows: DataFrame, kind: str) -> DataFrame:
    """``rows`` (output columns) going to the table's files and, as ``kind`` change rows, to
    the feed: each row twice, with its output in :data:`KIND`.

    With the change feed on, the data write emits the feed's rows too, so the touched files
    are read and joined once: a row goes to the table's files (``data``), to the feed, or
    both (an update's post-image, an insert), and the write puts each output in a folder of
    its own (``__rowmerge_kind=…``). The feed's folders hold rows of the table's columns
    only; :func:`.cdf.stamp_feed` gives them their change type and commit timestamp.
    """
    return rows.selectExpr(*[q(n) for n in rows.columns], f"explode(array('{DATA}', '{kind}')) AS {q(KIND)}")


def _old(i: int) -> str:
    return f"{PREFIX}old_{i}"


def inserted_rows(
    plan: MergePlan,
    source: MaterializedSource,
    target: DataFrame,
    scan: ScanResult | None,
    among: str = "all",
) -> DataFrame:
    """Source rows that match no target row and that a not_matched clause inserts.

    After a scan (or a lost one-pass bet that observed the matched ids), the rows are the
    ones it chose (by source row id), so the target is not read again; an insert-only merge
    has no scan and finds them with an anti-join, as does the one-pass write with the source
    broadcast when its inserts cannot come from statistics. ``among``: ``"outside"`` takes only
    the source rows whose keys lie below or above all the files' ranges, which match nothing,
    with no join (see :func:`inserts_by_statistics`; the others: :func:`inside_inserts`).
    """
    assert among in ("outside", "all"), among
    if among == "outside":
        assert source.may_match is not None
        unmatched = source.df.alias(plan.sa).where(~F.expr(source.may_match)).alias(plan.sa)
    elif scan is not None and scan.insert_source is not None:
        unmatched = scan.insert_source.alias(plan.sa)
    else:
        # Matched source ids via a join whose build side is the (usually small) source, so
        # the target is not shuffled; then the source minus those ids.
        matched = target.alias(plan.ta).join(source.join_side().alias(plan.sa), plan.on, "inner")
        matched_ids = matched.select(F.col(f"`{plan.sa}`.`{SRC_ID}`").alias(SRC_ID))
        unmatched = source.unmatched(matched_ids).alias(plan.sa)
    return enforce_constraints(plan, inserts(plan, unmatched))


def inside_inserts(
    spark: SparkSession, plan: MergePlan, source: MaterializedSource, matched: Collection[int]
) -> DataFrame:
    """The inserts among the source rows whose keys lie inside the files' ranges
    (``source.may_match``) and that matched no candidate's row: ``matched`` holds the ids of
    those that did, which the one-pass write observed in its own join (:class:`OnePass`), so
    the candidates are not read again (an anti-join with them read every candidate's keys: a
    job as long as a full scan of the key columns, for a merge that rewrote the whole table).
    The ids are at most :data:`STATISTICS_INSERT_ROWS`."""
    assert source.may_match is not None
    inside = replace(source, df=source.df.alias(plan.sa).where(F.expr(source.may_match)))
    return enforce_constraints(plan, inserts(plan, inside.without_ids(spark, matched).alias(plan.sa)))


@dataclass(frozen=True)
class StagedFile:
    path: str  # qualified Hadoop path inside the staging folder
    size: int
    rows: int
    summary: FileSummary | None = None  # row count and column ranges, from the footer


def write_changes(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    target: DataFrame,
    scan: ScanResult | None,
    staging: str,
    storage: Storage,
    one_pass: OnePass | None = None,
    feed_dir: str | None = None,
    groups: Sequence[Sequence[str]] | None = None,
    table_files: Mapping[str, int] | None = None,
) -> tuple[list[StagedFile], dict[str, int]]:
    """Write rewritten + inserted rows into ``staging``.

    Returns the non-empty files written and the row count of every touched file. With
    ``one_pass``, ``scan`` lists the candidate files (no scan ran): they are all rewritten,
    the inserts are found in the same job (by an anti-join with ``target``, or in a single
    task from the same join: :func:`single_task_rows`), and ``one_pass``
    observes what the clauses did. With ``feed_dir`` the same job writes there the table's
    files and the change feed's rows, each output in a folder of its own (see
    :func:`feed_rows`), and ``staging`` is not used. ``groups``: the touched files in groups
    of key neighbours (:func:`task_groups`); with more than one, each file's rows go to files
    of their own. ``table_files``: the table's files (path -> bytes), whose encodings a write
    that replaces none follows (:func:`.encodings.insert_options`).
    """
    pcols = list(plan.target.partition_columns)
    parts: list[DataFrame] = []
    touched = [f.path for f in scan.touched] if scan else []
    feed = feed_dir is not None
    # The rows inserted, or at most that many.
    expected = 0
    if plan.not_matched:
        expected = scan.inserted if scan is not None and one_pass is None else source.num_rows
    single = one_pass is not None and one_pass.single_task and bool(touched)
    grouped = bool(touched) and _grouped(groups)
    if single:
        assert one_pass is not None
        # One task joins, rewrites and inserts: the rows come out in key order, cut into
        # files no bigger than the largest one replaced (rewrite_file_cap).
        parts.append(single_task_rows(spark, plan, source, touched, one_pass, feed, grouped))
    elif touched:
        # With the source broadcast, each task reads one touched file (or packs a few small
        # ones) and writes its replacement: file sizes stay near the table's own.
        parts.append(rewritten_rows(spark, plan, source, touched, one_pass, feed, grouped))
    if plan.not_matched and not single and (scan is None or scan.inserted > 0 or one_pass is not None):
        among = "outside" if one_pass is not None and one_pass.inserts_by_statistics else "all"
        inserts = spread_inserts(plan, inserted_rows(plan, source, target, scan, among), expected, feed)
        parts.append(inserts.withColumn(TASK_GROUP, F.lit(None).cast("long")) if grouped else inserts)
    if not parts:
        return [], {}
    fmt = plan.target.file_format
    removed = {storage.from_spark_path(f.path): f.size for f in scan.touched} if scan else {}
    tails: dict[str, bytes] = {}
    counts = storage.count_rows(removed, fmt, tails) if removed else {}
    out = reduce(lambda a, b: a.unionByName(b), parts)
    cap = rewrite_file_cap(counts, expected) if counts else None
    if removed:
        # Written as the replaced files were, unless the inserts may outnumber their rows.
        like = removed if expected <= sum(counts.values()) else {}
        options = options_like(storage, like, fmt, plan.output_fields, tails)
    else:
        options = insert_options(storage, table_files or {}, fmt, plan.output_fields, rows=expected)
    with single_partitions_kept(spark) if single else nullcontext():
        listed = save_rows(spark, plan, out, staging, feed_dir, cap, grouped=grouped, options=options)
    fields = indexed_columns(plan.output_fields, pcols)
    return staged_files(fmt, listed, storage, removed, fields, counts)


def inserts_by_statistics(plan: MergePlan, source: MaterializedSource, single: bool) -> bool:
    """Whether the one-pass write with the source broadcast (not ``single``) takes its inserts
    from the files' ranges.

    Otherwise it finds them by an anti-join of the source with the candidates, which reads the
    candidates a second time and broadcasts the source again: two Spark jobs before the write.
    Instead the source rows whose keys lie below or above all the files' ranges (outside
    ``source.may_match``: they match nothing) are inserted as they are, and the write observes
    which of the others matched a candidate's row. When every one did (an upsert whose new keys
    lie beyond the table's, as increasing ids and timestamps do), those were all the inserts;
    otherwise the inserts among the rest are written after the write, found from the ids it
    observed, without reading the candidates again (:func:`write_missed_inserts`).
    """
    rows = source.may_match_rows
    return bool(plan.not_matched) and not single and rows is not None and rows <= STATISTICS_INSERT_ROWS


def write_missed_inserts(
    spark: SparkSession,
    plan: MergePlan,
    source: MaterializedSource,
    matched: Collection[int],
    missed: int,
    staging: str,
    storage: Storage,
    feed_dir: str | None,
    written: Sequence[StagedFile],
    groups: Sequence[Sequence[str]] | None = None,
) -> list[StagedFile]:
    """After a one-pass write that took its inserts from statistics, in which ``missed`` source
    rows with keys inside the files' ranges matched no candidate's row (those that did: the
    ids ``matched``, observed by the write): write the inserts among them next to the
    ``written`` files; return the new files. With the write's ``groups``, in its layout (the
    rows of no touched file's group)."""
    inserts = inside_inserts(spark, plan, source, matched)
    out = spread_inserts(plan, inserts, missed, feed_dir is not None)
    grouped = _grouped(groups)
    if grouped:
        out = out.withColumn(TASK_GROUP, F.lit(None).cast("long"))
    listed = save_rows(spark, plan, out, staging, feed_dir, None, append=True, grouped=grouped)
    fields = indexed_columns(plan.output_fields, list(plan.target.partition_columns))
    known = {f.path for f in written}
    return staged_files(plan.target.file_format, listed, storage, fields=fields, known=known)[0]


def spread_inserts(plan: MergePlan, inserts: DataFrame, expected: int, feed: bool) -> DataFrame:
    """``inserts`` (at most ``expected`` rows) across the write's tasks; with ``feed`` going
    to the change feed too (:func:`feed_rows`)."""
    pcols = list(plan.target.partition_columns)
    if pcols and expected <= SINGLE_TASK_ROWS.get():
        # A small insert goes out of one task, which writes one file per partition value
        # without the shuffle (and, with adaptive execution, the job) a repartition costs.
        inserts = inserts.coalesce(1)
    elif pcols:
        # one file per partition value (AQE-sized)
        inserts = inserts.repartition(*[F.col(q(c)) for c in pcols])
    else:
        inserts = inserts.coalesce(files_for(expected))
    return feed_rows(inserts, INSERT) if feed else inserts


def save_rows(
    spark: SparkSession,
    plan: MergePlan,
    out: DataFrame,
    staging: str,
    feed_dir: str | None,
    cap: int | None,
    append: bool = False,
    grouped: bool = False,
    options: Mapping[str, str] | None = None,
) -> str:
    """Write ``out`` into ``staging`` partitioned like the table, or with ``feed_dir`` into
    that folder, each output in a folder of its own (see :func:`feed_rows`); at most ``cap``
    rows per file; ``grouped``: in a folder per task group first (:func:`_task_group`), which
    the journal drops from the path when it places the files (``journal.layout.placed``);
    ``options``: the writer's (:func:`.encodings.options_like`).
    Return the folder holding the table's new files."""
    pcols = [*([TASK_GROUP] if grouped else []), *plan.target.partition_columns]
    writer = out.write.format(plan.target.file_format).options(**dict(options or {}))
    if append:
        writer = writer.mode("append")
    if feed_dir is not None:
        writer = writer.partitionBy(KIND, *pcols)
    elif pcols:
        writer = writer.partitionBy(*pcols)
    if cap is not None:
        writer = writer.option("maxRecordsPerFile", str(cap))
    if feed_dir is None:
        if grouped:
            with concurrent_writers(spark):  # a task keeps its groups' files open: no sort
                writer.save(staging)
        else:
            writer.save(staging)
        return staging
    with concurrent_writers(spark):
        writer.save(feed_dir)
    return f"{feed_dir}/{KIND}={DATA}"  # the journal's Staging.routed_data_dir


METASTORE_PRUNING_CONF = "spark.sql.hive.metastorePartitionPruning"


def concurrent_writers(spark: SparkSession) -> AbstractContextManager[None]:
    """Plan the writes in the block with :data:`CONCURRENT_WRITERS` open files per task,
    unless the session allows some already (its own setting stands; see
    :func:`_session_setting`). Other queries of the session planned meanwhile (other dbt
    threads' models) get it too: their partitioned writes then keep a few files open per task
    instead of sorting, at the memory of those open files. A session that refuses the setting
    writes as before (each task sorted by the outputs' folders)."""
    return _session_setting(spark, CONCURRENT_WRITERS_CONF, str(CONCURRENT_WRITERS), unset="0")


def partitions_pruned_by_spark(spark: SparkSession) -> AbstractContextManager[None]:
    """Plan the reads in the block with Spark pruning a table's partitions itself, from the
    metastore's list of them all, instead of handing it the filter, unless the session says
    otherwise. The reads of chosen files filter on their partitions
    (:meth:`.table.TargetTable.files_only`); handed to the metastore, such a filter fails on
    names Hive's filter language cannot hold (a partition column named `p q`: Derby refused it)
    and, on some metastores, on non-string columns. The whole list is what every read of the
    table without a partition filter fetched anyway; only the listing of files is pruned.
    Other queries of the session planned meanwhile prune the same way: the same partitions,
    one metastore request. A session that refuses the setting hands the filter over as before."""
    return _session_setting(spark, METASTORE_PRUNING_CONF, "false", unset="true")


def single_partitions_kept(spark: SparkSession) -> AbstractContextManager[None]:
    """Plan the writes in the block keeping every single-partition side of a join in its
    partition, whatever Spark estimates its size (see :func:`single_task_join`), unless the
    session sets its own limit (it stands). Other queries of the session planned meanwhile get
    it too: a join of theirs with a side in one partition keeps it there instead of spreading
    it over tasks. A session that refuses the setting has the side shuffled: the same rows,
    from more tasks."""
    return _session_setting(
        spark, SINGLE_PARTITION_CONF, NO_SINGLE_PARTITION_LIMIT, unset=SINGLE_PARTITION_DEFAULT
    )


@contextmanager
def _session_setting(spark: SparkSession, name: str, value: str, unset: str) -> Iterator[None]:
    """Setting ``name`` of the session at ``value`` in the block, if the session has not set it
    (it reads as ``unset``, Spark's default, or not at all).

    The setting is the session's: it is set when the first merge of the session enters and
    taken away when the last one leaves, so merges side by side in threads do not take it away
    under each other."""
    key = (id(spark), name)
    with _settings_lock:
        users, mine = _settings_users.get(key, (0, False))
        if users == 0:
            mine = False
            try:
                if str(spark.conf.get(name, unset) or unset).strip() == unset:
                    spark.conf.set(name, value)
                    mine = True
            except Exception:  # noqa: BLE001 - not allowed here: Spark plans as it would
                mine = False
        _settings_users[key] = (users + 1, mine)
    try:
        yield
    finally:
        with _settings_lock:
            users, mine = _settings_users.pop(key)
            if users > 1:
                _settings_users[key] = (users - 1, mine)
            elif mine:
                try:
                    spark.conf.unset(name)  # back to Spark's default
                except Exception:  # noqa: BLE001 - never hide the write's own outcome
                    pass


def rewrite_file_cap(touched_rows: Mapping[str, int], new_rows: int) -> int:
    """The most rows a file of a rewriting merge holds: as many as the largest file it writes
    anyway (the largest touched file, or an insert file of up to ``new_rows`` rows).

    Spark packs small touched files into one task, and a task writes one file: without a cap
    the file holding the newest keys absorbs every later merge's inserts and grows without
    bound, so a merge that updates a few recent rows rewrites more bytes every hour (the aging
    benchmark's recent-updates shape). With it a rewrite never makes a file bigger than one it
    replaces; small files are packed by compaction, once they cool.
    """
    return max(1, max(touched_rows.values(), default=0), min(new_rows, ROWS_PER_INSERT_FILE))


def files_for(rows: int) -> int:
    """How many files ``rows`` new rows go into (unpartitioned): about ROWS_PER_INSERT_FILE each."""
    return max(1, -(-rows // ROWS_PER_INSERT_FILE))


def staged_files(
    file_format: str,
    staging: str,
    storage: Storage,
    removed: Mapping[str, int] | None = None,
    fields: Sequence[StructField] = (),
    counts: Mapping[str, int] | None = None,
    known: Collection[str] = (),
) -> tuple[list[StagedFile], dict[str, int]]:
    """List what a write produced with row counts and ``fields``' ranges (from footers); drop
    empty files. Files of ``known`` (qualified paths: listed after an earlier write into the
    same folder) are left out.

    The rows of the ``removed`` files (path -> size: the touched files the commit replaces)
    are counted too, for the journal, unless ``counts`` has them already.
    """
    removed = removed or {}
    listed = {f.path: f for f in storage.list_data_files(staging) if f.path not in known}  # qualified
    summaries = summarize_files(storage, {p: f.size for p, f in listed.items()}, file_format, fields)
    if counts is None:
        counts = storage.count_rows(removed, file_format) if removed else {}
    out = []
    for path, f in sorted(listed.items()):
        summary = summaries[path]
        if summary.rows == 0:
            storage.delete(path)
            continue
        out.append(StagedFile(path, f.size, summary.rows, summary))
    return out, {q: counts[q] for q in map(storage.qualify, removed)}
