"""The search of `acp-bridge sessions serve` (docs/html.md, "Search"): the form in the
`nav` of the list and of the results, and the results page, `/TOKEN/search?q=...`:
the turns `sessions search` finds, best first, each a link to its turn in the
transcript (`session/ID#turn-N`, or the step's or tool call's anchor in it) with its facts and a snippet, the matches marked.

Every value from the log or the request (the query, titles, snippets, call ids) goes
through `markup.esc`; the only markup is ours (`<mark>` around a match, the form).
The form is sent by GET to the server itself: the pages that hold it carry
`form-action 'self'` (page.SERVED_CSP), every other page still allows no form.
"""

from __future__ import annotations

from acp_bridge.cli.sessions.markup import esc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from session.search.base import Hit

# (value, label) of the form's choice of how turns ended; "" is any.
ENDED = (("", "any end"), ("completed", "completed"), ("error", "failed"), ("cancelled", "cancelled"),
         ("interrupted", "interrupted"), ("running", "running"))
# The query parameters a search takes (those of `sessions search`), and how many hits.
PARAMS = ("q", "cwd", "agent", "model", "since", "until", "ended", "in", "n")
LIMIT, MAX_LIMIT = 50, 500


def form(query: Mapping[str, Sequence[str]] | None = None, *, back: bool = False) -> str:
    """The search form (our markup; the values given back are escaped)."""
    given = query or {}
    q = given.get("q", [""])[0]
    ended = given.get("ended", [""])[0]
    options = "".join(f'<option value="{value}"{" selected" if value == ended else ""}>{label}</option>'
                      for value, label in ENDED)
    link = '<a href="./">← All sessions</a> ' if back else ""
    return (f'{link}<form class="search" action="search" method="get" role="search">'
            f'<input type="search" name="q" value="{esc(q)}" placeholder="Search every prompt, answer and tool call" '
            f'aria-label="Search"><select name="ended" aria-label="How the turn ended">{options}</select>'
            '<button type="submit">Search</button></form>')


def snippet_html(hit: Hit) -> str:
    """The snippet, escaped a piece at a time, its matches in `<mark>`."""
    out, at = [], 0
    for start, end in hit.marks:
        out += [esc(hit.snippet[at:start]), "<mark>", esc(hit.snippet[start:end]), "</mark>"]
        at = end
    out.append(esc(hit.snippet[at:]))
    return "".join(out)


def hit_anchor(hit: Hit) -> str:
    """Where in the transcript a hit's text is: its tool call, its step, or its turn (the
    prompt)."""
    from acp_bridge.cli.sessions.html import anchor

    if hit.kind in ("tool", "output") and hit.ref is not None:
        return anchor(hit.turn, call_id=hit.ref)
    return anchor(hit.turn, hit.step if hit.kind in ("thought", "answer", "summary") else 0)


def copies_html(hit: Hit) -> str:
    """The other sessions that hold the hit's turn (forks that copied it), each a link."""
    if not hit.copies:
        return ""
    links = ", ".join(f'<a class="mono" href="session/{esc(sid)}#{hit_anchor(hit)}">{esc(sid[:8])}</a>'
                      for sid in hit.copies[:20])
    more = f" and {len(hit.copies) - 20} more" if len(hit.copies) > 20 else ""
    return f'<p class="info">also in {links}{more} (forks: the same turn, copied)</p>'


def hits_html(hits: list[Hit], text: str, where: str) -> str:
    """The results, in the page's `<main>`."""
    from acp_bridge.cli.sessions.html import STATES
    from acp_bridge.cli.sessions.search import state_text
    from acp_bridge.cli.sessions.text import cut, local_time, one_line

    out = ['<header class="page">', f"<h1>Search: {esc(text)}</h1>",
           f'<p class="info">{esc(where)} · {len(hits)} turn(s), best first · read-only</p>', "</header>", "<main>"]
    if not hits:
        out.append('<p class="note">No turn matches.</p>')
    else:
        out.append('<ol class="hits">')
        for hit in hits:
            title = esc(cut(one_line(hit.title), 80)) if hit.title else "(untitled)"
            state = hit.state if hit.state in STATES else "other"
            part = f"step {hit.step} {hit.kind}" if hit.step else hit.kind
            call = f" · call {esc(cut(one_line(hit.ref), 40))}" if hit.ref else ""
            agent = esc(cut(one_line(hit.agent), 40))
            out.append(
                f'<li><a href="session/{esc(hit.session_id)}#{hit_anchor(hit)}">{title} · turn {hit.turn}</a> '
                f'<span class="list-status st-{state}">{esc(cut(one_line(state_text(hit)), 60))}</span>'
                f'<div class="callid mono">{esc(hit.session_id[:8])} · {esc(local_time(hit.started, seconds=False))}'
                f" · {esc(part)}{call} · {agent} · {esc(cut(one_line(hit.model or ''), 40))}</div>"
                f'<p class="snippet">{snippet_html(hit)}</p>{copies_html(hit)}</li>')
        out.append("</ol>")
    out.append("</main>")
    return "\n".join(out)
