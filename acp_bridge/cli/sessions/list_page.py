"""The session list of `sessions serve` (docs/html.md): a page of PAGE_SIZE sessions,
newest first, with links to the newer and older pages (`?page=N`), each row marked when
an agent has its session open (live.py keeps it up to date)."""

from __future__ import annotations

from acp_bridge.cli.sessions.html import STATES
from acp_bridge.cli.sessions.markup import esc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from acp_bridge.cli.sessions.rows import Row
    from acp_bridge.cli.sessions.source import Source

PAGE_SIZE = 200  # sessions on a page, the newest first: a page of 10,000 would read every log


def page_number(params: Mapping[str, list[str]]) -> int | None:
    """The `page` a request asks for (1 without one); None for one that is not a page."""
    given = params.get("page", ["1"])[-1].strip() or "1"
    if not given.isdigit() or not 1 <= int(given) <= 1_000_000:
        return None
    return int(given)


def page_rows(source: Source, page: int) -> tuple[list[Row], int]:
    """The rows of page `page` and the store's session count. The pages before it are
    read too (the newest first, by the store's stamps: a first page reads only its own
    logs), so a deep page costs what its depth does."""
    from acp_bridge.cli.sessions.listing import list_rows

    total = len(source.ids())
    rows = list_rows(source, limit=PAGE_SIZE * page)
    return rows[PAGE_SIZE * (page - 1):], total


def pager(page: int, shown: int, total: int) -> str:
    """Which sessions the page holds, and the links to the pages beside it."""
    first = PAGE_SIZE * (page - 1) + 1
    if total <= PAGE_SIZE and page == 1:
        return ""
    links = []
    if page > 1:
        links.append(f'<a href="?page={page - 1}" rel="prev">← Newer</a>')
    if first + shown - 1 < total:
        links.append(f'<a href="?page={page + 1}" rel="next">Older →</a>')
    span = f"{first:,} to {first + shown - 1:,}" if shown else "none"
    return f'<p class="note pager">Sessions {span} of {total:,}, newest first. {" · ".join(links)}</p>'


def list_main(rows: list[Row], page: int, total: int) -> str:
    """The list's `<main>`: the pager, the table (or why there is none), the pager."""
    from acp_bridge.cli.sessions.live import running
    from acp_bridge.cli.sessions.text import cut, local_time, one_line, token_text
    from acp_bridge.cli.sessions.view import wrapped_agent

    nav = pager(page, len(rows), total)
    out = ["<main>", nav]
    if not rows:
        out.append('<p class="note">No sessions in this store.</p>' if total == 0 else
                   '<p class="note">No sessions on this page.</p>')
    else:
        out.append('<div class="table"><table class="sessions"><thead><tr><th>Session</th>'
                   "<th>Updated</th><th>Turns</th><th>Last turn</th><th>Tokens</th><th>Agent</th>"
                   "</tr></thead><tbody>")
        for row in rows:
            title = esc(cut(one_line(row.title), 80)) if row.title else "(untitled)"
            updated = "?" if row.updated is None else esc(local_time(row.updated, seconds=False))
            wrapped = wrapped_agent(row.header)
            agent = esc(cut(wrapped.name, 40)) if wrapped is not None else "acp-bridge"
            cwd = esc(cut(one_line(str(row.header.get("cwd", ""))), 60))
            if row.view is None:
                cells = ["?", f'<span class="list-status st-error">{row.status}</span>', ""]
            else:
                status, text = row.view.status()
                state = status if status in STATES else "other"
                cells = [str(row.view.turn_count),
                         f'<span class="list-status st-{state}">{esc(text)}</span>',
                         esc(token_text(row.view.usage))]
            live = ' <span class="running" title="an agent has this session open">● agent running</span>' \
                if running(row) else ""
            marked = ' class="live-row"' if running(row) else ""
            out.append(f'<tr{marked}><td class="title"><a href="session/{esc(row.id)}">{title}</a>{live}'
                       f'<div class="callid mono">{esc(row.id[:8])} · {cwd}</div></td>'
                       f'<td class="num">{updated}</td><td class="num">{cells[0]}</td>'
                       f"<td>{cells[1]}</td><td>{cells[2]}</td><td>{agent}</td></tr>")
        out.append("</tbody></table></div>")
        if len(rows) > 20:
            out.append(nav)
    out.append("</main>")
    return "\n".join(part for part in out if part)


def list_html(rows: list[Row], where: str, page: int, total: int, *, nav: str, csp: str, live: str) -> str:
    """The whole list page: `nav` (the search form) and `live` (the stream's mark and
    script) are our own markup; `csp` its policy."""
    from acp_bridge.cli.sessions.page import FOOT, head

    out = [head("Sessions", nav=nav + live, csp=csp), '<header class="page">', "<h1>Sessions</h1>",
           f'<p class="info">{esc(where)} · {total:,} session(s), newest first · read-only</p>',
           "</header>", list_main(rows, page, total), FOOT]
    return "\n".join(out)
