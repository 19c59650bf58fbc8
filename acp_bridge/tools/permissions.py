"""Session modes and the permission policy (DESIGN.md section 4). Pure.

    ask           edits and commands ask first (the default)
    accept_edits  edits run without asking; commands still ask
    read_only     edits and commands are refused without asking

Reading never asks; MCP servers' tools (kind `other`: their effects are unknown) ask
like commands. "Always allow" covers what its option's name says (`always_rule`): a
command (kind `execute`) is allowed by its exact text, any other tool by its name. It
holds for the session and is recovered from the log on load, where each answer that
let a call run is recorded (`tool/permission`, and the call's `tool/result`).
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from typing import Any, Final, Literal

from session.events import (
    TOOL_CALL,
    TOOL_PERMISSION,
    TOOL_RESULT,
    Event,
    PermissionRecord,
    PermissionRule,
)
from session.typed import typed

Decision = Literal["allow", "ask", "deny"]
Rule = tuple[str, str | None]
"""What an "Always allow" answer allows: (tool name, the exact command text of a
command; None: every call of the tool)."""

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
"""The options in order; the name of the "always" one is made per call (`options_for`)."""
OPTION_IDS: Final = frozenset(o["optionId"] for o in OPTIONS)
# A command shown in the "always" option's name: no longer than this, with nothing a
# reader could misjudge (a line break or other control character, surrounding spaces, a
# backtick); else the name says "this exact command", and the request's tool call
# shows it whole.
_SHOWN_COMMAND = 60


def always_rule(name: str, kind: str, arguments: Any) -> Rule:
    """What "Always allow" on a call of tool `name` allows from then on: a command
    (kind `execute` with a `command` string) only that exact command text, in any of
    the session's folders and with any timeout; any other tool every call of it."""
    if kind == "execute" and isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        return (name, arguments["command"])
    return (name, None)


def always_label(rule: Rule) -> str:
    """The name of the "always" option for `rule`: it says exactly what it allows."""
    name, command = rule
    if command is None:
        return f"Always allow all {name} calls"
    shown = command if len(command) <= _SHOWN_COMMAND and command == command.strip() \
        and command.isprintable() and "`" not in command else None
    return f"Always allow `{shown}`" if shown is not None else "Always allow this exact command"


def options_for(rule: Rule) -> list[dict[str, str]]:
    """The permission options of a call whose "always" answer would allow `rule`."""
    return [{**o, "name": always_label(rule)} if o["optionId"] == ALLOW_ALWAYS else dict(o) for o in OPTIONS]


def mode_state(mode: str) -> dict[str, Any]:
    """The session's mode as ACP shows it: `modes` and the `mode` config option (one
    setting under two names, so clients that know either can show and change it)."""
    modes = [{"id": m, "name": name, "description": text} for m, (name, text) in MODES.items()]
    option = {"id": "mode", "name": "Mode", "description": "When the agent asks before acting.",
              "category": "mode", "type": "select", "currentValue": mode,
              "options": [{"value": m["id"], "name": m["name"], "description": m["description"]}
                          for m in modes]}
    return {"modes": {"currentModeId": mode, "availableModes": modes}, "configOptions": [option]}


def decide(mode: str, kind: str, rule: Rule, always: Set[Rule]) -> Decision:
    """Whether a call of a tool of `kind` (whose "always" answer would allow `rule`)
    runs, asks, or is refused in `mode`. Only reading runs unasked: a tool whose effects
    are unknown (an MCP server's tool, kind `other`) asks like a command."""
    if kind in ("read", "search", "think"):
        return "allow"
    if mode == "read_only":
        return "deny"
    if rule in always:
        return "allow"
    if mode == "accept_edits" and kind in ("edit", "delete", "move"):
        return "allow"
    return "ask"


def unasked(mode: str, kind: str, rule: Rule, always: Set[Rule]) -> PermissionRecord | None:
    """Who decided a call that `decide` does not ask about, as the log records it on the
    call's `tool/call` (session.events.PermissionRecord): an "always" rule and which, or
    the mode; None for a read (nothing to decide) and for a call that asks (the client's
    answer is recorded)."""
    if kind in ("read", "search", "think"):
        return None
    if mode == "read_only":
        return {"outcome": "refused", "by": "mode", "mode": mode}
    if rule in always:
        name, command = rule
        which: PermissionRule = {"name": name} if command is None else {"name": name, "command": command}
        return {"outcome": "selected", "optionId": ALLOW_ALWAYS, "by": "rule", "rule": which}
    if mode == "accept_edits" and kind in ("edit", "delete", "move"):
        return {"outcome": "allowed", "by": "mode", "mode": mode}
    return None


_CALL_EVENTS = frozenset({TOOL_CALL, TOOL_PERMISSION, TOOL_RESULT})


class RememberedAlways:
    """The rules the person allowed always (`Rule`s), gathered from a log read in
    blocks: an "always" answer is recorded on the call's `tool/permission` (written
    before it runs) and on its `tool/result`; the rule comes from its `tool/call`."""

    def __init__(self) -> None:
        self.rules: set[Rule] = set()
        self._open: dict[str, Rule] = {}  # callId -> its rule, until its result

    def feed(self, event: Event) -> None:
        if event["type"] not in _CALL_EVENTS:  # most events of a log: skipped before the typed view
            return
        ev = typed(event)
        if ev["type"] == TOOL_CALL:
            call = ev["data"]
            self._open[call["callId"]] = always_rule(call["name"], call["kind"], call["arguments"])
        elif ev["type"] == TOOL_PERMISSION:
            self._learn(self._open.get(ev["data"]["callId"]), ev["data"].get("permission"))
        elif ev["type"] == TOOL_RESULT:
            result = ev["data"]
            self._learn(self._open.pop(result["callId"], None), result.get("permission"))

    def _learn(self, rule: Rule | None, permission: Any) -> None:
        if rule is not None and isinstance(permission, dict) and permission.get("optionId") == ALLOW_ALWAYS:
            self.rules.add(rule)

    def feed_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.feed(event)


def remembered_always(events: Iterable[Event]) -> set[Rule]:
    """The rules the person allowed always in this session, from the log."""
    remembered = RememberedAlways()
    remembered.feed_all(events)
    return remembered.rules
