"""`SessionStore.loading`: the load the agent uses, block by block, on every backend.

Blocks are made tiny here (a few records, a few hundred bytes) so that every path
crosses block boundaries: torn tails, damage and the repair closers."""

from __future__ import annotations

from typing import Any

import pytest

from session import SessionCorruptError, SessionStore
from session.backends import jsonl_read, memory, sqlite_read
from tests.support import tamper
from tests.support.logs import Script, write


@pytest.fixture(autouse=True)
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_read, "READ_BLOCK", 300)
    monkeypatch.setattr(memory.MemoryStream, "BLOCK", 3)
    monkeypatch.setattr(sqlite_read.SqliteStream, "BLOCK", 3)


def strip(events: Any) -> list[tuple[str, int, Any]]:
    return [(e["type"], e["seq"], e["data"]) for e in events]


def open_turn_log(store: SessionStore) -> tuple[str, list[Any]]:
    log = store.create(cwd="/w")
    script = Script().text_turn("one").tool_turn().text_turn("two")
    script.start_turn("three").start_step().chunk("par").chunk("tial")
    written = write(log, script)
    log.close()
    return log.id, written


def test_blocks_are_the_log_then_the_closers(store: SessionStore) -> None:
    sid, written = open_turn_log(store)
    load = store.loading(sid)
    blocks = list(load)
    assert len(blocks) > 3  # several blocks, so boundaries were crossed
    streamed = [e for b in blocks for e in b]
    assert load.loaded is not None
    report = load.loaded.report
    assert report.interrupted_turn == 4 and report.closers == len(blocks[-1]) == 2
    assert strip(streamed[: len(written)]) == strip(written)
    log = load.loaded.log
    # Only the last turn stays in memory; the count covers everything.
    assert log.events[0]["type"] == "turn/start" and log.events[0]["data"]["turn"] == 4
    assert strip(log.events) == strip(streamed[-len(log.events):])
    assert log.tracker.next_seq == len(streamed)
    # The live log goes on from there: a new turn replaces what it keeps.
    log.extend(Script(first_turn=5).text_turn("five").items)
    assert [e["data"]["turn"] for e in log.events] == [5] * len(log.events)
    log.close()
    # What the stream gave is what a whole load now reads back (repair was durable).
    again = store.load(sid)
    assert strip(again.log.events[: len(streamed)]) == strip(streamed)
    assert not again.report.repaired
    again.log.close()


def test_abandoned_load_releases_the_session(store: SessionStore) -> None:
    sid, _ = open_turn_log(store)
    blocks = iter(store.loading(sid))
    next(blocks)
    blocks.close()  # type: ignore[attr-defined]
    loaded = store.load(sid)  # not locked, and still repairs: nothing was written
    assert loaded.report.closers == 2
    loaded.log.close()


def test_damage_in_a_later_block_refuses_after_earlier_blocks(store: SessionStore) -> None:
    sid, written = open_turn_log(store)
    bad = len(written) // 2  # committed: turn/ends follow
    tamper.replace_event(store.backend, sid, bad, b'{"type":"nonsense"}')
    load = store.loading(sid)
    seen: list[Any] = []
    with pytest.raises(SessionCorruptError):
        for block in load:
            seen.extend(block)
    assert 0 < len(seen) <= bad
    assert load.loaded is None
    # Refused untouched and released: a second attempt says the same.
    with pytest.raises(SessionCorruptError):
        store.load(sid)


def test_torn_tail_across_blocks(store: SessionStore) -> None:
    sid, written = open_turn_log(store)
    tamper.replace_event(store.backend, sid, len(written) - 1, b'{"type":')
    loaded = store.load(sid)
    assert loaded.report.torn_records == 1
    assert strip(loaded.log.events[: len(written) - 1]) == strip(written[:-1])
    loaded.log.close()


def test_read_stream_of_a_live_session(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    written = write(log, Script().text_turn("one").text_turn("two"))
    log.flush()
    stream = store.backend.read_stream(log.id)  # no lock needed: the owner keeps it
    try:
        read = [e for b in stream.blocks() for e in b]
    finally:
        stream.close()
    assert strip(read) == strip(written)
    log.close()


def test_replay_encoder_is_notify_update_byte_for_byte() -> None:
    import orjson

    from acp_bridge.host.replay import ReplayEncoder
    from acp_bridge.host.updates import UpdateContext, updates_for
    from acp_bridge.rpc.protocol import UPDATE_HEAD, UPDATE_TAIL
    from tests.support.logs import events_of

    script = Script().text_turn("one", 'quotes " \\ and\nnewlines, ünïcode ✓')
    script.start_turn("two").start_step().chunk("think", kind="reasoning").chunk("text \u2028")
    script.message("text \u2028", calls=("a",)).call("a").result("a", "A").end_step()
    script.start_step().message("", calls=("b",)).result("b", "B", error=True).end_step().end_turn()
    events = events_of(script)
    sid = "0a0b0c0d-0000-4000-8000-000000000001"
    context = UpdateContext(replay=True, context_window=1000)
    expected = b"".join(
        UPDATE_HEAD + orjson.dumps(sid) + b',"update":' + orjson.dumps(u) + UPDATE_TAIL
        for e in events for u in updates_for(e, context)
    )
    encoder = ReplayEncoder(sid, 1000)
    got = b"".join(encoder.encode(events[i : i + 4]) for i in range(0, len(events), 4))
    assert got == expected
    assert got.count(b"agent_message_chunk") >= 2 and b"tool_call" in got


@pytest.mark.anyio
async def test_open_stored_restores_gc_and_switch_interval(store: SessionStore) -> None:
    import gc
    import sys

    from acp_bridge.host.replay import open_stored
    from acp_bridge.host.tuning import ProcessTuning

    sid, _ = open_turn_log(store)
    interval = sys.getswitchinterval()
    assert gc.isenabled()
    sent: list[bytes] = []

    async def send(payload: bytes) -> None:
        assert not gc.isenabled() and sys.getswitchinterval() < interval  # tuned meanwhile
        sent.append(payload)

    from acp_bridge.host.replay import ReplayEncoder

    opened = await open_stored(store, sid, sink=None, replay=(ReplayEncoder(sid, None), send), tuning=ProcessTuning())
    opened.log.close()
    assert sent and gc.isenabled() and sys.getswitchinterval() == interval
    # And after a refused load (the session is now locked by nobody; damage it).
    tamper.replace_event(store.backend, sid, 3, b"{}")
    with pytest.raises(SessionCorruptError):
        await open_stored(store, sid, sink=None, replay=None, tuning=ProcessTuning())
    assert gc.isenabled() and sys.getswitchinterval() == interval


@pytest.mark.anyio
async def test_a_load_with_the_neutral_policy_changes_no_process_state(store: SessionStore) -> None:
    # Domain code never tunes the process itself (issue 22): only the policy `serve`
    # hands in does (test above); the default one counts and changes nothing.
    import gc
    import sys

    from acp_bridge.host.replay import ReplayEncoder, open_stored
    from acp_bridge.host.tuning import Tuning

    sid, _ = open_turn_log(store)
    interval = sys.getswitchinterval()
    tuning = Tuning()
    seen: list[tuple[bool, float, int]] = []

    async def send(payload: bytes) -> None:
        seen.append((gc.isenabled(), sys.getswitchinterval(), tuning.loads_running))

    opened = await open_stored(store, sid, sink=None, replay=(ReplayEncoder(sid, None), send), tuning=tuning)
    opened.log.close()
    assert seen and all(s == (True, interval, 1) for s in seen)
    assert tuning.loads_running == 0


def test_a_created_log_without_history_keeps_its_last_turn(store: SessionStore) -> None:
    log = store.create(cwd="/w", keep_history=False)
    written = write(log, Script().text_turn("one").tool_turn().text_turn("three"))
    assert log.events[0]["type"] == "turn/start" and log.events[0]["data"]["turn"] == 3
    assert strip(log.events) == strip(written[-len(log.events):])
    assert log.tracker.next_seq == len(written)
    log.close()
    loaded = store.load(log.id)
    assert strip(loaded.log.events) == strip(written)  # the store has everything
    loaded.log.close()
