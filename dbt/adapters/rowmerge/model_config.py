"""Every rule about a row_level_merge model config, in one place (plain Python, no dbt).

The macros under ``macros/row_level_merge/`` only *compile*: they turn the model config into
the clause spec without judging it. This module judges: :func:`config_problems` checks the
config keys (their types, which may be combined, whether named columns exist), and
:func:`problems` adds the engine's own static checks of the compiled spec, so a dbt user and
a Python caller of the engine read the same messages. The adapter calls it once per compiled
spec and raises one error naming the relation (:func:`error_message`).

Adding a shorthand key: a row in :data:`KEYS`, a macro in ``clause_spec.sql`` that compiles
it, and their tests. Defaults the macros need (aliases, the change table's suffix) come from
:data:`DEFAULTS` through ``adapter.rowmerge_defaults()``, so they are written once.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dbt.adapters.rowmerge.merge.errors import MergeSpecError
from dbt.adapters.rowmerge.merge.feed_range import parse_timestamp
from dbt.adapters.rowmerge.merge.spec import (
    DEFAULT_SKIP_UNCHANGED_UPDATES,
    DEFAULT_SOURCE_ALIAS,
    DEFAULT_TARGET_ALIAS,
    SPEC_VERSION,
    UPKEEP_KEYS,
    MergeSpec,
    lock_timeout_problems,
    parse_spec,
    parse_upkeep,
)

STRATEGY = "row_level_merge"
FILE_FORMATS = ("parquet", "orc")
TABLE_FORMATS_WITH_MERGE = ("delta", "iceberg", "hudi")

DEFAULTS: dict[str, Any] = {
    "spec_version": SPEC_VERSION,
    "skip_unchanged_updates": DEFAULT_SKIP_UNCHANGED_UPDATES,
    "target_alias": DEFAULT_TARGET_ALIAS,
    "source_alias": DEFAULT_SOURCE_ALIAS,
    # change_data_feed: true -> this suffix on the model's name, in the model's schema
    "changes_suffix": "__changes",
}


@dataclass(frozen=True)
class Key:
    """One config key: the shape its value must have, and whether it is a clause shorthand
    (which cannot be mixed with ``merge_clauses``)."""

    kind: str  # list, strings (list of non-empty strings), bool, choice, key, feed, any
    shorthand: bool = False
    choices: tuple[str, ...] = ()


KEYS: dict[str, Key] = {
    "unique_key": Key("key"),
    "incremental_predicates": Key("strings"),
    "predicates": Key("strings"),  # dbt's older name of incremental_predicates
    "merge_clauses": Key("list"),
    "delete_condition": Key("any", shorthand=True),
    "matched_condition": Key("any", shorthand=True),
    "merge_update_columns": Key("strings", shorthand=True),
    "merge_exclude_columns": Key("strings", shorthand=True),
    "skip_matched_step": Key("bool", shorthand=True),
    "not_matched_condition": Key("any", shorthand=True),
    "skip_not_matched_step": Key("bool", shorthand=True),
    "not_matched_by_source_action": Key("choice", shorthand=True, choices=("delete", "update")),
    "not_matched_by_source_condition": Key("any", shorthand=True),
    "not_matched_by_source_set": Key("any", shorthand=True),
    "change_data_feed": Key("feed"),
    # a full refresh writes its change rows (old rows deleted, new inserted); false: none, and
    # table_changes refuses a range across it (the macros read it)
    "change_data_feed_on_replace": Key("bool"),
    # plan the merge and report what it would do, writing nothing (the macros read it)
    "dry_run": Key("bool"),
}
SHORTHAND = tuple(k for k, rule in KEYS.items() if rule.shorthand)
# Config keys the macros copy into the spec unchanged (parse_spec judges their values).
SPEC_KEYS = (
    "target_alias",
    "source_alias",
    "skip_unchanged_updates",
    "lock_timeout_s",
    "allow_empty_source",
    "max_delete_fraction",
    *UPKEEP_KEYS,  # table upkeep (optimize.py)
)
# dbt's and dbt-spark's own config keys: never taken for a misspelling of ours.
DBT_KEYS = frozenset(
    """
    alias batch_size begin buckets check_cols clustered_by column_types concurrent_batches contract
    database dbt_valid_to_current docs enabled event_time file_format full_refresh grants group
    incremental_strategy location_root lookback materialized meta on_configuration_change
    on_schema_change options packages partition_by persist_docs post-hook pre-hook post_hook pre_hook
    quoting schema sql_header strategy tags target_database target_schema tblproperties unique_key
    updated_at access
    """.split()
)
# How close (difflib ratio) an unknown key must be to one of ours to be called a misspelling.
MISSPELLING_CUTOFF = 0.8


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _shape_problem(key: str, rule: Key, value: Any) -> str | None:
    """What is wrong with the value's shape, or None (the value is not None here)."""
    if rule.kind == "list" and not _is_list(value):
        return f"`{key}` must be a list, got {value!r}"
    if rule.kind == "list" and not value:
        return f"`{key}` is an empty list: give at least one entry, or leave the key out"
    if rule.kind == "strings" and not (_is_list(value) and all(_is_name(v) for v in value)):
        return f"`{key}` must be a list of strings, got {value!r}"
    if rule.kind == "bool" and not isinstance(value, bool):
        return f"`{key}` must be true or false, got {value!r}"
    if rule.kind == "choice" and value not in rule.choices:
        allowed = " or ".join(f"'{c}'" for c in rule.choices)
        return f"`{key}` must be {allowed}, got {value!r}"
    names = _is_list(value) and all(map(_is_name, value))
    if rule.kind == "key" and value and not (_is_name(value) or names):
        return f"`{key}` must be a column name or a list of column names, got {value!r}"
    if rule.kind == "feed" and not (isinstance(value, bool) or _is_name(value)):
        return f"`{key}` must be true, false or the name of the change table, got {value!r}"
    return None


def _keys(value: Any) -> list[Any]:
    """unique_key as a list of its non-empty names ('' and [] mean no key, as in dbt)."""
    if value is None:
        return []
    values = list(value) if _is_list(value) else [value]
    return [v for v in values if not (isinstance(v, str) and v.strip() == "")]


def _set(config: Mapping[str, Any], key: str) -> bool:
    """A key counts as set when it has a value (dbt passes unset keys as None)."""
    return config.get(key) is not None


def config_problems(
    config: Mapping[str, Any], relation: str, columns: Sequence[str] | None = None
) -> list[str]:
    """Problems of the model config itself. ``columns``: the target's columns once it exists
    (None on the first run: column names are then checked at the first merge)."""
    problems: list[str] = []
    file_format = config.get("file_format") or "parquet"
    if file_format in TABLE_FORMATS_WITH_MERGE:
        problems.append(
            f"Invalid incremental strategy for file_format '{file_format}': {STRATEGY} is for plain "
            f"Parquet/ORC tables. A {file_format} table has MERGE INTO built in: use "
            "incremental_strategy='merge' (dbt-spark's own merge) for it."
        )
    elif file_format not in FILE_FORMATS:
        problems.append(
            f"Invalid file_format '{file_format}' for incremental_strategy='{STRATEGY}': set "
            "file_format to 'parquet' (the default) or 'orc'."
        )

    problems += misspelled_keys(config)
    for key, rule in KEYS.items():
        if _set(config, key):
            shape = _shape_problem(key, rule, config[key])
            if shape:
                problems.append(shape)

    if _set(config, "merge_clauses"):
        mixed = [k for k in SHORTHAND if _set(config, k)]
        if mixed:
            problems.append(
                f"`merge_clauses` cannot be combined with the shorthand key(s) {', '.join(mixed)}; "
                "write those clauses into merge_clauses instead"
            )
    # Without a unique_key nothing matches (`on` is FALSE): every source row is inserted, as in
    # dbt's own merge. Clauses other than the plain insert would then be meaningless (a matched
    # clause never acts, a not_matched_by_source clause acts on every row): refused.
    if not _keys(config.get("unique_key")) and (
        _set(config, "merge_clauses") or any(_set(config, k) for k in SHORTHAND)
    ):
        problems.append(
            f"`unique_key` is required for incremental_strategy='{STRATEGY}' (it builds the merge "
            "`on` condition; with merge_clauses too)"
        )
    if config.get("predicates") and config.get("incremental_predicates"):
        if list(config["predicates"]) != list(config["incremental_predicates"]):
            problems.append(
                "`predicates` and `incremental_predicates` are both set, to different lists; they are "
                "one setting (`predicates` is its older name): keep incremental_predicates"
            )
    if config.get("merge_update_columns") and config.get("merge_exclude_columns"):
        problems.append("`merge_update_columns` and `merge_exclude_columns` cannot both be set; use one")

    action = config.get("not_matched_by_source_action")
    if action == "update" and not config.get("not_matched_by_source_set"):
        problems.append(
            "`not_matched_by_source_action`='update' needs `not_matched_by_source_set` (a mapping of "
            "target column to SQL expression)"
        )
    if action is None:
        for key in ("not_matched_by_source_condition", "not_matched_by_source_set"):
            if _set(config, key):
                problems.append(
                    f"`{key}` has no effect without `not_matched_by_source_action` ('delete' or 'update')"
                )
    if action == "delete" and _set(config, "not_matched_by_source_set"):
        problems.append(
            "`not_matched_by_source_set` has no effect with `not_matched_by_source_action`='delete' "
            "(a deleted row takes no values); remove it, or set the action to 'update'"
        )
    # A condition on a step that is skipped would be dropped without a word (merge_update_columns
    # and merge_exclude_columns are not refused there: projects set them for every model).
    for skip, key in (
        ("skip_matched_step", "matched_condition"),
        ("skip_not_matched_step", "not_matched_condition"),
    ):
        if config.get(skip) is True and _set(config, key):
            problems.append(
                f"`{key}` has no effect with `{skip}`: true (that clause is not run); remove one of them"
            )
    if (
        config.get("skip_matched_step") is True
        and config.get("skip_not_matched_step") is True
        and action is None
        and not config.get("delete_condition")
    ):
        problems.append("`skip_matched_step` and `skip_not_matched_step` together leave no clause to run")

    if columns is not None and not problems:
        problems += _column_problems(config, relation, columns)
    return problems


def misspelled_keys(config: Mapping[str, Any]) -> list[str]:
    """Keys that are not ours but look like one of ours: dbt keeps an unknown key as custom
    config without a word, so a typo (``delete_conditon``) would silently change the merge."""
    ours = [*KEYS, *SPEC_KEYS]
    problems = []
    for key in sorted(str(k) for k in config):
        if key in ours or key in DBT_KEYS:
            continue
        close = difflib.get_close_matches(key, ours, n=1, cutoff=MISSPELLING_CUTOFF)
        if close:
            problems.append(
                f"`{key}` is not a {STRATEGY} config key (did you mean `{close[0]}`?); as written "
                "dbt keeps it as custom config and the merge ignores it"
            )
    return problems


def strategy_problem(strategy: str, valid: Sequence[str]) -> str | None:
    """dbt-spark's unknown-strategy message, listing this adapter's strategies (with
    row_level_merge) and the closest one, after dbt-core's own sentence (which dbt's adapter
    suite looks for)."""
    if strategy in valid:
        return None
    listed = ", ".join(f"'{s}'" for s in valid)
    close = difflib.get_close_matches(strategy, list(valid), n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (
        f"Invalid incremental strategy provided: {strategy}\n    Expected one of: {listed}{hint}\n    "
        f'(dbt could not find an incremental strategy macro with the name "get_incremental_{strategy}_sql")'
    )


def _column_problems(config: Mapping[str, Any], relation: str, columns: Sequence[str]) -> list[str]:
    """Key and update/exclude column lists against the table's columns (the model's on the
    first run; case-insensitive, as Spark)."""
    problems = []
    known = {c.lower() for c in columns}
    for name in _keys(config.get("unique_key")):
        if isinstance(name, str) and name.strip("`").lower() not in known:
            problems.append(
                f"`unique_key` names column '{name}', which {relation} does not have "
                f"(columns: {', '.join(columns)}); name the key column(s) as the model's SQL selects them"
            )
    if config.get("skip_matched_step"):
        return problems
    for key in ("merge_update_columns", "merge_exclude_columns"):
        for name in config.get(key) or ():
            if str(name).lower() not in known:
                problems.append(
                    f"`{key}` names column '{name}', which {relation} does not have "
                    f"(columns: {', '.join(columns)})"
                )
    excluded = {str(c).lower() for c in config.get("merge_exclude_columns") or ()}
    if excluded and not problems and known <= excluded:
        problems.append("`merge_exclude_columns` excludes every column; use skip_matched_step instead")
    return problems


def check(
    spec: Mapping[str, Any], config: Mapping[str, Any], relation: str, columns: Sequence[str] | None = None
) -> MergeSpec:
    """The parsed spec of a model, or MergeSpecError listing everything wrong with its config
    or, once the config is valid, with the spec compiled from it (a spec compiled from a
    broken config would repeat the same problem in the engine's words)."""
    found = config_problems(config, relation, columns)
    if found:
        raise MergeSpecError(found)
    return parse_spec(spec)


def problems(
    spec: Mapping[str, Any], config: Mapping[str, Any], relation: str, columns: Sequence[str] | None = None
) -> list[str]:
    """What :func:`check` would report (empty = valid)."""
    try:
        check(spec, config, relation, columns)
    except MergeSpecError as exc:
        return exc.problems
    return []


def unknown_arguments(operation: str, given: Sequence[str], known: Sequence[str]) -> str | None:
    """What a run-operation says of arguments it does not take (None if there are none): each
    named, with the closest of its own where one is near, and the whole list it takes."""
    unknown = [g for g in given if g not in known]
    if not unknown:
        return None
    said = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=MISSPELLING_CUTOFF)
        said.append(f"`{name}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
    return f"{operation} takes no argument {', '.join(said)}; its arguments are " + ", ".join(
        f"`{k}`" for k in known
    )


def snapshot_problems(config: Mapping[str, Any]) -> list[str]:
    """Problems of the keys a snapshot takes from its config (the upkeep keys, lock_timeout_s),
    judged on every run, the first too: its merge judges them again from the second run on, by
    which time a bad value would have been with the table since it was created. (A cluster_by
    column's existence is left to the merge: the table's columns are dbt's to build.)"""
    problems: list[str] = []
    parse_upkeep({k: config.get(k) for k in UPKEEP_KEYS if config.get(k) is not None}, problems)
    if config.get("lock_timeout_s") is not None:
        problems += lock_timeout_problems(config.get("lock_timeout_s"))
    return problems


def error_message(relation: str, found: Sequence[str], what: str | None = None) -> str:
    """One format for every config error a dbt user sees; ``what``: what was wrong when it
    was not a model's config (a run-operation's arguments: ``rowmerge_vacuum arguments``)."""
    what = what or f"{STRATEGY} config"
    if len(found) == 1:
        return f"Invalid {what} for {relation}: {found[0]}"
    listed = "\n  - ".join(found)
    return f"Invalid {what} for {relation} ({len(found)} problems):\n  - {listed}"


def version_range_problem(start: Any, end: Any, start_ts: Any = None, end_ts: Any = None) -> str | None:
    """What is wrong with the bounds of ``table_changes(relation, start_version, end_version,
    start_ts, end_ts)``: versions are numbers >= 0, timestamps ISO 8601 text (UTC unless it
    says otherwise); a start is required, as a version or a timestamp."""
    if start is None and start_ts is None:
        return "start_version (or start_ts) is required"
    for name, value in (("start_version", start), ("end_version", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return (
                f"{name} must be a version number >= 0 (see `dbt run-operation rowmerge_history`), "
                f"got {value!r}"
            )
    for name, value in (("start_ts", start_ts), ("end_ts", end_ts)):
        if value is not None:
            try:
                parse_timestamp(value)
            except ValueError as exc:
                return f"{name}: {exc}"
    return None
