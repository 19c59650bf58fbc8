"""Text for `acp-bridge chat`: ACP `session/update`s, permission questions, prompt
answers and session lists rendered for a person at a terminal.

Pure apart from the `Renderer`'s small memory of what it printed last (whether the
last line is still open, which message is streaming, the tool calls seen): every
method returns the text to print and prints nothing itself, so it is tested on
strings. ANSI styling (dim thoughts) only when `color` is set, which the caller
decides (stdout is a terminal and NO_COLOR is unset).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any, Final

from acp_bridge.cli.safe_text import clean, cleaned

DIM: Final = "\x1b[2m"
RESET: Final = "\x1b[0m"

PERMISSION_CHOICES: Final = "[a]llow once / allow a[l]ways / [r]eject: "
OUTPUT_PREVIEW_LINES: Final = 8

STOP_REASONS: Final = {
    "cancelled": "[cancelled]",
    "max_tokens": "[stopped: the model hit its output limit]",
    "max_turn_requests": "[stopped: too many steps in one turn]",
    "refusal": "[the model refused]",
}

_PLAN_MARKS: Final = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def diff_counts(old: str | None, new: str) -> tuple[int, int]:
    """Lines added and removed going from `old` (None: no file) to `new`."""
    before = (old or "").splitlines()
    after = new.splitlines()
    added = removed = 0
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def short_path(path: str, cwd: str | None) -> str:
    if cwd:
        try:
            relative = os.path.relpath(path, cwd)
        except ValueError:
            return path
        if not relative.startswith(".."):
            return relative
    return path


def diff_summary(item: Mapping[str, Any], cwd: str | None = None) -> str:
    """One line for an ACP `diff` content item: `path +A -R` (and `(new file)`)."""
    old = item.get("oldText")
    new = item.get("newText")
    added, removed = diff_counts(old if isinstance(old, str) else None, new if isinstance(new, str) else "")
    summary = f"{short_path(str(item.get('path', '?')), cwd)} +{added} -{removed}"
    return summary + (" (new file)" if old is None else "")


def _diffs(content: Any) -> list[Mapping[str, Any]]:
    return [c for c in content if isinstance(c, dict) and c.get("type") == "diff"] if isinstance(content, list) else []


def _texts(content: Any) -> list[str]:
    """The text of `content` items (ToolCallContent `content` blocks, or bare blocks)."""
    texts: list[str] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        block = item.get("content") if item.get("type") == "content" else item
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return texts


def _block_text(block: Any) -> str:
    if isinstance(block, dict):
        if block.get("type") == "text":
            return str(block.get("text", ""))
        if block.get("type") == "resource_link":
            return f"[{block.get('name') or block.get('uri')}]"
        return f"[{block.get('type', 'content')}]"
    return ""


def _is_end_note(update: Mapping[str, Any]) -> bool:
    """The agent's note of how a turn ended: messageId `t{turn}-end` with the reason in
    `_meta.acpBridge` (a wrapped agent's own chunks carry neither)."""
    meta = update.get("_meta")
    ours = meta.get("acpBridge") if isinstance(meta, dict) else None
    return str(update.get("messageId") or "").endswith("-end") and isinstance(ours, dict) \
        and isinstance(ours.get("reason"), dict)


def sessions_table(sessions: Iterable[Mapping[str, Any]], current: str | None = None) -> str:
    rows = [("", "SESSION", "UPDATED", "TITLE")]
    for info in sessions:
        sid = str(info.get("sessionId", "?"))
        updated = str(info.get("updatedAt") or "").replace("T", " ").split(".")[0].rstrip("Z")
        title = clean(str(info.get("title") or "")).replace("\n", " ")
        rows.append(("*" if sid == current else "", sid, updated, title))
    if len(rows) == 1:
        return "(no sessions)\n"
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)).rstrip()
             for row in rows]
    return "\n".join(lines) + "\n"


class Renderer:
    """Turns what the agent sends into text, remembering just enough between calls."""

    def __init__(self, *, color: bool = False, cwd: str | None = None) -> None:
        self.color = color
        self.cwd = cwd
        self.open = False  # the last text printed did not end with a newline
        self._stream: tuple[str, str] | None = None  # (kind, messageId) now streaming
        self._kinds: dict[str, str] = {}  # toolCallId -> kind
        self._title_shown = False
        # The agent's note of how the running turn ended was shown: the prompt's answer
        # (its stop reason or error) then says nothing new, and is not shown again.
        self._ended_noted = False

    # --- plumbing --------------------------------------------------------------------

    def _text(self, text: str, *, raw: str | None = None) -> str:
        """Record what `text` leaves open (judged on `raw` when styling wraps it)."""
        judged = text if raw is None else raw
        if judged:
            self.open = not judged.endswith("\n")
        return text

    def newline(self) -> str:
        """End the open line, if any; what follows starts a new block."""
        self._stream = None
        if self.open:
            self.open = False
            return "\n"
        return ""

    def line(self, text: str) -> str:
        """`text` on a line of its own."""
        return self.newline() + self._text(text + "\n")

    def dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.color and text else text

    def line_closed(self) -> None:
        """The person pressed Enter: the cursor is at the start of a line."""
        self.open = False
        self._stream = None

    def typed(self, line: str, *, echo: bool) -> str:
        """The person entered `line` (and Enter): echoed when the terminal did not
        show it (piped input), so the transcript reads as a conversation."""
        self.line_closed()
        return line + "\n" if echo else ""

    def new_session(self) -> None:
        self._title_shown = False
        self._kinds.clear()

    # --- prompts and answers ---------------------------------------------------------

    def input_prompt(self) -> str:
        self._ended_noted = False  # what comes next belongs to the next prompt
        return self.newline() + self._text("> ")

    def answer(self, result: Any) -> str:
        """The answer to `session/prompt`: the stop reason unless the turn just ended,
        or the agent's note said how it ended."""
        reason = result.get("stopReason") if isinstance(result, dict) else None
        end = self.newline()
        if reason in (None, "end_turn") or self._ended_noted:
            return end
        return end + self._text(STOP_REASONS.get(str(reason), f"[stopped: {reason}]") + "\n")

    def failed(self, message: str) -> str:
        """A prompt's error answer, unless the agent's note of the turn's end said it."""
        if self._ended_noted:
            return self.newline()
        return self.line(f"[error: {clean(message)}]")

    def permission(self, tool_call: Mapping[str, Any], options: Any = None) -> str:
        """The question for `session/request_permission`, ending in the choices. The
        agent's name for its "always" option is shown when it says more than "Always
        allow" (acp-bridge names what it allows: a command, every call of a tool)."""
        tool_call = cleaned(tool_call)  # what the agent sends is never a terminal command
        title = tool_call.get("title") or "tool call"
        kind = tool_call.get("kind") or self._kinds.get(str(tool_call.get("toolCallId")), "other")
        text = self.line(f"? {title} ({kind})")
        for item in _diffs(tool_call.get("content")):
            text += self._text(f"    {diff_summary(item, self.cwd)}\n")
        always = next((o.get("name") for o in options if isinstance(o, dict) and o.get("kind") == "allow_always"),
                      None) if isinstance(options, list) else None
        if isinstance(always, str) and always.strip() and always.strip().lower() != "always allow":
            text += self._text(f"    a[l]ways: {clean(always)}\n")
        return text + self.choices()

    def choices(self) -> str:
        return self.newline() + self._text("  " + PERMISSION_CHOICES)

    # --- updates ---------------------------------------------------------------------

    def update(self, update: Mapping[str, Any]) -> str:
        # Model and tool output is untrusted: its control characters are shown, not run.
        update = cleaned(update)
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            if _is_end_note(update):
                # How the turn ended (acp_bridge.host.updates.end_notice): a line of its
                # own, live as on a load.
                self._ended_noted = True
                return self.line(_block_text(update.get("content")).strip())
            return self._chunk("text", update)
        if kind == "agent_thought_chunk":
            return self._chunk("thought", update)
        if kind == "user_message_chunk":
            return self._chunk("user", update)
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_update(update)
        if kind == "session_info_update":
            title = update.get("title")
            if isinstance(title, str) and title and not self._title_shown:
                self._title_shown = True
                return self.line(self.dim(f"[session: {title}]"))
            return ""
        if kind == "current_mode_update":
            return self.line(f"[mode: {update.get('currentModeId')}]")
        if kind == "plan":
            return self._plan(update.get("entries"))
        # usage_update, config_option_update, available_commands_update: quiet
        return ""

    def _chunk(self, kind: str, update: Mapping[str, Any]) -> str:
        text = _block_text(update.get("content"))
        key = (kind, str(update.get("messageId") or ""))
        head = ""
        if self._stream != key:
            head = self.newline()
            self._stream = key
            if kind == "user":
                head += "> "
            elif kind == "thought" and not self.color:
                head += "(thinking) "
        if kind == "thought" and self.color:
            return head + self._text(self.dim(text), raw=head + text)
        return head + self._text(text, raw=head + text)

    def _tool_call(self, update: Mapping[str, Any]) -> str:
        call_id = str(update.get("toolCallId"))
        self._kinds[call_id] = str(update.get("kind") or "other")
        status = update.get("status") or "pending"
        text = self.line(f"⚙ {update.get('title') or 'tool call'} [{status}]")
        if status in ("completed", "failed"):
            text += self._result(update)
        return text

    def _tool_update(self, update: Mapping[str, Any]) -> str:
        if "kind" in update:
            self._kinds[str(update.get("toolCallId"))] = str(update["kind"])
        if update.get("status") in ("completed", "failed"):
            return self._result(update)
        return ""  # in_progress, or a terminal embedded while a command runs

    def _result(self, update: Mapping[str, Any]) -> str:
        kind = self._kinds.get(str(update.get("toolCallId")), "other")
        content = update.get("content")
        texts = _texts(content)
        if not texts:
            raw = update.get("rawOutput")
            texts = _texts(raw.get("content")) if isinstance(raw, dict) else []
        body = "\n".join(texts).rstrip("\n")
        output: list[str] = []
        if kind == "execute" and body:
            # A command's display is its output, then a status line ("exit code 0").
            *output, status = body.split("\n")
            detail = status.strip()
        else:
            detail = first_line(body)
        if update.get("status") == "failed":
            head = self.line(f"  ✗ failed: {detail or 'no details'}")
        else:
            diffs = [diff_summary(item, self.cwd) for item in _diffs(content)]
            shown = "; ".join(diffs) if diffs else (detail if kind == "execute" else "")
            head = self.line("  ✓ completed" + (f": {shown}" if shown else ""))
        return head + self._preview(output)

    def _preview(self, lines: list[str]) -> str:
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            return ""
        shown = lines[:OUTPUT_PREVIEW_LINES]
        text = "".join(self.dim(f"  │ {line}") + "\n" for line in shown)
        if len(lines) > len(shown):
            text += self.dim(f"  │ … {len(lines) - len(shown)} more lines") + "\n"
        return self._text(text)

    def _plan(self, entries: Any) -> str:
        if not isinstance(entries, list):
            return ""
        text = self.line("Plan:")
        for entry in entries:
            if isinstance(entry, dict):
                mark = _PLAN_MARKS.get(str(entry.get("status")), "[ ]")
                text += self._text(f"  {mark} {entry.get('content', '')}\n")
        return text
