"""Time travel from dbt: a model's `retain_versions` keeps the files its merges replace,
`dbt run-operation rowmerge_restore` brings a version's rows back (the model's unique_key
pairing changed rows into updates in its change feed), and a model selects from
`{{ rowmerge_as_of(ref(...), N) }}`; a `--full-refresh` keeps the table it replaces as a
merge keeps the files it replaces (by default, or as the model's retention says); bad
retention config is refused naming the key."""

from __future__ import annotations

import re

from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

from tests.functional.helpers import incremental_model, ok, rows, run_step, table, values

STEP1 = values("id, name", "(1, 'a')", "(2, 'b')")
STEP2 = values("id, name", "(1, 'x')", "(3, 'c')")
STEP3 = values("id, name", "(2, 'y')")
MODEL = "unique_key='id', retain_versions=5, change_data_feed=true, auto_compact=false"


def _three_runs(project) -> None:
    write_file(incremental_model(MODEL, STEP1, STEP2, STEP3), project.project_root, "models", "orders.sql")
    for step in (1, 2, 3):
        ok(run_step(step), "orders")


class TestRestoreOperation:
    def test_restore_brings_back_a_version_and_feeds_the_difference(self, project):
        _three_runs(project)
        relation = table(project, "orders")
        assert rows(project, "orders") == [(1, "x"), (2, "y"), (3, "c")]
        _, dry = run_dbt_and_capture(
            [
                "run-operation",
                "rowmerge_restore",
                "--args",
                f"{{relation: {relation}, version: 0, dry_run: true}}",
            ]
        )
        assert f"rowmerge_restore {relation}: {relation}: would restore the rows of version 0" in dry
        assert rows(project, "orders") == [(1, "x"), (2, "y"), (3, "c")]
        _, output = run_dbt_and_capture(
            ["run-operation", "rowmerge_restore", "--args", f"{{relation: {relation}, version: 0}}"]
        )
        assert re.search(
            rf"{re.escape(relation)}: restored the rows of version 0 as version 3: 1 file\(s\) back, "
            r"\d+ out; 1 row\(s\) deleted, 0 inserted, 2 updated",
            output,
        ), output
        assert rows(project, "orders") == [(1, "a"), (2, "b")]
        # history says which version a RESTORE brought back
        history_args = ["run-operation", "rowmerge_history", "--args", f"{{relation: {relation}}}"]
        _, logged = run_dbt_and_capture(history_args)
        assert re.search(r"\b3 \| [^|]+ \| RESTORE \(to version 0\) \| ", logged), logged
        # read unfiltered: the metastore cannot take a filter on _commit_version (see
        # test_change_feed_and_history.py)
        feed = project.run_sql(
            f"select id, name, _change_type, _commit_version from {relation}__changes", fetch="all"
        )
        assert sorted(tuple(r)[:3] for r in feed if r[3] == 3) == [
            (1, "a", "update_postimage"),
            (1, "x", "update_preimage"),
            (2, "b", "update_postimage"),
            (2, "y", "update_preimage"),
            (3, "c", "delete"),
        ]
        # and the model merges on
        ok(run_step(2), "orders")
        assert rows(project, "orders") == [(1, "x"), (2, "b"), (3, "c")]
        # the latest version, asked by the table's name as text
        write_file(
            "{{ config(materialized='table') }}\n"
            f"select {{{{ rowmerge_latest_version('{relation}') }}}} as v",
            project.project_root,
            "models",
            "latest.sql",
        )
        run_dbt(["run", "--select", "latest"])
        assert rows(project, "latest") == [(4,)]


class TestAsOfMacro:
    def test_a_model_selects_from_an_earlier_version(self, project):
        _three_runs(project)
        write_file(
            "{{ config(materialized='table') }}\nselect id, name from {{ rowmerge_as_of(ref('orders'), 1) }}",
            project.project_root,
            "models",
            "orders_at_1.sql",
        )
        run_dbt(["run", "--select", "orders_at_1"])
        assert rows(project, "orders_at_1") == [(1, "x"), (2, "b"), (3, "c")]


class TestFullRefreshRetention:
    def test_a_refresh_is_undone_unless_the_model_turned_retention_off(self, project):
        # Both models are refreshed right after their first run: version 0 records no policy.
        for name, extra in (("kept", ""), ("off", ", retain_versions=0, retain_hours=0")):
            model = incremental_model(f"unique_key='id', auto_compact=false{extra}", STEP1, STEP2)
            write_file(model, project.project_root, "models", f"{name}.sql")
        ok(run_step(1), "kept")
        results = run_step(2, "--full-refresh")
        assert [ok(results, n).adapter_response["code"] for n in ("kept", "off")] == ["REPLACE TABLE"] * 2
        for name in ("kept", "off"):
            assert rows(project, name) == [(1, "x"), (3, "c")]

        restore = ["run-operation", "rowmerge_restore", "--args"]
        _, output = run_dbt_and_capture([*restore, f"{{relation: {table(project, 'kept')}, version: 0}}"])
        assert "restored the rows of version 0 as version 2" in output, output
        assert rows(project, "kept") == [(1, "a"), (2, "b")]
        _, refused = run_dbt_and_capture(
            [*restore, f"{{relation: {table(project, 'off')}, version: 0}}"], expect_pass=False
        )
        assert "Version 0 of" in refused and "can no longer be read" in refused, refused
        assert rows(project, "off") == [(1, "x"), (3, "c")]


class TestBadRetentionConfig:
    def test_refused_naming_the_key(self, project):
        write_file(
            incremental_model("unique_key='id', retain_versions=-1", STEP1, STEP2),
            project.project_root,
            "models",
            "orders.sql",
        )
        _, output = run_dbt_and_capture(["run", "--vars", "{step: 1}"], expect_pass=False)
        assert "`retain_versions` must be a whole number >= 0, got -1" in output


class TestVacuumOperation:
    def test_vacuum_deletes_what_a_shorter_retention_no_longer_keeps(self, project):
        _three_runs(project)
        relation = table(project, "orders")
        _, dry = run_dbt_and_capture(
            [
                "run-operation",
                "rowmerge_vacuum",
                "--args",
                f"{{relation: {relation}, retain_versions: 1, force: true, dry_run: true}}",
            ]
        )
        assert re.search(
            rf"rowmerge_vacuum {re.escape(relation)}: {re.escape(relation)}: would delete \d+ retained "
            r"file\(s\), \d+ bytes, of 1 version\(s\) and 2 journal entries \(folded into the base of "
            r"version 1\); versions from 1 on can be read",
            dry,
        ), dry
        assert "_rowmerge_log/retained/00000000000000000001/" in dry
        sizes = r"bytes: [1-9]\d* of retained files, [1-9]\d* of journal files, 0 of change-feed files"
        assert re.search(sizes, dry), dry
        # unforced, the files of versions current within the hour are refused
        _, refused = run_dbt_and_capture(
            ["run-operation", "rowmerge_vacuum", "--args", f"{{relation: {relation}, retain_versions: 1}}"],
            expect_pass=False,
        )
        assert "refused: it would delete the files of version(s) 0" in refused and "force: true" in refused
        _, output = run_dbt_and_capture(
            [
                "run-operation",
                "rowmerge_vacuum",
                "--args",
                f"{{relation: {relation}, retain_versions: 1, force: true}}",
            ]
        )
        assert re.search(
            r"deleted \d+ retained file\(s\), \d+ bytes, of 1 version\(s\) and 2 journal entries "
            r"\(folded into the base of version 1\) as version 3",
            output,
        ), output
        assert rows(project, "orders") == [(1, "x"), (2, "y"), (3, "c")]
        # version 1 still restores; version 0 is gone
        _, gone = run_dbt_and_capture(
            ["run-operation", "rowmerge_restore", "--args", f"{{relation: {relation}, version: 0}}"],
            expect_pass=False,
        )
        assert "Every version from 1 on can be read" in gone
        run_dbt(["run-operation", "rowmerge_restore", "--args", f"{{relation: {relation}, version: 1}}"])
        assert rows(project, "orders") == [(1, "x"), (2, "b"), (3, "c")]


class TestOperationsAsAUserSpellsThem:
    """A relation spelled another way still finds its model (its unique_key pairs a restore's
    updates); a run-operation's bad argument is named as the operation's; a quoted "false"
    is false for the macro as for the operation."""

    def test_spellings_arguments_and_quoted_flags(self, project):
        _three_runs(project)
        relation = table(project, "orders")
        for spelled in (relation.upper(), f"spark_catalog.{relation}"):
            args = f"{{relation: {spelled}, version: 0, dry_run: true}}"
            _, dry = run_dbt_and_capture(["run-operation", "rowmerge_restore", "--args", args])
            # paired by the model's unique_key: 2 updated (without it: 3 deleted, 2 inserted)
            assert "1 row(s) deleted, 0 inserted, 2 updated" in dry, dry
        for limit in ('"2"', "0"):
            _, said = run_dbt_and_capture(
                ["run-operation", "rowmerge_history", "--args", f"{{relation: {relation}, limit: {limit}}}"],
                expect_pass=False,
            )
            wanted = f"Invalid rowmerge_history arguments for {relation}: `limit` must be a whole number >= 1"
            assert wanted in said, said
        _, said = run_dbt_and_capture(
            ["run-operation", "rowmerge_restore", "--args", f"{{relation: {relation}, version: '1'}}"],
            expect_pass=False,
        )
        wanted = f"Invalid rowmerge_restore arguments for {relation}: `version` must be a whole number >= 0"
        assert wanted in said, said
        _, said = run_dbt_and_capture(
            ["run-operation", "rowmerge_restore", "--args", f"{{relation: {relation}, versoin: 1}}"],
            expect_pass=False,
        )
        assert "rowmerge_restore takes no argument `versoin` (did you mean `version`?); its arguments" in said
        assert rows(project, "orders") == [(1, "x"), (2, "y"), (3, "c")]
        _, vacuumed = run_dbt_and_capture(
            [
                "run-operation",
                "rowmerge_vacuum",
                "--args",
                f'{{relation: {relation}, retain_versions: 1, force: true, dry_run: "false"}}',
            ]
        )
        assert "bytes:" not in vacuumed, vacuumed  # a real vacuum prints no dry run's listing
        assert "as version 3" in vacuumed, vacuumed

    def test_history_of_a_table_without_a_journal_says_so(self, project):
        model = "{{ config(materialized='table') }}\nselect 1 as id"
        write_file(model, project.project_root, "models", "plain.sql")
        run_dbt(["run", "--select", "plain"])
        relation = table(project, "plain")
        args = f"{{relation: {relation}}}"
        _, said = run_dbt_and_capture(["run-operation", "rowmerge_history", "--args", args])
        assert f"(no versions: {relation} has no rowmerge journal" in said, said
