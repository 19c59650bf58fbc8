"""Search under hostile arguments (issue 34, points 6 and 7; docs/search.md "Bounds").

- A query's cost is linear in its text, on every backend: a term or group given twice
  counts once, and at most `MAX_TOKENS` words are searched, said on stderr (the table
  of `parse_query`, pure; then 20,000 repeats of a word and a phrase of 14,000 words
  through the real command, which PostgreSQL refused with "stack depth limit
  exceeded").
- Odd arguments are one line and exit 2, never a traceback (docs/cli.md): a time before
  1970 or past 9999 (`--since 0001-01-01`), `-n` of 20 digits, a 100,000-character
  `--model`; a span of 20 digits back is from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from session import SearchQueryError
from session.search.query import MAX_TOKENS, Term, parse_query, tsquery
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session
from tests.test_sessions_cli import cli


def words(*tokens: str, negated: bool = False) -> Term:
    return Term(tokens, False, negated)


def test_repeats_count_once() -> None:
    assert parse_query(" ".join(["alpha"] * 20_000)).groups == ((words("alpha"),),)
    assert parse_query("a b a -c b -c").groups == ((words("a"), words("b"), words("c", negated=True)),)
    assert parse_query("a OR b OR a OR a").groups == ((words("a"),), (words("b"),))
    assert parse_query('"a b" "a b" a').groups == ((words("a", "b"), words("a")),)
    assert parse_query("a a").cut is None


def test_a_query_over_the_bound_is_cut_and_says_so() -> None:
    many = [f"w{i}" for i in range(MAX_TOKENS + 36)]
    query = parse_query(" ".join(many))
    assert [t.tokens[0] for t in query.groups[0]] == many[:MAX_TOKENS]
    assert query.cut is not None and f"{MAX_TOKENS + 36:,} words" in query.cut
    phrase = parse_query('"' + " ".join(["alpha"] * 14_000) + '" -beta')
    assert phrase.groups == ((Term(("alpha",) * MAX_TOKENS, False, False),),)  # no room left for -beta
    # Positive terms first; then the exclusions that fit whole, in their place.
    mixed = parse_query("-x " + " ".join(many[:MAX_TOKENS - 1]))
    assert mixed.groups[0][0] == words("x", negated=True) and len(mixed.groups[0]) == MAX_TOKENS
    # A group left without a word to find is dropped with its exclusions.
    grouped = parse_query(" ".join(many[:MAX_TOKENS]) + " OR other -no")
    assert len(grouped.groups) == 1 and grouped.cut is not None
    assert len(tsquery(phrase)) < 20 * MAX_TOKENS  # what PostgreSQL parses is bounded too
    with pytest.raises(SearchQueryError) as refused:
        parse_query("-" + "x" * 100_000)
    assert len(str(refused.value)) < 500  # the query is not echoed whole


def one_session(root: Path | str, kind: str, tmp_path: Path) -> str:
    return add_session(root, kind, str(tmp_path), Script().text_turn("alpha beta question", "gamma answer"), DAY0)


def check_query_bounds(root: Path | str, kind: str, sid: str) -> None:
    base = ("--store", str(root), "--backend", kind, "search")
    repeated = cli(*base, " ".join(["alpha"] * 20_000), "--json")
    assert repeated.code == 0 and repeated.err == "", repeated.err
    assert [h["sessionId"] for h in orjson.loads(repeated.raw)] == [sid]
    phrase = cli(*base, '"' + " ".join(["alpha"] * 14_000) + '"', "--json")
    assert phrase.code == 0, phrase.err
    assert orjson.loads(phrase.raw) == [] and f"only {MAX_TOKENS} were searched" in phrase.err, phrase.err


def check_odd_arguments(root: Path | str, kind: str, sid: str) -> None:
    base = ("--store", str(root), "--backend", kind, "search")
    for args in (("--since", "1970-01-02"), ("--until", "9999-12-30"), ("-n", "1000000000"),
                 ("--since", "99999999999999999999d")):  # a span back past 1970: from the start
        result = cli(*base, "alpha", "--json", *args)
        assert result.code == 0, (args, result.err)
        assert [h["sessionId"] for h in orjson.loads(result.raw)] == [sid], args
    # Beyond what they can mean: one line naming the option, exit 2 (docs/cli.md).
    for command, option, value, said in (
            ("search", "--since", "0001-01-01", "not a time from 1970 to 9999"),
            ("search", "--until", "0001-01-01", "not a time from 1970 to 9999"),
            ("stats", "--since", "0001-01-01", "not a time from 1970 to 9999"),
            ("search", "-n", "99999999999999999999", "must be 1 to 1,000,000,000"),
            ("search", "-n", "0", "must be 1 to 1,000,000,000"),
            ("list", "-n", "99999999999999999999", "must be 1 to 1,000,000,000"),
            ("search", "--model", "m" * 100_000, "--model: at most 1,000 characters"),
            ("search", "--agent", "m" * 100_000, "--agent: at most 1,000 characters"),
            ("stats", "--model", "m" * 100_000, "--model: at most 1,000 characters")):
        args = (command, *(("alpha",) if command == "search" else ()), option, value)
        result = cli("--store", str(root), "--backend", kind, *args)
        # The one line that says it (argparse's own refusals come after its usage lines).
        assert result.code == 2 and said in result.err.splitlines()[-1], (option, value[:30], result.err)
        assert "Traceback" not in result.err, result.err
        assert "cannot read the store" not in result.err


@pytest.mark.parametrize("check", [check_query_bounds, check_odd_arguments], ids=["bounds", "arguments"])
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_the_file_stores(tmp_path: Path, kind: str, check: Callable[[Path | str, str, str], None]) -> None:
    root = tmp_path / "store"
    check(root, kind, one_session(root, kind, tmp_path))


@pytest.mark.parametrize("check", [check_query_bounds, check_odd_arguments], ids=["bounds", "arguments"])
def test_postgres(pg_dsn: str, tmp_path: Path, check: Callable[[Path | str, str, str], None]) -> None:
    check(pg_dsn, "postgres", one_session(pg_dsn, "postgres", tmp_path))
