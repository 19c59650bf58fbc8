"""The search index's query language, whatever index answers it (session.search.fts,
.pg): `word word` (both), `"a phrase"`, `pre*`, `-word`, `a OR b`, parsed to a `Query`,
written for SQLite FTS5 (`fts5_match`) and PostgreSQL (`tsquery`); and the snippet of a
hit around its matches, one copy for every index. Pure.

Texts are tokenized as SQLite's `unicode61` tokenizer does (letters and digits, case
folded, nothing else), and the PostgreSQL index is given the same tokens, so a query
finds the same turns in every store: `main.py` is the two words `main py`, found as a
phrase.

Bounded, so that a search costs time linear in its text whatever the index: FTS5's
cost grows with the square of a query's terms (20,000 repeats of one word: 4.3 s) and
PostgreSQL parses a phrase recursively (14,000 words: "stack depth limit exceeded").
A term given twice in a group, and a group given twice, count once (the same turns
match); then at most MAX_TOKENS words are searched: the positive terms first, in the
query's order (a phrase cut to what is left of the budget), then the negations that
fit whole; an `OR` group left without a word to find is dropped. Within a group, a cut
finds what the whole group finds and maybe more (fewer words to hold, fewer to be
without); a dropped group's turns are not found. `Query.cut` says what was left out,
for the caller to say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from session.errors import SearchQueryError

_TOKEN = re.compile(r"[^\W_]+")
MAX_TOKENS = 64
"""Words a query searches at most, once repeats are dropped (see the module)."""


@dataclass(frozen=True)
class Term:
    tokens: tuple[str, ...]  # a phrase: these tokens in this order
    prefix: bool  # the last token is a prefix
    negated: bool


@dataclass(frozen=True)
class Query:
    """`word word` (both), `"a phrase"`, `pre*` (a prefix), `-word` (not), `a OR b`:
    groups of terms, any group matching. Words are tokenized as the texts are."""

    groups: tuple[tuple[Term, ...], ...]
    text: str
    cut: str | None = None  # what the MAX_TOKENS bound left out, said to the person

    def positive_tokens(self) -> list[tuple[str, bool]]:
        """(token, is a prefix) of every term that is not negated: what a snippet marks."""
        out = []
        for group in self.groups:
            for term in group:
                if not term.negated:
                    out += [(t, term.prefix and i == len(term.tokens) - 1) for i, t in enumerate(term.tokens)]
        return out


_PART = re.compile(r'(-?)"([^"]*)"(\*?)|(\S+)')


def tokens_of(text: str) -> list[str]:
    """The tokens of a text, as the index has them (unicode61: letters and digits, folded)."""
    return [t.casefold() for t in _TOKEN.findall(text)]


def parse_query(text: str) -> Query:
    """Raises SearchQueryError for a query without anything to find."""
    groups: list[tuple[Term, ...]] = []
    current: dict[Term, None] = {}  # in order, each term once
    for match in _PART.finditer(text):
        neg, phrase, star, word = match.groups()
        if word is not None:
            if word == "OR":
                groups.append(tuple(current))
                current = {}
                continue
            neg = "-" if word.startswith("-") and len(word) > 1 else ""
            body = word[1:] if neg else word
            star = "*" if body.endswith("*") else ""
            phrase = body
        tokens = tuple(tokens_of(phrase))
        if tokens:
            current.setdefault(Term(tokens, bool(star), bool(neg)))
    groups.append(tuple(current))
    kept = tuple(dict.fromkeys(g for g in groups if g))  # a group given twice, once
    if not kept or any(all(t.negated for t in g) for g in kept):
        shown = text if len(text) <= 200 else text[:199] + "…"
        raise SearchQueryError(
            f"nothing to search for in {shown!r}: give at least one word (letters or digits) "
            "to find in each part, e.g. `timeout -retry` or `\"exact phrase\"`")
    return bounded(Query(kept, text))


def bounded(query: Query) -> Query:
    """`query` searching at most MAX_TOKENS words (see the module): positive terms
    first, in order, the last one kept cut to the budget's end; then the negations that
    fit whole; groups left without a positive term are dropped."""
    total = sum(len(t.tokens) for group in query.groups for t in group)
    if total <= MAX_TOKENS:
        return query
    budget = MAX_TOKENS
    kept: dict[tuple[int, int], Term] = {}
    for g, group in enumerate(query.groups):
        for i, term in enumerate(group):
            if not term.negated and budget > 0:
                head = term.tokens[:budget]
                kept[(g, i)] = term if len(head) == len(term.tokens) else Term(head, False, False)
                budget -= len(head)
    for g, group in enumerate(query.groups):
        for i, term in enumerate(group):
            if term.negated and len(term.tokens) <= budget and any(k[0] == g for k in kept):
                kept[(g, i)] = term
                budget -= len(term.tokens)
    groups = tuple(tuple(kept[(g, i)] for i in range(len(group)) if (g, i) in kept)
                   for g, group in enumerate(query.groups))
    groups = tuple(group for group in groups if group)
    searched = sum(len(t.tokens) for group in groups for t in group)
    said = (f"the query has {total:,} words (repeats counted once); only {searched:,} were searched "
            f"(at most {MAX_TOKENS}): its first words, then exclusions that fit")
    return Query(groups, query.text, said)


def fts5_match(query: Query) -> str:
    """The query in SQLite FTS5's MATCH syntax."""
    def term(t: Term) -> str:
        return '"' + " ".join(t.tokens) + '"' + ("*" if t.prefix else "")

    parts = []
    for group in query.groups:
        positive = " AND ".join(term(t) for t in group if not t.negated)
        negative = "".join(f" NOT {term(t)}" for t in group if t.negated)
        parts.append(f"({positive}{negative})")
    return " OR ".join(parts)


def tsquery(query: Query, *, near: str = " <-> ") -> str:
    """The query as PostgreSQL `to_tsquery('simple', ...)` text (tokens are letters and
    digits only: nothing to quote); with `near=" & "`, a phrase as its words anywhere
    (what the GIN index answers alone, without reading a text)."""
    def term(t: Term) -> str:
        words = [f"'{tok}'" for tok in t.tokens]
        if t.prefix:
            words[-1] += ":*"
        inner = near.join(words)
        return ("!" if t.negated else "") + (f"({inner})" if len(words) > 1 else inner)

    return " | ".join("(" + " & ".join(term(t) for t in group) + ")" for group in query.groups)


# --- snippets ---------------------------------------------------------------------------------


SNIPPET = 200  # characters of a snippet, about


def snippet(text: str, query: Query) -> tuple[str, list[tuple[int, int]]]:
    """`text` around its first match (whitespace folded), at most about SNIPPET
    characters, with the (start, end) of every match in it. One copy for every index,
    so a hit reads the same whatever the store."""
    wanted = query.positive_tokens()
    if not wanted:
        return " ".join(text[:SNIPPET * 4].split())[:SNIPPET], []
    alternatives = sorted({re.escape(t) + (r"[^\W_]*" if prefix else "") for t, prefix in wanted},
                          key=len, reverse=True)
    pattern = re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])", re.IGNORECASE)
    if len(text) > SNIPPET * 8:  # a long text (a piece is up to 32,000 characters): fold only around its match
        near = pattern.search(text)
        at = near.start() if near is not None else 0
        head = max(0, at - SNIPPET * 2)
        text = ("… " if head else "") + text[head:at + SNIPPET * 4]
    folded = " ".join(text.split())
    first = pattern.search(folded)
    start = 0 if first is None else max(0, first.start() - SNIPPET // 4)
    if start:
        space = folded.find(" ", start)
        start = space + 1 if 0 <= space < (first.start() if first else start) else start
    end = min(len(folded), start + SNIPPET)
    if end < len(folded):
        space = folded.rfind(" ", start, end)
        end = space if space > (first.end() if first else start) else end
    shown = folded[start:end]
    marks = [(m.start(), m.end()) for m in pattern.finditer(shown)]
    prefix = "…" if start else ""
    suffix = "…" if end < len(folded) else ""
    return prefix + shown + suffix, [(a + len(prefix), b + len(prefix)) for a, b in marks]
