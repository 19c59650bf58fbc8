"""Session modes and the permission policy (DESIGN.md section 4). Pure.

    ask           edits and commands ask first (the default)
    accept_edits  edits run without asking; commands still ask
    read_only     edits and commands are refused without asking

Reading never asks; MCP servers' tools (kind `other`: their effects are unknown) ask
like commands. "Allow always" is remembered per tool name for the session (and
recovered from the log on load, where each answer is recorded on `tool/result`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal

from session.events import TOOL_CALL, TOOL_RESULT, Event

Decision = Literal["allow", "ask", "deny"]

MODES: Final = {
    "ask": ("Ask", "Ask before editing files or running commands."),
    "accept_edits": ("Accept edits", "Edit files without asking; ask before running commands."),
    "read_only": ("Read only", "Read and answer; refuse edits and commands."),
}
DEFAULT_MODE: Final = "ask"

ALLOW_ONCE: Final = "allow_once"
ALLOW_ALWAYS: Final = "allow_always"
REJECT_ONCE: Final = "reject_once"
OPTIONS: Final = (
    {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
    {"optionId": ALLOW_ALWAYS, "name": "Always allow", "kind": "allow_always"},
    {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
)


def mode_state(mode: str) -> dict[str, Any]:
    """The session's mode as ACP shows it: `modes` and the `mode` config option (one
    setting under two names, so clients that know either can show and change it)."""
    modes = [{"id": m, "name": name, "description": text} for m, (name, text) in MODES.items()]
    option = {"id": "mode", "name": "Mode", "description": "When the agent asks before acting.",
              "category": "mode", "type": "select", "currentValue": mode,
              "options": [{"value": m["id"], "name": m["name"], "description": m["description"]}
                          for m in modes]}
    return {"modes": {"currentModeId": mode, "availableModes": modes}, "configOptions": [option]}


def decide(mode: str, kind: str, tool_name: str, always: frozenset[str] | set[str]) -> Decision:
    """Whether a call of a tool of `kind` runs, asks, or is refused in `mode`. Only
    reading runs unasked: a tool whose effects are unknown (an MCP server's tool, kind
    `other`) asks like a command."""
    if kind in ("read", "search", "think"):
        return "allow"
    if mode == "read_only":
        return "deny"
    if tool_name in always:
        return "allow"
    if mode == "accept_edits" and kind in ("edit", "delete", "move"):
        return "allow"
    return "ask"


class RememberedAlways:
    """Tool names the person allowed always, gathered from a log read in blocks."""

    def __init__(self) -> None:
        self.tools: set[str] = set()
        self._names: dict[str, str] = {}  # callId -> tool name, until its result

    def feed(self, event: Event) -> None:
        etype = event["type"]
        if etype == TOOL_CALL:
            data = event["data"]
            self._names[data["callId"]] = data["name"]
        elif etype == TOOL_RESULT:
            data = event["data"]
            name = self._names.pop(data["callId"], None)
            permission = data.get("permission")
            if name and isinstance(permission, dict) and permission.get("optionId") == ALLOW_ALWAYS:
                self.tools.add(name)

    def feed_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.feed(event)


def remembered_always(events: Iterable[Event]) -> set[str]:
    """Tool names the person allowed always in this session, from the log."""
    remembered = RememberedAlways()
    remembered.feed_all(events)
    return remembered.tools
