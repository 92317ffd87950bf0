"""Phase 1: parse and statically validate the clause spec (its shape: README, `merge_clauses`).

The spec is plain data (what the dbt macros emit, or what a Python caller writes). This
module is the one boundary where it is checked: it collects *every* problem and raises
once, naming the offending key, before Spark is touched. Checks that need the tables'
schemas (column names, expression resolution) live in ``plan``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import MergeSpecError
from .journal.retention import Retention, chosen
from .sqltext import (
    check_path_safe,
    expression_problem,
    lists_several,
    names_result,
    parse_name,
    quote,
    shorten,
)

_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

SPEC_VERSION = 1
DEFAULT_TARGET_ALIAS = "DBT_INTERNAL_DEST"
DEFAULT_SOURCE_ALIAS = "DBT_INTERNAL_SOURCE"
DEFAULT_SKIP_UNCHANGED_UPDATES = True
DEFAULT_SCHEMA_EVOLUTION = False
DEFAULT_LOCK_TIMEOUT_S = 600.0
# Table upkeep (optimize.py, compaction.py; README "Compaction" says why these defaults).
DEFAULT_AUTO_COMPACT = True
DEFAULT_TARGET_FILE_SIZE_MB = 128.0
DEFAULT_COMPACT_MIN_FILES = 8
DEFAULT_COMPACT_MAX_FILES = 64
DEFAULT_COMPACT_MAX_MB = 256.0

WHEN_KINDS = ("matched", "not_matched", "not_matched_by_source")
ACTIONS_BY_WHEN: dict[str, tuple[str, ...]] = {
    "matched": ("update", "delete"),
    "not_matched": ("insert",),
    "not_matched_by_source": ("update", "delete"),
}
# Spellings users bring from SQL; normalised before validation.
WHEN_ALIASES = {
    "not_matched_by_target": "not_matched",
    "not matched": "not_matched",
    "not matched by target": "not_matched",
    "not matched by source": "not_matched_by_source",
}
# The keys of table upkeep (Upkeep, parse_upkeep): compaction after each merge, the clustering.
UPKEEP_KEYS = (
    "auto_compact",
    "target_file_size_mb",
    "cluster_by",
    "optimize_every",
    "auto_compact_min_files",
    "auto_compact_max_files",
    "auto_compact_max_mb",
    "retain_versions",
    "retain_hours",
    "change_feed_retain_versions",
)
TOP_LEVEL_KEYS = {
    "version",
    "target",
    "source",
    "target_alias",
    "source_alias",
    "on",
    "on_origin",
    "clauses",
    "skip_unchanged_updates",
    "change_data_feed",
    "schema_evolution",
    "lock_timeout_s",
    "allow_empty_source",
    "max_delete_fraction",
    "constraints",
    *UPKEEP_KEYS,
}
# `origin` is optional: the config key a clause came from (the dbt macros set it), so
# messages name what the user wrote, e.g. "matched_condition" or "merge_clauses[2]".
CLAUSE_KEYS = {"when", "action", "condition", "set", "values", "origin"}
CONSTRAINT_TYPES = ("not_null", "check")
CONSTRAINT_KEYS = {"type", "column", "expression", "name"}


@dataclass(frozen=True)
class Clause:
    """One resolved WHEN clause. ``assignments`` is None for ``*``."""

    when: str
    action: str
    condition: str | None
    assignments: tuple[tuple[str, str], ...] | None
    position: int  # index in the user's clause list, for messages
    origin: str | None = None

    @property
    def name(self) -> str:
        return self.origin or f"clauses[{self.position}]"

    @property
    def star(self) -> bool:
        return self.action in ("update", "insert") and self.assignments is None

    @property
    def label(self) -> str:
        return f"{self.name} (when: {self.when}, action: {self.action})"


@dataclass(frozen=True)
class Constraint:
    """A rule every row an update or insert writes must satisfy (a dbt contract's ``not_null``
    or ``check``): ``column`` must not be NULL, or ``expression`` over the target's columns
    must not be false (NULL passes, as in SQL)."""

    type: str  # not_null | check
    column: str | None = None  # not_null
    expression: str | None = None  # check
    name: str | None = None

    @property
    def label(self) -> str:
        if self.type == "not_null":
            return f"not_null({self.column})"
        named = f" {self.name}" if self.name else ""
        return f"check{named} ({shorten(self.expression or '')})"


@dataclass(frozen=True)
class Upkeep:
    """How a merge keeps its table's files in shape after it commits (compaction.py)."""

    auto_compact: bool = DEFAULT_AUTO_COMPACT
    target_file_size_mb: float = DEFAULT_TARGET_FILE_SIZE_MB
    # None: the table's stored clustering (its journal), else the merge's key columns
    cluster_by: tuple[str, ...] | None = None
    optimize_every: int | None = None  # a whole-table optimize after every N-th version
    min_files: int = DEFAULT_COMPACT_MIN_FILES  # files of one size tier before they merge
    max_files: int = DEFAULT_COMPACT_MAX_FILES  # at most this many files compacted per merge
    max_mb: float = DEFAULT_COMPACT_MAX_MB  # and at most this many MB
    # How long replaced files are kept (journal/retention.py); None: the table's stored
    # retention, else the default.
    retain_versions: int | None = None
    retain_hours: float | None = None
    # How many versions of change rows vacuum keeps (None: the stored setting, else all).
    feed_retain_versions: int | None = None

    @property
    def target_bytes(self) -> int:
        return max(1, int(self.target_file_size_mb * 1024 * 1024))

    def retention(self, stored: Retention | None) -> Retention | None:
        """The retention the next version records: each setting given here, else the table's
        ``stored`` one, else the default (journal/retention.py ``chosen``). One place, so a
        merge, a full refresh, an optimize and a vacuum decide it the same way."""
        return chosen(self.retain_versions, self.retain_hours, stored, self.feed_retain_versions)


def parse_upkeep(raw: Mapping[str, Any], problems: list[str]) -> Upkeep:
    """The upkeep keys of a spec (or of an ``optimize`` call), each problem named by its key."""

    def number(key: str, default: float, whole: bool, least: float) -> float:
        """``raw[key]``: a whole number >= ``least``, or (not ``whole``) any number > 0."""
        value = raw.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or (value < least if whole else value <= 0)
            or (whole and value != int(value))
        ):
            kind = f"a whole number >= {least:g}" if whole else "a number > 0"
            problems.append(f"`{key}` must be {kind}, got {value!r}")
            return default
        return float(value)

    auto = raw.get("auto_compact", DEFAULT_AUTO_COMPACT)
    if not isinstance(auto, bool):
        problems.append(f"`auto_compact` must be true or false, got {auto!r}")
        auto = DEFAULT_AUTO_COMPACT
    cluster = raw.get("cluster_by")
    cluster_by: tuple[str, ...] | None = None
    if isinstance(cluster, str) and cluster.strip():
        cluster_by = (cluster.strip(),)
    elif isinstance(cluster, (list, tuple)) and all(isinstance(c, str) and c.strip() for c in cluster):
        cluster_by = tuple(c.strip() for c in cluster)
    elif cluster is not None:
        problems.append(f"`cluster_by` must be a column name or a list of column names, got {cluster!r}")
    if cluster_by is not None and len({c.lower() for c in cluster_by}) != len(cluster_by):
        problems.append(f"`cluster_by` names a column twice: {list(cluster_by)}")
    every = number("optimize_every", 0, True, 1)
    versions = number("retain_versions", -1, True, 0)
    feed_versions = number("change_feed_retain_versions", 0, True, 1)
    hours = raw.get("retain_hours")
    if hours is not None and (
        isinstance(hours, bool) or not isinstance(hours, (int, float)) or not 0 <= hours < math.inf
    ):
        problems.append(f"`retain_hours` must be a number >= 0, got {hours!r}")
        hours = None
    known = len(problems)
    min_files = int(number("auto_compact_min_files", DEFAULT_COMPACT_MIN_FILES, True, 2))
    max_files = int(number("auto_compact_max_files", DEFAULT_COMPACT_MAX_FILES, True, 2))
    if min_files > max_files and len(problems) == known:
        # A tier merges min_files files at once and a merge compacts at most max_files: the
        # tiers would never merge, silently.
        problems.append(
            f"`auto_compact_min_files` ({min_files}) must not exceed `auto_compact_max_files` "
            f"({max_files}): a size tier merges `auto_compact_min_files` files at once, and a merge "
            "compacts at most `auto_compact_max_files`, so no size tier would ever be compacted"
        )
    return Upkeep(
        auto_compact=auto,
        target_file_size_mb=number("target_file_size_mb", DEFAULT_TARGET_FILE_SIZE_MB, False, 1),
        cluster_by=cluster_by,
        optimize_every=int(every) if every else None,
        min_files=min_files,
        max_files=max_files,
        max_mb=number("auto_compact_max_mb", DEFAULT_COMPACT_MAX_MB, False, 1),
        retain_versions=int(versions) if versions >= 0 else None,
        retain_hours=float(hours) if hours is not None else None,
        feed_retain_versions=int(feed_versions) if feed_versions else None,
    )


@dataclass(frozen=True)
class MergeSpec:
    """The validated spec; everything downstream trusts it."""

    target: str
    source: str
    on: str
    clauses: tuple[Clause, ...]
    target_alias: str = DEFAULT_TARGET_ALIAS
    source_alias: str = DEFAULT_SOURCE_ALIAS
    skip_unchanged_updates: bool = DEFAULT_SKIP_UNCHANGED_UPDATES
    change_data_feed: Mapping[str, Any] | None = None
    schema_evolution: bool = DEFAULT_SCHEMA_EVOLUTION
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
    # An empty source may delete every row through a NOT MATCHED BY SOURCE delete (see
    # EmptySourceError); off by default because an empty upstream is usually a mistake.
    allow_empty_source: bool = False
    # At most this fraction of the table's rows may be deleted by one merge (None: no limit);
    # see DeleteLimitError.
    max_delete_fraction: float | None = None
    constraints: tuple[Constraint, ...] = ()
    upkeep: Upkeep = field(default_factory=lambda: Upkeep())
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The config `on` was compiled from (the dbt macros set it: `unique_key`, ...), so messages
    # about `on` name what the user wrote.
    on_origin: str | None = None

    @property
    def on_label(self) -> str:
        """``on`` as messages name it: the config it came from, with the condition."""
        if self.on_origin:
            return f"{self.on_origin} (merge condition {shorten(self.on)})"
        return f"`on` ({shorten(self.on)})"

    def of_kind(self, when: str) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if c.when == when)

    @property
    def matched(self) -> tuple[Clause, ...]:
        return self.of_kind("matched")

    @property
    def not_matched(self) -> tuple[Clause, ...]:
        return self.of_kind("not_matched")

    @property
    def not_matched_by_source(self) -> tuple[Clause, ...]:
        return self.of_kind("not_matched_by_source")

    @property
    def enforces_cardinality(self) -> bool:
        """Spark/Iceberg rule: any matched clause, unless it is a lone unconditional delete."""
        m = self.matched
        if not m:
            return False
        return not (len(m) == 1 and m[0].action == "delete" and m[0].condition is None)


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _key_names(keys: Any, allowed: set[str]) -> list[str]:
    """Keys outside ``allowed``, shown as written (a non-string key must not crash sorting)."""
    return sorted(k if isinstance(k, str) else repr(k) for k in keys if k not in allowed)


def _check_expression(text: str, what: str, problems: list[str]) -> None:
    why = expression_problem(text)
    if why is not None:
        problems.append(f"{what} {why}; simplify it or compute the value in the model SQL")
    elif names_result(text):
        problems.append(
            f"{what} names its result with AS, as a SELECT column would; write the expression alone"
        )
    elif lists_several(text):
        problems.append(
            f"{what} lists several expressions (a comma outside parentheses), as a SELECT list "
            "would; write one expression"
        )


def _check_name(raw: Mapping[str, Any], key: str, problems: list[str]) -> None:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        return  # reported as missing
    try:
        parse_name(value)
    except ValueError as exc:
        hint = (
            " The source is the name of a table or view; to merge a query, create a temporary "
            "view of it first"
            if key == "source"
            else ""
        )
        problems.append(f"`{key}` ({value!r}) is not a valid table name: {exc}.{hint}")


def _check_assignments(
    key: str, value: Any, where: str, problems: list[str]
) -> tuple[tuple[str, str], ...] | None:
    if value == "*":
        return None
    if isinstance(value, Mapping) and value:
        out = []
        for col, expr in value.items():
            if not _is_str(col):
                problems.append(f"{where}: `{key}` column names must be non-empty strings, got {col!r}")
            elif (
                not isinstance(expr, (str, int, float, bool))
                or (isinstance(expr, str) and not expr.strip())
                or (isinstance(expr, float) and not math.isfinite(expr))
            ):
                problems.append(f"{where}: `{key}` value for column '{col}' must be a SQL expression string")
            else:
                text = str(expr).lower() if isinstance(expr, bool) else str(expr)
                _check_expression(text, f"{where}: `{key}` value for column '{col}'", problems)
                out.append((str(col), text))
        return tuple(out)
    problems.append(
        f'{where}: `{key}` must be "*" or a mapping of target column to SQL expression, got {value!r}'
    )
    return None


def static_problems(raw: Mapping[str, Any]) -> list[str]:
    """Every problem visible without Spark, as user-facing strings (empty = valid)."""
    try:
        parse_spec(raw)
    except MergeSpecError as exc:
        return exc.problems
    return []


def parse_spec(raw: Mapping[str, Any]) -> MergeSpec:
    """Validate ``raw`` and return the resolved :class:`MergeSpec`, or raise MergeSpecError."""
    problems: list[str] = []
    if not isinstance(raw, Mapping):
        raise MergeSpecError([f"the spec must be a mapping, got {type(raw).__name__}"])

    unknown = _key_names(raw, TOP_LEVEL_KEYS)
    if unknown:
        problems.append(
            f"unknown spec key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(TOP_LEVEL_KEYS))}"
        )
    version = raw.get("version", SPEC_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version != SPEC_VERSION:
        problems.append(f"`version` must be {SPEC_VERSION}, got {version!r}")
    for key in ("target", "source", "on"):
        if not _is_str(raw.get(key)):
            hint = " (set `unique_key`, or write `on` in merge_clauses config)" if key == "on" else ""
            problems.append(f"`{key}` is required and must be a non-empty string{hint}")
    _check_name(raw, "target", problems)
    _check_name(raw, "source", problems)
    if _is_str(raw.get("on")):
        _check_expression(raw["on"], f"`on` ({shorten(raw['on'])})", problems)
    target_alias = raw.get("target_alias")
    source_alias = raw.get("source_alias")
    target_alias = DEFAULT_TARGET_ALIAS if target_alias is None else target_alias
    source_alias = DEFAULT_SOURCE_ALIAS if source_alias is None else source_alias
    for key, alias in (("target_alias", target_alias), ("source_alias", source_alias)):
        if not isinstance(alias, str) or not _ALIAS.match(alias):
            problems.append(f"`{key}` must be a plain identifier, got {alias!r}")
    if isinstance(target_alias, str) and isinstance(source_alias, str):
        if target_alias.lower() == source_alias.lower():
            problems.append("`target_alias` and `source_alias` must differ")

    for key, default in (
        ("skip_unchanged_updates", DEFAULT_SKIP_UNCHANGED_UPDATES),
        ("schema_evolution", DEFAULT_SCHEMA_EVOLUTION),
        ("allow_empty_source", False),
    ):
        if not isinstance(raw.get(key, default), bool):
            problems.append(f"`{key}` must be true or false, got {raw.get(key)!r}")
    lock_timeout = raw.get("lock_timeout_s", DEFAULT_LOCK_TIMEOUT_S)
    problems += lock_timeout_problems(lock_timeout)

    max_delete = raw.get("max_delete_fraction")
    if max_delete is not None and (
        isinstance(max_delete, bool)
        or not isinstance(max_delete, (int, float))
        or not math.isfinite(max_delete)
        or not 0 <= max_delete <= 1
    ):
        problems.append(
            "`max_delete_fraction` must be a number from 0 to 1 (0.1: at most 10% of the rows), got "
            f"{max_delete!r}"
        )

    cdf = raw.get("change_data_feed")
    if cdf is not None and not (
        isinstance(cdf, Mapping) and _is_str(cdf.get("table")) and set(cdf) == {"table"}
    ):
        problems.append(
            f"`change_data_feed` must be null or a mapping with one key, `table` (the change "
            f"table's name), got {cdf!r}"
        )
    elif cdf is not None:
        try:
            check_path_safe(parse_name(cdf["table"]))
        except ValueError as exc:
            problems.append(
                f"`change_data_feed` table {cdf['table']!r} is not a valid name for a new table: {exc}"
            )

    clauses = _parse_clauses(raw.get("clauses"), problems)
    constraints = _parse_constraints(raw.get("constraints"), problems)
    upkeep = parse_upkeep(raw, problems)
    if problems:
        raise MergeSpecError(problems)
    return MergeSpec(
        target=str(raw["target"]).strip(),
        source=str(raw["source"]).strip(),
        on=str(raw["on"]).strip(),
        on_origin=str(raw["on_origin"])
        if isinstance(raw.get("on_origin"), str) and raw["on_origin"]
        else None,
        clauses=clauses,
        target_alias=str(target_alias),
        source_alias=str(source_alias),
        skip_unchanged_updates=bool(raw.get("skip_unchanged_updates", DEFAULT_SKIP_UNCHANGED_UPDATES)),
        change_data_feed=cdf,
        schema_evolution=bool(raw.get("schema_evolution", DEFAULT_SCHEMA_EVOLUTION)),
        lock_timeout_s=float(lock_timeout),
        allow_empty_source=bool(raw.get("allow_empty_source", False)),
        max_delete_fraction=None if max_delete is None else float(max_delete),
        constraints=constraints,
        upkeep=upkeep,
        raw=dict(raw),
    )


def lock_timeout_problems(value: Any) -> list[str]:
    """What is wrong with a ``lock_timeout_s``, a merge's or a table operation's (empty if
    nothing): a wait that is negative, infinite or not a number would never be what was meant."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        return [f"`lock_timeout_s` must be a finite number of seconds >= 0, got {value!r}"]
    return []


def _parse_clauses(raw_clauses: Any, problems: list[str]) -> tuple[Clause, ...]:
    if not isinstance(raw_clauses, (list, tuple)) or not raw_clauses:
        problems.append("`clauses` must be a non-empty list of WHEN clauses")
        return ()
    clauses: list[Clause] = []
    for i, rc in enumerate(raw_clauses):
        origin = rc.get("origin") if isinstance(rc, Mapping) else None
        origin = str(origin) if origin else None
        where = origin or f"clauses[{i}]"
        if not isinstance(rc, Mapping):
            problems.append(f"{where}: each clause must be a mapping, got {rc!r}")
            continue
        extra = _key_names(rc, CLAUSE_KEYS)
        if extra:
            problems.append(
                f"{where}: unknown key(s) {', '.join(extra)}; a clause has "
                "when, action, condition, set (update) or values (insert)"
            )
        when = str(rc.get("when", "")).strip().lower()
        when = WHEN_ALIASES.get(when, when)
        action = str(rc.get("action", "")).strip().lower()
        if when not in WHEN_KINDS:
            problems.append(f"{where}: unknown `when` {rc.get('when')!r}; use one of {', '.join(WHEN_KINDS)}")
            continue
        where = f"{origin or f'clauses[{i}]'} (when: {when})"
        if action not in ("update", "delete", "insert"):
            problems.append(
                f"{where}: unknown `action` {rc.get('action')!r}; use one of "
                f"{', '.join(ACTIONS_BY_WHEN[when])}"
            )
            continue
        if action not in ACTIONS_BY_WHEN[when]:
            problems.append(
                f"{where}: action '{action}' is not allowed here; when: {when} allows "
                f"{' or '.join(ACTIONS_BY_WHEN[when])}"
                + (" (insert is only for when: not_matched)" if action == "insert" else "")
            )
            continue
        condition = rc.get("condition")
        if condition is not None and not _is_str(condition):
            if isinstance(condition, bool):
                condition = str(condition).lower()
            else:
                problems.append(f"{where}: `condition` must be a SQL boolean expression string")
                condition = None
        if isinstance(condition, str):
            _check_expression(condition, f"{where}: `condition`", problems)
        assignments: tuple[tuple[str, str], ...] | None = None
        if action == "update":
            if "values" in rc:
                problems.append(f"{where}: `values` is for insert; an update takes `set`")
            if "set" not in rc:
                problems.append(f'{where}: an update needs `set` ("*" or a column mapping)')
            else:
                assignments = _check_assignments("set", rc["set"], where, problems)
        elif action == "insert":
            if "set" in rc:
                problems.append(f"{where}: `set` is for update; an insert takes `values`")
            if "values" not in rc:
                problems.append(f'{where}: an insert needs `values` ("*" or a column mapping)')
            else:
                assignments = _check_assignments("values", rc["values"], where, problems)
        else:
            for key in ("set", "values"):
                if key in rc:
                    problems.append(f"{where}: a delete takes no `{key}`")
        clauses.append(
            Clause(
                when=when,
                action=action,
                condition=condition.strip() if isinstance(condition, str) else None,
                assignments=assignments,
                position=i,
                origin=origin,
            )
        )
    for kind in WHEN_KINDS:
        of_kind = [c for c in clauses if c.when == kind]
        for c in of_kind[:-1]:
            if c.condition is None:
                problems.append(
                    f"{c.name} (when: {kind}): only the last {kind} clause may omit "
                    f"`condition`; a clause after it could never act. Add a condition or move it last"
                )
    return tuple(clauses)


def _parse_constraints(raw: Any, problems: list[str]) -> tuple[Constraint, ...]:
    """`constraints`: a list of {type: not_null, column} / {type: check, expression[, name]}."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        problems.append(f"`constraints` must be a list of constraints, got {raw!r}")
        return ()
    out = []
    for i, rc in enumerate(raw):
        where = f"constraints[{i}]"
        if not isinstance(rc, Mapping):
            problems.append(f"{where}: each constraint must be a mapping, got {rc!r}")
            continue
        extra = _key_names(rc, CONSTRAINT_KEYS)
        if extra:
            problems.append(
                f"{where}: unknown key(s) {', '.join(extra)}; a constraint has type, column, expression, name"
            )
        kind = rc.get("type")
        name = rc.get("name")
        if name is not None and not _is_str(name):
            problems.append(f"{where}: `name` must be a non-empty string, got {name!r}")
            name = None
        if kind == "not_null":
            if not _is_str(rc.get("column")):
                problems.append(f"{where}: a not_null constraint needs `column`, got {rc.get('column')!r}")
                continue
            out.append(Constraint("not_null", column=str(rc["column"]).strip(), name=name))
        elif kind == "check":
            expression = rc.get("expression")
            if not _is_str(expression):
                problems.append(
                    f"{where}: a check constraint needs `expression` (SQL over the table's "
                    f"columns), got {expression!r}"
                )
                continue
            _check_expression(str(expression), f"{where}: `expression`", problems)
            out.append(Constraint("check", expression=str(expression).strip(), name=name))
        else:
            problems.append(
                f"{where}: unknown `type` {kind!r}; the engine enforces {', '.join(CONSTRAINT_TYPES)}"
            )
    return tuple(out)


def merge_sql(spec: MergeSpec) -> str:
    """The merge as Spark SQL ``MERGE INTO`` text: what a user reads to see what will run.

    Only for reading (the engine runs the spec, never this text); each clause carries the
    config key it came from as a comment.
    """
    lines = [
        f"MERGE INTO {spec.target} AS {spec.target_alias}",
        f"USING {spec.source} AS {spec.source_alias}",
        f"ON {spec.on}",
    ]
    for c in spec.clauses:
        when = {
            "matched": "MATCHED",
            "not_matched": "NOT MATCHED",
            "not_matched_by_source": "NOT MATCHED BY SOURCE",
        }
        head = f"WHEN {when[c.when]}" + (f" AND ({c.condition})" if c.condition else "")
        if c.action == "delete":
            body = "DELETE"
        elif c.assignments is None:
            body = "UPDATE SET *" if c.action == "update" else "INSERT *"
        elif c.action == "update":
            body = "UPDATE SET " + ", ".join(f"{quote(col)} = {expr}" for col, expr in c.assignments)
        else:
            cols = ", ".join(quote(col) for col, _ in c.assignments)
            body = f"INSERT ({cols}) VALUES ({', '.join(expr for _, expr in c.assignments)})"
        lines.append(f"{head} THEN {body}  -- {c.name}")
    return "\n".join(lines)
