"""A stored session as the search index keeps it (docs/search.md): each turn's facts
(when, model, mode, how it ended, tokens, steps, tool calls and their errors, the cost
a wrapped agent reported) and its texts (the prompt, each step's thinking and answer,
each tool call and its output), read with `session`'s read-only reader and built with
the same `TurnBuilder` as `show`, one turn in memory at a time.

A read starts where the index stopped (`SessionRow.at`: its last indexed `turn/end`)
and checks that that record is still there, the same, before it goes on: a log cut or
rewritten behind the index raises `Rewound`, and the indexer reads it from its start.
The torn-tail rule applies as it does for a load: damage that a `turn/end` follows is
`SessionCorruptError` (the session is kept as damaged); a torn tail is not indexed.
The invariants are checked as a load checks them (a read that starts at a `turn/end`
starts the tracker where that record leaves it): a log that breaks them is still
indexed, for search, but its row says it was not `checked`, and `sessions list` then
reads the log itself (and shows it as damaged, as a load would refuse it).
"""

from __future__ import annotations

from acp_bridge.cli.sessions.text import blocks_text
from acp_bridge.cli.sessions.turns import Turn, TurnBuilder
from acp_bridge.cli.sessions.view import tool_diffs, wrapped_agent
from session.search.base import DocRow, Rewound, SessionRow, TurnRow
from session.typed import typed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any

    from session.backends.base import ReadStream, Stamp
    from session.events import Event
    from session.items import WrappedUpdateData
    from session.typed import TurnEndEvent

OURS = "acp-bridge"  # the agent of a session our own agent recorded


def session_row(sid: str, stream: ReadStream, stamp: Stamp) -> SessionRow:
    """The facts of a session from its header (and the store's title, if it keeps one)."""
    import orjson

    header: dict[str, Any] = dict(stream.header)
    agent = wrapped_agent(header)
    name = agent.product if agent is not None else OURS
    imported = header.get("imported")
    if isinstance(imported, dict) and isinstance(imported.get("agent"), str):
        name = imported["agent"]  # `acp-bridge import`'s: the agent that wrote it (docs/import.md)
    row = SessionRow(sid, int(header.get("createdAt") or 0), str(header.get("cwd", "")), name, stream.title,
                     stamp, header=orjson.dumps(header).decode())
    forked = header.get("forkedFrom")
    parent = forked.get("sessionId") if isinstance(forked, dict) else None
    if isinstance(parent, str) and parent != sid and copied_turns(header):  # found in the original
        row.fork_of, row.fork_turn = parent, copied_turns(header)
    return row


def copied_turns(header: Mapping[str, object]) -> int:
    """How many of a session's first turns are a copy of another's (a fork's, up to
    `forkedFrom.turn`): lineage, counted where they ran (docs/search.md, "How the stats
    count")."""
    forked = header.get("forkedFrom")
    turn = forked.get("turn") if isinstance(forked, dict) else None
    return turn if isinstance(turn, int) and not isinstance(turn, bool) and turn > 0 else 0


def title_after(title: str | None, prompted: bool, event: Event) -> tuple[str | None, bool]:
    """The index's title of a session once `event` is read, and whether its first prompt
    has been: the store's own title, else its first prompt's (`first_prompt_title`), as
    `sessions list` reads it from the log (source.py). The one place the index decides a
    title: a title set later in the log would be taken here."""
    from session.titles import first_prompt_title

    if prompted or event["type"] != "user/message":
        return title, prompted
    return title if title is not None else first_prompt_title(event), True


class TurnFeed:
    """The turns of one session's log from `previous.at` on (from its start without
    one): `turns()` once, then `row()` (session.search.base.Feed). Closes `stream`."""

    def __init__(self, sid: str, stream: ReadStream, stamp: Stamp, previous: SessionRow | None) -> None:
        self.sid = sid
        self._stream = stream
        self._row = session_row(sid, stream, stamp)
        self._copies = copied_turns(stream.header)
        self._previous = previous
        if previous is not None:  # resumed: what was read up to `at` stays as it was
            if previous.created != self._row.created:
                stream.close()
                raise Rewound(f"session {sid}: another header")
            self._row.title = self._row.title or previous.title
            self._row.at, self._row.at_time, self._row.at_turn = previous.at, previous.at_time, previous.at_turn
            self._row.cost, self._row.currency = previous.cost, previous.currency
            self._row.checked = previous.checked

    def row(self) -> SessionRow:
        return self._row

    def turns(self) -> Iterator[tuple[TurnRow, list[DocRow]]]:
        from session import InvariantError, InvariantTracker
        from session.backends.base import At
        from session.scan import TailSplitter

        stream, row, previous = self._stream, self._row, self._previous
        at = previous.at if previous is not None else None
        splitter = TailSplitter(self.sid, stream.locate, start=at.seq if at is not None else 0)
        builder = TurnBuilder(keep=False)
        checked = at is None
        # Where the log stands after the turn/end the last read stopped at: outside a
        # turn, that turn the last (its tool calls all closed with it).
        tracker: InvariantTracker | None = InvariantTracker(session_id=self.sid)
        if at is None:
            row.checked = True
        elif row.checked and previous is not None:
            tracker = InvariantTracker(session_id=self.sid, next_seq=at.seq + 1, turn=previous.at_turn or 0)
        else:
            tracker = None
        prompted = at is not None  # turn 1, its prompt with it, ended before where it stopped
        last_end: TurnEndEvent | None = None
        turn_cost: tuple[float, str] | None = None
        try:
            for block in stream.blocks():
                if not checked:
                    self._check(block[0] if block else None)
                    checked = True
                events = splitter.feed(block)
                if events and at is not None and events[0]["seq"] == at.seq:
                    events = events[1:]  # the turn/end the last read stopped at
                if tracker is not None:
                    try:
                        tracker.feed_stored(events)
                    except InvariantError:  # still indexed (search finds it); `list` reads the log
                        tracker, row.checked = None, False
                for event in events:
                    ev = typed(event)
                    if ev["type"] == "user/message":
                        row.title, prompted = title_after(row.title, prompted, event)
                    elif ev["type"] == "wrapped/update":
                        turn_cost = _reported_cost(ev["data"], turn_cost)
                    elif ev["type"] == "config/set" and "wrapped" in ev["data"]:
                        # Moved to another agent (docs/persistence.md, config/set.wrapped):
                        # its cost counts from its own session's start, not the last one's.
                        row.cost = row.currency = None
                    done = builder.feed(event)
                    if done is None:
                        continue
                    try:
                        yield self._rows(done, turn_cost)
                    finally:
                        done.close()
                    assert ev["type"] == "turn/end"  # what completes a turn
                    turn_cost, last_end = None, ev
            if not checked:
                raise Rewound(f"session {self.sid}: the log ends before where the index stopped")
            splitter.finish()  # a torn tail is not indexed: a load will cut it
            if builder.turn is not None:  # open: running, or cut short and not yet repaired
                try:
                    yield self._rows(builder.turn, turn_cost, keep_cost=False)
                finally:
                    builder.turn.close()
            if last_end is not None:
                where = stream.locate(last_end["seq"])  # JSONL: its offset, for the next read
                row.at = At(last_end["seq"], where.get("offset"))
                row.at_time, row.at_turn = last_end["time"], int(last_end["data"].get("turn", 0))
        finally:
            stream.close()

    def _check(self, first: object) -> None:
        """The first record read must be the `turn/end` the last read stopped at."""
        previous = self._previous
        assert previous is not None and previous.at is not None
        if not (isinstance(first, dict) and first.get("type") == "turn/end"
                and first.get("seq") == previous.at.seq and first.get("time") == previous.at_time
                and isinstance(first.get("data"), dict) and first["data"].get("turn") == previous.at_turn):
            raise Rewound(f"session {self.sid}: the log changed before seq {previous.at.seq}")

    def _rows(self, turn: Turn, cost: tuple[float, str] | None, *,
              keep_cost: bool = True) -> tuple[TurnRow, list[DocRow]]:
        reason = turn.reason
        tools = [tool for step in turn.steps for tool in step.tools]
        facts = TurnRow(turn.number, turn.started_at, turn.ended_at, turn.model, turn.mode,
                        str(reason.get("kind")) if reason else "open", reason, dict(turn.usage),
                        len(turn.steps), len(tools),
                        sum(1 for t in tools if t.result is not None and t.result.get("isError")),
                        kind="command" if turn.command is not None else "prompt",
                        copied=turn.number <= self._copies)
        if cost is not None:  # what the agent said the session cost by this turn's end
            amount, currency = cost
            before = self._row.cost if self._row.currency == currency else None
            facts.cost = amount - before if before is not None and amount >= before else amount
            facts.currency = currency
            if keep_cost:
                self._row.cost, self._row.currency = amount, currency
        return facts, docs_of(turn)


def _reported_cost(data: WrappedUpdateData, last: tuple[float, str] | None) -> tuple[float, str] | None:
    """A wrapped agent's `usage_update.cost` (ACP: the session's cumulative cost), if
    this update carries one."""
    update = data.get("update")
    cost = update.get("cost") if isinstance(update, dict) and update.get("sessionUpdate") == "usage_update" else None
    if not isinstance(cost, dict):
        return last
    amount, currency = cost.get("amount"), cost.get("currency")
    if isinstance(amount, int | float) and not isinstance(amount, bool) and amount >= 0 and isinstance(currency, str):
        return float(amount), currency[:16]
    return last


def docs_of(turn: Turn) -> list[DocRow]:
    """The texts of a turn, as `show --full` has them: the prompt, then each step's
    compactions' summaries, thinking, answer, and tool calls (name, title, the text of
    their arguments, the files they edit and what they wrote there) and their output."""
    number = turn.number
    docs = [DocRow(number, 0, "prompt", None, blocks_text(turn.prompt))]
    for step in turn.steps:
        docs += [DocRow(number, step.number, "summary", cid, blocks_text(compaction.summary))
                 for cid, compaction in step.compactions.items()]
        docs.append(DocRow(number, step.number, "thought", None, step.shown_reasoning()))
        docs.append(DocRow(number, step.number, "answer", None, step.shown_text()))
        for tool in step.tools:
            words = [tool.name, tool.title or "", *argument_texts(tool.arguments)]
            for path, _, new in tool_diffs(tool):
                words.append(path)
                if new not in words:  # a write's content is most often its argument already
                    words.append(new)
            docs.append(DocRow(number, step.number, "tool", tool.call_id, "\n".join(w for w in words if w)))
            if tool.result is not None:
                output = blocks_text(tool.result.get("content"))
                error = tool.result.get("error")
                if isinstance(error, dict):
                    output += f"\n{error.get('name', '')} {error.get('code', '')}"
                docs.append(DocRow(number, step.number, "output", tool.call_id, output))
    return [doc for doc in docs if doc.text.strip()]


def argument_texts(arguments: object) -> list[str]:
    """The text of a tool call's arguments: every string (and number) in them, as text,
    in order, never their JSON (whose escapes would glue a line's first word to `n`, and
    whose keys and quotes are not what anyone searches for). Arguments given as JSON
    text are parsed first; text that is not JSON is itself the text."""
    import orjson

    value: object = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return [arguments]
    out: list[str] = []
    stack = [value]
    while stack:  # depth first, in order, without recursion (a log's nesting is not ours)
        value = stack.pop()
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out.append(str(value))
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
    return out
