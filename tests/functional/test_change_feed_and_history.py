"""change_data_feed, table_changes(), --full-refresh as a version, and the
rowmerge_history / rowmerge_recover run-operations.

One project runs a timeline and snapshots every state the tests look at, so each test only
compares snapshots (exact rows, exact log text) and the tests do not depend on their order:

1. step 1: every model is created (version 0, empty change tables);
2. step 2: the first merge (version 1);
3. step 3: the second merge (version 2); then rowmerge_history and rowmerge_recover;
4. ``--full-refresh`` of ``feed`` with step 2's SELECT (version 3, REPLACE TABLE: history and
   feed go on), then step 3 merges it again (version 4).

Change tables are read unfiltered: with the Hive metastore a filter on ``_commit_version``
(a name starting with ``_``) cannot be pushed to the metastore; ``table_changes`` wraps it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.helpers import (
    GOOD_ROWS,
    PREFIX,
    bad_model,
    by_name,
    column_names,
    counts,
    incremental_model,
    merge_line,
    metrics,
    ok,
    rows,
    run_step,
    table,
    table_exists,
    values,
)

S = "DBT_INTERNAL_SOURCE"
HEADER = "version | timestamp | operation | inserted | updated | deleted | files added | files removed"
# The journal's timestamps: ISO 8601, milliseconds, UTC.
ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"

FEED_COLUMNS = "id, name, op, _change_type, _commit_version"

# `feed`: the CDC shape. delete_condition deletes a matched row whose op is 'D'.
FEED_STEP1 = values("id, name, op", "(1, 'a', 'I')", "(2, 'b', 'I')", "(3, 'c', 'I')")
# 1 updated, 2 deleted, 3 arrives unchanged (no change rows), 4 inserted.
FEED_STEP2 = values("id, name, op", "(1, 'A', 'U')", "(2, 'b', 'D')", "(3, 'c', 'I')", "(4, 'd', 'I')")
# 4 updated, 1 deleted, 5 inserted, 9 is an unknown delete (neither inserted nor reported).
FEED_STEP3 = values("id, name, op", "(4, 'D', 'U')", "(1, 'A', 'D')", "(5, 'e', 'I')", "(9, 'z', 'D')")

V1_CHANGES = [
    (1, "a", "I", "update_preimage", 1),
    (1, "A", "U", "update_postimage", 1),
    (2, "b", "I", "delete", 1),
    (4, "d", "I", "insert", 1),
]
V2_CHANGES = [
    (4, "d", "I", "update_preimage", 2),
    (4, "D", "U", "update_postimage", 2),
    (1, "A", "U", "delete", 2),
    (5, "e", "I", "insert", 2),
]

# --full-refresh with step 2's SELECT after step 3: version 3 deletes every row and inserts the new.
V3_REFRESH = [
    (3, "c", "I", "delete", 3),
    (4, "D", "U", "delete", 3),
    (5, "e", "I", "delete", 3),
    (1, "A", "U", "insert", 3),
    (3, "c", "I", "insert", 3),
    (4, "d", "I", "insert", 3),
]

# `custom`: change_data_feed names its change table.
CUSTOM_STEP1 = values("id, name", "(1, 'a')", "(2, 'b')")
CUSTOM_STEP2 = values("id, name", "(2, 'B')", "(3, 'c')")
CUSTOM_STEP3 = values("id, name", "(3, 'C')")

MODELS = {
    "feed.sql": incremental_model(
        f"unique_key='id', change_data_feed=true, delete_condition=\"{S}.op = 'D'\"",
        FEED_STEP1,
        FEED_STEP2,
        FEED_STEP3,
    ),
    "custom.sql": incremental_model(
        "unique_key='id', change_data_feed='custom_changes'",
        CUSTOM_STEP1,
        CUSTOM_STEP2,
        CUSTOM_STEP3,
    ),
    # Downstream of the feeds: plain tables rebuilt on every run.
    # A start past the latest version fails, so a consumer waits for it (the README's guard).
    "feed_from_v2.sql": (
        "{{ config(materialized='table') }}\n"
        "{% if (rowmerge_latest_version(ref('feed')) or 0) >= 2 %}\n"
        f"select {FEED_COLUMNS} from {{{{ table_changes(ref('feed'), 2) }}}} as c\n"
        "{% else %}\n"
        f"select {FEED_COLUMNS} from {{{{ table_changes(ref('feed'), 0) }}}} as c where false\n"
        "{% endif %}\n"
    ),
    "feed_v1_to_v1.sql": (
        "{{ config(materialized='table') }}\n"
        "{% if (rowmerge_latest_version(ref('feed')) or 0) >= 1 %}\n"
        f"select {FEED_COLUMNS} from {{{{ table_changes(ref('feed'), 1, 1) }}}} as c\n"
        "{% else %}\n"
        f"select {FEED_COLUMNS} from {{{{ table_changes(ref('feed'), 0) }}}} as c where false\n"
        "{% endif %}\n"
    ),
    "feed_v0_to_v2.sql": (
        "{{ config(materialized='table') }}\n"
        f"select {FEED_COLUMNS} from {{{{ table_changes(ref('feed'), 0, 2) }}}} as c\n"
    ),
    # table_changes finds a change table that change_data_feed named.
    "custom_from_v0.sql": (
        "{{ config(materialized='table') }}\n"
        "select id, name, _change_type, _commit_version from {{ table_changes(ref('custom'), 0) }} as c\n"
    ),
}


def _sorted(data: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(data, key=repr)


def describe(project: Any, name: str) -> list[tuple[str, str]]:
    """(name, type) of every ``describe table`` row, partition information included."""
    return [(r[0], r[1]) for r in project.run_sql(f"describe table {table(project, name)}", fetch="all")]


def change_rows(project: Any, name: str, columns: str) -> list[tuple[Any, ...]]:
    """Every row of a change table (read unfiltered, see the module doc), sorted."""
    return rows(project, name, columns)


def commit_timestamps(project: Any, name: str) -> dict[int, list[str]]:
    """Per _commit_version, the distinct _commit_timestamp values (UTC, milliseconds)."""
    fetched = project.run_sql(
        "select _commit_version, date_format(_commit_timestamp, \"yyyy-MM-dd'T'HH:mm:ss.SSS\") "
        f"from {table(project, name)}",
        fetch="all",
    )
    out: dict[int, set[str]] = {}
    for version, ts in fetched:
        out.setdefault(version, set()).add(ts)
    return {v: sorted(ts) for v, ts in out.items()}


def change_files(project: Any, name: str) -> dict[int, int]:
    """Per _commit_version, how many files of the change table hold its rows."""
    fetched = project.run_sql(
        f"select distinct _commit_version, input_file_name() from {table(project, name)}", fetch="all"
    )
    out: dict[int, int] = {}
    for version, _ in fetched:
        out[version] = out.get(version, 0) + 1
    return out


def log_lines(output: str) -> list[str]:
    """dbt's captured stdout as lines, without colour codes and the time prefix."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    return [re.sub(r"^\d\d:\d\d:\d\d\s+", "", line).rstrip() for line in plain.splitlines()]


def run_operation(macro: str, args: str) -> list[str]:
    """``dbt run-operation`` and the lines it logged (without dbt's time prefix)."""
    _, output = run_dbt_and_capture(["run-operation", macro, "--args", args])
    return log_lines(output)


def history_lines(lines: list[str]) -> list[str]:
    """The header logged by rowmerge_history and every line after it."""
    assert HEADER in lines, "\n".join(lines)
    start = lines.index(HEADER)
    return [line for line in lines[start:] if line]


def split_history(line: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in line.split(" | "))


class TestChangeFeedAndHistory:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def timeline(self, project) -> dict[str, Any]:
        s: dict[str, Any] = {}
        feed_rel = table(project, "feed")
        s["step1"] = run_step(1)
        assert {n: r.status for n, r in s["step1"].items()} == {n[:-4]: "success" for n in MODELS}, {
            n: r.message for n, r in s["step1"].items()
        }
        s["describe_after_create"] = describe(project, "feed__changes")
        s["changes_after_create"] = change_rows(project, "feed__changes", FEED_COLUMNS)
        s["custom_tables_after_create"] = (
            table_exists(project, "custom_changes"),
            table_exists(project, "custom__changes"),
        )
        s["custom_changes_after_create"] = change_rows(
            project, "custom_changes", "id, name, _change_type, _commit_version"
        )
        s["downstream_1"] = {n: rows(project, n) for n in ("feed_from_v2", "feed_v1_to_v1", "feed_v0_to_v2")}
        s["history_after_create"] = history_lines(
            run_operation("rowmerge_history", f"{{relation: {feed_rel}}}")
        )

        s["step2"] = run_step(2)
        s["feed_after_step2"] = rows(project, "feed")
        s["changes_after_step2"] = change_rows(project, "feed__changes", FEED_COLUMNS)
        s["downstream_2"] = {n: rows(project, n) for n in ("feed_from_v2", "feed_v1_to_v1", "feed_v0_to_v2")}

        s["step3"] = run_step(3)
        s["feed_after_step3"] = rows(project, "feed")
        s["changes_after_step3"] = change_rows(project, "feed__changes", FEED_COLUMNS)
        s["timestamps_after_step3"] = commit_timestamps(project, "feed__changes")
        s["change_files_after_step3"] = change_files(project, "feed__changes")
        s["custom_changes_after_step3"] = change_rows(
            project, "custom_changes", "id, name, _change_type, _commit_version"
        )
        s["custom_tables_after_step3"] = (
            table_exists(project, "custom_changes"),
            table_exists(project, "custom__changes"),
        )
        s["downstream_3"] = {
            n: rows(project, n) for n in ("feed_from_v2", "feed_v1_to_v1", "feed_v0_to_v2", "custom_from_v0")
        }
        s["history"] = history_lines(run_operation("rowmerge_history", f"{{relation: {feed_rel}}}"))
        s["history_limit_2"] = history_lines(
            run_operation("rowmerge_history", f"{{relation: {feed_rel}, limit: 2}}")
        )
        s["recover"] = run_operation("rowmerge_recover", f"{{relation: {feed_rel}}}")
        s["feed_after_recover"] = rows(project, "feed")
        return s

    @pytest.fixture(scope="class")
    def refreshed(self, project, timeline) -> dict[str, Any]:
        """--full-refresh of `feed` (step 2's SELECT), then step 3 merges into the new table."""
        s: dict[str, Any] = {}
        feed_rel = table(project, "feed")
        results, output = run_dbt_and_capture(
            ["run", "--vars", "{step: 2}", "--full-refresh", "--select", "feed"]
        )
        s["refresh"] = by_name(results)
        s["refresh_log"] = output
        s["feed_after_refresh"] = rows(project, "feed")
        s["describe_after_refresh"] = describe(project, "feed__changes")
        s["changes_after_refresh"] = change_rows(project, "feed__changes", FEED_COLUMNS)
        s["history_after_refresh"] = history_lines(
            run_operation("rowmerge_history", f"{{relation: {feed_rel}}}")
        )
        s["merge"] = by_name(run_dbt(["run", "--vars", "{step: 3}", "--select", "feed"]))
        s["feed_after_merge"] = rows(project, "feed")
        s["changes_after_merge"] = change_rows(project, "feed__changes", FEED_COLUMNS)
        s["history_after_merge"] = history_lines(
            run_operation("rowmerge_history", f"{{relation: {feed_rel}}}")
        )
        return s

    # -- 1. change_data_feed=true --------------------------------------------------------------
    def test_first_run_creates_an_empty_change_table(self, project, timeline):
        assert timeline["describe_after_create"] == [
            ("id", "int"),
            ("name", "string"),
            ("op", "string"),
            ("_change_type", "string"),
            ("_commit_timestamp", "timestamp"),
            ("_commit_version", "bigint"),
            ("# Partition Information", ""),
            ("# col_name", "data_type"),
            ("_commit_version", "bigint"),
        ]
        assert timeline["changes_after_create"] == []

    def test_first_merge_writes_version_1_change_rows(self, project, timeline):
        r = ok(timeline["step2"], "feed")
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 1 deleted; 1 of 1 files rewritten"
        assert r.adapter_response["version"] == 1
        assert r.adapter_response["spec"]["change_data_feed"] == {
            "table": f"{project.test_schema}.feed__changes"
        }
        assert timeline["feed_after_step2"] == _sorted([(1, "A", "U"), (3, "c", "I"), (4, "d", "I")])
        assert timeline["changes_after_step2"] == _sorted(V1_CHANGES)

    def test_second_merge_adds_version_2_change_rows(self, project, timeline):
        r = ok(timeline["step3"], "feed")
        # Step 2 left one file: a table of one file is rewritten in one pass, in a single task
        # that writes the inserts into the same file (rewrite.single_task_join).
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 1 deleted; 1 of 1 files rewritten"
        assert r.adapter_response["version"] == 2
        assert timeline["feed_after_step3"] == _sorted([(3, "c", "I"), (4, "D", "U"), (5, "e", "I")])
        assert timeline["changes_after_step3"] == _sorted(V1_CHANGES + V2_CHANGES)

    def test_change_files_metric_counts_the_feed_files_of_each_version(self, project, timeline):
        added = {
            v: metrics(ok(timeline[step], "feed"))["numTargetChangeFilesAdded"]
            for v, step in ((1, "step2"), (2, "step3"))
        }
        assert all(n >= 1 for n in added.values()), added
        assert timeline["change_files_after_step3"] == added

    def test_commit_timestamp_is_the_journal_timestamp(self, project, timeline):
        journal = {int(split_history(line)[0]): split_history(line)[1] for line in timeline["history"][1:]}
        feed = timeline["timestamps_after_step3"]
        assert sorted(feed) == [1, 2]
        for version in (1, 2):
            assert feed[version] == [journal[version].removesuffix("+00:00")], (version, feed, journal)

    # -- 2. change_data_feed='<name>' ----------------------------------------------------------
    def test_named_change_table_in_the_models_schema(self, project, timeline):
        assert timeline["custom_tables_after_create"] == (True, False)
        assert timeline["custom_tables_after_step3"] == (True, False)
        assert timeline["custom_changes_after_create"] == []
        r2, r3 = ok(timeline["step2"], "custom"), ok(timeline["step3"], "custom")
        assert (r2.adapter_response["version"], r3.adapter_response["version"]) == (1, 2)
        assert r2.adapter_response["spec"]["change_data_feed"] == {
            "table": f"{project.test_schema}.custom_changes"
        }
        assert counts(r3) == (1, 0, 0)
        assert timeline["custom_changes_after_step3"] == _sorted(
            [
                (2, "b", "update_preimage", 1),
                (2, "B", "update_postimage", 1),
                (3, "c", "insert", 1),
                (3, "c", "update_preimage", 2),
                (3, "C", "update_postimage", 2),
            ]
        )

    # -- 3. table_changes() in downstream models -----------------------------------------------
    def test_table_changes_after_create_is_empty(self, project, timeline):
        assert timeline["downstream_1"] == {"feed_from_v2": [], "feed_v1_to_v1": [], "feed_v0_to_v2": []}

    def test_table_changes_after_first_merge(self, project, timeline):
        assert timeline["downstream_2"] == {
            "feed_from_v2": [],
            "feed_v1_to_v1": _sorted(V1_CHANGES),
            "feed_v0_to_v2": _sorted(V1_CHANGES),
        }

    def test_table_changes_selects_the_version_range(self, project, timeline):
        assert timeline["downstream_3"] == {
            "feed_from_v2": _sorted(V2_CHANGES),
            "feed_v1_to_v1": _sorted(V1_CHANGES),
            "feed_v0_to_v2": _sorted(V1_CHANGES + V2_CHANGES),
            "custom_from_v0": timeline["custom_changes_after_step3"],
        }

    # -- 5. rowmerge_history -------------------------------------------------------------------
    def test_history_after_create(self, project, timeline):
        lines = timeline["history_after_create"]
        assert lines[0] == HEADER
        assert [split_history(line)[:1] + split_history(line)[2:] for line in lines[1:]] == [
            ("0", "CREATE TABLE", "3", "0", "0", "1", "0")
        ]
        assert re.fullmatch(ISO_UTC, split_history(lines[1])[1]), lines[1]

    def test_history_after_create_and_two_merges(self, project, timeline):
        lines = timeline["history"]
        assert lines[0] == HEADER
        fields = [split_history(line) for line in lines[1:]]
        assert all(len(f) == 8 for f in fields), lines
        for f in fields:
            assert re.fullmatch(ISO_UTC, f[1]), f
        # Newest first. Version 0: the 3 rows in 1 file dbt created. Versions 1 and 2: that
        # file rewritten in one pass, which for a merge this small joins and writes in a single
        # task: one file, inserts included (rewrite.single_task_join).
        assert [f[:1] + f[2:] for f in fields] == [
            ("2", "MERGE", "1", "1", "1", "1", "1"),
            ("1", "MERGE", "1", "1", "1", "1", "1"),
            ("0", "CREATE TABLE", "3", "0", "0", "1", "0"),
        ]
        # The same file counts as the merges' own metrics.
        for step, f in (("step3", fields[0]), ("step2", fields[1])):
            m = metrics(ok(timeline[step], "feed"))
            assert (f[6], f[7]) == (str(m["numTargetFilesAdded"]), str(m["numTargetFilesRemoved"])), (step, m)
        # The timestamps go forward with the versions.
        assert fields[2][1] <= fields[1][1] <= fields[0][1]
        # Exactly these lines: nothing else is logged after the header.
        assert len(lines) == 4, lines

    def test_history_limit(self, project, timeline):
        lines = timeline["history_limit_2"]
        assert lines[0] == HEADER
        assert lines[1:] == timeline["history"][1:3]

    # -- 6. rowmerge_recover -------------------------------------------------------------------
    def test_recover_on_a_healthy_table(self, project, timeline):
        expected = f"rowmerge_recover {project.test_schema}.feed: nothing to recover"
        assert expected in timeline["recover"], "\n".join(timeline["recover"])
        assert timeline["feed_after_recover"] == timeline["feed_after_step3"]

    # -- 4. --full-refresh -----------------------------------------------------------------------
    def test_full_refresh_is_the_next_version_and_says_so_in_the_run_line(self, project, refreshed):
        r = ok(refreshed["refresh"], "feed")
        assert merge_line(r) == "REPLACE TABLE version 3: 3 rows (replacing 3); 6 change rows"
        assert r.adapter_response["version"] == 3
        # Nothing was forgotten: no history-restart line.
        assert "history restarted" not in refreshed["refresh_log"]

    def test_full_refresh_feed_deletes_the_old_rows_and_inserts_the_new(self, project, timeline, refreshed):
        # The table is what a merge of step 2's SELECT into an empty table inserts: the D row
        # is not (delete_condition), as on every run.
        assert refreshed["feed_after_refresh"] == _sorted([(1, "A", "U"), (3, "c", "I"), (4, "d", "I")])
        assert refreshed["changes_after_refresh"] == _sorted(V1_CHANGES + V2_CHANGES + V3_REFRESH)
        assert refreshed["describe_after_refresh"] == timeline["describe_after_create"]
        lines = refreshed["history_after_refresh"]
        assert lines[0] == HEADER
        assert [split_history(line)[0] for line in lines[1:]] == ["3", "2", "1", "0"]
        assert split_history(lines[1])[2:6] == ("REPLACE TABLE", "3", "0", "3")

    def test_merge_after_full_refresh_writes_the_version_after_it(self, project, refreshed):
        r = ok(refreshed["merge"], "feed")
        assert r.adapter_response["version"] == 4
        assert merge_line(r) == "MERGE 1 updated, 1 inserted, 1 deleted; 1 of 1 files rewritten"
        assert refreshed["feed_after_merge"] == _sorted([(3, "c", "I"), (4, "D", "U"), (5, "e", "I")])
        v4 = [
            (4, "d", "I", "update_preimage", 4),
            (4, "D", "U", "update_postimage", 4),
            (1, "A", "U", "delete", 4),
            (5, "e", "I", "insert", 4),
        ]
        assert refreshed["changes_after_merge"] == _sorted(V1_CHANGES + V2_CHANGES + V3_REFRESH + v4)
        fields = [split_history(line) for line in refreshed["history_after_merge"][1:]]
        assert [(f[0], f[2]) for f in fields][:2] == [("4", "MERGE"), ("3", "REPLACE TABLE")]


# -- 7. bad config ---------------------------------------------------------------------------------


# name -> (bad config, good config, expected message; {prefix} is
# "Invalid row_level_merge config for <relation>: ")
BAD = {
    "cdf_number": (
        "unique_key='id', change_data_feed=5",
        "unique_key='id', change_data_feed=true",
        "{prefix}`change_data_feed` must be true, false or the name of the change table, got 5",
    ),
    "cdf_list": (
        "unique_key='id', change_data_feed=['x']",
        "unique_key='id', change_data_feed=true",
        "{prefix}`change_data_feed` must be true, false or the name of the change table, got ['x']",
    ),
    "cdf_comment": (
        "unique_key='id', change_data_feed='c -- feed'",
        "unique_key='id', change_data_feed=true",
        "c -- feed' is not a valid name for a new table: it is not a table name (unexpected ' -- feed'; "
        "write db.table, and back-quote parts with other characters)",
    ),
    "lock_negative": (
        "unique_key='id', lock_timeout_s=-1",
        "unique_key='id', change_data_feed=false",
        "{prefix}`lock_timeout_s` must be a finite number of seconds >= 0, got -1",
    ),
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


class TestBadChangeFeedConfig:
    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": bad_model(bad, good) for name, (bad, good, _) in BAD.items()}

    @pytest.fixture(scope="class")
    def runs(self, project) -> dict[str, Any]:
        s: dict[str, Any] = {}
        s["first"] = by_name(run_dbt(["run", "--vars", "{bad: true}"], expect_pass=False))
        s["exists_after_first"] = {
            n: (table_exists(project, n), table_exists(project, f"{n}__changes")) for n in BAD
        }
        good = by_name(run_dbt(["run"]))
        assert {n: r.status for n, r in good.items()} == {n: "success" for n in BAD}
        s["exists_after_good"] = {
            n: (table_exists(project, n), table_exists(project, f"{n}__changes")) for n in BAD
        }
        s["incremental"] = by_name(run_dbt(["run", "--vars", "{bad: true}"], expect_pass=False))
        s["after"] = {n: (column_names(project, n), rows(project, n)) for n in BAD}
        s["changes_after"] = {n: rows(project, f"{n}__changes") for n in BAD if s["exists_after_good"][n][1]}
        return s

    @staticmethod
    def expected(project, name: str) -> str:
        rel = f"{project.test_schema}.{name}"
        return _one_line(BAD[name][2].format(prefix=PREFIX.format(rel=rel)))

    @pytest.mark.parametrize("name", sorted(BAD))
    def test_fails_on_first_run_and_creates_nothing(self, project, runs, name):
        r = runs["first"][name]
        assert r.status == "error", f"{name}: expected a config error, got {r.status}"
        assert self.expected(project, name) in _one_line(r.message), r.message
        assert runs["exists_after_first"][name] == (False, False)

    def test_good_config_creates_the_change_table_only_with_change_data_feed(self, project, runs):
        assert runs["exists_after_good"] == {
            "cdf_number": (True, True),
            "cdf_list": (True, True),
            "cdf_comment": (True, True),
            "lock_negative": (True, False),
        }

    @pytest.mark.parametrize("name", sorted(BAD))
    def test_fails_on_incremental_run_and_changes_nothing(self, project, runs, name):
        r = runs["incremental"][name]
        assert r.status == "error", f"{name}: expected a config error, got {r.status}"
        assert self.expected(project, name) in _one_line(r.message), r.message
        assert runs["after"][name] == (["id", "name"], GOOD_ROWS)
        if name in runs["changes_after"]:
            assert runs["changes_after"][name] == []
