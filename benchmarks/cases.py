"""The benchmark's cases: Delta Lake's merge grid, the merges it lacks, and the dbt-shaped scenarios.

``GRID`` is Delta Lake's ``MergeTestCases`` (16 cases, named as there): single and multiple
insert-only merges at 5%, 50% and 100% of the chosen files' rows, one delete-only merge and nine
upserts, each with the source their ``MergeDataLoad`` builds for its
``(filesMatchedFraction, rowsMatchedFraction, rowsNotMatchedFraction)``. ``EXTRA`` adds what
users of this adapter run and the grid lacks: a CDC batch with conditional matched
update/delete, a mirror with NOT MATCHED BY SOURCE delete, the change data feed, a
date-partitioned table and the hourly 100-row batch. ``DBT`` keeps the scenarios this benchmark
started with, on the same table.

A case is data: the table it runs on, how its source is built, and its clauses in the clause
spec's form (aliases ``t`` and ``s``). Each system translates the clauses for itself
(``peers.py``); ``expect_zero`` holds Delta's per-case checks of the merge's counters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webreturns import (
    DATE_COLUMN,
    BaseTable,
    SourceBuilder,
    cdc_source,
    grid_source,
    insert_only_source,
    mirror_source,
    mirror_window_start,
    partitioned_cdc_source,
    recent_upsert_source,
    scattered_source,
    small_upsert_source,
)

TARGET_ALIAS = "t"
SOURCE_ALIAS = "s"
ON_KEY = "t.wr_order_number = s.wr_order_number AND t.wr_item_sk = s.wr_item_sk"
ON_KEY_AND_DATE = f"{ON_KEY} AND t.{DATE_COLUMN} = s.{DATE_COLUMN}"

Clauses = list[dict[str, Any]]

UPDATE_ALL = {"when": "matched", "action": "update", "set": "*"}
INSERT_ALL = {"when": "not_matched", "action": "insert", "values": "*"}
UPSERT: Clauses = [UPDATE_ALL, INSERT_ALL]
INSERT_ONLY: Clauses = [INSERT_ALL]
MULTIPLE_INSERT: Clauses = [
    {"when": "not_matched", "condition": "s.wr_item_sk % 2 = 0", "action": "insert", "values": "*"},
    INSERT_ALL,
]
DELETE_ONLY: Clauses = [{"when": "matched", "action": "delete"}]
CDC: Clauses = [
    {"when": "matched", "condition": "s.op = 'D'", "action": "delete"},
    {"when": "matched", "condition": "s.op = 'U'", "action": "update", "set": "*"},
    {"when": "not_matched", "condition": "s.op <> 'D'", "action": "insert", "values": "*"},
]


@dataclass(frozen=True)
class Case:
    name: str
    group: str  # grid | extra | dbt
    description: str
    source: SourceBuilder
    clauses: Clauses | Callable[[BaseTable], Clauses]
    table: str = "flat"  # flat | by_date (webreturns.generate's kinds)
    on: str = ON_KEY
    change_data_feed: bool = False
    source_id: str = ""  # cases with the same source_id share one source (default: the name)
    delta_name: str = ""  # the name in Delta Lake's MergeTestCases
    expect_zero: tuple[str, ...] = field(default=())  # inserted | updated | deleted | files_removed

    def clause_list(self, base: BaseTable) -> Clauses:
        return self.clauses(base) if callable(self.clauses) else self.clauses

    @property
    def source_key(self) -> str:
        return f"{self.table}/{self.source_id or self.name}"


def _f(x: float) -> str:
    return repr(float(x))


def _insert_only(multiple: bool, not_matched: float) -> Case:
    kind = "multiple_insert_only" if multiple else "single_insert_only"
    return Case(
        name=f"{kind}_0.05_{_f(not_matched)}",
        group="grid",
        description=(
            f"{'two NOT MATCHED (AND s.wr_item_sk % 2 = 0) INSERT' if multiple else 'NOT MATCHED INSERT'}; "
            f"{not_matched:.0%} of the chosen files' rows as new keys"
        ),
        source=grid_source(0.05, 0.0, not_matched),
        clauses=MULTIPLE_INSERT if multiple else INSERT_ONLY,
        source_id=f"grid_0.05_0.0_{_f(not_matched)}",
        delta_name=f"{kind}_filesMatchedFraction_0.05_rowsNotMatchedFraction_{_f(not_matched)}",
        expect_zero=("updated", "deleted"),
    )


def _upsert(files: float, matched: float, not_matched: float) -> Case:
    return Case(
        name=f"upsert_{_f(files)}_{_f(matched)}_{_f(not_matched)}",
        group="grid",
        description=(
            f"MATCHED UPDATE + NOT MATCHED INSERT; {files:.0%} of files, {matched:.0%} of their rows "
            f"updated, {not_matched:.1%} as inserts"
        ),
        source=grid_source(files, matched, not_matched),
        clauses=UPSERT,
        source_id=f"grid_{_f(files)}_{_f(matched)}_{_f(not_matched)}",
        delta_name=(
            f"upsert_filesMatchedFraction_{_f(files)}_rowsMatchedFraction_{_f(matched)}"
            f"_rowsNotMatchedFraction_{_f(not_matched)}"
        ),
        expect_zero=("deleted",),
    )


GRID: list[Case] = [
    *(_insert_only(multiple, nm) for nm in (0.05, 0.5, 1.0) for multiple in (False, True)),
    Case(
        name="delete_only_0.05_0.05",
        group="grid",
        description="MATCHED DELETE; 5% of files, 5% of their rows deleted",
        source=grid_source(0.05, 0.05, 0.0),
        clauses=DELETE_ONLY,
        source_id="grid_0.05_0.05_0.0",
        delta_name="delete_only_filesMatchedFraction_0.05_rowsMatchedFraction_0.05",
        expect_zero=("inserted", "updated"),
    ),
    *(_upsert(0.05, m, 0.1) for m in (0.0, 0.01, 0.1)),
    *(_upsert(0.05, m, 0.001) for m in (0.5, 0.99, 1.0)),
    _upsert(0.05, 0.1, 0.0),
    _upsert(0.5, 0.01, 0.001),
    _upsert(1.0, 0.01, 0.001),
]


def _mirror_clauses(base: BaseTable) -> Clauses:
    first = mirror_window_start(base, 0.05)
    return [
        UPDATE_ALL,
        INSERT_ALL,
        {
            "when": "not_matched_by_source",
            "condition": f"t.wr_order_number >= {first}",
            "action": "delete",
        },
    ]


EXTRA: list[Case] = [
    Case(
        name="cdc",
        group="extra",
        description=(
            "CDC batch from 5% of files: MATCHED AND op='D' DELETE, MATCHED AND op='U' UPDATE, "
            "NOT MATCHED AND op<>'D' INSERT; 1% U, 0.5% D, 1% I, 0.1% D of absent keys"
        ),
        source=cdc_source(0.05, 0.01, 0.005, 0.01, 0.001),
        clauses=CDC,
    ),
    Case(
        name="mirror",
        group="extra",
        description=(
            "snapshot of the newest 5% of orders: 1% changed, 0.5% gone, 0.5% new rows; NOT MATCHED "
            "BY SOURCE AND t.wr_order_number >= <window> DELETE"
        ),
        source=mirror_source(0.05, 0.01, 0.005, 0.005),
        clauses=_mirror_clauses,
    ),
    Case(
        name="upsert_cdf",
        group="extra",
        description="upsert_0.05_0.01_0.1 with change_data_feed on",
        source=grid_source(0.05, 0.01, 0.1),
        clauses=UPSERT,
        change_data_feed=True,
        source_id="grid_0.05_0.01_0.1",
        expect_zero=("deleted",),
    ),
    Case(
        name="partitioned_upsert",
        group="extra",
        description=(
            f"{DATE_COLUMN}-partitioned table ({30} days): 1% updates in the last 2 days + 1% new rows "
            "on the last; date in ON"
        ),
        source=recent_upsert_source(0.01, 2 / 30, 0.01),
        clauses=UPSERT,
        table="by_date",
        on=ON_KEY_AND_DATE,
        expect_zero=("deleted",),
    ),
    Case(
        name="upsert_100_rows",
        group="extra",
        description="the hourly dbt batch: 50 updates among the newest 1,000 rows + 50 new rows",
        source=small_upsert_source(50, 50),
        clauses=UPSERT,
        expect_zero=("deleted",),
    ),
]

DBT: list[Case] = [
    Case(
        name="upsert_recent",
        group="dbt",
        description="1% updates among the newest 2% of rows + 1% new rows",
        source=recent_upsert_source(0.01, 0.02, 0.01),
        clauses=UPSERT,
        expect_zero=("deleted",),
    ),
    Case(
        name="upsert_recent_cdf",
        group="dbt",
        description="upsert_recent with change_data_feed on",
        source=recent_upsert_source(0.01, 0.02, 0.01),
        clauses=UPSERT,
        change_data_feed=True,
        source_id="upsert_recent",
        expect_zero=("deleted",),
    ),
    Case(
        name="upsert_scattered",
        group="dbt",
        description="0.1% updates spread over every file",
        source=scattered_source(1000),
        clauses=UPSERT,
        expect_zero=("deleted", "inserted"),
    ),
    Case(
        name="insert_only",
        group="dbt",
        description="2% new rows, insert-only merge",
        source=insert_only_source(0.02),
        clauses=INSERT_ONLY,
        expect_zero=("updated", "deleted", "files_removed"),
    ),
    Case(
        name="partitioned_cdc",
        group="dbt",
        description="by date (30 days); CDC updates/deletes/inserts in the last 2 days",
        source=partitioned_cdc_source(2, 7, 7, 0.01),
        clauses=CDC,
        table="by_date",
    ),
]

ALL: list[Case] = GRID + EXTRA + DBT
GROUPS = {"grid": GRID, "extra": EXTRA, "dbt": DBT, "all": ALL}
# The --scale curve: one grid upsert and the hourly batch.
SCALE = ["upsert_0.05_0.01_0.1", "upsert_100_rows"]


def select(spec: str) -> list[Case]:
    """Cases named in ``spec`` (comma-separated names or group names), in benchmark order."""
    wanted: set[str] = set()
    by_name = {c.name: c for c in ALL}
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        if token in GROUPS:
            wanted.update(c.name for c in GROUPS[token])
        elif token in by_name:
            wanted.add(token)
        else:
            raise SystemExit(
                f"unknown case {token!r}; cases: {', '.join(by_name)}; groups: {', '.join(GROUPS)}"
            )
    return [c for c in ALL if c.name in wanted]
