"""What :mod:`.plan` asks the session's JVM about expressions, answered through Spark Connect.

A Connect client has no JVM: it cannot walk the analyzed plan's Java objects or call Spark's
SQL parser. The same questions are answered from what the server does return:

- the plan's node kinds (is there an aggregate, a window, a generator, a subquery?) from the
  analyzed plan's text (``DataFrame._explain_string``), main tree only, as the JVM walk counts;
- whether an expression is deterministic by asking the analyzer: it refuses a
  non-deterministic join condition (INVALID_NON_DETERMINISTIC_EXPRESSIONS), so the expression
  is put in one (``(expr) IS NULL OR TRUE``, which joins every row and is never run);
- the conjuncts of ``on`` and its ``target.col = source.col`` pairs by a small tokenizer that
  respects quotes, parentheses, CASE ... END and BETWEEN ... AND. It is conservative: a
  conjunct it cannot read as a plain column pair only loses file skipping, never rows, because
  every conjunct still joins as written.
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

from .outputs import q
from .sqltext import tokens_at

_ANALYZED = "== Analyzed Logical Plan =="
_SUBQUERY = re.compile(r"\b(scalar-subquery|exists|list|lateral-subquery)#\d+")
_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)"
_PAIR = re.compile(rf"^\s*({_IDENT})\s*\.\s*({_IDENT})\s*=\s*({_IDENT})\s*\.\s*({_IDENT})\s*$")


def analyzed_lines(df: DataFrame) -> list[str]:
    """The analyzed logical plan of ``df``, one node per line, as the server prints it."""
    text = df._explain_string(extended=True)  # type: ignore[operator]
    _, _, rest = text.partition(_ANALYZED)
    body = rest.split("\n== ", 1)[0].strip("\n").splitlines()
    return body[1:]  # the first line is the output schema


def node_classes(df: DataFrame) -> list[str]:
    """Node names of the main plan tree (subquery plans, printed after ``:``, excluded)."""
    return tree_nodes(analyzed_lines(df))


def tree_nodes(lines: list[str]) -> list[str]:
    """Node names of a plan's tree text (Spark's ``treeString``), main tree only."""
    out = []
    for line in lines:
        m = re.match(r"^([ :|+\-]*)([A-Za-z]\w*)", line)
        if m and ":" not in m.group(1):
            out.append(m.group(2))
    return out


def top_has_subquery(df: DataFrame) -> bool:
    """True if the top node's own expressions hold a subquery (EXISTS, IN (SELECT ...), scalar)."""
    lines = analyzed_lines(df)
    return bool(lines) and _SUBQUERY.search(lines[0]) is not None


def deterministic(frame: DataFrame, col: Column) -> bool:
    """Whether ``col`` (over ``frame``) is deterministic, as Spark's analyzer judges it.

    Only ``col`` itself: the analyzer judges each node by its own expressions, so a frame
    that computes a column with ``uuid()`` (a source, materialized once) does not count.
    """
    one = frame.sparkSession.range(1).select(F.lit(1).alias("__rowmerge_one"))
    try:
        frame.join(one, col.isNull() | F.lit(True), "inner").schema  # noqa: B018 -- analyse only
    except AnalysisException as exc:
        if "NON_DETERMINISTIC" in str(exc):
            return False
        raise
    return True


def _unquote(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


def _tokens(text: str) -> list[tuple[int, int, str]]:
    """(start, end, upper-cased word) of every bare word outside quotes and comments, with '('
    and ')': a comment's words and parentheses are not SQL (a `(` in one once shifted the
    depth, and a `) AND t.x = 1` in one became a filter on the target)."""
    return [
        (s, e, tok.upper())
        for kind, s, e, tok in tokens_at(text)
        if kind == "word" or (kind == "other" and tok in "()")
    ]


def split_conjuncts(on: str) -> list[str]:
    """The top-level AND operands of ``on`` (not the AND of BETWEEN, nor one inside parentheses
    or CASE ... END); ``on`` whole when a top-level OR makes it a disjunction."""
    tokens = _tokens(on)
    depth = 0
    for _, _, tok in tokens:
        depth += 1 if tok in ("(", "CASE") else -1 if tok in (")", "END") else 0
        if depth == 0 and tok == "OR":  # AND binds tighter: `a OR b AND c` is one disjunction
            return [_strip_parens(on.strip())]
    parts, start, depth, between = [], 0, 0, 0
    for s, e, tok in tokens:
        if tok in ("(", "CASE"):
            depth += 1
        elif tok in (")", "END"):
            depth -= 1
        elif depth == 0 and tok == "BETWEEN":
            between += 1
        elif depth == 0 and tok == "AND":
            if between:
                between -= 1
            else:
                parts.append(on[start:s])
                start = e
    parts.append(on[start:])
    return [_strip_parens(p.strip()) for p in parts if p.strip()]


def _strip_parens(text: str) -> str:
    """``(a = b)`` -> ``a = b`` when the outer parentheses enclose the whole text."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for s, _, tok in _tokens(text):
            depth += {"(": 1, ")": -1}.get(tok, 0)
            if depth == 0 and s < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def key_pair(conj: str, ta: str, sa: str) -> tuple[str, str] | None:
    """``ta.col = sa.col`` (either order) -> (target column, the source column quoted)."""
    m = _PAIR.match(conj)
    if m is None:
        return None
    a, b, c, d = (_unquote(g) for g in m.groups())
    for (q1, c1), (q2, c2) in (((a, b), (c, d)), ((c, d), (a, b))):
        if q1.lower() == ta.lower() and q2.lower() == sa.lower():
            return c1, q(sa, c2)
    return None


def columns_of(on: str, ta: str) -> list[str]:
    """Every ``ta.column`` the text refers to, in order, once."""
    found: list[str] = []
    pattern = re.compile(rf"(?<![\w.`])({_IDENT})\s*\.\s*({_IDENT})")
    blanked = "".join(
        " " * (e - s) if kind in ("string", "comment") else tok for kind, s, e, tok in tokens_at(on)
    )
    for m in pattern.finditer(blanked):
        q, col = _unquote(m.group(1)), _unquote(m.group(2))
        if q.lower() == ta.lower() and col not in found:
            found.append(col)
    return found
