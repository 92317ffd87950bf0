"""A row_level_merge model's contract: not_null and check constraints are enforced by the
engine on every row a merge (or the first run) writes; a violation fails the run naming the
constraint and a sample key, and the table is left exactly as it was (or not created)."""

from __future__ import annotations

import pytest
from dbt.tests.util import run_dbt

from tests.functional.helpers import (
    by_name,
    expect_rows,
    incremental_model,
    ok,
    run_step,
    table_exists,
    values,
)

CONFIG = "unique_key='id', on_schema_change='fail'"
GOOD = values("id, qty, note", "(1, 5, 'a')", "(2, 7, 'b')")

MODELS = {
    "guarded.sql": incremental_model(
        CONFIG,
        GOOD,
        # step 2: an insert with a NULL in a not_null column
        values("id, qty, note", "(3, 1, cast(null as string))", "(4, 1, 'd')"),
        # step 3: an update that breaks the check
        values("id, qty, note", "(2, -1, 'b')", "(5, 1, 'e')"),
    ),
    # Bad from the start: the first run must not create the table.
    "bad_first.sql": incremental_model(CONFIG, values("id, qty, note", "(1, -5, 'a')", "(2, -1, 'b')"), GOOD),
    # The contract is enforced from step 2 on: a row written before breaks the check, and a
    # merge that only copies it (same file as the updated row) does not re-check it.
    "copied.sql": incremental_model(
        CONFIG + ", contract={'enforced': var('step', 1) == 2}",
        values("id, qty, note", "(1, 5, 'a')", "(2, -7, 'b')"),
        values("id, qty, note", "(1, 6, 'a')"),
    ),
}


SCHEMA_YML = "version: 2\nmodels:\n" + "".join(
    f"""  - name: {name}
    config:
      contract:
        enforced: true
    columns:
      - name: id
        data_type: int
        constraints:
          - type: not_null
      - name: qty
        data_type: int
        constraints:
          - type: check
            name: qty_not_negative
            expression: "qty >= 0"
      - name: note
        data_type: string
    constraints:
      - type: not_null
        columns: [note]
"""
    for name in ("guarded", "bad_first")
)
SCHEMA_YML += """  - name: copied
    columns:
      - name: id
        data_type: int
      - name: qty
        data_type: int
        constraints:
          - type: check
            expression: "qty >= 0"
      - name: note
        data_type: string
"""


class TestContractConstraints:
    @pytest.fixture(scope="class")
    def models(self):
        return {**MODELS, "schema.yml": SCHEMA_YML}

    @pytest.fixture(scope="class")
    def first(self, project):
        return run_step(1, expect_pass=False)

    def test_first_run_creates_the_table_with_its_journal(self, project, first):
        ok(first, "guarded")
        expect_rows(project, "guarded", [(1, 5, "a"), (2, 7, "b")])
        history = project.run_sql(f"describe table extended {project.test_schema}.guarded", fetch="all")
        assert history  # created, no ALTER TABLE failed after it

    def test_first_run_violation_creates_nothing(self, project, first):
        r = first["bad_first"]
        assert r.status == "error"
        message = " ".join(r.message.split())
        assert (
            f"{project.test_schema}.bad_first was not created: 2 row(s) of the model violate constraint "
            "check qty_not_negative (qty >= 0) (first: id=" in message
        ), message
        assert not table_exists(project, "bad_first")

    def test_insert_violating_not_null_fails_and_changes_nothing(self, project, first):
        r = run_step(2, "--select", "guarded", expect_pass=False)["guarded"]
        assert r.status == "error"
        message = " ".join(r.message.split())
        assert (
            f"MERGE into {project.test_schema}.guarded failed: a row it writes violates constraint "
            "not_null(note) (first: id=3). Nothing was changed." in message
        ), message
        expect_rows(project, "guarded", [(1, 5, "a"), (2, 7, "b")])

    def test_update_violating_check_fails_and_changes_nothing(self, project, first):
        r = run_step(3, "--select", "guarded", expect_pass=False)["guarded"]
        assert r.status == "error"
        message = " ".join(r.message.split())
        assert (
            f"MERGE into {project.test_schema}.guarded failed: a row it writes violates constraint "
            "check qty_not_negative (qty >= 0) (first: id=2)." in message
        ), message
        expect_rows(project, "guarded", [(1, 5, "a"), (2, 7, "b")])

    def test_copied_rows_are_not_rechecked(self, project, first):
        ok(first, "copied")
        results = by_name(run_dbt(["run", "--vars", "{step: 2}", "--select", "copied"]))
        assert ok(results, "copied").adapter_response["_message"].startswith("MERGE 1 updated, 0 inserted")
        expect_rows(project, "copied", [(1, 6, "a"), (2, -7, "b")])
