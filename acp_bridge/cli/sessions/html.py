"""`acp-bridge sessions export ID --format html` and the transcript page of `sessions
serve`: a session's transcript as one self-contained HTML page (docs/html.md), the third
rendering of the same streamed walk as `show` and the Markdown export (walk.py, the view
model in turns.py and view.py; `transcripts.turn_chunks` puts head, turns and tail in
order). Nothing is fetched: the style sheet is inline and allowed by its hash
(page.py), the page has no script, and every value from the log is escaped (markup.py).

Anchors: each turn (`#turn-N`), step and tool call has an id (`anchor`), which search
results link to. Per turn: its status (completed, cancelled, failed, interrupted, running: a coloured
mark and border), when, how long, mode and model; the prompt as the user wrote it; per
step a compaction of the model's context and its summary (collapsed), the thinking
(collapsed), the answer as Markdown, each tool call (collapsed: its
arguments and result; its permission decision, error mark and diff summary on the
line that stays visible), the diffs of edits (open); a wrapped agent's notices where they
came; the turn's end and its tokens.
"""

from __future__ import annotations

from acp_bridge.cli.sessions.markup import esc, model_text
from acp_bridge.cli.sessions.page import CSP, FOOT, fields, head
from acp_bridge.cli.sessions.text import (
    Lines,
    blocks_text,
    diff_summary,
    json_text,
    local_time,
    one_line,
    permission_text,
    token_text,
    unified,
)
from acp_bridge.cli.sessions.transcripts import pieces, turn_chunks
from acp_bridge.cli.sessions.view import (
    compaction_heading,
    notice_text,
    result_mark,
    tool_diffs,
    turn_info,
    view_notes,
    wrapped_agent,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from acp_bridge.cli.sessions.source import Source
    from acp_bridge.cli.sessions.turns import Step, Tool, Turn
    from acp_bridge.cli.sessions.walk import Walk

    Line = str | Lines

# The turn states a page styles; a reason kind from the log outside them is "other".
STATES = frozenset({"completed", "cancelled", "error", "interrupted", "max_tokens", "max_steps",
                    "refusal", "running"})


def html_chunks(walk: Walk, source: Source, *, nav: str = "", csp: str = CSP) -> Iterator[str]:
    """The page, a piece at a time. `nav` is markup of ours put above it (serve's link
    back to the list, and its live page's script: live.py, with the policy `csp` that
    lets it run)."""
    return turn_chunks(walk, lambda: _head(walk, source, nav, csp), lambda turn: _turn(walk, turn),
                       lambda: _tail(walk))


def turn_html(walk: Walk, turn: Turn) -> str:
    """One turn's section, whole (serve's live page sends a turn again as it grows)."""
    return "".join(pieces(_turn(walk, turn)))


def turn_state(walk: Walk, turn: Turn) -> str:
    """The state a turn is styled by (a CSS class: from STATES only)."""
    if turn.reason is None:
        return "running"
    if not turn.end_on_disk:
        return "interrupted"
    kind = str(turn.reason.get("kind"))
    return kind if kind in STATES else "other"


def damage_note(message: str) -> str:
    """The end of a page whose log was found damaged part-way (the turns before it are
    shown already): the error, and the page closed."""
    return f'<p class="damage">{esc(message)}</p>\n</main>\n{FOOT}'


def _head(walk: Walk, source: Source, nav: str, csp: str) -> list[str]:
    header = walk.header
    title = one_line(walk.title) if walk.title else "Untitled session"
    items = [("id", f'<span class="mono">{esc(walk.id)}</span>'),
             ("cwd", f'<span class="mono">{esc(str(header.get("cwd", "")))}</span>')]
    if header.get("additionalDirectories"):
        items.append(("directories", ", ".join(
            f'<span class="mono">{esc(str(d))}</span>' for d in header["additionalDirectories"])))
    wrapped = wrapped_agent(header)
    if wrapped is not None:
        its = f' (its session <span class="mono">{esc(wrapped.session_id)}</span>)' \
            if wrapped.session_id else ""
        items += [("agent", f"{esc(wrapped.name)}, wrapped by acp-bridge{its}"),
                  ("command", f'<span class="mono">{esc(wrapped.command)}</span>')]
    items += [("created", esc(local_time(header.get("createdAt")))),
              ("updated", esc(local_time(walk.updated))),
              ("backend", esc(source.name))]
    return [head(title, nav=nav, csp=csp), '<header class="page">', f"<h1>{esc(title)}</h1>",
            fields(items), "</header>", "<main>"]


def _tail(walk: Walk) -> list[str]:
    out = [] if walk.turn_count else ['<p class="note">No turns yet.</p>']
    turns = str(walk.turn_count)
    if walk.last is not None:
        turns += f" (last: {esc(walk.status()[1])})"
    items = [("turns", turns)]
    if walk.owner == "live":
        items.append(("owner", f"process {walk.owner_pid} (live: an agent has it open)"))
    items.append(("tokens", esc(token_text(walk.usage))))
    out += [f'<p class="note">Note: {esc(note)}</p>'
            for note in view_notes(walk.torn, walk.running, walk.closers)]
    return [*out, "</main>", '<footer class="page">', fields(items), "</footer>", FOOT]


def anchor(turn: int, step: int = 0, call_id: str | None = None) -> str:
    """The id of a turn's section (`turn-3`), of one of its steps (`turn-3-step-2`) or
    of a tool call's part (`turn-3-call-ID`, the call's id percent-encoded: an id holds
    no space, and a link's fragment finds it as it is). Search results link to them."""
    if call_id is not None:
        from urllib.parse import quote

        return f"turn-{turn}-call-{quote(call_id, safe='')}"
    return f"turn-{turn}-step-{step}" if step else f"turn-{turn}"


def _turn(walk: Walk, turn: Turn) -> list[Line]:
    anchor = f"turn-{turn.number}"
    out: list[Line] = [
        f'<section class="turn st-{turn_state(walk, turn)}" id="{anchor}">',
        f'<h2><a href="#{anchor}">Turn {turn.number}</a> '
        f'<span class="status turn-status">{esc(walk.turn_status(turn))}</span></h2>',
        f'<p class="info">{esc(turn_info(turn))}</p>',
        '<div class="prompt"><div class="who">User</div>',
        f'<div class="text">{esc(blocks_text(turn.prompt).strip())}</div></div>',
        *(f'<p class="info">{esc(notice_text(notice))}</p>' for notice in turn.notices),
    ]
    for step in turn.steps:
        out += _step(step, turn)
    if turn.reason is not None:
        end = f"End: {esc(walk.turn_status(turn))}"
    else:
        end = "The turn is still running; shown as far as it is on disk."
    if turn.usage:
        end += f' <span class="usage">· tokens {esc(token_text(turn.usage))}</span>'
    return [*out, f'<p class="end">{end}</p>', "</section>"]


def _step(step: Step, turn: Turn) -> list[Line]:
    head_line = f"Step {step.number}"
    if step.usage:
        head_line += f" · tokens {esc(token_text(step.usage))}"
    out: list[Line] = [f'<div class="step" id="{anchor(turn.number, step.number)}">'
                       f'<div class="step-head">{head_line}</div>']
    for compaction in step.compactions.values():  # collapsed as thinking is: not the conversation
        summary = blocks_text(compaction.summary)
        out += [f'<details class="thinking"><summary>{esc(compaction_heading(compaction))}</summary>',
                *(model_text(summary) if summary.strip() else ['<p class="info">(no summary)</p>']), "</details>"]
    partial = ' <span class="partial">(partial: streamed, cut short)</span>' if step.partial else ""
    reasoning = step.shown_reasoning()
    if reasoning.strip():
        out += [f"<details class=\"thinking\"><summary>Thinking{partial}</summary>",
                *model_text(reasoning), "</details>"]
    text = step.shown_text()
    if text.strip():
        out += [f'<div class="who">Assistant{partial}</div>', *model_text(text)]
    for tool in step.tools:
        out += _tool(tool, turn)
    out += [f'<p class="info">{esc(notice_text(notice))}</p>' for notice in step.notices]
    if not (reasoning.strip() or text.strip() or step.tools or step.compactions or step.notices):
        out.append('<p class="info">(no output)</p>')
    out.append("</div>")
    return out


def _permission(tool: Tool) -> str:
    """The decision about the call and who made it (text.permission_text), whether or
    not the call completed."""
    permission = tool.permission
    text = permission_text(permission)
    if text is None:
        return ""
    option = str(permission.get("optionId") or permission.get("outcome") or "") \
        if isinstance(permission, dict) else ""
    kind = "allow" if option.startswith("allow") else \
        "reject" if option.startswith(("reject", "refused")) else "other"
    return f' <span class="perm perm-{kind}">permission: {esc(text)}</span>'


def _tool(tool: Tool, turn: Turn) -> list[Line]:
    result = tool.result
    summary = f'Tool <span class="tool-name mono">{esc(tool.name)}</span>'
    if tool.kind:
        summary += f' <span class="kind">({esc(tool.kind)})</span>'
    if tool.title:
        summary += f" — {esc(tool.title)}"
    summary += f' <span class="callid mono">{esc(tool.call_id)}</span>'
    diffs = tool_diffs(tool)
    summary += _permission(tool)
    if result is None:
        summary += ' <span class="synthetic">' + ("no result yet" if turn.reason is None
                                                 else "no result recorded") + "</span>"
    else:
        mark = result_mark(tool)
        if mark:
            summary += f' <span class="mark">{esc(mark)}</span>'
        if not tool.result_on_disk:
            summary += ' <span class="synthetic">(synthetic, not yet on disk)</span>'
    for path, old, new in diffs:
        summary += f' <span class="info">{esc(diff_summary(path, old, new))}</span>'
    out: list[Line] = [f'<details class="tool" id="{anchor(turn.number, call_id=tool.call_id)}">'
                       f"<summary>{summary}</summary>",
                       '<div class="label">Arguments</div>',
                       f"<pre>{esc(json_text(tool.arguments))}</pre>"]
    if result is not None:
        out += ['<div class="label">Result</div>',
                f'<pre class="result">{esc(blocks_text(result.get("content")).rstrip()) or "(empty)"}</pre>']
    out.append("</details>")
    for path, old, new in diffs:
        out += [f'<details class="diff" open><summary>{esc(diff_summary(path, old, new))}</summary>',
                _diff(path, old, new), "</details>"]
    return out


def _diff(path: str, old: str | None, new: str) -> str:
    lines = []
    for number, line in enumerate(unified(path, old, new)):
        kind = "file" if number < 2 else "hunk" if line.startswith("@@") else \
            "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
        lines.append(f'<span class="{kind}">{esc(line) or " "}</span>')
    return '<pre class="diff">' + "".join(lines) + "</pre>"
