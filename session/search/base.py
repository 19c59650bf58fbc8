"""What a search index holds and answers, whatever keeps it (session.search.fts, .pg):
the rows of a session, its turns and their texts (cut in pieces); the filters; a hit; a
row of usage figures. Pure, but for the `SearchIndex` protocol its implementations fill
in. The query language and the snippets are session.search.query's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from session.backends.base import At, Stamp
from session.errors import IndexDamaged as IndexDamaged  # what a search index and its feeds raise
from session.errors import IndexUnwritable as IndexUnwritable
from session.errors import Rewound as Rewound
from session.search.query import Query

FORMAT = "5"
"""The index's own format version, stored in it: an index of another is rebuilt.
2: a session's row keeps its header and whether its log was checked (`sessions list`
takes its facts from fresh rows). 4: a turn's row says what started it (a prompt or a
command) and whether it is a fork's copy of its original's turn (the stats count it
once, in the session that ran it). 5: a tool call's text is its arguments' strings,
not their JSON, with what its edits wrote; a copied turn is linked to the session it
ran in (`turns.origin`: search finds it once); a text's id orders equal scores."""

KINDS = ("prompt", "answer", "thought", "tool", "output", "summary")
"""What a text of a turn is: the user's prompt, an answer, the model's thinking, a tool
call (its name, title, arguments, the files it edits), a tool call's output, the summary
of a compaction of the model's context (`context/compaction`)."""

STATES = ("completed", "cancelled", "error", "interrupted", "max_tokens", "max_steps", "refusal", "open")
"""How a turn ended: a `turn/end` reason kind, or `open` (running, or cut short and not
yet repaired: which of the two is the owner's to say, when it is shown)."""

PIECE = 32_000
"""Characters of one indexed text at most: a longer text is indexed in pieces (each
found, ranked and quoted on its own), so a snippet and a PostgreSQL tsvector stay small."""
TEXT_LIMIT = 4_000_000
"""Characters of one text indexed at most (a tool's output of 50 MB is found by its
first 4 M characters)."""

# What a snippet marks a match with in a stored text: never part of one (`clean_text`).
MARK, UNMARK = "\ue000", "\ue001"


@dataclass
class SessionRow:
    """A session as the index keeps it, and where its reading stopped: `at` is the
    last indexed `turn/end` (its seq, time, turn number; the offset in a JSONL file),
    so the next read starts there and checks that record first."""

    id: str
    created: int
    cwd: str
    agent: str  # the wrapped agent's name; "acp-bridge" for our own agent's sessions
    title: str | None
    stamp: Stamp
    at: At | None = None
    at_time: int | None = None
    at_turn: int | None = None
    cost: float | None = None  # a wrapped agent's cumulative `usage_update.cost` at `at`
    currency: str | None = None
    damaged: str | None = None  # why the log cannot be read (then no turn is kept)
    header: str = "{}"  # the log's header as JSON (what `sessions list` shows of it)
    # Whether every event read, from seq 0 to where the reading stopped, kept the log
    # invariants as a load checks them: only then may `list` show the row's facts.
    checked: bool = False
    # A fork's `forkedFrom`: its turns up to `fork_turn` are copies of that session's.
    fork_of: str | None = None
    fork_turn: int | None = None


@dataclass
class SessionBrief:
    """What `sessions list` shows of a session, from its index rows: the session's row,
    its number of turns, their token sums, and its last turn's number, state and reason."""

    row: SessionRow
    turns: int
    tokens: dict[str, int]
    last_turn: int | None
    last_state: str | None
    last_reason: dict[str, Any] | None


@dataclass
class TurnRow:
    turn: int
    started: int
    ended: int | None
    model: str | None
    mode: str | None
    state: str  # one of STATES
    reason: Mapping[str, Any] | None  # as the log holds it (one the invariants refused too)
    tokens: dict[str, int]  # session.events.Usage's token counts, summed over the steps
    steps: int
    tools: int
    tool_errors: int
    cost: float | None = None  # what a wrapped agent said this turn cost (usage_update.cost)
    currency: str | None = None
    kind: str = "prompt"  # what started it (`turn/start.trigger.kind`): "prompt" or "command"
    # A fork's copy of a turn its original ran (the fork's turns up to `forkedFrom.turn`):
    # lineage, not new work; the stats count the turn where it ran.
    copied: bool = False


@dataclass
class DocRow:
    turn: int
    step: int  # 0: the prompt
    kind: str  # one of KINDS
    ref: str | None  # the tool call's id
    text: str


class Feed(Protocol):
    """A session's turns as the indexer reads them: `turns()` once (each turn with its
    texts, the open last turn too), then `row()` says where the reading stopped.
    `turns()` raises Rewound, and what the reader raises for a damaged log."""

    def turns(self) -> Iterator[tuple[TurnRow, list[DocRow]]]: ...

    def row(self) -> SessionRow: ...


TOKEN_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens")


@dataclass
class StatsRow:
    """Sums over the turns of one group and model (the model prices them): each turn
    once, in the session that ran it (a fork's copies left out); `turns` and `errors`
    are the prompts', a slash command's turn is counted in `commands` (and, when it
    could not run, `failed_commands`)."""

    key: Any  # the group: a quarter-hour (epoch ms // 900_000), a model, an agent, a cwd
    model: str | None
    turns: int
    errors: int
    interrupted: int
    cancelled: int
    tokens: dict[str, int]
    reported: dict[str, float]  # currency -> what wrapped agents said their turns cost
    reported_turns: int  # turns with such a figure
    tool_errors: int
    commands: int = 0
    failed_commands: int = 0


@dataclass
class Hit:
    """One turn a query found: its best text (kind, step, tool call) and the turn's and
    session's facts. `snippet` is that text around its matches, with `marks`: the
    (start, end) of each match in it."""

    session_id: str
    turn: int
    kind: str
    step: int
    ref: str | None
    score: float
    title: str | None
    cwd: str
    agent: str
    started: int
    model: str | None
    state: str
    reason: dict[str, Any] | None
    doc_id: int = 0
    snippet: str = ""
    marks: list[tuple[int, int]] = field(default_factory=list)
    origin: str = ""  # the session the turn ran in (the hit's own, unless that is gone or filtered out)
    copies: list[str] = field(default_factory=list)  # the other sessions that hold it: forks, or the original


# --- filters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """What a search or the stats keep: sessions of one of `cwds`, of `agent` (its name,
    any case), turns on `model` (the spec, or the name after its `provider:`, any case),
    started in [since, until) (epoch ms), ended one of `ended` (`interrupted` takes the
    open turns too: which of them still run is for the caller to tell), texts of `kinds`."""

    cwds: tuple[str, ...] = ()
    agent: str | None = None
    model: str | None = None
    since: int | None = None
    until: int | None = None
    ended: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()

    def where(self, mark: str) -> tuple[list[str], list[Any]]:
        """SQL conditions on `s` (sessions), `t` (turns) and, for kinds, `d` (the texts'
        rows), with `mark` as the parameter placeholder ("?" or "%s")."""
        out: list[str] = []
        args: list[Any] = []
        if self.cwds:
            out.append(f"s.cwd IN ({', '.join([mark] * len(self.cwds))})")
            args += [without_nul(cwd) for cwd in self.cwds]
        if self.agent is not None:
            out.append(f"lower(s.agent) = {mark}")
            args.append(without_nul(self.agent).lower())
        if self.model is not None:
            name = without_nul(self.model).lower()
            like = "%:" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            out.append(f"(lower(t.model) = {mark} OR lower(t.model) LIKE {mark} ESCAPE '\\')")
            args += [name, like]
        if self.since is not None:
            out.append(f"t.started >= {mark}")
            args.append(self.since)
        if self.until is not None:
            out.append(f"t.started < {mark}")
            args.append(self.until)
        if self.ended:
            states = sorted({*self.ended, *(("open",) if "interrupted" in self.ended else ())})
            out.append(f"t.state IN ({', '.join([mark] * len(states))})")
            args += states
        if self.kinds:
            out.append(f"d.kind IN ({', '.join([mark] * len(self.kinds))})")
            args += self.kinds
        return out, args


@dataclass(frozen=True)
class Changes:
    """What a pass reads, found where the store and its index are one database
    (`SearchIndex.changes`): each session whose stamp differs from the index's, with
    whether the index holds a row of it; the indexed sessions the store no longer
    holds; how many sessions the store holds."""

    changed: list[tuple[str, Stamp, bool]]
    gone: list[str]
    stored: int


def stamp_text(stamp: Stamp) -> str:
    """A stamp as the index keeps it."""
    return ",".join(map(str, stamp))


# --- texts -------------------------------------------------------------------------------------


def without_nul(text: str) -> str:
    """A text value as both indexes keep it, and as a filter is compared with it:
    PostgreSQL's text holds no NUL (nor can a parameter of a query carry one), so a NUL
    is kept as U+FFFD, everywhere alike."""
    return text.replace("\0", "\ufffd") if "\0" in text else text


def clean_text(text: str) -> str:
    """A text as stored: without the snippet marks (and NUL, which PostgreSQL's text refuses)."""
    if MARK in text or UNMARK in text:
        text = text.replace(MARK, " ").replace(UNMARK, " ")
    return without_nul(text)


def pieces(text: str) -> list[str]:
    """`text` (up to TEXT_LIMIT) in pieces of at most PIECE characters, cut at a space
    where there is one in the piece's last tenth."""
    text = clean_text(text[:TEXT_LIMIT])
    out = []
    while len(text) > PIECE:
        cut = text.rfind(" ", PIECE - PIECE // 10, PIECE)
        cut = PIECE if cut < 0 else cut + 1
        out.append(text[:cut])
        text = text[cut:]
    if text.strip():
        out.append(text)
    return out


class Briefs(Protocol):
    """An index opened read-only for `sessions list` (fts.FtsBriefs, pg.PgBriefs): never
    made, rebuilt or written. `briefs` is None where there is nothing to trust (no
    index, one of another format or store, a damaged one): the caller reads the logs."""

    def briefs(self, session_ids: Sequence[str]) -> dict[str, SessionBrief] | None: ...

    def close(self) -> None: ...


class SearchIndex(Protocol):
    """A store's search index. `lock()` before writing: False if another indexer holds
    it (then read what is there). Raises SearchIndexError where it cannot work."""

    where: str
    rebuilt: str | None  # why the index was made again, if it was (once opened)

    def lock(self, wait: float) -> bool: ...

    def rebuild(self, why: str) -> None:
        """Drop everything: the index is made again at its next use."""

    def unlock(self) -> None: ...

    def sessions(self) -> dict[str, SessionRow]: ...

    def stamps(self) -> dict[str, str]:
        """Every session's stamp as last read, as text (`stamp_text`: what a pass
        compares; the rows of the sessions that changed are then read one by one)."""

    def unreadable(self) -> dict[str, tuple[str, str]]:
        """Each session kept as unreadable: (its stamp as text, why), without reading
        every row (a pass compares stamps alone)."""

    def changes(self, conninfo: str | None) -> Changes | None:
        """Where the index lives in the store's own database (PostgreSQL; `conninfo`, the
        store's, None for a file store): the sessions whose stamps differ, compared
        there in one query, not every stamp of both sent here (10,000 sessions: 44 ->
        5 ms a pass). None where the pass compares the stamps itself."""

    def fingerprint(self) -> str | None:
        """The store's fingerprint (`StoreReader.fingerprint`) the last whole pass began
        with, if it had one."""

    def keep_fingerprint(self, fingerprint: str | None) -> None:
        """Keep (None: forget) the fingerprint a whole pass began with."""

    def session(self, session_id: str) -> SessionRow | None: ...

    def replace(self, session_id: str, from_turn: int, feed: Feed) -> None:
        """In one transaction: drop the session's turns from `from_turn` on (0: all of
        them), add the feed's, and keep its row. Raises what the feed raises, having
        changed nothing."""

    def damaged(self, row: SessionRow) -> None:
        """Keep `row` (its `damaged` says why) and drop the session's turns."""

    def drop(self, session_ids: Sequence[str]) -> None: ...

    def relink(self) -> None:
        """Mark each turn a fork copied with the session it ran in (`turns.origin`, after
        the fork's `forkedFrom` chain as far as the index knows it): a search finds it
        once. A pass that read or dropped a log ends with it."""

    def search(self, query: Query, filters: Filters, limit: int) -> list[Hit]:
        """The best `limit` turns, best first, one hit each (its best text), snippets made:
        a turn that forks copied is one hit, the original's where it is kept, naming the
        other sessions that hold it."""

    def open_turns(self, filters: Filters, by: str) -> list[tuple[Any, str]]:
        """(group key, session id) of each open turn the filters keep (see `stats`)."""

    def stats(self, filters: Filters, by: str) -> list[StatsRow]:
        """Sums per group (`by`: day, model, agent, cwd, session, or "" for one) and model."""

    def close(self) -> None: ...
