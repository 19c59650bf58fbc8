"""`acp-bridge sessions serve [--port N]`: the store as a local, read-only web page
(docs/html.md): the session list and each session's transcript, the same page as
`export --format html`.

- **Only here, only for you.** One listening socket, on 127.0.0.1 (a random free port
  unless `--port`). Every URL starts with a random token (`secrets.token_urlsafe`, 128
  bits), printed once on stderr; a request without it, or for a Host other than
  127.0.0.1 or localhost at that port (a DNS-rebinding page), or with two Hosts, is
  refused 403, whatever its method. The token is compared in constant time and is
  never logged.
- **Read-only.** Every request opens the store through `Source` (`session.open_reader`:
  no lock, no repair, nothing created), in a worker of server.py's bounded pool, and
  closes it; a session an agent has open is shown as far as it is on disk. GET only
  (HEAD too); any other method, once the token is checked, is 405.
- **Headers.** server.py's on every answer, errors included: the page's
  Content-Security-Policy (page.py) as a header, with `frame-ancestors 'none'`;
  `nosniff`, `no-referrer`, `no-store`. A query string of more than 64 fields is 400.
- **Streamed.** A transcript is sent as the walk produces it (HTTP/1.0, the end of the
  body is the end of the connection), so a long session costs a turn's memory here too.
  An error before the first piece (an unknown id, a log damaged in its first block) is
  an error page with its status; damage found later ends the page with the message.

- **Live.** `/TOKEN/live/...`: server-sent events that keep a session's page and the
  list up to date (live.py; the pages' policy allows that one script by its hash).
- **Paged.** The list is a page of 200 sessions, `?page=N` the older ones (list_page.py).

- **Search.** `/TOKEN/search?q=...` (the form in the list's `nav`, search_page.py): the
  turns `sessions search` finds, each a link to its message. The store's search index
  is kept up to date by a thread from the first search on (keeper.py), as `sessions
  index --watch` keeps it: the index is written (its own file or tables,
  docs/search.md), never the store. The pages with the form carry
  `form-action 'self'`; the rest allow no form.
"""

from __future__ import annotations

import sys

from acp_bridge.cli.sessions.live import LIVE_CSP, live_mark
from acp_bridge.cli.sessions.markup import esc
from acp_bridge.cli.sessions.page import FOOT, SERVED_CSP, head
from acp_bridge.cli.sessions.server import PROG

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path
    from typing import Any

    from acp_bridge.cli.sessions.keeper import IndexKeeper
    from acp_bridge.cli.sessions.server import Handler, Limits

    Page = tuple[int, Iterator[str]]  # (status, an HTML body)
    Answer = Page | tuple[int, Iterator[str], str]  # a page, or (status, body, content type)
    Params = Mapping[str, list[str]]  # a request's query string, parsed

HOST = "127.0.0.1"
BACK = '<a href="../">← All sessions</a>'  # from /TOKEN/session/ID


class Site:
    """What the handler serves: the store (opened per request) and the token."""

    def __init__(self, backend: str, root: Path | str, token: str, index: str | None = None) -> None:
        import threading

        self.backend, self.root, self.token = backend, root, token
        self.index = index  # `--index FILE`, if given
        self.keeper: IndexKeeper | None = None  # the search index, kept up to date from the first search
        self._starting = threading.Lock()

    def keep_index(self) -> IndexKeeper:
        from acp_bridge.cli.sessions.keeper import IndexKeeper

        with self._starting:
            if self.keeper is None:
                self.keeper = IndexKeeper(self.backend, self.root, self.index, PROG)
            return self.keeper

    def close(self) -> None:
        if self.keeper is not None:
            self.keeper.close()

    def source(self) -> Any:
        from acp_bridge.cli.sessions.source import Source

        return Source(self.backend, self.root)

    def list_page(self, rest: str, params: Params) -> Page:
        from acp_bridge.cli.sessions.list_page import list_html, page_number, page_rows
        from acp_bridge.cli.sessions.search_page import form

        page = page_number(params)
        if rest or page is None:
            return not_found()
        source = self.source()
        try:
            rows, total = page_rows(source, page)  # reads the logs of the pages up to it only
            where = f"{source.root} ({source.name} backend)"
        finally:
            source.close()
        return 200, iter([list_html(rows, where, page, total, nav=form(), csp=LIVE_CSP,
                                    live=live_mark(f"live/list?page={page}"))])

    def live_page(self, rest: str, params: Params) -> Answer:
        """`live/session/ID?from=N` and `live/list?page=P`: server-sent events (live.py)."""
        from acp_bridge.cli.sessions.list_page import PAGE_SIZE, list_main, page_number, page_rows
        from acp_bridge.cli.sessions.live import EVENT_STREAM, list_events, turn_events
        from acp_bridge.cli.sessions.source import resolve_id
        from acp_bridge.errors import AmbiguousIdError
        from session import InvalidSessionIdError, SessionNotFoundError

        kind, _, sid = rest.partition("/")
        if kind == "list" and not sid:
            page = page_number(params)
            if page is None:
                return not_found()
            number = page

            def render(source: Any) -> str:
                rows, total = page_rows(source, number)
                return list_main(rows, number, total)

            return 200, list_events(self.source, render, PAGE_SIZE * number), EVENT_STREAM
        if kind != "session":
            return not_found()
        start = params.get("from", ["0"])[-1]
        source = self.source()
        try:
            found = resolve_id(source, sid)
            if found not in source.ids():  # a full id is taken as given: it must be there to follow
                raise SessionNotFoundError(f"session {found} not found", session_id=found)
        except (InvalidSessionIdError, SessionNotFoundError, AmbiguousIdError) as exc:
            return error_page(404, str(exc))
        finally:
            source.close()
        return 200, turn_events(self.source, found, int(start) if start.isdigit() else 0), EVENT_STREAM

    def session_page(self, rest: str, params: Params) -> Page:
        from acp_bridge.cli.sessions.html import html_chunks
        from acp_bridge.cli.sessions.source import resolve_id
        from acp_bridge.cli.sessions.walk import Walk
        from acp_bridge.errors import AmbiguousIdError
        from session import InvalidSessionIdError, SessionError, SessionNotFoundError

        source = self.source()
        walk = None
        try:
            sid = resolve_id(source, rest)
            walk = Walk(source, sid)
            chunks = html_chunks(walk, source, nav=BACK + live_mark(f"../live/session/{sid}"), csp=LIVE_CSP)
            first = next(chunks, "")  # errors before any piece get a status of their own
        except (InvalidSessionIdError, SessionNotFoundError, AmbiguousIdError) as exc:
            _close(walk, source)
            status = 400 if isinstance(exc, AmbiguousIdError) else 404
            return error_page(status, str(exc), nav=BACK)
        except (SessionError, OSError) as exc:
            _close(walk, source)
            return error_page(500, f"cannot show this session: {exc}", nav=BACK)
        except BaseException:
            _close(walk, source)
            raise
        return 200, _rest_of_page(first, chunks, walk, source)

    def search_page(self, rest: str, params: Params) -> Page:
        import argparse

        from acp_bridge.cli.sessions.search import ENDED, filters_of
        from acp_bridge.cli.sessions.search_page import LIMIT, MAX_LIMIT, form, hits_html
        from acp_bridge.errors import ConfigError
        from session import SearchQueryError
        from session.search.base import KINDS
        from session.search.query import parse_query

        if rest:
            return not_found()
        one = {name: values[-1].strip() for name, values in params.items() if values}
        text = one.get("q", "")
        nav = form(params, back=True)
        if not text:
            body = '<main><h1>Search</h1><p class="note">Words to find in every session.</p></main>'
            return 200, iter([head("Search", nav=nav, csp=SERVED_CSP) + body + FOOT])
        ended = [e for e in params.get("ended", []) if e]
        kinds = [k for k in params.get("in", []) if k]
        try:
            if not set(ended) <= set(ENDED) or not set(kinds) <= set(KINDS):
                raise ConfigError("ended" if not set(ended) <= set(ENDED) else "in", "not one of the choices")
            limit = int(one.get("n") or LIMIT)
            query = parse_query(text)
            filters = filters_of(argparse.Namespace(cwd=one.get("cwd") or None, agent=one.get("agent") or None,
                                                    model=one.get("model") or None, since=one.get("since") or None,
                                                    until=one.get("until") or None, ended=ended, kinds=kinds),
                                 kinds=True)
        except (SearchQueryError, ConfigError, ValueError) as exc:
            return error_page(400, str(exc), nav=nav, csp=SERVED_CSP)
        source = self.source()
        try:
            hits, lines = self.keep_index().search(source, query, filters, max(0, min(limit, MAX_LIMIT)))
            where = f"{source.root} ({source.name} backend)"
        finally:
            source.close()
        said = [*lines, *([f"{PROG}: {query.cut}"] if query.cut is not None else [])]
        told = "".join(f'<p class="note">{esc(line)}</p>' for line in said)
        page = head(f"Search: {text}", nav=nav, csp=SERVED_CSP) + told + hits_html(hits, text, where) + FOOT
        return 200, iter([page])


ROUTES: dict[str, Callable[[Site, str, Params], Answer]] = {
    "": Site.list_page,
    "session": Site.session_page,
    "search": Site.search_page,
    "live": Site.live_page,
}


def _close(walk: Any, source: Any) -> None:
    if walk is not None:
        walk.close()
    source.close()


def _rest_of_page(first: str, chunks: Iterator[str], walk: Any, source: Any) -> Iterator[str]:
    from acp_bridge.cli.sessions.html import damage_note
    from session import SessionError

    try:
        yield first
        try:
            yield from chunks
        except (SessionError, OSError) as exc:  # found part-way: the turns before are out
            yield damage_note(str(exc))
    finally:
        _close(walk, source)


def error_page(status: int, message: str, *, nav: str = "", csp: str | None = None) -> Page:
    title = {400: "Bad request", 404: "Not found", 405: "Method not allowed"}.get(status, "Error")
    body = (f'{head(title, nav=nav, csp=csp) if csp else head(title, nav=nav)}<main><h1>{title}</h1>'
            f'<p class="damage">{esc(message)}</p></main>{FOOT}')
    return status, iter([body])


def not_found() -> Page:
    return error_page(404, "There is no such page.")


# --- the server ---------------------------------------------------------------------------


def make_handler(site: Site, port_of: Callable[[], int], limits: Limits) -> type[Handler]:
    import hmac

    from acp_bridge.cli.sessions.server import Handler

    class SiteHandler(Handler):
        def answer(self, send_body: bool) -> None:
            port = port_of()
            hosts = self.headers.get_all("Host") or []  # two are refused: which one would a proxy have read?
            path, _, query = self.path.split("#", 1)[0].partition("?")
            parts = path.split("/", 2)  # "", token, rest
            given = parts[1] if len(parts) > 1 else ""
            if len(hosts) != 1 or hosts[0] not in (f"{HOST}:{port}", f"localhost:{port}") or \
                    not hmac.compare_digest(given.encode(), site.token.encode()):
                self.reply(403, iter(["Forbidden.\n"]), "text/plain", send_body)
                return
            if self.command not in ("GET", "HEAD"):
                self.reply(*error_page(405, "This server only reads."), "text/html", send_body)
                return
            if len(parts) == 2:  # /TOKEN: relative links need the slash
                self.reply(301, iter([""]), "text/html", send_body, location=f"/{site.token}/")
                return
            route, _, rest = parts[2].partition("/")
            handler = ROUTES.get(route)
            try:
                from urllib.parse import parse_qs

                params = parse_qs(query, max_num_fields=limits.fields)
            except ValueError:
                page: Answer = error_page(400, f"The query string has more than {limits.fields} fields.")
            else:
                try:
                    page = handler(site, rest, params) if handler is not None else not_found()
                except Exception as exc:  # a store that cannot be read: said, and the server goes on
                    print(f"{PROG}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                    page = error_page(500, f"cannot read the store: {exc}")
            status, body, *kind = page
            self.reply(status, body, kind[0] if kind else "text/html", send_body)

    SiteHandler.limits = limits
    return SiteHandler


def serve(backend: str, root: Path | str, args: argparse.Namespace, limits: Limits | None = None) -> int:
    """Serve until SIGINT or SIGTERM. Returns the exit code."""
    import secrets
    import signal
    import threading

    from acp_bridge.cli.sessions.server import Limits, PooledServer
    from session import shown_store

    limits = limits or Limits()
    port = getattr(args, "port", 0) or 0
    if not 0 <= port <= 65535:
        print(f"{PROG}: --port must be 0-65535, not {port}", file=sys.stderr)
        return 2
    site = Site(backend, root, secrets.token_urlsafe(16), getattr(args, "index", None))
    holder: list[int] = [port]
    handler = make_handler(site, lambda: holder[0], limits)
    try:
        server = PooledServer((HOST, port), handler, limits)
    except OSError as exc:
        print(f"{PROG}: cannot listen on {HOST}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    holder[0] = server.server_address[1]

    def stop(signum: int, frame: object) -> None:
        # Not an exception raised into the loop, which could land anywhere (in the middle
        # of starting a request's thread): the loop is asked to end, from a thread, since
        # `shutdown` waits for it.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{PROG}: {shown_store(root)} ({backend} backend), read-only, at "
          f"http://{HOST}:{holder[0]}/{site.token}/ (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        site.close()
    return 0
