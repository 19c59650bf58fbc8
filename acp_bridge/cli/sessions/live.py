"""The live side of `sessions serve` (docs/html.md, "Live"): a session's page follows its
turns as they are written, and the list follows the store.

- **Server-sent events, under the token.** `/TOKEN/live/session/ID?from=N` is a stream
  of `turn` events, each a turn's whole section (`{"id": "turn-N", "html": ...}`),
  rendered as the page renders it (html.turn_html): every turn from N on at once, then
  each turn again whenever the log changes it. `/TOKEN/live/list?page=P` is a stream of
  `list` events, the list's `<main>` again whenever the store (a stamp) or an owner (an
  agent opening or closing a session) changes. Each stream ends after STREAM_SECONDS
  (the browser's EventSource connects again after `retry`), and at most MAX_STREAMS run
  at once: the server has a fixed pool of workers (server.py, `Limits.workers`), and a
  stream holds one. A stream past the cap says `retry: BUSY_RETRY_MS` and ends at once,
  so a page beyond it polls every few seconds instead, and the pages and the other
  requests always find a worker.
- **Following a log, on every backend.** A tick every POLL seconds asks what changed,
  as cheaply as the backend allows: a JSONL log's size and mtime (one `stat`: the file
  is tailed, its new turns read when it grows); a SQL store's stamp of the session (its
  last seq and time, one query), and for a session whose streamed chunks are not in the
  stamp yet (`StoreReader.unstamped`: SQLite's tail file) the page is rendered again
  every tick and sent only where a turn changed. A turn shows
  within POLL plus a render of its log of its write (tests/test_html_live.py).
- **Within the strict policy.** The pages still forbid every script but one: LIVE_JS,
  inline, allowed by its hash (`script-src 'sha256-...'`, so a script smuggled into the
  page by a log, which escaping already stops, would not run either: its hash is not
  ours), and `connect-src 'self'` for its EventSource. The script takes what the
  events carry as HTML made by our renderer (every log text escaped there) and puts it
  in place of the turn (or the list) it replaces, keeping which `<details>` the reader
  opened. The export (a file) has no script and no policy change.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from acp_bridge.cli.sessions.page import SERVED_CSP, source_hash

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from acp_bridge.cli.sessions.rows import Row

POLL = 0.1  # seconds between two looks at a session's log
LIST_POLL = 1.0  # seconds between two looks at the store, for the list
STREAM_SECONDS = 300.0  # a stream's life; the browser connects again after RETRY_MS
RETRY_MS = 500
HEARTBEAT = 10.0  # seconds without an event before a comment line (a closed tab is found)
MAX_STREAMS = 8  # streams at once: half of the server's default workers (Limits.workers)
BUSY_RETRY_MS = 3000  # what a stream past the cap tells the browser
_streams = threading.BoundedSemaphore(MAX_STREAMS)

LIVE_JS = """document.addEventListener('DOMContentLoaded', () => {
  const mark = document.getElementById('live');
  if (!mark || !window.EventSource) return;
  const main = document.querySelector('main');
  const opened = (node) => [...node.querySelectorAll('details')].map((d) => d.open);
  const reopen = (node, states) => node.querySelectorAll('details').forEach((d, i) => {
    if (i < states.length) d.open = states[i];
  });
  const element = (html) => {
    const t = document.createElement('template');
    t.innerHTML = html;
    return t.content.firstElementChild;
  };
  const turns = document.querySelectorAll('section.turn');
  const from = turns.length ? turns[turns.length - 1].id.replace('turn-', '') : '0';
  const url = mark.dataset.live + (mark.dataset.live.includes('?') ? '&' : '?') + 'from=' + from;
  const events = new EventSource(url);
  events.onopen = () => { mark.textContent = 'live'; mark.className = 'live on'; };
  events.onerror = () => { mark.textContent = 'reconnecting'; mark.className = 'live off'; };
  events.addEventListener('turn', (e) => {
    const data = JSON.parse(e.data);
    const node = element(data.html);
    const old = document.getElementById(data.id);
    if (old) {
      reopen(node, opened(old));
      old.replaceWith(node);
      return;
    }
    const all = main.querySelectorAll('section.turn');
    if (all.length) {
      all[all.length - 1].after(node);
    } else {
      const none = [...main.querySelectorAll('p.note')].find((p) => p.textContent === 'No turns yet.');
      if (none) none.remove();
      main.prepend(node);
    }
  });
  events.addEventListener('list', (e) => {
    const node = element(JSON.parse(e.data).html);
    if (node) main.replaceWith(node);
  });
});"""

SCRIPT_HASH = f"'sha256-{source_hash(LIVE_JS)}'"
# The served pages' policy: SERVED_CSP (our style sheet, forms to ourselves) and our one
# script, with its connection back to the server.
LIVE_CSP = f"{SERVED_CSP}; script-src {SCRIPT_HASH}; connect-src 'self'"
LIVE_CSP_HEADER = LIVE_CSP + "; frame-ancestors 'none'"
SCRIPT = f"<script>{LIVE_JS}</script>"
EVENT_STREAM = "text/event-stream"


def live_mark(url: str) -> str:
    """The page's mark of its stream (the script finds it by id, and says its state in it)."""
    from acp_bridge.cli.sessions.markup import esc

    return f' <span id="live" class="live" data-live="{esc(url)}">live</span>{SCRIPT}'


@contextmanager
def stream_slot() -> Iterator[bool]:
    """One of the MAX_STREAMS streams, if one is free (False: the caller says `retry`)."""
    taken = _streams.acquire(blocking=False)
    try:
        yield taken
    finally:
        if taken:
            _streams.release()


def event(name: str, data: dict[str, Any]) -> str:
    """One server-sent event: its data is JSON on one line (orjson escapes newlines)."""
    import orjson

    return f"event: {name}\ndata: {orjson.dumps(data).decode()}\n\n"


# --- a session's turns ------------------------------------------------------------------


def session_stamp(source: Any, sid: str) -> tuple[int, ...] | None:
    """What changes whenever the session's log does, as cheaply as the backend says it;
    None when the store cannot say (the caller renders again and compares)."""
    import os

    reader = source.reader
    if source.name == "jsonl":
        try:
            st = os.stat(reader.path_of(sid))
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ino)
    if sid in reader.unstamped():
        return None
    stamp = reader.stamps().get(sid)
    return None if stamp is None else tuple(stamp)


def rendered_turns(source: Any, sid: str) -> list[tuple[int, str]]:
    """Every turn of the session as its page shows it: (number, its section's HTML)."""
    from acp_bridge.cli.sessions.html import turn_html
    from acp_bridge.cli.sessions.walk import Walk

    walk = Walk(source, sid)
    try:
        return [(turn.number, turn_html(walk, turn)) for turn in walk.turns()]
    finally:
        walk.close()


def turn_events(open_source: Callable[[], Any], sid: str, start: int, *,
                seconds: float = STREAM_SECONDS, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """The `turn` events of session `sid`, from turn `start` on (see the module)."""
    with stream_slot() as free:
        if not free:
            yield f"retry: {BUSY_RETRY_MS}\n\n"
            return
        yield from _turn_events(open_source, sid, start, seconds, clock, sleep)


def _turn_events(open_source: Callable[[], Any], sid: str, start: int, seconds: float,
                 clock: Callable[[], float], sleep: Callable[[float], None]) -> Iterator[str]:
    from session import SessionError, SessionNotFoundError

    yield f"retry: {RETRY_MS}\n\n"
    sent: dict[int, str] = {}
    last: tuple[int, ...] | None = None
    first = True
    end = clock() + seconds
    quiet_since = clock()
    source = open_source()
    try:
        while clock() < end:
            stamp = session_stamp(source, sid)
            if first or stamp is None or stamp != last:
                last = stamp
                try:
                    turns = rendered_turns(source, sid)
                except SessionNotFoundError:
                    return  # deleted: nothing more to follow (the browser's retry is a 404)
                except (SessionError, OSError):
                    turns = []  # damaged or gone meanwhile: the page says so when reloaded
                for number, html in turns:
                    if sent.get(number) != html and (not first or number >= start):
                        yield event("turn", {"id": f"turn-{number}", "html": html})
                        quiet_since = clock()
                    sent[number] = html
                first = False
            if clock() - quiet_since >= HEARTBEAT:
                yield ": still here\n\n"
                quiet_since = clock()
            sleep(POLL)
    finally:
        source.close()


# --- the list -----------------------------------------------------------------------------


def list_events(open_source: Callable[[], Any], render: Callable[[Any], str], newest: int, *,
                seconds: float = STREAM_SECONDS, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """The `list` events: `render(source)`, the list's `<main>`, each time the store's
    stamps or the owners of its `newest` sessions (the page's and those before it)
    change."""
    with stream_slot() as free:
        if not free:
            yield f"retry: {BUSY_RETRY_MS}\n\n"
            return
        yield from _list_events(open_source, render, newest, seconds, clock, sleep)


def _list_events(open_source: Callable[[], Any], render: Callable[[Any], str], newest: int, seconds: float,
                 clock: Callable[[], float], sleep: Callable[[float], None]) -> Iterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    last: Any = None
    sent = ""
    end = clock() + seconds
    quiet_since = clock()
    while clock() < end:
        source = open_source()
        try:
            stamps = source.reader.stamps()
            shown = sorted(stamps, key=lambda sid: (-stamps[sid][1] if len(stamps[sid]) > 1 else 0, sid))[:newest]
            owners = source.reader.owners(shown)
            now = (stamps, {sid: owner.state for sid, owner in owners.items()})
            if last is not None and now != last:
                html = render(source)
                if html != sent:
                    yield event("list", {"html": html})
                    sent, quiet_since = html, clock()
            elif last is None:
                sent = render(source)
            last = now
        finally:
            source.close()
        if clock() - quiet_since >= HEARTBEAT:
            yield ": still here\n\n"
            quiet_since = clock()
        sleep(LIST_POLL)


def running(row: Row) -> bool:
    """Whether an agent has the session open now (its owner is live): the list marks it."""
    return row.view is not None and row.view.owner == "live"
