"""The store's side of an import (`SessionStore.publish`, `Backend.publish`) on every
backend: a session published whole, turns appended whole to one that holds exactly
what the import read, nothing written otherwise; and an imported session loaded through
our agent (`session/load`) replays what the native file says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session import SessionStore, open_backend
from session.backends.base import read_stored
from session.errors import InvariantError, SessionExistsError, SessionLockedError, StoreIOError
from session.events import SESSION_FORMAT_VERSION, Event, Header
from tests.support.logs import Script

SID = "0119a114-ba2b-5ec8-b601-1a2bb3eb91d2"
HEADER: Header = {"type": "session", "version": SESSION_FORMAT_VERSION, "id": SID, "createdAt": 1000, "cwd": "/w"}


def events(turns: int, *, first: int = 1, seq: int = 0) -> list[Event]:
    script = Script(first_turn=first)
    for n in range(turns):
        script.text_turn(f"prompt {first + n}", "an answer")
    return [{"type": kind, "seq": seq + i, "time": 2000 + seq + i, "data": dict(data)}
            for i, (kind, data) in enumerate(script.items)]


def store_of(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SessionStore:
    where: Any = request.getfixturevalue("pg_dsn") if kind == "postgres" else tmp_path / "store"
    return SessionStore(open_backend(kind, None if kind == "memory" else where))


def stored(store: SessionStore) -> list[Any]:
    return [(e["type"], e["seq"], e["time"], e["data"]) for e in read_stored(store.backend.read_stream(SID)).events]


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite", "postgres"])
def test_publish_is_whole_and_an_append_needs_exactly_what_was_read(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = store_of(kind, tmp_path, request)
    try:
        one = events(1)
        store.publish({**HEADER, "imported": {"agent": "claude-code", "file": "f", "sessionId": "n"}}, one)
        assert stored(store) == [(e["type"], e["seq"], e["time"], e["data"]) for e in one]
        assert [(s["title"], s["updatedAt"]) for s in store.list()] == [("prompt 1", one[-1]["time"])]
        with pytest.raises(SessionExistsError):
            store.publish(HEADER, one)
        two = events(2, first=2, seq=len(one))
        with pytest.raises(StoreIOError, match="changed while it was imported"):
            store.publish(HEADER, events(2, first=2, seq=len(one) - 1), after=(len(one) - 1, 1))
        with pytest.raises(InvariantError):  # turn numbers that do not follow: refused before any write
            store.publish(HEADER, events(1, first=3, seq=len(one)), after=(len(one), 1))
        assert len(stored(store)) == len(one)
        owned = store.load(SID)
        with pytest.raises(SessionLockedError):
            store.publish(HEADER, two, after=(len(one), 1))
        owned.log.close()
        store.publish(HEADER, two, after=(len(one), 1))
        assert [e[1] for e in stored(store)] == list(range(len(one) + len(two)))
        assert [d["turn"] for t, _, _, d in stored(store) if t == "turn/end"] == [1, 2, 3]
        assert [s["updatedAt"] for s in store.list()] == [two[-1]["time"]]  # the native time, not the write's
        reopened = store.load(SID)  # whole: nothing to repair
        assert not reopened.report.repaired
        reopened.log.close()
        reader = store.backend.reader()
        try:
            assert reader.peek(SID).header["imported"]["agent"] == "claude-code"  # type: ignore[index]
        finally:
            reader.close()
    finally:
        store.close()
