"""`acp-bridge sessions show` and `export --format md`: a session's transcript as plain
text or as Markdown, streamed from one pass over the log (walk.py). (`export --format
jsonl` is the stored form, copied a piece at a time: `Source.raw_chunks`.)"""

from __future__ import annotations

from acp_bridge.cli.sessions.text import (
    PIECE,
    Lines,
    blocks_text,
    cut,
    diff_summary,
    head_lines,
    indent,
    json_text,
    local_time,
    one_line,
    permission_text,
    token_text,
    unified,
)
from acp_bridge.cli.sessions.turns import Step, Tool, Turn
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
    from collections.abc import Callable, Iterator

    from acp_bridge.cli.sessions.source import Source
    from acp_bridge.cli.sessions.walk import Walk

    Line = str | Lines  # a line, or long text printed a piece at a time

# show: how much of a tool's arguments to print without --full.
SHOW_ARG_CHARS = 200


# --- show -----------------------------------------------------------------------------------
#
# Both renderings stream: the head (what the store says of the session, and its title,
# known once the first turn is in), then each turn as the walk completes it, then the
# tail (turn count, owner, notes, total tokens), which only the whole log can tell.


def show_chunks(walk: Walk, source: Source, *, full: bool) -> Iterator[str]:
    """The `show` output, a piece at a time: a session's transcript as plain text."""
    return turn_chunks(walk, lambda: _show_head(walk, source),
                   lambda turn: _turn_text(walk, turn, full), lambda: _show_tail(walk))


def markdown_chunks(walk: Walk, source: Source) -> Iterator[str]:
    """The `export --format md` output, a piece at a time."""
    return turn_chunks(walk, lambda: _markdown_head(walk, source),
                   lambda turn: _turn_markdown(walk, turn), lambda: _markdown_tail(walk))


def turn_chunks(walk: Walk, head: Callable[[], list[str]], body: Callable[[Turn], list[Line]],
            tail: Callable[[], list[str]]) -> Iterator[str]:
    """A rendering of the walk, a piece at a time: `head` with the first turn's `body`
    (the title is known then), each turn's `body` as it completes, `tail` at the end
    (the HTML export is the third rendering: html.py)."""
    started = False
    for turn in walk.turns():
        lines = body(turn)
        if not started:
            started = True
            lines = [*head(), *lines]
        yield from _pieces(lines)
    end: list[Line] = [*tail()]
    if not started:
        end = [*head(), *end]
    yield from _pieces(end)


def _pieces(lines: list[Line]) -> Iterator[str]:
    """The text of `lines`, in pieces of about 64 KB: short lines joined, long text
    (`Lines`) a piece at a time."""
    batch: list[str] = []
    size = 0
    for line in lines:
        if isinstance(line, str):
            batch.append(line)
            size += len(line)
            if size < PIECE:
                continue
        if batch:
            yield "\n".join(batch) + "\n"
            batch, size = [], 0
        if isinstance(line, Lines):
            yield from line.pieces()
    if batch:
        yield "\n".join(batch) + "\n"


def _show_head(walk: Walk, source: Source) -> list[str]:
    header = walk.header
    out = [f"Session {walk.id}"]
    fields = [
        ("title", one_line(walk.title) if walk.title else "(untitled)"),
        ("cwd", one_line(str(header.get("cwd", "")))),
    ]
    if header.get("additionalDirectories"):
        fields.append(("dirs", ", ".join(one_line(str(d)) for d in header["additionalDirectories"])))
    wrapped = wrapped_agent(header)
    if wrapped is not None:
        its = f" (its session {wrapped.session_id})" if wrapped.session_id else ""
        fields += [("agent", f"{wrapped.name}, wrapped{its}"), ("command", wrapped.command)]
    imported = header.get("imported")
    if isinstance(imported, dict):  # `acp-bridge import`'s (docs/import.md): whatever it holds, on one line
        version = f" {one_line(str(imported['version']))}" if imported.get("version") else ""
        fields += [("agent", f"{one_line(str(imported.get('agent')))}{version}, imported (its session "
                             f"{one_line(str(imported.get('sessionId')))})"),
                   ("file", one_line(str(imported.get("file"))))]
    forked = header.get("forkedFrom")
    if isinstance(forked, dict):  # whatever the header holds, on one line
        fields.append(("forked", f"from {one_line(str(forked.get('sessionId')))} at turn "
                                 f"{one_line(str(forked.get('turn')))}"))
    fields += [
        ("created", local_time(header.get("createdAt"))),
        ("updated", local_time(walk.updated)),
        ("store", f"{one_line(walk.where)} ({source.name})"),
    ]
    return out + [f"  {name:<8} {value}" for name, value in fields]


def _turn_text(walk: Walk, turn: Turn, full: bool) -> list[Line]:
    out: list[Line] = ["", f"Turn {turn.number} — {walk.turn_status(turn)}", f"  {turn_info(turn)}"]
    out += ["", "  User:"]
    out += indent(blocks_text(turn.prompt).split("\n"), "    ")
    out += [f"  {notice_text(notice)}" for notice in turn.notices]
    for step in turn.steps:
        label = f"  Step {step.number}"
        if step.usage:
            label += f" · tokens {token_text(step.usage)}"
        out += ["", label]
        out += _step_text(step, turn, full)
    out.append("")
    if turn.reason is not None:
        end = f"  End: {walk.turn_status(turn)}"
    else:
        end = "  (the turn is still running; shown as far as it is on disk)"
    out.append(end + (f" · tokens {token_text(turn.usage)}" if turn.usage else ""))
    return out


def _show_tail(walk: Walk) -> list[str]:
    fields = []
    if walk.last is not None:
        fields.append(("turns", f"{walk.turn_count} (last: {walk.status()[1]})"))
    if walk.owner == "live":
        fields.append(("owner", f"process {walk.owner_pid} (live: an agent has it open)"))
    out = [] if walk.turn_count else ["", "No turns yet."]
    if fields:
        out += [""] + [f"  {name:<8} {value}" for name, value in fields]
    out += [f"  note: {note}" for note in view_notes(walk.torn, walk.running, walk.closers)]
    return [*out, "", f"Total tokens: {token_text(walk.usage)}"]


def _step_text(step: Step, turn: Turn, full: bool) -> list[Line]:
    out: list[Line] = []
    for compaction in step.compactions.values():  # before the step's model call: it needed it
        out.append(f"    {compaction_heading(compaction)}")
        summary = Lines(blocks_text(compaction.summary), "      ", strip=True)
        if summary:
            out += ["    Summary:", summary]
    partial = " (partial: streamed, cut short)" if step.partial else ""
    reasoning = Lines(step.shown_reasoning(), "      | ", strip=True)
    if reasoning:
        out += [f"    Thinking{partial}:", reasoning]
    text = Lines(step.shown_text(), "      ", strip=True)
    if text:
        out += [f"    Assistant{partial}:", text]
    for tool in step.tools:
        out += _tool_text(tool, turn, full)
    out += [f"    {notice_text(notice)}" for notice in step.notices]
    if not (reasoning or text or step.tools or step.compactions or step.notices):
        out.append("    (no output)")
    return out


def _tool_heading(tool: Tool) -> str:
    head = one_line(tool.name)
    if tool.kind:
        head += f" ({one_line(tool.kind)})"
    if tool.title:
        head += f" — {one_line(tool.title)}"
    return head + f" [{one_line(tool.call_id)}]"


def _tool_text(tool: Tool, turn: Turn, full: bool) -> list[str]:
    out = [f"    Tool {_tool_heading(tool)}"]
    args = json_text(tool.arguments)
    out.append(f"      arguments: {args if full else cut(args, SHOW_ARG_CHARS)}")
    permission = permission_text(tool.permission)
    if permission:
        out.append(f"      permission: {permission}")
    result = tool.result
    if result is None:
        if turn.reason is None:
            out.append("      result: (no result yet)" if tool.started
                       else "      result: (not started yet)")
        else:
            out.append("      result: (none recorded)")
        return out
    mark = result_mark(tool)
    label = "      result" + (f" {mark}" if mark else "")
    if not tool.result_on_disk:
        label += " (synthetic, not yet on disk)"
    out.append(label + ":")
    out += indent(head_lines(blocks_text(result.get("content")), full), "        ")
    for path, old, new in tool_diffs(tool):
        out.append(f"      {diff_summary(path, old, new)}")
        if full:
            out += indent(unified(path, old, new), "        ")
    return out


# --- export --format md ---------------------------------------------------------------


def fence(text: str, lang: str = "") -> list[str]:
    import re

    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return [bar + lang, *text.rstrip("\n").split("\n"), bar]


def _md_escape(text: str) -> str:
    """One line of plain text that Markdown shows as is (headings, emphasis, code)."""
    import re

    text = re.sub(r"([\\`*\[\]<>])", r"\\\1", text)
    return re.sub(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])", r"\\_", text)


def _markdown_head(walk: Walk, source: Source) -> list[str]:
    header = walk.header
    title = one_line(walk.title) if walk.title else "Untitled session"
    out = [f"# {_md_escape(title)}", ""]
    items = [
        ("id", f"`{walk.id}`"),
        ("cwd", f"`{one_line(str(header.get('cwd', ''))).replace('`', '')}`"),
    ]
    if header.get("additionalDirectories"):
        items.append(("directories", ", ".join(
            f"`{one_line(str(d)).replace('`', '')}`" for d in header["additionalDirectories"])))
    wrapped = wrapped_agent(header)
    if wrapped is not None:
        its = f" (its session `{wrapped.session_id.replace('`', '')}`)" if wrapped.session_id else ""
        items += [("agent", f"{_md_escape(wrapped.name)}, wrapped{its}"),
                  ("command", f"`{wrapped.command.replace('`', '')}`")]
    items += [
        ("created", local_time(header.get("createdAt"))),
        ("updated", local_time(walk.updated)),
        ("backend", source.name),
    ]
    return out + [f"- **{name}**: {value}" for name, value in items]


def _turn_markdown(walk: Walk, turn: Turn) -> list[Line]:
    out: list[Line] = ["", f"## Turn {turn.number} — {_md_escape(walk.turn_status(turn))}", "",
           f"*{_md_escape(turn_info(turn))}*", "", "### User", ""]
    out += blocks_text(turn.prompt).split("\n")
    for notice in turn.notices:
        out += ["", f"*{_md_escape(notice_text(notice))}*"]
    for step in turn.steps:
        label = f"### Step {step.number}"
        if step.usage:
            label += f" · tokens {token_text(step.usage)}"
        out += ["", label]
        out += _step_markdown(step, turn)
    out.append("")
    if turn.reason is not None:
        end = f"**End:** {_md_escape(walk.turn_status(turn))}"
    else:
        end = "**The turn is still running;** shown as far as it is on disk."
    out.append(end + (f" · tokens {token_text(turn.usage)}" if turn.usage else ""))
    return out


def _markdown_tail(walk: Walk) -> list[str]:
    turns = str(walk.turn_count)
    if walk.last is not None:
        turns += f" (last: {_md_escape(walk.status()[1])})"
    items = [("turns", turns)]
    if walk.owner == "live":
        items.append(("owner", f"process {walk.owner_pid} (live)"))
    out = ["", "---", ""] + [f"- **{name}**: {value}" for name, value in items]
    notes = view_notes(walk.torn, walk.running, walk.closers)
    if notes:
        out.append("")
        out += [f"> **Note:** {_md_escape(note)}" for note in notes]
    return [*out, "", f"**Total tokens:** {token_text(walk.usage)}"]


def _step_markdown(step: Step, turn: Turn) -> list[Line]:
    out: list[Line] = []
    for compaction in step.compactions.values():
        out += ["", f"**{_md_escape(compaction_heading(compaction))}**"]
        summary = Lines(blocks_text(compaction.summary), "> ", strip=True, rstrip=True)
        if summary:
            out += ["", "> **Summary:**", ">", summary]
    partial = " (partial: streamed, cut short)" if step.partial else ""
    reasoning = Lines(step.shown_reasoning(), "> ", strip=True, rstrip=True)
    if reasoning:
        out += ["", f"> **Thinking{partial}:**", ">", reasoning]
    text = Lines(step.shown_text(), strip=True)
    if text:
        out += ["", f"**Assistant{partial}:**", "", text]
    for tool in step.tools:
        out += ["", f"**Tool** `{one_line(tool.name).replace('`', '')}`"
                    + (f" ({_md_escape(one_line(tool.kind))})" if tool.kind else "")
                    + (f" — {_md_escape(one_line(tool.title))}" if tool.title else "")
                    + f" · `{one_line(tool.call_id).replace('`', '')}`", ""]
        out += ["Arguments:", ""]
        out += fence(json_text(tool.arguments), "json")
        result = tool.result
        out.append("")
        permission = permission_text(tool.permission)
        if permission:
            out += [f"Permission: {_md_escape(permission)}", ""]
        if result is None:
            out.append("Result: *no result yet*" if turn.reason is None else "Result: *none recorded*")
            continue
        mark = result_mark(tool)
        label = "Result" + (f" **{_md_escape(mark)}**" if mark else "")
        if not tool.result_on_disk:
            label += " *(synthetic, not yet on disk)*"
        out += [label + ":", ""]
        out += fence(blocks_text(result.get("content")), "text")
        for path, old, new in tool_diffs(tool):
            out += ["", f"{_md_escape(diff_summary(path, old, new))}:", ""]
            out += fence("\n".join(unified(path, old, new)), "diff")
    for notice in step.notices:
        out += ["", f"*{_md_escape(notice_text(notice))}*"]
    if not (reasoning or text or step.tools or step.compactions or step.notices):
        out += ["", "*(no output)*"]
    return out
