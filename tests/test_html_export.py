"""`acp-bridge sessions export ID --format html` (issue 26, point 3): one self-contained
page per session, from stores written by real processes (the hostile agent of
tests/support/xss_agent.py behind a real `acp-bridge wrap`, one of them SIGKILLed
mid-turn; our own turn runner with a scripted model), on both file backends. Read back
with the standard library's HTML parser; tests/test_html_browser.py loads the same
pages in Chromium."""

from __future__ import annotations

import base64
import hashlib
import html
import subprocess
import sys
from pathlib import Path

import pytest

from acp_bridge.cli.sessions.page import CSP, CSS
from tests.support.html_sessions import PROMPT, active_parts, parse_page, record_hostile
from tests.support.xss_agent import MARKDOWN, TAGS
from tests.test_sessions_cli import BASE_MS, cli, make_work, record, store_state

SESSIONS = [sys.executable, "-m", "acp_bridge", "sessions"]
EDIT = {"text": "Editing.", "toolCalls": [
    {"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "alpha\nBETA\n"}}],
    "usage": {"inputTokens": 40, "outputTokens": 9}}


@pytest.fixture(scope="module", params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def stores(kind: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A store with the hostile wrapped session (completed, failed, cancelled turns), the
    crashed one (open on disk, owner gone) and one of our agent's (an allowed edit)."""
    base = tmp_path_factory.mktemp(f"html-{kind}")
    root = base / "store"
    work = make_work(base / "work")
    ids = record_hostile(root, kind, work)
    ids["edit"] = record(root, kind, work, [EDIT, {"text": "Edited **a.txt**."}], ["edit a.txt"],
                         options=["allow_once"], base_ms=BASE_MS)
    return root, ids


def export(root: Path | str, kind: str, sid: str) -> str:
    proc = subprocess.run([*SESSIONS, "--store", str(root), "--backend", kind, "export", sid,
                           "--format", "html"], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""
    return proc.stdout.decode("utf-8")


@pytest.mark.integration
def test_a_page_that_fetches_nothing_and_runs_nothing(kind: str, stores: tuple[Path, dict[str, str]],
                                                       tmp_path: Path) -> None:
    root, ids = stores
    before = store_state(root)
    text = export(root, kind, ids["wrapped"])
    assert store_state(root) == before  # read-only
    page = parse_page(text)
    (head,) = page.find_all("head")
    # The policy comes first, before any text from the log, and allows only our style
    # sheet, by its hash: the one <style> holds exactly that sheet.
    assert [(m.attrs.get("charset"), m.attrs.get("http-equiv")) for m in head.find_all("meta")][:2] == \
        [("utf-8", None), (None, "Content-Security-Policy")]
    assert head.find_all("meta")[1].attrs["content"] == CSP
    assert CSP.startswith("default-src 'none'; style-src 'sha256-")
    (style,) = page.find_all("style")
    digest = base64.b64encode(hashlib.sha256(style.all_text().encode()).digest()).decode()
    assert style.all_text() == CSS and f"'sha256-{digest}'" in CSP
    # Nothing in it could run, load or send anything: every payload is text.
    assert active_parts(page) == []
    assert "<script" not in text.lower().replace("&lt;script", "")
    shown = html.unescape(page.all_text())
    assert shown.count(TAGS) >= 8  # prompt, thought, answer, tool title and call id, output, diff, error
    assert "<https://example.org/ok>" not in shown and "https://example.org/ok" in shown
    links = [(a.attrs["href"], a.all_text()) for a in page.find_all("a") if a.attrs["href"].startswith("http")]
    assert links == [("https://example.org/ok", "https://example.org/ok")]  # the one good link
    assert "[a js link](javascript:document.title='PWNED')" in shown  # a bad one stays text
    assert "[evil]: javascript:" in shown or "[a reference][evil]" in shown
    (title,) = page.find_all("title")
    assert title.all_text().startswith(PROMPT[:40])


@pytest.mark.integration
def test_the_page_shows_what_happened(kind: str, stores: tuple[Path, dict[str, str]]) -> None:
    root, ids = stores
    page = parse_page(export(root, kind, ids["wrapped"]))
    turns = page.find_all("section", "turn")
    assert [t.attrs["class"] for t in turns] == ["turn st-completed", "turn st-error", "turn st-cancelled"]
    statuses = [html.unescape(t.find_all("span", "turn-status")[0].all_text()) for t in turns]
    assert statuses[0] == "completed"
    assert statuses[1] == f"error: failed {TAGS} (step 0, code internal_error); the agent answered -32603"
    assert statuses[2] == "cancelled (by session/cancel)"
    first = turns[0]
    (prompt,) = first.find_all("div", "prompt")
    assert [d.all_text() for d in prompt.find_all("div", "who")] == ["User"]
    assert html.unescape(prompt.find_all("div", "text")[0].all_text()) == PROMPT
    # The thought and the tool call collapse (<details>, closed); the diff is open.
    (thinking,) = first.find_all("details", "thinking")
    assert "open" not in thinking.attrs and f"thinking hard {TAGS}" in html.unescape(thinking.all_text())
    assert [b.all_text() for b in thinking.find_all("strong")] == ["hard"]  # Markdown too
    (tool,) = first.find_all("details", "tool")
    assert "open" not in tool.attrs
    summary = html.unescape(tool.find_all("summary")[0].all_text())
    # The permission request's title is the agent's last word on the call (issue 35).
    assert summary.startswith(f"Tool asks {TAGS} (edit) — asks {TAGS}"), summary
    assert "permission: allow_once" in summary
    assert tool.find_all("span", "perm-allow")
    assert f"output {TAGS}" in html.unescape(tool.find_all("pre", "result")[0].all_text())
    (diff,) = first.find_all("details", "diff")
    assert diff.attrs.get("open") == ""
    lines = [(s.attrs["class"], html.unescape(s.all_text())) for s in diff.find_all("span")]
    path = "/w/<img src=x onerror=\"document.title='PWNED'\">.txt"
    assert lines == [("file", f"--- {path}"), ("file", f"+++ {path}"), ("hunk", "@@ -1 +1 @@"),
                     ("del", "-a"), ("add", f"+b {TAGS}")]
    # The answer is Markdown, rendered: a heading, a table, a fenced block, and the raw
    # HTML block shown as its text.
    (answer,) = [md for md in first.find_all("div", "md") if md.parent and md.parent.tag != "details"][:1]
    assert [h.all_text() for h in answer.find_all("h1")] == ["Result"]
    assert answer.find_all("table") and answer.find_all("pre")
    assert '<div onmouseover="document.title=\'PWNED\'">a raw HTML block</div>' in \
        html.unescape(answer.all_text())
    # Usage per turn and per step; the wrapped agent named in the header.
    assert "tokens 1,234 in / 0 out" in first.find_all("p", "end")[0].all_text()
    # A wrapped turn's usage is the agent's own, on its last step (docs/wrap.md, "Recording").
    assert [h.all_text() for h in first.find_all("div", "step-head")] == ["Step 1", "Step 2 · tokens 1,234 in / 0 out"]
    fields = html.unescape(page.find_all("dl", "fields")[0].all_text())
    assert f"agentxss {TAGS} 1<script>, wrapped by acp-bridge (its session xss-session-1)" in fields
    assert "xss_agent.py" in fields
    footer = html.unescape(page.find_all("footer")[0].all_text())
    assert "turns3 (last: cancelled)" in footer and "tokens1,234 in / 0 out" in footer


@pytest.mark.integration
def test_an_unrepaired_crash_and_an_edit_of_our_agent(kind: str, stores: tuple[Path, dict[str, str]]) -> None:
    root, ids = stores
    page = parse_page(export(root, kind, ids["crashed"]))
    (turn,) = page.find_all("section", "turn")
    assert turn.attrs["class"] == "turn st-interrupted"
    assert html.unescape(turn.find_all("span", "turn-status")[0].all_text()) == \
        "interrupted (crash; not yet repaired on disk)"
    notes = [n.all_text() for n in page.find_all("p", "note")]
    assert notes == ["Note: turn 1 was cut short and has not been repaired on disk yet; it is shown "
                     "as loading will close it. Nothing was written."]
    assert f"waiting {TAGS}" in html.unescape(turn.all_text())

    page = parse_page(export(root, kind, ids["edit"]))
    (turn,) = page.find_all("section", "turn")
    assert turn.attrs["class"] == "turn st-completed"
    (diff,) = turn.find_all("details", "diff")
    lines = [(s.attrs["class"], s.all_text()) for s in diff.find_all("span")]
    assert lines[2:5] == [("hunk", "@@ -1,22 +1,2 @@"), ("ctx", " alpha"), ("del", "-beta")]
    assert lines[-1] == ("add", "+BETA") and len(lines) == 2 + 1 + 1 + 21 + 1
    assert "permission: allow_once" in turn.find_all("summary")[0].all_text()
    assert [b.all_text() for b in turn.find_all("strong")] == ["a.txt"]  # Markdown, rendered
    assert "Step 1 · tokens 40 in / 9 out" in [s.all_text() for s in turn.find_all("div", "step-head")]
    assert html.unescape(page.find_all("dl", "fields")[0].all_text()).count("wrapped") == 0


def test_markdown_tricks_stay_text() -> None:
    """Every trick in the hostile agent's answer, rendered alone: raw HTML is escaped,
    javascript:/data: targets (plain, entity-encoded, autolinked, by reference) leave the
    link as text, an image becomes a link that loads nothing."""
    from acp_bridge.cli.sessions.markup import markdown

    out = markdown(MARKDOWN)
    page = parse_page(out)
    assert active_parts(page) == []
    assert [a.attrs["href"] for a in page.find_all("a")] == ["https://example.org/ok"]
    shown = page.all_text()
    for trick in ["[a js link](javascript:", "[an entity link](javascript:", "<javascript:document",
                  "![an image](x.png", "[a data page](data:text/html,<script>"]:
        assert trick in shown, trick
    assert markdown("![cat](https://example.org/cat.png)").strip() == (
        '<p><a class="image" href="https://example.org/cat.png" rel="noopener noreferrer nofollow">'
        "[image: cat]</a></p>")
    assert "\\u202e" in markdown("evil\u202etxt.exe") and "\u202e" not in markdown("evil\u202etxt.exe")
    assert "\\x1b[2J" in markdown("a\x1b[2J")  # control characters shown, as at the terminal


def test_a_long_answer_is_escaped_text_a_piece_at_a_time(tmp_path: Path, kind: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MARKDOWN_CHARS an answer is not rendered (its token tree would hold the whole
    text many times over): it is shown escaped, in pieces."""
    from acp_bridge.cli.sessions import markup, text
    from session import SessionStore, open_backend
    from tests.support.logs import Script

    monkeypatch.setattr(markup, "MARKDOWN_CHARS", 100)
    monkeypatch.setattr(text, "PIECE", 64)
    store = SessionStore(open_backend(kind, tmp_path))
    log = store.create(cwd="/w")
    answer = "".join(f"<b>{i}</b> & " for i in range(200))
    log.extend(Script().text_turn("q", answer).items)
    log.close()
    store.close()
    res = cli("--store", str(tmp_path), "--backend", kind, "export", log.id, "--format", "html")
    assert res.code == 0, res.err
    page = parse_page(res.out)
    (long,) = page.find_all("pre", "long")
    # (A newline right after <pre> is not shown: HTML drops it; the stdlib parser keeps it.)
    assert long.all_text() == "\n" + answer.strip() + "\n"
    assert active_parts(page) == [] and not page.find_all("b")


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_damage_is_refused_as_for_markdown(tmp_path: Path, backend: str) -> None:
    from session import SessionStore, open_backend
    from tests.support.logs import Script
    from tests.support.tamper import replace_event

    store = SessionStore(open_backend(backend, tmp_path))
    log = store.create(cwd="/w")
    log.extend(Script().text_turn().items)
    log.close()
    replace_event(store.backend, log.id, 2, b'{"type": "step/sta')
    store.close()
    md = cli("--store", str(tmp_path), "--backend", backend, "export", log.id)
    page = cli("--store", str(tmp_path), "--backend", backend, "export", log.id, "--format", "html")
    assert md.code == 1 and f"session {log.id}" in md.err
    assert (page.code, page.out, page.err) == (1, "", md.err)  # load's own message, word for word


@pytest.mark.integration
def test_the_markdown_library_is_imported_only_for_html(tmp_path: Path) -> None:
    """markdown-it-py is loaded by the HTML export only: not by `show`, the Markdown
    export or `list`, and not by the agent up to its first answer."""
    from tests.support.logs import Script

    store_dir = tmp_path / "store"
    from session import SessionStore, open_backend

    store = SessionStore(open_backend("jsonl", store_dir))
    log = store.create(cwd="/w")
    log.extend(Script().text_turn().items)
    log.close()
    store.close()
    check = ("import sys; from acp_bridge.cli.sessions.main import main; code = main(sys.argv[1:]); "
             "print(code, 'markdown_it' in sys.modules, file=sys.stderr)")
    seen = {}
    for name, argv in {"list": ["list"], "show": ["show", log.id], "md": ["export", log.id],
                       "html": ["export", log.id, "--format", "html"]}.items():
        out = subprocess.run([sys.executable, "-c", check, "--store", str(store_dir), *argv],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=30,
                             check=True)
        seen[name] = out.stderr.split()
    assert seen == {"list": ["0", "False"], "show": ["0", "False"], "md": ["0", "False"],
                    "html": ["0", "True"]}


@pytest.mark.anyio
@pytest.mark.integration
async def test_the_agent_does_not_load_the_markdown_library(tmp_path: Path, work: Path) -> None:
    from tests.support.acp_client import AgentProcess
    from tests.test_fast_paths import imported_modules

    agent = AgentProcess(tmp_path / "store")
    agent.command[1:1] = ["-X", "importtime"]
    async with agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "hello"))["stopReason"] == "end_turn"
    modules = imported_modules(agent.stderr)
    assert "acp_bridge.agent.runner" in modules  # the turn ran in this process
    assert not {m for m in modules if m.split(".")[0] == "markdown_it"}
