"""SQL text the engine builds or receives: names, types, and time functions.

The engine prefers the DataFrame and catalog APIs, but a few statements exist only as SQL
(``ALTER TABLE ... ADD COLUMNS``, ``ADD PARTITION``, ``DESCRIBE ... AS JSON``). Everything
that goes into such text passes through here: table names are parsed strictly (a name such
as ``db.t -- nightly`` is rejected, not silently read as ``db.t``) and every identifier is
back-quoted, so no name or type can change the statement's meaning or make it fail later.

User expressions (conditions, values, ``on``) are evaluated by several Spark jobs of one
merge (scan, rewrite, change feed). Spark fixes ``current_timestamp()`` and its relatives
once per *query*, so each job would see another instant and the table could disagree with
its change feed. :func:`pin_time` replaces them with the merge's commit timestamp (the
``_commit_timestamp`` of its change rows), as Spark does within one query.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime

from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampType, UserDefinedType

MAX_NAME_PARTS = 3  # catalog.database.table
MAX_EXPRESSION_DEPTH = 200  # parentheses; deeper input overflows Spark's parser stack
MAX_EXPRESSION_CHARS = 100_000

_UNQUOTED_PART = re.compile(r"\w+")
_WORD = re.compile(r"^\w+$")


def quote(part: str) -> str:
    """One identifier, back-quoted (a back-quote inside is doubled)."""
    return "`" + part.replace("`", "``") + "`"


def quote_name(parts: Iterable[str]) -> str:
    return ".".join(quote(p) for p in parts)


DEFAULT_CATALOG = "spark_catalog"


def display_name(parts: Iterable[str]) -> str:
    """A table name as people write it: parts joined by dots, back-quoted only where needed."""
    return ".".join(p if _WORD.match(p) else quote(p) for p in parts)


def name_key(parts: Iterable[str]) -> tuple[str, ...]:
    """The parts of a table name as the session catalog compares them: lower case, without
    the default catalog (``spark_catalog.db.t`` is ``db.t``)."""
    out = tuple(p.lower() for p in parts)
    return out[1:] if len(out) == MAX_NAME_PARTS and out[0] == DEFAULT_CATALOG else out


def same_table(recorded: str, parts: Iterable[str]) -> bool:
    """True if the name ``recorded`` (in a journal, as some writer gave it) can name the table
    whose full name is ``parts``: equal once normalized (:func:`name_key`), where a recorded
    name without its database (written by a caller that relied on the current database)
    compares by what it has."""
    try:
        mine = name_key(parse_name(recorded))
    except ValueError:
        return False
    full = name_key(parts)
    return len(mine) <= len(full) and full[len(full) - len(mine) :] == mine


def parse_name(text: str) -> tuple[str, ...]:
    """``db.t``, ``\\`db\\`.\\`t\\``` or ``catalog.db.t`` -> its parts; ValueError saying why not.

    Unquoted parts are word characters only; a back-quoted part may hold anything (a
    doubled back-quote stands for one). Nothing else is accepted: no spaces, comments,
    semicolons or SQL around the name.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("it is empty")
    s = text.strip()
    parts: list[str] = []
    i = 0
    while True:
        if i < len(s) and s[i] == "`":
            j, part = i + 1, []
            while True:
                k = s.find("`", j)
                if k < 0:
                    raise ValueError("a back-quote is not closed")
                part.append(s[j:k])
                if s.startswith("``", k):
                    part.append("`")
                    j = k + 2
                    continue
                i = k + 1
                break
            name = "".join(part)
            if not name:
                raise ValueError("it has an empty part")
            parts.append(name)
        else:
            m = _UNQUOTED_PART.match(s, i)
            if not m:
                shown = s[i : i + 20]
                raise ValueError(
                    f"it is not a table name (unexpected {shown!r}; write db.table, and back-quote "
                    "parts with other characters)"
                )
            parts.append(m.group(0))
            i = m.end()
        if i == len(s):
            break
        if s[i] != ".":
            raise ValueError(
                f"it is not a table name (unexpected {s[i : i + 20]!r}; write db.table, and "
                "back-quote parts with other characters)"
            )
        i += 1
    if len(parts) > MAX_NAME_PARTS:
        raise ValueError(f"it has {len(parts)} parts; at most catalog.database.table")
    return tuple(parts)


def check_path_safe(parts: Iterable[str]) -> None:
    """A name the engine creates a managed table under: its folder name must be a plain word."""
    for p in parts:
        if not _WORD.match(p):
            raise ValueError(
                f"part {p!r} may hold only letters, digits and underscores (a managed table's "
                "folder is named after it)"
            )


def sql_type(dtype: DataType) -> str:
    """A type as DDL text that Spark parses back to the same type (nested names quoted).

    ``simpleString()`` writes ``struct<a b:int>``, which no parser accepts.
    """
    if isinstance(dtype, StructType):
        return "STRUCT<" + ", ".join(f"{quote(f.name)}: {sql_type(f.dataType)}" for f in dtype.fields) + ">"
    if isinstance(dtype, ArrayType):
        return f"ARRAY<{sql_type(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"MAP<{sql_type(dtype.keyType)}, {sql_type(dtype.valueType)}>"
    if isinstance(dtype, TimestampType):
        # ``timestamp`` reads as TIMESTAMP_NTZ in a session with spark.sql.timestampType=TIMESTAMP_NTZ.
        return "TIMESTAMP_LTZ"
    return dtype.simpleString()


def has_udt(dtype: DataType) -> bool:
    """Whether ``dtype`` is or holds a user-defined type, which has no SQL spelling (its
    ``simpleString()`` is ``udt``): such a value can be built only as a Column."""
    if isinstance(dtype, UserDefinedType):
        return True
    if isinstance(dtype, StructType):
        return any(has_udt(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return has_udt(dtype.elementType)
    if isinstance(dtype, MapType):
        return has_udt(dtype.keyType) or has_udt(dtype.valueType)
    return False


def null_sql(dtype: DataType) -> str | None:
    """A NULL of ``dtype`` as SQL text, or None where the type has no SQL spelling."""
    return None if has_udt(dtype) else f"CAST(NULL AS {sql_type(dtype)})"


def epoch_micros(at: datetime) -> int:
    """An aware datetime as microseconds since the epoch (exact, no float rounding)."""
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def sql_string(value: str) -> str:
    """A string literal (Spark's default escaping: backslash escapes are processed)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- expression text ------------------------------------------------------------------------

SHOWN_CHARS = 120  # how much of an expression a message quotes


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a message quotes it: whole if short, else its start and its length."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text)} characters)"


_TOKEN = re.compile(
    r"""
      (?P<string>'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")
    | (?P<quoted>`(?:``|[^`])*`)
    | (?P<comment>--(?:\\\n|[^\r\n])*|/\*.*?\*/)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokens_at(text: str) -> Iterator[tuple[str, int, int, str]]:
    """(kind, start, end, text) of each token of ``text``, the kinds of :data:`_TOKEN`: a
    string, a quoted name or a comment is one token, so nothing inside it is read as SQL."""
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        assert kind is not None
        yield kind, m.start(), m.end(), m.group(0)


def _tokens(text: str) -> Iterator[tuple[str, str]]:
    for kind, _, _, tok in tokens_at(text):
        yield kind, tok


def _at_depth(text: str) -> Iterator[tuple[int, str, str, str]]:
    """(depth, kind, token, before) of each token of ``text``: how many parentheses are open
    around it (a parenthesis itself counts as outside the pair it opens or closes), and the
    last token before it that is not space or a comment ("" at the start)."""
    depth, before = 0, ""
    for kind, tok in _tokens(text):
        if kind == "other" and tok == ")":
            depth -= 1
        yield depth, kind, tok, before
        if kind == "other" and tok == "(":
            depth += 1
        if kind not in ("space", "comment"):
            before = tok


def expression_problem(text: str) -> str | None:
    """Why ``text`` cannot be a merge expression without asking Spark (None if it may be)."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return f"is {len(text)} characters long (at most {MAX_EXPRESSION_CHARS})"
    deepest = max((d + 1 for d, kind, tok, _ in _at_depth(text) if kind == "other" and tok == "("), default=0)
    if deepest > MAX_EXPRESSION_DEPTH:
        return f"nests parentheses {deepest} deep (at most {MAX_EXPRESSION_DEPTH})"
    return None


def names_result(text: str) -> bool:
    """Whether ``text`` ends in ``AS name``, as a SELECT column may: outside parentheses AS
    only names a result (CAST's is inside them). Spark parses such text alone, but not as a
    part of a larger expression."""
    return any(  # s.as: a field named as
        d == 0 and kind == "word" and tok.upper() == "AS" and before != "."
        for d, kind, tok, before in _at_depth(text)
    )


def lists_several(text: str) -> bool:
    """Whether ``text`` is several expressions (a comma outside parentheses), as a SELECT list
    is: in the parentheses :func:`operand` adds they would be one struct. A type's own commas
    (``s.m::map<string,int>``) are inside its angle brackets."""
    angle = 0
    for d, kind, tok, before in _at_depth(text):
        if kind == "other" and tok == "<" and (angle or before.lower() in _TYPE_WORDS):
            angle += 1
        elif kind == "other" and tok == ">" and angle:
            angle -= 1
        elif d == 0 and not angle and kind == "other" and tok == ",":
            return True
    return False


# Types whose parameters go in angle brackets (struct<a:int,b:string>).
_TYPE_WORDS = {"array", "map", "struct"}


def operand(text: str) -> str:
    """A user's expression as it can stand inside a larger one (a CASE branch, a comparison):
    in parentheses, and ended by line breaks where it holds a ``--`` comment, which would
    otherwise run on over everything the engine writes after it. Two breaks: Spark's lexer
    goes on with a comment over a backslash followed by a line break (``-- in C:\\``)."""
    return f"({text}\n\n)" if "--" in text else f"({text})"


# Time functions Spark evaluates once per query: name -> SQL for the pinned instant.
# ``{micros}`` is the commit time in epoch microseconds, ``{seconds}`` in whole seconds.
_PINNED = {
    "current_timestamp": "timestamp_micros({micros})",
    "now": "timestamp_micros({micros})",
    "localtimestamp": "CAST(timestamp_micros({micros}) AS TIMESTAMP_NTZ)",
    "current_date": "CAST(timestamp_micros({micros}) AS DATE)",
    "curdate": "CAST(timestamp_micros({micros}) AS DATE)",
    "unix_timestamp": "CAST({seconds} AS BIGINT)",
}
# Spark also reads these without parentheses (unless a column has the name).
_BARE = {"current_timestamp", "current_date"}
# Not expressible as a literal of the same type in every Spark 4 release.
_UNPINNABLE = {"current_time"}


class UnpinnableTime(ValueError):
    """An expression uses a time function whose value cannot be fixed for the whole merge."""


def _unpinnable(shown: str) -> UnpinnableTime:
    return UnpinnableTime(
        f"{shown} would take a different value in each pass of the merge; select it in the model SQL "
        "and assign that column instead"
    )


def pin_time(text: str, at: datetime, columns: Iterable[str] = ()) -> str:
    """``text`` with every time function call replaced by the instant ``at``.

    Only real calls are replaced: not inside strings, comments or back-quoted names, not
    ``x.now`` (a field), not a bare name that is also a column (Spark reads the column).
    """
    micros = epoch_micros(at)
    pinned = {name: sql.format(micros=micros, seconds=micros // 1_000_000) for name, sql in _PINNED.items()}
    names = {c.lower() for c in columns}
    toks = list(_tokens(text))
    out: list[tuple[int, str]] = []  # (index in toks of the first token replaced, text)
    i = 0

    def significant(j: int, step: int) -> int:
        while 0 <= j < len(toks) and toks[j][0] in ("space", "comment"):
            j += step
        return j

    def named(j: int, name: str) -> bool:
        kind, tok = toks[j]
        return (kind == "word" and tok.lower() == name) or (kind == "quoted" and tok[1:-1].lower() == name)

    def qualified(j: int) -> int | None:
        """Where the call at ``j`` starts: ``j``, or its ``builtin.`` / ``system.builtin.``
        qualifier (Spark 4.2 names built-in functions so); None for ``x.now``, a field of x."""
        dot = significant(j - 1, -1)
        if dot < 0 or toks[dot] != ("other", "."):
            return j
        qual = significant(dot - 1, -1)
        if qual < 0 or not named(qual, "builtin"):
            return None
        dot = significant(qual - 1, -1)
        if dot < 0 or toks[dot] != ("other", "."):
            return qual
        system = significant(dot - 1, -1)
        if system < 0 or not named(system, "system"):
            return None
        before = significant(system - 1, -1)
        return system if before < 0 or toks[before] != ("other", ".") else None

    while i < len(toks):
        kind, tok = toks[i]
        low, after_tok, start = tok.lower(), i + 1, i
        call = qualified(i) if kind == "word" and low in pinned.keys() | _UNPINNABLE else None
        if call is not None:
            after = significant(i + 1, 1)
            if after < len(toks) and toks[after] == ("other", "("):
                if low in _UNPINNABLE:
                    raise _unpinnable(f"{tok}()")
                close = significant(after + 1, 1)
                if close < len(toks) and toks[close] == ("other", ")"):  # unix_timestamp(col) is not "now"
                    tok, after_tok, start = pinned[low], close + 1, call
            elif low in _BARE | _UNPINNABLE and low not in names and call == i:
                if low in _UNPINNABLE:
                    raise _unpinnable(tok)
                tok = pinned[low]
        while out and out[-1][0] >= start:  # a qualifier the pinned call replaces
            out.pop()
        out.append((start, tok))
        i = after_tok
    return "".join(t for _, t in out)
