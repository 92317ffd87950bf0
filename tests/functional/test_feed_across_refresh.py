"""A change-feed consumer across `--full-refresh`, through real dbt runs (issue 29 item 1).

`consumer` is the README's incremental consumer: it appends the change rows of `src` after
the last version it read. It runs before a full refresh of `src`, after it and after the
next merge; every change row reaches it exactly once, and applying them in order gives
exactly `src`. A model that opts out of feed rows for its full refreshes makes a read across
the refresh fail naming it; a start past the next version fails; `--empty` reads no change
row; a read by timestamp selects the versions committed in the range.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dbt.tests.util import run_dbt

from tests.functional.helpers import by_name, incremental_model, ok, rows, run_step, values

STEP1 = values("id, name", "(1, 'a')", "(2, 'b')")
STEP2 = values("id, name", "(2, 'B')", "(3, 'c')")
STEP3 = values("id, name", "(3, 'C')", "(4, 'd')")

# Appends the change rows after the last version it holds (all of them on its first run).
CONSUMER = """
{{ config(materialized='incremental', incremental_strategy='append', file_format='parquet') }}
{%- set start = 0 -%}
{%- if execute and is_incremental() -%}
  {%- set last = run_query('select coalesce(max(_commit_version), -1) from ' ~ this) -%}
  {%- set start = last.columns[0].values()[0] + 1 -%}
{%- endif -%}
{%- if execute and (rowmerge_latest_version(ref('src')) or 0) >= start %}
select id, name, _change_type, _commit_version from {{ table_changes(ref('src'), start) }} as c
{%- else %}
select id, name, _change_type, _commit_version from {{ table_changes(ref('src'), 0) }} as c where false
{%- endif %}
"""

MODELS = {
    "src.sql": incremental_model("unique_key='id', change_data_feed=true", STEP1, STEP2, STEP3),
    "consumer.sql": CONSUMER,
    "quiet.sql": incremental_model(
        "unique_key='id', change_data_feed=true, change_data_feed_on_replace=false", STEP1, STEP2, STEP3
    ),
}

ORDER = {"delete": 0, "update_preimage": 1, "insert": 2, "update_postimage": 3}


def _apply(changes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The table a consumer builds from version 0's rows (the table as dbt created it, which
    writes no change rows) by applying change rows in version order (deletes and pre-images
    before inserts and post-images within a version)."""
    state: dict[int, str] = {1: "a", 2: "b"}
    for key, name, kind, _ in sorted(changes, key=lambda r: (r[3], ORDER[r[2]])):
        if kind in ("delete", "update_preimage"):
            assert state.pop(key) is not None
        else:
            assert key not in state
            state[key] = name
    return sorted(state.items())


def _write(project: Any, name: str, text: str) -> Path:
    path = Path(project.project_root) / "models" / name
    path.write_text(text)
    return path


class TestFeedAcrossFullRefresh:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def timeline(self, project) -> dict[str, Any]:
        s: dict[str, Any] = {}
        s["step1"] = run_step(1)
        s["step2"] = run_step(2)
        s["refresh"] = by_name(
            run_dbt(["run", "--vars", "{step: 2}", "--full-refresh", "--select", "src", "quiet"])
        )
        s["consumer_after_refresh"] = by_name(run_dbt(["run", "--vars", "{step: 2}", "--select", "consumer"]))
        s["step3"] = run_step(3, "--select", "src", "consumer")
        s["src"] = rows(project, "src")
        s["consumer"] = rows(project, "consumer")
        s["feed"] = rows(project, "src__changes", "id, name, _change_type, _commit_version")
        return s

    def test_every_change_row_reaches_the_consumer_exactly_once(self, project, timeline):
        refresh = ok(timeline["refresh"], "src")
        assert refresh.adapter_response["version"] == 2
        assert (
            refresh.adapter_response["_message"]
            == "REPLACE TABLE version 2: 2 rows (replacing 3); 5 change rows"
        )
        assert Counter(timeline["consumer"]) == Counter(timeline["feed"])
        assert sorted({r[3] for r in timeline["consumer"]}) == [1, 2, 3]
        assert timeline["src"] == [(2, "B"), (3, "C"), (4, "d")]

    def test_consumer_ends_with_exactly_the_table(self, project, timeline):
        assert _apply(timeline["consumer"]) == timeline["src"]

    def test_refresh_rows_are_the_old_rows_deleted_and_the_new_inserted(self, project, timeline):
        v2 = sorted(r for r in timeline["feed"] if r[3] == 2)
        assert v2 == sorted(
            [
                (1, "a", "delete", 2),
                (2, "B", "delete", 2),
                (3, "c", "delete", 2),
                (2, "B", "insert", 2),
                (3, "c", "insert", 2),
            ]
        )

    def test_reading_across_a_refresh_without_change_rows_fails_naming_it(self, project, timeline):
        assert ok(timeline["refresh"], "quiet").adapter_response["_message"] == (
            "REPLACE TABLE version 2: 2 rows (replacing 3); no change rows (opted out)"
        )
        path = _write(project, "reads_quiet.sql", "select * from {{ table_changes(ref('quiet'), 1) }} as c\n")
        try:
            r = by_name(run_dbt(["run", "--select", "reads_quiet"], expect_pass=False))["reads_quiet"]
            assert r.status == "error"
            message = " ".join(r.message.split())
            rel = f"{project.test_schema}.quiet"
            assert f"table_changes({rel}): version 2 of {rel} is a full refresh (REPLACE TABLE at" in message
            assert "change_data_feed_on_replace: false" in message and "Read from version 3 on" in message
        finally:
            path.unlink()

    def test_start_past_the_next_version_fails(self, project, timeline):
        path = _write(project, "reads_ahead.sql", "select * from {{ table_changes(ref('src'), 5) }} as c\n")
        try:
            r = by_name(run_dbt(["run", "--select", "reads_ahead"], expect_pass=False))["reads_ahead"]
            assert r.status == "error"
            rel = f"{project.test_schema}.src"
            text = " ".join(r.message.split())
            assert f"start_version 5 is past the latest version of {rel} (3; the next one will be 4)" in text
        finally:
            path.unlink()

    def test_empty_run_reads_no_change_row(self, project, timeline):
        path = _write(
            project,
            "reads_all.sql",
            "{{ config(materialized='table') }}\nselect * from {{ table_changes(ref('src'), 0) }} as c\n",
        )
        try:
            ok(by_name(run_dbt(["run", "--select", "reads_all"])), "reads_all")
            assert len(rows(project, "reads_all")) == len(timeline["feed"])
            ok(by_name(run_dbt(["run", "--empty", "--select", "reads_all"])), "reads_all")
            assert rows(project, "reads_all") == []
        finally:
            path.unlink()

    def test_read_by_timestamp_selects_the_versions_committed_in_the_range(self, project, timeline):
        history = project.run_sql(
            f"select _commit_version, min(_commit_timestamp) from {project.test_schema}.src__changes "
            "group by _commit_version",
            fetch="all",
        )
        at = {int(v): ts for v, ts in history}
        start = at[2].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        path = _write(
            project,
            "reads_since.sql",
            "{{ config(materialized='table') }}\n"
            f"select * from {{{{ table_changes(ref('src'), start_ts='{start}') }}}} as c\n",
        )
        try:
            ok(by_name(run_dbt(["run", "--select", "reads_since"])), "reads_since")
            got = rows(project, "reads_since", "id, name, _change_type, _commit_version")
            assert Counter(got) == Counter(r for r in timeline["feed"] if r[3] >= 2)
        finally:
            path.unlink()
