"""`sessions serve` follows running sessions (issue 36, "The page is live"): in headless
Chromium (Debian's, tests/support/browser.py), with an agent writing while the page is
open, a session's page shows a turn as it streams, within 0.5 s of the agent sending
what it wrote (log before send: the write came first); the list marks the session whose
agent has it open and shows a new session without a reload. The page's one script runs
under the strict policy, allowed by its hash, and nothing is refused."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.cli.sessions.live import event, turn_events
from tests.support.acp_client import AgentProcess, write_script
from tests.support.browser import Browser
from tests.support.html_sessions import Served
from tests.test_html_browser import browser, csp_reports

__all__ = ["browser"]  # the module-scoped fixture, shared with the other browser tests

WORDS = [f"w{n:02d}x" for n in range(1, 25)]


def test_an_event_is_one_line_of_json() -> None:
    assert event("turn", {"id": "turn-1", "html": "<p>a\nb</p>"}) == \
        'event: turn\ndata: {"id":"turn-1","html":"<p>a\\nb</p>"}\n\n'


def test_turn_events_send_a_turn_again_only_when_it_changed(tmp_path: Path) -> None:
    """The stream of a session, driven by a fake clock over a store a test writes."""
    from acp_bridge.cli.sessions.source import Source
    from tests.support.logs import Script
    from tests.support.search_store import add_session

    root = tmp_path / "store"
    sid = add_session(root, "jsonl", "/w", Script().text_turn("one", "first").text_turn("two", "second"), 1_000)
    ticks = iter(range(1000))
    events = turn_events(lambda: Source("jsonl", root), sid, 2, seconds=3, clock=lambda: next(ticks) * 0.1,
                         sleep=lambda s: None)
    got = list(events)
    assert got[0] == "retry: 500\n\n"
    sent = [e for e in got if e.startswith("event: turn")]
    assert len(sent) == 1 and '"id":"turn-2"' in sent[0] and "second" in sent[0]  # from turn 2, once


@pytest.mark.anyio
@pytest.mark.browser
@pytest.mark.integration
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_the_page_follows_an_agent_writing(browser: Browser, kind: str, tmp_path: Path) -> None:
    await follow(browser, tmp_path / "store", tmp_path / "store", kind, tmp_path)


@pytest.mark.anyio
@pytest.mark.browser
@pytest.mark.integration
async def test_the_page_follows_an_agent_writing_to_postgres(browser: Browser, pg_server: Any, pg_database: str,
                                                              tmp_path: Path) -> None:
    pg_server.emptied(pg_database)
    served = pg_server.tcp_dsn(pg_database.split("?")[0].rsplit("/", 1)[1])
    await follow(browser, pg_database, served, "postgres", tmp_path)


async def follow(browser: Browser, store: Path | str, served_store: Path | str, kind: str, tmp_path: Path) -> None:
    """An agent streams a turn while the session's page is open, then makes a session
    while the list is open: what the page shows, and how soon."""
    work = tmp_path / "work"
    work.mkdir()
    model = write_script(tmp_path / "m.json", {"text": "ready"}, {"text": " ".join(WORDS)}, {"text": "new one"},
                         chunk_delay_ms=120)
    async with AgentProcess(store, model=model, backend=kind) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "first")
        with Served(served_store, kind) as served:
            await anyio.to_thread.run_sync(browser.goto, f"{served.url}session/{sid}")
            assert browser.evaluate("document.getElementById('live').textContent") in ("live", "reconnecting")
            assert browser.evaluate("[...document.querySelectorAll('section.turn')].length") == 1

            sent: dict[str, float] = {}  # word -> when the agent sent it (after writing it)
            shown: dict[str, float] = {}  # word -> when the page showed it
            stop = threading.Event()

            def watch_page() -> None:
                while not stop.is_set():
                    text = browser.evaluate("(document.getElementById('turn-2') || {innerText: ''}).innerText")
                    now = time.monotonic()
                    for word in WORDS:
                        if word in text and word not in shown:
                            shown[word] = now
                    time.sleep(0.02)

            async with anyio.create_task_group() as tg:
                answer = agent.prompt_soon(tg, sid, "stream please")
                watcher = threading.Thread(target=watch_page)
                watcher.start()
                try:
                    with anyio.fail_after(30):
                        while True:
                            done = bool(answer)  # the updates read before the answer was: all of them
                            text = "".join(u["content"].get("text", "") for u in agent.updates_of(sid)
                                           if u["sessionUpdate"] == "agent_message_chunk")
                            now = time.monotonic()
                            for word in WORDS:
                                if word in text and word not in sent:
                                    sent[word] = now
                            if done:
                                break
                            await anyio.sleep(0.005)
                        while len(shown) < len(WORDS) and time.monotonic() - max(sent.values()) < 3:
                            await anyio.sleep(0.05)
                finally:
                    stop.set()
                    await anyio.to_thread.run_sync(watcher.join)
            delays = sorted(shown[w] - sent[w] for w in WORDS if w in shown and w in sent)
            print(f"live delays ({kind}): median {delays[len(delays) // 2]:.3f} s, max {delays[-1]:.3f} s")
            assert len(delays) == len(WORDS), (set(WORDS) - set(shown), set(WORDS) - set(sent))
            assert delays[-1] < 0.5, delays
            # The turn ended: shown so, in place, without a reload; the first turn untouched.
            with anyio.fail_after(5):
                while "st-completed" not in browser.evaluate("document.getElementById('turn-2').className"):
                    await anyio.sleep(0.05)
            assert browser.evaluate("[...document.querySelectorAll('section.turn')].length") == 2
            assert csp_reports(browser) == []  # our script ran, nothing was refused

            # The list: the session the agent has open is marked, and a new one appears.
            await anyio.to_thread.run_sync(browser.goto, served.url)
            rows = "[...document.querySelectorAll('table.sessions tbody tr')].map((r) => r.innerText)"
            listed = browser.evaluate(rows)
            assert len(listed) == 1 and "agent running" in listed[0]
            other = await agent.new_session(work)
            await agent.prompt(other, "another")
            with anyio.fail_after(10):
                while len(browser.evaluate(rows)) < 2:
                    await anyio.sleep(0.1)
            assert all("agent running" in row for row in browser.evaluate(rows))
            assert csp_reports(browser) == []
    assert served.returncode == 0


@pytest.mark.integration
def test_the_streams_are_under_the_token_and_the_headers(tmp_path: Path) -> None:
    """The event streams answer as every page does: the token, the Host, the policy and
    the headers; HEAD makes no stream (it would run for minutes unsent)."""
    from acp_bridge.cli.sessions.live import LIVE_CSP_HEADER
    from tests.support.html_sessions import fetch
    from tests.support.logs import Script
    from tests.support.search_store import add_session

    root = tmp_path / "store"
    sid = add_session(root, "jsonl", "/w", Script().text_turn("one", "first"), 1_000)
    with Served(root, "jsonl") as served:
        for path in ("live/list", f"live/session/{sid}?from=1"):
            started = time.monotonic()
            status, headers, body = fetch(served.url + path, method="HEAD")
            assert (status, body) == (200, "") and time.monotonic() - started < 5
            assert headers["content-type"] == "text/event-stream; charset=utf-8"
            assert headers["content-security-policy"] == LIVE_CSP_HEADER
            assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
            assert fetch(served.url.replace(served.token, "x" * len(served.token)) + path)[0] == 403
            assert fetch(served.url + path, host="evil.example:80")[0] == 403
        assert fetch(served.url + "live/session/00000000-0000-4000-8000-00000000beef")[0] == 404
        assert fetch(served.url + "live/other")[0] == 404
        assert fetch(served.url + "live/list?page=0")[0] == 404


def test_streams_past_the_cap_tell_the_browser_to_come_back(tmp_path: Path) -> None:
    """A stream holds one of the server's fixed workers: past MAX_STREAMS at once, a
    stream says `retry` and ends, and the page polls instead of starving the pool."""
    import contextlib

    from acp_bridge.cli.sessions import live

    opened: list[str] = []
    with contextlib.ExitStack() as held:
        assert all(held.enter_context(live.stream_slot()) for _ in range(live.MAX_STREAMS))
        assert list(live.turn_events(lambda: opened.append("store"), "x", 0)) == [
            f"retry: {live.BUSY_RETRY_MS}\n\n"]
        assert list(live.list_events(lambda: opened.append("store"), str, 200)) == [
            f"retry: {live.BUSY_RETRY_MS}\n\n"]
    assert opened == []  # the store was not even opened
    with live.stream_slot() as free:
        assert free  # the slots came back
