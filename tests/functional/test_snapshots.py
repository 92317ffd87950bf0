"""Snapshots on Parquet: dbt's snapshot merge run by the engine.

Each class snapshots a source that changes between ``dbt snapshot`` runs (``var('step')``)
and checks the exact rows: the timestamp and check strategies, every ``hard_deletes`` mode,
``dbt_valid_to_current``, the change feed and journal of a snapshot, ``--empty``, and the
merge text in target/run. dbt-tests-adapter's own snapshot classes run at the end, with
only their table-editing helpers adapted to Parquet (which has no UPDATE/DELETE).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from dbt.tests.adapter.simple_snapshot.test_snapshot import BaseSimpleSnapshot, BaseSnapshotCheck
from dbt.tests.util import relation_from_name, run_dbt, run_dbt_and_capture

from tests.functional.helpers import (
    by_name,
    column_names,
    merge_line,
    rows,
    table,
    table_exists,
    table_property,
)
from tests.functional.test_change_feed_and_history import history_lines, run_operation, split_history

D = dt.datetime
JAN1, JAN2, JAN3 = D(2024, 1, 1), D(2024, 1, 2), D(2024, 1, 3)

SOURCE = {
    1: "(1, 'a', timestamp'2024-01-01'), (2, 'b', timestamp'2024-01-01'), (3, 'c', timestamp'2024-01-01')",
    # 1 unchanged, 2 updated, 3 deleted, 4 new
    2: "(1, 'a', timestamp'2024-01-01'), (2, 'B', timestamp'2024-01-02'), (4, 'd', timestamp'2024-01-02')",
    # 3 comes back
    3: "(1, 'a', timestamp'2024-01-01'), (2, 'B', timestamp'2024-01-02'), (3, 'c', timestamp'2024-01-03'), "
    "(4, 'd', timestamp'2024-01-02')",
}


def snapshot_sql(name: str, config: str) -> str:
    """A snapshot of SOURCE[var('step')] (one file: exact file counts, stable order)."""
    steps = "".join(
        f"{{% {'if' if step == 1 else 'elif'} var('step', 1) == {step} %}}"
        f"select /*+ REPARTITION(1) */ * from values {rows_} as t(id, v, updated_at)\n"
        for step, rows_ in SOURCE.items()
    )
    return (
        f"{{% snapshot {name} %}}\n{{{{ config(unique_key='id', {config}) }}}}\n"
        f"{steps}{{% endif %}}\n{{% endsnapshot %}}\n"
    )


def snapshot(step: int, *args: str, expect_pass: bool = True) -> dict[str, Any]:
    return by_name(run_dbt(["snapshot", "--vars", f"{{step: {step}}}", *args], expect_pass=expect_pass))


def history(project: Any, name: str) -> list[tuple[Any, ...]]:
    """(id, v, dbt_valid_from, dbt_valid_to) of every row, sorted (None first)."""
    return same_order(rows(project, name, "id, v, dbt_valid_from, dbt_valid_to"))


def same_order(data: Any) -> list[tuple[Any, ...]]:
    return sorted(data, key=lambda t: tuple((v is not None, v) for v in t))


class TestTimestampStrategy:
    """Updates close the current version at the new updated_at; deletes are ignored (default)."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap.sql": snapshot_sql("snap", "strategy='timestamp', updated_at='updated_at'")}

    def test_versions_after_each_run(self, project):
        first = snapshot(1)
        assert first["snap"].status == "success"
        assert history(project, "snap") == [(1, "a", JAN1, None), (2, "b", JAN1, None), (3, "c", JAN1, None)]
        assert table_property(project, "snap", "Provider") == "parquet"

        second = snapshot(2)
        # one version closed (update), two inserted (2's new version and 4)
        assert merge_line(second["snap"]).startswith("MERGE 1 updated, 2 inserted, 0 deleted"), merge_line(
            second["snap"]
        )
        assert history(project, "snap") == same_order(
            [
                (1, "a", JAN1, None),
                (2, "b", JAN1, JAN2),
                (2, "B", JAN2, None),
                (3, "c", JAN1, None),  # hard_deletes='ignore': 3's version stays current
                (4, "d", JAN2, None),
            ]
        )
        # re-running the same source changes nothing
        again = snapshot(2)
        assert merge_line(again["snap"]).startswith("MERGE 0 updated, 0 inserted, 0 deleted")
        assert len(history(project, "snap")) == 5

    def test_target_run_shows_the_merge(self, project):
        snapshot(1)
        written = list(Path(project.project_root, "target", "run").rglob("snap.sql"))
        assert len(written) == 1, written
        text = written[0].read_text()
        assert "MERGE INTO" in text and "WHEN MATCHED AND" in text and "dbt_change_type" in text, text


class TestCheckStrategy:
    """Only a change in a checked column makes a new version."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        # updated_at is not checked: id 1 differs only there in step 3 below... and is not versioned
        return {"snap.sql": snapshot_sql("snap", "strategy='check', check_cols=['v']")}

    def test_versions_follow_the_checked_columns(self, project):
        snapshot(1)
        snapshot(2)
        got = history(project, "snap")
        assert [(i, v, to is None) for i, v, _, to in got] == same_order(
            [(1, "a", True), (2, "B", True), (2, "b", False), (3, "c", True), (4, "d", True)]
        )
        # the closed version of 2 ends where its new one starts
        versions = {(i, v): (start, to) for i, v, start, to in got}
        assert versions[(2, "b")][1] == versions[(2, "B")][0] is not None
        # step 3: 3's updated_at changed but v did not, and 3 was never closed (deletes ignored)
        snapshot(3)
        assert history(project, "snap") == got


class TestHardDeletesInvalidate:
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {
            "snap.sql": snapshot_sql(
                "snap", "strategy='timestamp', updated_at='updated_at', hard_deletes='invalidate'"
            )
        }

    def test_a_deleted_row_is_closed_and_a_revived_one_reopened(self, project):
        snapshot(1)
        before = D.now()
        snapshot(2)
        got = {(i, v, start): to for i, v, start, to in history(project, "snap")}
        closed_3 = got.pop((3, "c", JAN1))
        # closed at the snapshot's time
        assert closed_3 is not None and closed_3 >= before - dt.timedelta(seconds=5)
        assert got == {(1, "a", JAN1): None, (2, "b", JAN1): JAN2, (2, "B", JAN2): None, (4, "d", JAN2): None}
        snapshot(3)
        # 3 is back: a new current version from its updated_at
        assert [r for r in history(project, "snap") if r[0] == 3] == [
            (3, "c", JAN1, closed_3),
            (3, "c", JAN3, None),
        ]


class TestHardDeletesNewRecord:
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {
            "snap.sql": snapshot_sql(
                "snap", "strategy='timestamp', updated_at='updated_at', hard_deletes='new_record'"
            )
        }

    def test_a_deleted_row_gets_a_deletion_record(self, project):
        snapshot(1)
        assert rows(project, "snap", "id, dbt_is_deleted") == [(1, "False"), (2, "False"), (3, "False")]
        snapshot(2)
        got = same_order(rows(project, "snap", "id, v, dbt_valid_to is null, dbt_is_deleted"))
        assert got == same_order(
            [
                (1, "a", True, "False"),
                (2, "B", True, "False"),
                (2, "b", False, "False"),
                (3, "c", False, "False"),  # closed ...
                (3, "c", True, "True"),  # ... and a current record saying it is deleted
                (4, "d", True, "False"),
            ]
        )
        snapshot(3)
        revived = same_order(rows(project, "snap", "id, v, updated_at, dbt_valid_to is null, dbt_is_deleted"))
        assert [r for r in revived if r[0] == 3] == [
            (3, "c", JAN1, False, "False"),
            (3, "c", JAN1, False, "True"),
            (3, "c", JAN3, True, "False"),
        ]


class TestValidToCurrentAndChangeFeed:
    """dbt_valid_to_current marks current rows; the snapshot keeps a journal and change feed."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {
            "snap.sql": snapshot_sql(
                "snap",
                "strategy='timestamp', updated_at='updated_at', "
                "dbt_valid_to_current=\"to_timestamp('9999-12-31')\", change_data_feed=true",
            )
        }

    def test_current_rows_carry_the_sentinel_and_changes_are_recorded(self, project):
        end = D(9999, 12, 31)
        snapshot(1)
        assert history(project, "snap") == [(1, "a", JAN1, end), (2, "b", JAN1, end), (3, "c", JAN1, end)]
        second = snapshot(2)
        assert second["snap"].adapter_response["version"] == 1
        assert history(project, "snap") == same_order(
            [
                (1, "a", JAN1, end),
                (2, "b", JAN1, JAN2),
                (2, "B", JAN2, end),
                (3, "c", JAN1, end),
                (4, "d", JAN2, end),
            ]
        )
        changes = same_order(
            rows(project, "snap__changes", "_commit_version, _change_type, id, v, dbt_valid_to")
        )
        assert changes == [
            (1, "insert", 2, "B", end),
            (1, "insert", 4, "d", end),
            (1, "update_postimage", 2, "b", JAN2),
            (1, "update_preimage", 2, "b", end),
        ]
        # the snapshot has a journal like any merged table: CREATE TABLE was version 0
        lines = run_operation("rowmerge_history", f"{{relation: {table(project, 'snap')}}}")
        journal = [split_history(line)[:3] for line in history_lines(lines)[1:]]
        assert [(v, op) for v, _, op in journal] == [("1", "MERGE"), ("0", "CREATE TABLE")], lines


class TestEmptySnapshotChangesNothing:
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {
            "snap.sql": snapshot_sql(
                "snap", "strategy='timestamp', updated_at='updated_at', hard_deletes='invalidate'"
            )
        }

    def test_empty_run_skips_the_merge(self, project):
        snapshot(1)
        before = history(project, "snap")
        # --empty selects no rows: a merge would invalidate every current row
        empty = snapshot(2, "--empty")
        assert merge_line(empty["snap"]) == f"MERGE skipped (--empty): {table(project, 'snap')} not changed"
        assert history(project, "snap") == before


class TestDryRunWritesNothing:
    """`--vars '{rowmerge_dry_run: true}'` plans a snapshot's merge as it does a model's: no
    table on the first run, no column added, no row written; the real run then does what the
    dry run reported."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        # the second step's source has a new column, w
        return {
            "snap.sql": "{% snapshot snap %}\n{{ config(unique_key='id', strategy='timestamp', "
            "updated_at='updated_at', hard_deletes='invalidate', "
            "post_hook='create table if not exists {{ this.schema }}.hook_ran using parquet as select 1 as x'"
            ") }}\n"
            "{% if var('step', 1) == 1 %}"
            f"select /*+ REPARTITION(1) */ * from values {SOURCE[1]} as t(id, v, updated_at)\n"
            "{% else %}"
            f"select /*+ REPARTITION(1) */ *, 'x' as w from values {SOURCE[2]} as t(id, v, updated_at)\n"
            "{% endif %}\n{% endsnapshot %}\n"
        }

    def dry(self, step: int) -> tuple[Any, str]:
        results, output = run_dbt_and_capture(
            ["snapshot", "--vars", f"{{step: {step}, rowmerge_dry_run: true}}"]
        )
        result = by_name(results)["snap"]
        assert result.status == "success"
        return result, output

    def test_the_dry_run_reports_and_the_real_run_does_it(self, project):
        created, _ = self.dry(1)
        assert merge_line(created) == (
            f"CREATE TABLE dry run: {table(project, 'snap')} would be created with 3 rows; nothing written"
        )
        assert not table_exists(project, "snap")
        assert not table_exists(project, "hook_ran")  # no post-hook either

        snapshot(1)
        assert table_exists(project, "hook_ran")
        project.run_sql(f"drop table {table(project, 'hook_ran')}")
        before = history(project, "snap")
        columns = column_names(project, "snap")
        assert "w" not in columns

        planned, output = self.dry(2)
        line = merge_line(planned)
        # 2's current version and 3 (deleted) closed; 2's new version and 4 inserted
        assert line.startswith(
            f"MERGE dry run: {table(project, 'snap')} would update 2, insert 2, delete 0 rows"
        ), line
        assert line.endswith("; nothing written"), line
        assert f"rowmerge dry run: {table(project, 'snap')} would gain column(s) w" in output
        assert history(project, "snap") == before
        assert column_names(project, "snap") == columns
        assert not table_exists(project, "snap__dbt_tmp")
        assert not table_exists(project, "hook_ran")

        merged = snapshot(2)["snap"]
        assert merge_line(merged).startswith("MERGE 2 updated, 2 inserted, 0 deleted"), merge_line(merged)
        assert "w" in column_names(project, "snap")
        assert len(history(project, "snap")) == 5


def retained_files(project: Any, name: str) -> list[str]:
    """The files the table keeps for time travel (``_rowmerge_log/retained/<version>/``)."""
    location = (table_property(project, name, "Location") or "").removeprefix("file:")
    found = Path(location, "_rowmerge_log", "retained").rglob("*.parquet")
    return [str(p) for p in found if not p.name.startswith(".")]  # not Hadoop's .crc files


class TestUpkeepConfig:
    """A snapshot's upkeep keys reach its table's journal as a model's do: retention off keeps
    no replaced file; a bad value is refused naming the key before the first run writes."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        timestamp = "strategy='timestamp', updated_at='updated_at'"
        return {
            "kept.sql": snapshot_sql("kept", f"{timestamp}, auto_compact=false"),
            "off.sql": snapshot_sql(
                "off", f"{timestamp}, auto_compact=false, retain_versions=0, retain_hours=0"
            ),
            "bad.sql": snapshot_sql("bad", f"{timestamp}, retain_versions=-1, lock_timeout_s='soon'"),
        }

    def test_a_bad_value_is_refused_before_the_table_exists(self, project):
        results, output = run_dbt_and_capture(["snapshot", "--select", "bad"], expect_pass=False)
        assert by_name(results)["bad"].status == "error"
        assert f"Invalid snapshot config for {table(project, 'bad')} (2 problems):" in output, output
        assert "`retain_versions` must be a whole number >= 0, got -1" in output
        assert "`lock_timeout_s` must be a finite number of seconds >= 0, got 'soon'" in output
        assert not table_exists(project, "bad")

    def test_retention_follows_the_snapshot_config(self, project):
        snapshot(1, "--select", "kept", "off")
        second = snapshot(2, "--select", "kept", "off")
        for name in ("kept", "off"):
            assert merge_line(second[name]).startswith("MERGE 1 updated, 2 inserted, 0 deleted; 1 of 1 files")
        assert len(retained_files(project, "kept")) == 1  # the one file the merge rewrote
        assert retained_files(project, "off") == []


class ParquetSnapshotHelpers:
    """dbt-tests-adapter edits its `fact` table with UPDATE/DELETE, which Parquet tables do not
    have; these rebuild the table instead (same rows as the SQL would leave). The snapshot
    table is dropped between tests instead of emptied with DELETE (its journal goes with it)."""

    def _rebuild_fact(self, select: str) -> None:
        fact = relation_from_name(self.project.adapter, "fact")
        self.project.run_sql(f"drop table if exists {fact}__rebuilt")
        self.project.run_sql(f"create table {fact}__rebuilt using parquet as {select}")
        self.project.run_sql(f"drop table {fact}")
        self.project.run_sql(f"alter table {fact}__rebuilt rename to {fact}")

    def update_fact_records(self, updates: dict[str, str], where: str | None = None) -> None:
        fact = relation_from_name(self.project.adapter, "fact")
        cols = []
        for name, *_ in self.project.run_sql(f"describe {fact}", fetch="all"):
            if not name or name.startswith("#"):
                break
            cols.append(name)
        cond = where or "true"
        select = ", ".join(
            f"case when {cond} then {updates[c]} else {c} end as {c}" if c in updates else c for c in cols
        )
        self._rebuild_fact(f"select {select} from {fact}")

    def delete_fact_records(self, where: str | None = None) -> None:
        fact = relation_from_name(self.project.adapter, "fact")
        if where is None:
            self.project.run_sql(f"drop table if exists {fact}")
        else:
            self._rebuild_fact(f"select * from {fact} where not ({where})")

    def add_fact_column(self, column: str | None = None, definition: str | None = None) -> None:
        fact = relation_from_name(self.project.adapter, "fact")
        data_type = str(definition).lower().replace("default null", "").strip()
        self.project.run_sql(f"alter table {fact} add columns ({column} {data_type})")

    def delete_snapshot_records(self) -> None:
        self.project.run_sql(f"drop table if exists {relation_from_name(self.project.adapter, 'snapshot')}")


class TestDbtSimpleSnapshot(ParquetSnapshotHelpers, BaseSimpleSnapshot):
    pass


class TestDbtSnapshotCheck(ParquetSnapshotHelpers, BaseSnapshotCheck):
    pass


class TestMetaColumnNamesAndKeyList:
    """snapshot_meta_column_names renames dbt's columns and unique_key may be a list: the
    engine's merge uses the configured names."""

    @pytest.fixture(scope="class")
    def snapshots(self):
        meta = (
            "{'dbt_valid_from': 'valid_from', 'dbt_valid_to': 'valid_to', 'dbt_scd_id': 'scd_id', "
            "'dbt_updated_at': 'seen_at'}"
        )
        sql = snapshot_sql("snap", "strategy='timestamp', updated_at='updated_at'")
        return {
            "snap.sql": sql.replace(
                "unique_key='id'", f"unique_key=['id'], snapshot_meta_column_names={meta}"
            )
        }

    def test_versions_use_the_configured_names(self, project):
        snapshot(1)
        second = snapshot(2)
        assert merge_line(second["snap"]).startswith("MERGE 1 updated, 2 inserted, 0 deleted")
        got = same_order(rows(project, "snap", "id, v, valid_from, valid_to"))
        assert got == same_order(
            [
                (1, "a", JAN1, None),
                (2, "b", JAN1, JAN2),
                (2, "B", JAN2, None),
                (3, "c", JAN1, None),
                (4, "d", JAN2, None),
            ]
        )
        columns = [r[0] for r in project.run_sql(f"describe {table(project, 'snap')}", fetch="all")]
        assert {"scd_id", "seen_at", "valid_from", "valid_to"} <= set(columns)
        assert not any(c.startswith("dbt_") for c in columns), columns
