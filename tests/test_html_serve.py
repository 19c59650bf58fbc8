"""`acp-bridge sessions serve` (issue 26, point 3): a real server process over stores
written by real processes (tests/test_html_export.py's), asked over real HTTP: the list
and the same transcript page as the export, one listening socket on 127.0.0.1, the token
in every URL (403 without it, whatever the method or path), read-only, also while an
agent owns a session. tests/test_html_browser.py loads its pages in Chromium."""

from __future__ import annotations

import html
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from acp_bridge.cli.sessions.live import LIVE_CSP_HEADER as CSP_HEADER
from session import SessionLockedError, SessionStore, open_backend
from tests.support.html_sessions import (
    Served,
    active_parts,
    fetch,
    listening_sockets,
    parse_page,
    waiting_on_a_permission,
    without_live,
    without_search_form,
)
from tests.support.html_sessions import served_page as live_page
from tests.support.pg_server import PgServer
from tests.test_html_export import export, kind, stores
from tests.test_sessions_cli import store_state

pytestmark = pytest.mark.integration

__all__ = ["kind", "stores"]  # the module-scoped fixtures, shared with the export's tests


def test_the_list_and_the_same_transcript_as_the_export(kind: str, stores: tuple[Path, dict[str, str]]) -> None:
    root, ids = stores
    before = store_state(root)
    with Served(root, kind) as served:
        status, headers, body = fetch(served.url)
        assert status == 200
        assert headers["content-security-policy"] == CSP_HEADER
        assert CSP_HEADER.endswith("; frame-ancestors 'none'")
        assert (headers["x-content-type-options"], headers["referrer-policy"], headers["cache-control"]) == \
            ("nosniff", "no-referrer", "no-store")
        assert headers["content-type"] == "text/html; charset=utf-8"
        page = parse_page(body)
        assert active_parts(without_live(without_search_form(page))) == []
        rows = page.find_all("tr")[1:]
        links = {a.attrs["href"] for row in rows for a in row.find_all("a")}
        assert links == {f"session/{sid}" for sid in ids.values()}
        by_id = {row.find_all("a")[0].attrs["href"].split("/")[1]: html.unescape(row.all_text())
                 for row in rows}
        assert "cancelled" in by_id[ids["wrapped"]] and "xss <script>" in by_id[ids["wrapped"]]
        assert "interrupted (unrepaired)" in by_id[ids["crashed"]]
        assert "completed" in by_id[ids["edit"]] and "acp-bridge" in by_id[ids["edit"]]

        for sid in ids.values():
            status, headers, served_page = fetch(served.url + f"session/{sid}")
            assert status == 200 and headers["content-security-policy"] == CSP_HEADER
            # One page for both: the export's, with the link back to the list.
            assert served_page == live_page(export(root, kind, sid), sid)
        status, _, by_prefix = fetch(served.url + f"session/{ids['edit'][:8]}")
        assert status == 200 and ids["edit"] in by_prefix
        for missing in ("00000000-0000-4000-8000-00000000beef", "..%2F..%2Fetc", "../../etc/passwd", "x"):
            status, _, body = fetch(served.url + f"session/{missing}")
            assert status == 404, missing
            assert active_parts(parse_page(body)) == []
        assert fetch(served.url + "nothing/here")[0] == 404
    assert served.returncode == 0
    assert store_state(root) == before  # nothing written, locked or repaired


def test_only_with_the_token_only_on_loopback_only_reading(kind: str, stores: tuple[Path, dict[str, str]]) -> None:
    root, ids = stores
    with Served(root, kind) as served:
        token, port = served.token, served.port
        assert len(token) >= 22  # 128 bits, URL-safe
        base = f"http://127.0.0.1:{port}"
        wrong = ("A" if token[0] != "A" else "B") + token[1:]
        for path in ("/", "/favicon.ico", f"/{wrong}/", f"/{token[:-1]}/", f"/{token}x/",
                     f"/x/{token}/", f"/{wrong}/session/{ids['edit']}", f"/?{token}"):
            for method in ("GET", "HEAD", "POST", "DELETE"):
                status, _, body = fetch(base + path, method=method)
                assert status == 403, (path, method)
                assert token not in body
        # A page of another site that a DNS name pointed here (rebinding) names its own host.
        assert fetch(served.url, host=f"evil.example:{port}")[0] == 403
        assert fetch(served.url, host="127.0.0.1")[0] == 403
        assert fetch(served.url, host=f"localhost:{port}")[0] == 200
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            assert fetch(served.url, method=method)[0] == 405
        status, headers, body = fetch(served.url, method="HEAD")
        assert (status, body) == (200, "") and headers["content-security-policy"] == CSP_HEADER
        status, headers, _ = fetch(f"{base}/{token}")
        assert (status, headers["location"]) == (301, f"/{token}/")
        assert "python" not in headers.get("server", "").lower()
        # Nothing else listens: one socket, on 127.0.0.1.
        assert listening_sockets(served.proc.pid) == [("127.0.0.1", port)]
    assert served.returncode == 0
    assert served.stderr.count(token) == 1  # printed once, never logged per request
    assert served.stderr.startswith("acp-bridge sessions serve: ") and "read-only" in served.stderr


def test_a_session_an_agent_has_open_is_shown_as_far_as_it_is_on_disk(tmp_path: Path, kind: str,
                                                                     work: Path) -> None:
    store = tmp_path / "store"

    async def main() -> None:
        async with waiting_on_a_permission(store, kind, work, "look") as (agent, sid):
            before = store_state(store)
            with Served(store, kind) as served:
                status, _, body = await anyio.to_thread.run_sync(fetch, served.url + f"session/{sid}")
                listed = (await anyio.to_thread.run_sync(fetch, served.url))[2]
            assert served.returncode == 0
            assert status == 200
            page = parse_page(body)
            (turn,) = page.find_all("section", "turn")
            assert turn.attrs["class"] == "turn st-running"
            text = html.unescape(page.all_text())
            assert f"running (in process {agent.proc.pid})" in text
            assert "no result yet" in text and "The turn is still running" in text
            assert "owner" in text and "live: an agent has it open" in text
            assert "running" in html.unescape(parse_page(listed).all_text())
            assert store_state(store) == before
            backend = open_backend(kind, store)
            with pytest.raises(SessionLockedError):  # still the agent's
                SessionStore(backend).load(sid)
            backend.close()

    anyio.run(main)


def test_the_port_option(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(tmp_path),
                               "serve", "--port", str(port)], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1
        assert proc.stderr == f"acp-bridge sessions serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    deadline = time.monotonic() + 10
    while True:  # the port is free again; serve takes it
        try:
            with Served(tmp_path, "jsonl", "--port", str(port)) as served:
                assert served.port == port
                status, _, body = fetch(served.url)
                assert status == 200 and "No sessions in this store." in body
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert not (tmp_path / "sessions").exists()  # an empty store is not created


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_damage_found_part_way_ends_the_page_with_it(tmp_path: Path, backend: str) -> None:
    """The turns before the damage are sent already; the page ends with the message. A
    log damaged in its first block is an error page."""
    from tests.support.logs import Script
    from tests.support.tamper import replace_event

    store = SessionStore(open_backend(backend, tmp_path))
    late, early = store.create(cwd="/w"), store.create(cwd="/w")
    big = " ".join(f"w{i}" + "x" * 3_000 for i in range(100))  # turns past a read block
    script = Script().text_turn("q1", f"first {big}").text_turn("q2", f"second {big}").text_turn("q3", "third")
    late.extend(script.items)
    early.extend(Script().text_turn().items)
    late.close()
    early.close()
    bad = max(i for i, item in enumerate(script.items) if item[0] == "assistant/chunk")
    data = b'{"turn":3,"step":7,"chunk":{"type":"text","text":"x"}}'
    if backend == "jsonl":
        data = b'{"type":"assistant/chunk","seq":%d,"time":1,"data":%s}' % (bad, data)
    replace_event(store.backend, late.id, bad, data)
    replace_event(store.backend, early.id, 2, b'{"type": "step/sta')
    store.close()
    with Served(tmp_path, backend) as served:
        status, _, body = fetch(served.url + f"session/{late.id}")
        assert status == 200
        page = parse_page(body)
        shown = [t.attrs["id"] for t in page.find_all("section", "turn")]
        assert shown[0] == "turn-1" and "turn-3" not in shown  # checked a block at a time
        (damage,) = page.find_all("p", "damage")
        assert f"breaks the log invariants at seq {bad}" in damage.all_text()
        assert body.endswith("</html>\n")
        status, _, body = fetch(served.url + f"session/{early.id}")
        assert status == 500 and "cannot show this session" in body
        assert fetch(served.url)[0] == 200  # the list lists it as damaged
    assert served.returncode == 0


def test_export_and_serve_over_postgres(pg_server: PgServer, pg_database: str, work: Path) -> None:
    """The same pages from a PostgreSQL store (the hostile agent behind `wrap --backend
    postgres`), its password shown nowhere."""
    from tests.support.html_sessions import record_hostile
    from tests.support.pg_server import PASSWORD

    pg_server.emptied(pg_database)
    ids = record_hostile(pg_database, "postgres", work)  # a DSN
    dsn = pg_server.tcp_dsn(pg_database.split("?")[0].rsplit("/", 1)[1])
    exported = export(dsn, "postgres", ids["wrapped"])
    page = parse_page(exported)
    assert [t.attrs["class"] for t in page.find_all("section", "turn")] == \
        ["turn st-completed", "turn st-error", "turn st-cancelled"]
    assert active_parts(page) == []
    with Served(dsn, "postgres") as served:
        status, _, listed = fetch(served.url)
        assert status == 200 and listed.count('href="session/') == 2
        status, _, shown = fetch(served.url + f"session/{ids['wrapped']}")
        assert status == 200 and shown == live_page(exported, ids["wrapped"])
        status, _, shown = fetch(served.url + f"session/{ids['crashed']}")
        assert "interrupted (crash; not yet repaired on disk)" in shown
    assert served.returncode == 0
    assert PASSWORD not in listed + served.stderr and "***" in listed


def test_a_store_that_cannot_be_read_is_an_error_page_and_the_server_goes_on(tmp_path: Path) -> None:
    from tests.support.logs import Script

    store = SessionStore(open_backend("sqlite", tmp_path))
    log = store.create(cwd="/w")
    log.extend(Script().text_turn("before the damage").items)
    log.close()
    store.close()
    with Served(tmp_path, "sqlite") as served:
        assert "before the damage" in fetch(served.url)[2]
        for side in tmp_path.glob("sessions.sqlite3*"):
            side.write_bytes(b"this is not a database" * 100)
        for _ in range(2):  # still serving after the first failure
            status, headers, body = fetch(served.url)
            assert status == 500 and "cannot read the store" in body
            assert headers["content-security-policy"] == CSP_HEADER
    assert served.returncode == 0
    assert "file is not a database" in served.stderr and served.stderr.count(served.token) == 1


def test_the_search_box(kind: str, stores: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """The list's form asks `search?q=...`; its results are the turns `sessions search`
    finds, each a link to its turn in the transcript, the query and every snippet
    escaped; the pages with the form (only they) allow a form to be sent, to the server
    itself. The index goes where `--index` says; the store is not written."""
    from urllib.parse import quote

    from acp_bridge.cli.sessions.live import LIVE_CSP
    from tests.support.xss_agent import TAGS

    root, ids = stores
    before = store_state(root)
    index = tmp_path / "index.sqlite3"
    with Served(root, kind, "--index", str(index)) as served:
        status, headers, body = fetch(served.url)
        assert "form-action 'self'" in headers["content-security-policy"]
        assert "form-action 'self'" in body and "form-action 'none'" not in body  # the page's own <meta>
        status, headers, body = fetch(served.url + "search?q=" + quote("look"))
        assert status == 200 and "form-action 'self'" in headers["content-security-policy"]
        page = parse_page(body)
        assert active_parts(without_search_form(page)) == []
        hits = page.find_all("li")
        links = [li.find_all("a")[0].attrs["href"] for li in hits]
        # "look" is in the hostile prompts (and the wrapped agent's answers), not in the edit.
        assert links and set(links) <= {f"session/{ids['wrapped']}#turn-{n}" for n in (1, 2, 3)} | \
            {f"session/{ids['crashed']}#turn-1"}
        assert f"session/{ids['wrapped']}#turn-1" in links
        marked = [m.all_text() for li in hits for m in li.find_all("mark")]
        assert marked and {m.lower() for m in marked} == {"look"}
        # The hostile text comes back as text: a search for its tags finds them, escaped.
        status, _, body = fetch(served.url + "search?q=" + quote(TAGS))
        assert status == 200 and "<script>" not in body.split("</head>", 1)[1]
        page = parse_page(body)
        assert page.find_all("input")[0].attrs["value"] == TAGS  # given back in the box, as text
        assert active_parts(without_search_form(page)) == []
        assert TAGS in page.find_all("h1")[0].all_text()
        assert page.find_all("li"), "the tags' words are in the prompts"
        # The transcript a hit links to has its turn's anchor, and no form.
        status, headers, shown = fetch(served.url + f"session/{ids['wrapped']}")
        assert 'id="turn-1"' in shown and "<form" not in shown and f'content="{LIVE_CSP}"' in shown
        # Filters, and what is not a query.
        status, _, body = fetch(served.url + "search?q=PWNED&ended=cancelled")
        links = [li.find_all("a")[0].attrs["href"] for li in parse_page(body).find_all("li")]
        assert links == [f"session/{ids['wrapped']}#turn-3"]
        status, _, body = fetch(served.url + "search?q=PWNED&ended=interrupted")
        assert [li.find_all("a")[0].attrs["href"] for li in parse_page(body).find_all("li")] == \
            [f"session/{ids['crashed']}#turn-1"]
        assert fetch(served.url + "search?q=zzzunfound")[2].count("No turn matches.") == 1
        assert fetch(served.url + "search?q=" + quote("-look"))[0] == 400
        assert fetch(served.url + "search?q=look&ended=nonsense")[0] == 400
        assert fetch(served.url + "search?q=look&since=yesterday")[0] == 400
        status, _, body = fetch(served.url + "search")
        assert status == 200 and "Words to find" in body
        assert fetch(served.url + "search/more")[0] == 404
        # Without the token, nothing.
        assert fetch(served.url.replace(served.token, "x" * len(served.token)) + "search?q=look")[0] == 403
    assert served.returncode == 0
    assert index.is_file()
    assert store_state(root) == before  # the store is not written: the index is apart
