"""Small helpers shared by the functional tests (model text, result lookup, table reads)."""

from __future__ import annotations

from typing import Any

from dbt.tests.util import run_dbt


def incremental_model(config: str, step1: str, step2: str, step3: str | None = None) -> str:
    """An incremental row_level_merge model whose SELECT switches on ``var('step')``.

    ``config`` is extra ``config()`` arguments (Jinja/Python syntax), e.g. ``unique_key='id'``.
    """
    text = (
        "{{ config(materialized='incremental', incremental_strategy='row_level_merge', "
        + config
        + ") }}\n"
        + "{% if var('step', 1) == 1 %}\n"
        + step1.strip()
        + "\n"
    )
    if step3 is not None:
        text += "{% elif var('step', 1) == 2 %}\n" + step2.strip() + "\n{% else %}\n" + step3.strip() + "\n"
    else:
        text += "{% else %}\n" + step2.strip() + "\n"
    return text + "{% endif %}\n"


def values(columns: str, *rows: str) -> str:
    """``select * from values ...`` written as ONE file (REPARTITION(1)) so file counts are exact."""
    return f"select /*+ REPARTITION(1) */ * from values {', '.join(rows)} as t({columns})"


def by_name(results: Any) -> dict[str, Any]:
    """Run results keyed by node name."""
    return {r.node.name: r for r in results}


def run_step(step: int, *args: str, expect_pass: bool = True) -> dict[str, Any]:
    """``dbt run --vars {step: N}`` (plus ``args``); results keyed by node name."""
    return by_name(run_dbt(["run", "--vars", f"{{step: {step}}}", *args], expect_pass=expect_pass))


def table(project: Any, name: str) -> str:
    return f"{project.test_schema}.{name}"


def rows(project: Any, name: str, columns: str = "*") -> list[tuple[Any, ...]]:
    """Every row of the model's table as tuples, sorted (stable for mixed None values)."""
    fetched = project.run_sql(f"select {columns} from {table(project, name)}", fetch="all")
    return sorted((tuple(r) for r in fetched), key=repr)


def expect_rows(project: Any, name: str, expected: list[tuple[Any, ...]], columns: str = "*") -> None:
    actual = rows(project, name, columns)
    assert actual == sorted(expected, key=repr), (
        f"{name}: rows differ\nactual:   {actual}\nexpected: {expected}"
    )


def column_names(project: Any, name: str) -> list[str]:
    """The table's columns in order, as the catalog reports them."""
    described = project.run_sql(f"describe table {table(project, name)}", fetch="all")
    out: list[str] = []
    for r in described:
        if not r[0] or r[0].startswith("#"):
            break
        out.append(r[0])
    return out


def table_property(project: Any, name: str, key: str) -> str | None:
    """A field of ``describe table extended`` (e.g. Provider, Type, Location)."""
    for r in project.run_sql(f"describe table extended {table(project, name)}", fetch="all"):
        if r[0] == key:
            return r[1]
    return None


def table_exists(project: Any, name: str) -> bool:
    found = project.run_sql(f"show tables in {project.test_schema} like '{name}'", fetch="all")
    return any(r[1] == name for r in found)


def merge_line(result: Any) -> str:
    return result.adapter_response.get("_message", "")


def metrics(result: Any) -> dict[str, int]:
    return result.adapter_response.get("metrics", {})


def counts(result: Any) -> tuple[int, int, int]:
    """(updated, inserted, deleted) from the adapter response metrics."""
    m = metrics(result)
    return (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"])


def ok(results: dict[str, Any], name: str) -> Any:
    """The named model's result, asserting it succeeded (showing dbt's message if not)."""
    r = results[name]
    assert r.status == "success", f"{name}: {r.status}: {r.message}"
    return r


# -- bad-config models: the same model with a good config and, under var `bad`, a bad one ----
PREFIX = "Invalid row_level_merge config for {rel}: "
GOOD_ROWS = [(1, "a"), (2, "b")]


def bad_model(bad: str, good: str = "unique_key='id'") -> str:
    """Good config (var `bad` false) writes GOOD_ROWS; bad config (var `bad` true) must fail."""
    base = "materialized='incremental', incremental_strategy='row_level_merge', "
    return (
        "{% if var('bad', false) %}\n"
        + "{{ config("
        + base
        + bad
        + ") }}\n"
        + values("id, name", "(2, 'B')", "(3, 'c')")
        + "\n{% else %}\n"
        + "{{ config("
        + base
        + good
        + ") }}\n"
        + values("id, name", "(1, 'a')", "(2, 'b')")
        + "\n{% endif %}\n"
    )
