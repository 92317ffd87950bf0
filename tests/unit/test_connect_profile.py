"""`method: connect` profiles: validation, the Spark Connect URL, what `dbt debug` shows;
and the Python reading of `on` that Connect mode uses instead of Spark's parser."""

from __future__ import annotations

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.rowmerge.connections import RowMergeCredentials
from dbt.adapters.rowmerge.merge import plan_connect
from dbt.adapters.rowmerge.session import connect_url


def creds(**kw: object) -> RowMergeCredentials:
    return RowMergeCredentials.from_dict({"method": "connect", "schema": "analytics", **kw})


@pytest.mark.parametrize(
    ("host", "token", "ssl", "url"),
    [
        ("sc://h:15002", None, False, "sc://h:15002"),
        ("sc://h:15002/", "abc", False, "sc://h:15002/;token=abc"),
        ("sc://h:15002", None, True, "sc://h:15002/;use_ssl=true"),
        ("sc://h:1/;user_id=me", "abc", True, "sc://h:1/;user_id=me;token=abc;use_ssl=true"),
        ("sc://h:1/;use_ssl=true", None, True, "sc://h:1/;use_ssl=true"),
    ],
)
def test_connect_url(host: str, token: str | None, ssl: bool, url: str) -> None:
    assert connect_url(host, token, ssl) == url


def test_connect_profile_builds_its_url_and_hides_the_token() -> None:
    c = creds(host="sc://spark:15002", token="s3cret", use_ssl=True)
    assert c.type == "rowmerge" and str(c.method) == "connect"
    assert c.remote_url == "sc://spark:15002/;token=s3cret;use_ssl=true"
    shown = dict(c.connection_info())
    assert shown["method"] == "connect" and shown["host"] == "sc://spark:15002"
    assert "s3cret" not in repr(shown)


def test_connect_profile_needs_an_sc_host() -> None:
    with pytest.raises(DbtRuntimeError, match=r"`method: connect` needs `host: sc://<host>:<port>`"):
        creds(host="localhost")


def test_session_profiles_are_unchanged() -> None:
    c = RowMergeCredentials.from_dict({"method": "session", "host": "localhost", "schema": "s"})
    assert str(c.method) == "session" and dict(c.connection_info())["method"] == "session"


@pytest.mark.parametrize(
    ("on", "parts"),
    [
        ("t.id = s.id", ["t.id = s.id"]),
        ("t.a = s.a AND t.b = s.b", ["t.a = s.a", "t.b = s.b"]),
        ("(t.a = s.a) and t.d BETWEEN 1 AND 5", ["t.a = s.a", "t.d BETWEEN 1 AND 5"]),
        ("t.a = s.a AND (t.x = 1 OR t.y = 2)", ["t.a = s.a", "t.x = 1 OR t.y = 2"]),
        (
            "CASE WHEN t.a AND s.b THEN 1 END = 1 AND t.k = s.k",
            ["CASE WHEN t.a AND s.b THEN 1 END = 1", "t.k = s.k"],
        ),
        ("t.v = 'x AND y' AND t.k = s.k", ["t.v = 'x AND y'", "t.k = s.k"]),
        ("(t.a = s.a) AND (t.b = s.b)", ["t.a = s.a", "t.b = s.b"]),
        ("(t.a = s.a) OR (t.b = s.b)", ["(t.a = s.a) OR (t.b = s.b)"]),
        ("t.a = s.a OR t.b = s.b AND t.c = 1", ["t.a = s.a OR t.b = s.b AND t.c = 1"]),
        (
            "t.a = s.a AND (t.b = 1 OR t.c = 2) AND t.d = s.d",
            ["t.a = s.a", "t.b = 1 OR t.c = 2", "t.d = s.d"],
        ),
        # A comment's words and parentheses are not SQL: `t.x = 1` below is no filter.
        (
            "t.id = s.id AND (t.r = 'eu' -- a ) AND t.x = 1 AND (\n\n)",
            ["t.id = s.id", "t.r = 'eu' -- a ) AND t.x = 1 AND ("],
        ),
        ("t.id = s.id AND (t.r = 1 /* (or */)", ["t.id = s.id", "t.r = 1 /* (or */"]),
        ("t.id = s.id -- key OR not\n AND t.k = s.k", ["t.id = s.id -- key OR not", "t.k = s.k"]),
    ],
)
def test_split_conjuncts(on: str, parts: list[str]) -> None:
    assert plan_connect.split_conjuncts(on) == parts


@pytest.mark.parametrize(
    ("conj", "pair"),
    [
        ("t.id = s.id", ("id", "`s`.`id`")),
        ("s.id=t.key", ("key", "`s`.`id`")),
        ("`T`.`my col` = `s`.`o``k`", ("my col", "`s`.`o``k`")),
        ("t.id <=> s.id", None),
        ("t.id = s.id + 1", None),
        ("t.id = 5", None),
        ("x.id = s.id", None),
    ],
)
def test_key_pair(conj: str, pair: tuple[str, str] | None) -> None:
    assert plan_connect.key_pair(conj, "t", "s") == pair


def test_columns_of_skips_literals_and_other_aliases() -> None:
    on = "t.a = s.a AND t.`b c` > 0 AND t.v <> 't.z' AND tt.q = 1 AND T.a = 1 -- not t.w\n/* t.u */"
    assert plan_connect.columns_of(on, "t") == ["a", "b c", "v"]
