"""Sessions recorded for the HTML tests (tests/test_html_export.py,
tests/test_html_browser.py): the hostile agent (tests/support/xss_agent.py) run
behind a real `acp-bridge wrap` process, turn by turn as an editor would drive it, so
every payload reaches the store the way a wrapped agent's output does."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from tests.support.acp_client import AgentProcess, ClientPolicy
from tests.support.wrapped import WrappedProcess
from tests.support.xss_agent import TAGS

XSS_AGENT = [sys.executable, str(Path(__file__).with_name("xss_agent.py"))]
PROMPT = f"please look {TAGS}"


async def _wrapped(store: Path | str, backend: str, cwd: Path) -> str:
    """One wrapped session: a completed turn (an edit, allowed), a failed one, a
    cancelled one."""
    policy = ClientPolicy(permissions=["allow_once"])
    async with WrappedProcess(store, XSS_AGENT, backend=backend, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(cwd)
        await agent.prompt(sid, PROMPT)
        answer = await agent.request_raw("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": f"fail {TAGS}"}]})
        assert "error" in answer, answer
        async with anyio.create_task_group() as tg:
            done = agent.prompt_soon(tg, sid, f"wait {TAGS}")
            await agent.wait_for(lambda: any("waiting" in str(u) for u in agent.updates_of(sid)))
            await agent.notify("session/cancel", {"sessionId": sid})
        assert done["result"]["stopReason"] == "cancelled", done
        return sid


async def _crashed(store: Path | str, backend: str, cwd: Path) -> str:
    """A wrapped session whose wrapper is killed (SIGKILL) inside its turn: open on
    disk, its owner gone (interrupted, not yet repaired)."""
    async with WrappedProcess(store, XSS_AGENT, backend=backend) as agent:
        await agent.initialize()
        sid = await agent.new_session(cwd)
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, f"wait {TAGS}")
            await agent.wait_for(lambda: any("waiting" in str(u) for u in agent.updates_of(sid)))
            agent.kill9()
            await agent.proc.wait()
            tg.cancel_scope.cancel()
        return sid


@contextlib.asynccontextmanager
async def waiting_on_a_permission(store: Path | str, backend: str, cwd: Path,
                                  text: str) -> AsyncIterator[tuple[AgentProcess, str]]:
    """A wrapped session mid-turn, live: prompted with `text`, its turn waits on a
    permission request nobody answers; the turn is cancelled on the way out."""
    async with WrappedProcess(store, XSS_AGENT, backend=backend,
                              policy=ClientPolicy(hang_permissions=True)) as agent:
        await agent.initialize()
        sid = await agent.new_session(cwd)
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, text)
            await agent.wait_for(lambda: bool(agent.policy.asked))  # the turn waits on us
            yield agent, sid
            tg.cancel_scope.cancel()


def record_hostile(store: Path | str, backend: str, cwd: Path) -> dict[str, str]:
    """{"wrapped": id, "crashed": id}, recorded in `store`."""
    async def main() -> dict[str, str]:
        return {"wrapped": await _wrapped(store, backend, cwd),
                "crashed": await _crashed(store, backend, cwd)}

    return anyio.run(main)


# --- reading a page back -------------------------------------------------------------


class Element:
    __slots__ = ("attrs", "nodes", "parent", "tag")

    def __init__(self, tag: str, attrs: dict[str, str], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.nodes: list[Element | str] = []  # elements and text, in order

    @property
    def children(self) -> list[Element]:
        return [n for n in self.nodes if isinstance(n, Element)]

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        """The text inside, as written (whitespace between elements included)."""
        return "".join(n if isinstance(n, str) else n.all_text() for n in self.nodes)

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Element]:
        out = []
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.classes()):
                out.append(child)
            out.extend(child.find_all(tag, cls))
        return out


VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "base", "area", "col", "embed",
                  "source", "track", "wbr"})


def parse_page(text: str) -> Element:
    """A page as the HTML parser of the standard library reads it (a tree of elements;
    entities decoded), for checks that need no browser."""
    from html.parser import HTMLParser

    root = Element("#root", {}, None)

    class Parser(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.at = root

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            element = Element(tag, {k: v or "" for k, v in attrs}, self.at)
            self.at.nodes.append(element)
            if tag not in VOID:
                self.at = element

        def handle_endtag(self, tag: str) -> None:
            at: Element | None = self.at
            while at is not None and at.tag != tag:
                at = at.parent
            assert at is not None and at.parent is not None, f"</{tag}> closes nothing"
            self.at = at.parent

        def handle_data(self, data: str) -> None:
            self.at.nodes.append(data)

    parser = Parser()
    parser.feed(text)
    parser.close()
    return root


# Elements and attributes that could run script, load something or send something.
ACTIVE_TAGS = frozenset({"script", "img", "iframe", "frame", "svg", "math", "object", "embed",
                         "link", "base", "form", "input", "button", "video", "audio", "source",
                         "picture", "template", "frameset", "applet", "portal"})


def active_parts(page: Element) -> list[str]:
    """Whatever in a page could run, load or send: an active element, an event-handler
    or style attribute, a `src`, a link whose target is not http(s), mailto or ours."""
    found = []
    for element in page.find_all():
        if element.tag in ACTIVE_TAGS:
            found.append(f"<{element.tag}>")
        for name, value in element.attrs.items():
            if name.startswith("on") or name in ("style", "src", "srcdoc", "srcset", "action",
                                                 "formaction", "background", "poster"):
                found.append(f"{element.tag} {name}={value!r}")
        href = element.attrs.get("href")
        if href is not None and not _our_link(href):
            found.append(f"{element.tag} href={href!r}")
    return found


def without_search_form(page: Element) -> Element:
    """`page` with the search form of `serve` (in its `<nav>`) taken out, once it is
    checked to be ours and nothing more: a GET to `search` of text fields, a choice and
    a button, no handler, no script, no other target."""
    (nav,) = page.find_all("nav")
    (form,) = nav.find_all("form")
    assert (form.attrs.get("action"), form.attrs.get("method"), form.classes()) == ("search", "get", {"search"})
    assert {e.tag for e in form.find_all()} <= {"input", "select", "option", "button"}
    assert [(e.attrs.get("type"), e.attrs.get("name")) for e in form.find_all("input")] == [("search", "q")]
    assert [e.attrs.get("name") for e in form.find_all("select")] == ["ended"]
    for element in [form, *form.find_all()]:
        assert not [name for name in element.attrs if name.startswith("on") or name in
                    ("style", "src", "formaction", "formtarget", "target")], element.attrs
    nav.nodes.remove(form)
    return page


def without_live(page: Element) -> Element:
    """`page` with the one script of `serve`'s live pages taken out, once checked to be
    ours and nothing more: LIVE_JS whole, no attribute (allowed by its hash alone), and
    the mark it reads (`span#live`, its stream's URL under the page's own path)."""
    from acp_bridge.cli.sessions.live import LIVE_JS

    (script,) = page.find_all("script")
    assert script.attrs == {} and script.all_text() == LIVE_JS
    (mark,) = [e for e in page.find_all("span") if e.attrs.get("id") == "live"]
    assert mark.attrs["data-live"].startswith(("live/", "../live/")) and set(mark.attrs) == {"id", "class", "data-live"}
    assert script.parent is not None
    script.parent.nodes.remove(script)
    return page


def served_page(exported: str, sid: str) -> str:
    """The page `serve` gives for a session whose export is `exported`: the same, with
    the link back to the list, the live mark and script, and the policy that lets it run."""
    from acp_bridge.cli.sessions.live import LIVE_CSP, live_mark
    from acp_bridge.cli.sessions.page import CSP
    from acp_bridge.cli.sessions.serve import BACK

    return exported.replace(f'content="{CSP}"', f'content="{LIVE_CSP}"', 1).replace(
        "<body>\n", f"<body>\n<nav>{BACK}{live_mark(f'../live/session/{sid}')}</nav>", 1)


def _our_link(href: str) -> bool:
    from urllib.parse import urlsplit

    scheme = urlsplit(href).scheme.lower()
    if scheme:
        return scheme in ("http", "https", "mailto")
    # Ours: an anchor in the page, the list, a session of the list (serve).
    return href.startswith("#turn-") or href in ("../", "./") or href.startswith("session/")


# --- `acp-bridge sessions serve` as a process ---------------------------------------------


class Served:
    """`with Served(store, backend) as served:` a running `acp-bridge sessions serve`;
    `served.url` is the URL it printed (with its token). On leaving, it is stopped with
    SIGTERM and must exit 0; `served.stderr` is all it wrote there."""

    def __init__(self, store: Path | str, backend: str, *args: str) -> None:
        self.command = [sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store),
                        "--backend", backend, "serve", *args]
        self.url = ""
        self.stderr = ""
        self.returncode: int | None = None

    def __enter__(self) -> Served:
        import re
        import subprocess
        import time

        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 20
        line = self.proc.stderr.readline()  # the server's one line, or its error
        assert time.monotonic() < deadline
        found = re.search(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]+/", line)
        if found is None:
            self.proc.kill()
            rest = self.proc.communicate()[1]
            raise AssertionError(f"no URL from serve: {line}{rest}")
        self.stderr = line
        self.url = found.group(0)
        return self

    @property
    def token(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[1]

    @property
    def port(self) -> int:
        return int(self.url.split(":")[2].split("/")[0])

    def __exit__(self, *exc: object) -> None:
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stderr += err
        self.returncode = self.proc.returncode
        assert out == "", out  # nothing on stdout


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket process `pid` listens on (Linux /proc)."""
    import os

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, size in (("tcp", 4), ("tcp6", 16)):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            shown = ".".join(str(b) for b in raw[::-1]) if size == 4 else raw.hex()
            found.append((shown, int(port, 16)))
    return found


def fetch(url: str, *, method: str = "GET", host: str | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of one request, with no redirect followed."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        headers = {"Host": host} if host is not None else {}
        connection.request(method, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
        response = connection.getresponse()
        body = response.read().decode("utf-8")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()
