"""Building session logs for tests: a small fluent builder of (type, data) items that
follow the invariants, and helpers to write them through a SessionLog."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import orjson

from session import (
    Event,
    SessionLog,
    SessionStore,
    check_invariants,
    interrupted_turn_closers,
    open_backend,
)
from session.events import EventType
from session.items import Item as SessionItem
from session.transcript import Transcript

Item = tuple[EventType, dict[str, Any]]
"""A `session.items.Item` whose data is a plain dict, for tests to build and tamper with."""


class Script:
    """Append-only list of (type, data) items; methods track turn and step numbers."""

    def __init__(self, first_turn: int = 1) -> None:
        self.items: list[Item] = []
        self.turn = first_turn - 1
        self.step = 0

    def add(self, etype: EventType, data: dict[str, Any]) -> Script:
        self.items.append((etype, data))
        return self

    def start_turn(self, prompt: str = "hello there") -> Script:
        self.turn += 1
        self.step = 0
        self.add("turn/start", {"turn": self.turn, "trigger": {"kind": "prompt"}, "mode": "ask"})
        return self.add(
            "user/message", {"turn": self.turn, "content": [{"type": "text", "text": prompt}]}
        )

    def start_step(self) -> Script:
        self.step += 1
        return self.add("step/start", {"turn": self.turn, "step": self.step})

    def chunk(self, text: str, kind: str = "text") -> Script:
        return self.add(
            "assistant/chunk",
            {"turn": self.turn, "step": self.step, "chunk": {"type": kind, "text": text}},
        )

    def message(self, text: str = "", calls: tuple[str, ...] = (), usage: bool = True) -> Script:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call_id in calls:
            content.append(
                {"type": "tool-call", "id": call_id, "name": "read_file",
                 "arguments": orjson.dumps({"path": f"{call_id}.txt"}).decode()}
            )
        data: dict[str, Any] = {"turn": self.turn, "step": self.step, "content": content}
        if usage:
            data["usage"] = {"inputTokens": 10, "outputTokens": 3}
        return self.add("assistant/message", data)

    def call(self, call_id: str, *, pending: bool = False) -> Script:
        """A `tool/call`; `pending`: it waits for a permission (`grant`) or a refusal."""
        data: dict[str, Any] = {"turn": self.turn, "step": self.step, "callId": call_id, "name": "read_file",
                                "arguments": {"path": f"{call_id}.txt"}, "title": f"Read {call_id}.txt",
                                "kind": "read", "locations": [{"path": f"/w/{call_id}.txt"}]}
        if pending:
            data["pending"] = True
        return self.add("tool/call", data)

    def grant(self, call_id: str, option: str = "allow_once") -> Script:
        """The `tool/permission` that lets a pending call run."""
        return self.add("tool/permission", {"turn": self.turn, "step": self.step, "callId": call_id,
                                            "permission": {"outcome": "selected", "optionId": option}})

    def result(self, call_id: str, text: str = "contents", error: bool = False) -> Script:
        return self.add(
            "tool/result",
            {"turn": self.turn, "step": self.step, "callId": call_id,
             "content": [{"type": "text", "text": text}], "isError": error},
        )

    def compaction(self, compaction_id: str = "k1", status: str = "in_progress", *, to_turn: int | None = None,
                   from_turn: int = 1, summary: list[dict[str, Any]] | None = None, **extra: Any) -> Script:
        """A `context/compaction` in the open step: the turns before this one (up to
        `to_turn`) summarized by `summary`."""
        last = self.turn - 1 if to_turn is None else to_turn
        return self.add("context/compaction", {
            "turn": self.turn, "step": self.step, "compactionId": compaction_id,
            "replaces": {"fromTurn": from_turn, "toTurn": last}, "summary": summary or [], "status": status,
            **extra})

    def compacted_turn(self, summary: str, prompt: str = "go on", answer: str = "going on", *,
                       to_turn: int | None = None, from_turn: int = 1) -> Script:
        """A turn whose first step compacts the turns before it (in progress, then
        completed with `summary`), then answers."""
        cid = f"t{self.turn + 1}s1-compaction"
        self.start_turn(prompt).start_step()
        self.compaction(cid, to_turn=to_turn, from_turn=from_turn)
        self.compaction(cid, "completed", to_turn=to_turn, from_turn=from_turn,
                        summary=[{"type": "text", "text": summary}], usage={"inputTokens": 50, "outputTokens": 5})
        return self.chunk(answer).message(answer).end_step().end_turn()

    def end_step(self) -> Script:
        return self.add("step/end", {"turn": self.turn, "step": self.step})

    def end_turn(self, kind: str = "completed", **fields: Any) -> Script:
        return self.add("turn/end", {"turn": self.turn, "reason": {"kind": kind, **fields}})

    # Whole turns.

    def text_turn(self, prompt: str = "hi", answer: str = "hello back") -> Script:
        self.start_turn(prompt).start_step()
        for word in answer.split():
            self.chunk(word + " ")
        return self.message(answer).end_step().end_turn()

    def title_turn(self, title: str) -> Script:
        """A `/title` turn as our agent records it (acp_bridge.host.commands): the
        prompt, its `config/set session/title`, the answer."""
        self.start_turn(f"/title {title}")
        self.add("config/set", {"configId": "session/title", "value": title, "turn": self.turn})
        return self.start_step().message("titled").end_step().end_turn()

    def tool_turn(self, calls: tuple[str, ...] = ("c1", "c2")) -> Script:
        self.start_turn("read files").start_step().chunk("thinking", "reasoning")
        self.message("reading", calls=calls)
        for call_id in calls:
            self.call(call_id).result(call_id)
        self.end_step().start_step().chunk("done").message("done").end_step()
        return self.end_turn()


def write(log: SessionLog, script: Script | Sequence[SessionItem]) -> list[Event]:
    items = script.items if isinstance(script, Script) else script
    return [log.append(etype, data) for etype, data in items]


def events_of(script: Script, start_seq: int = 0, time: int = 1_000) -> list[Event]:
    """The events a script would become, without a store (for the pure functions)."""
    return [
        {"type": etype, "seq": start_seq + i, "time": time + i, "data": data}
        for i, (etype, data) in enumerate(script.items)
    ]


def closers_of(events: Sequence[Event], *, cause: Literal["crash", "shutdown"] = "crash",
               time: int | None = None) -> list[Event]:
    """The closers crash repair appends to the log `events` (from seq 0; checked), stamped
    `time`, by default the last event's, as a load stamps them."""
    stamp = time if time is not None else events[-1]["time"] if events else 0
    return interrupted_turn_closers(check_invariants(events), time=stamp, cause=cause)


def load_clean(store: SessionStore, sid: str) -> tuple[list[Event], dict[str, Any]]:
    """The events and header of `sid` as a load gives them; the load must need no repair
    (the log is closed again either way)."""
    opened = store.load(sid)
    try:
        assert not opened.report.repaired, opened.report
        return list(opened.log.events), dict(opened.log.header)
    finally:
        opened.log.close()


def clean_events(store: SessionStore, sid: str) -> list[Event]:
    """load_clean's events."""
    return load_clean(store, sid)[0]


def stored_clean(store: Path, sid: str, backend: str = "jsonl") -> list[Event]:
    """A closed session's events from the store at that path, on a backend opened for the
    read: the load needs no repair, and the events keep the invariants of a closed log."""
    sessions = SessionStore(open_backend(backend, store))
    try:
        events = clean_events(sessions, sid)
    finally:
        sessions.close()
    check_invariants(events, closed=True)
    return events


def loaded_events(store: Path, sid: str, backend: str = "jsonl") -> list[dict[str, Any]]:
    """A stored session's events as a load gives them (checked, and repaired if a crash
    left its last turn open)."""
    sessions = SessionStore(open_backend(backend, store))
    try:
        loaded = sessions.load(sid)
        events = [dict(e) for e in loaded.log.events]
        loaded.log.close()
        return events
    finally:
        sessions.close()


def sized_turns(*answers: int) -> Transcript:
    """A transcript of one turn per answer: prompt "p<n>", then an answer the provider
    counted `answers[n - 1]` output tokens."""
    script = Script()
    for n, output in enumerate(answers, 1):
        script.start_turn(f"p{n}").start_step().add("assistant/message", {
            "turn": n, "step": 1, "content": [{"type": "text", "text": "a"}],
            "usage": {"inputTokens": 1, "outputTokens": output}}).end_step().end_turn()
    transcript = Transcript()
    transcript.feed_all(events_of(script))
    return transcript
