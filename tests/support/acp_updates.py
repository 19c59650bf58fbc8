"""ACP traffic of a wrapped agent for tests of `acp-bridge wrap`'s recording: session
updates, permission requests and answers as an agent and an editor send them, and
`logged` to append recorder items through a real log and load them back."""

from __future__ import annotations

from typing import Any

from session import Event, SessionStore, check_invariants, derive_messages
from session.backends.memory import MemoryBackend
from session.items import Item
from session.transcript import unanswered_calls
from tests.support.logs import write

PROMPT = [{"type": "text", "text": "read a.txt and fix it"}]
ALLOW = {"outcome": "selected", "optionId": "allow-once"}
REJECT = {"outcome": "selected", "optionId": "reject-once"}
PLAN: dict[str, Any] = {"sessionUpdate": "plan", "entries": [
    {"content": "Read a.txt", "priority": "high", "status": "in_progress"}]}
MODE = {"sessionUpdate": "current_mode_update", "currentModeId": "architect"}


def text(t: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": t}}


def thought(t: str) -> dict[str, Any]:
    return text(t, "agent_thought_chunk")


def call(cid: str, title: str = "Read a.txt", **more: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": cid, "title": title, "kind": "read",
            "status": "pending", "rawInput": {"path": "a.txt"}, **more}


def shown(t: str) -> list[dict[str, Any]]:
    """ToolCallContent holding one text block."""
    return [{"type": "content", "content": {"type": "text", "text": t}}]


def done(cid: str, output: str = "one\ntwo\n", status: str = "completed") -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": cid, "status": status,
            "content": shown(output)}


def asked(cid: str) -> dict[str, Any]:
    """The `toolCall` of a `session/request_permission` (a ToolCallUpdate)."""
    return {"toolCallId": cid, "title": "Read a.txt", "kind": "read"}



def without_prompts(replayed: list[Any]) -> list[Any]:
    """A wrapped session's replay less what only a replay adds: the prompts (our
    `t{n}-user` chunks: live, the editor typed them, so they are not among the updates
    it received) and what ends a load before its answer, the session's title, then its
    commands (docs/protocol.md, "Sessions")."""
    out = [u for u in replayed if not (u.get("sessionUpdate") == "user_message_chunk"
                                      and str(u.get("messageId", "")).endswith("-user"))]
    for ending in ("available_commands_update", "session_info_update"):
        if out and out[-1].get("sessionUpdate") == ending:
            out.pop()
    return out


def logged(items: list[Item]) -> list[Event]:
    """`items` appended through a live memory-backed log, then loaded back: both the
    append-time and the load-time invariant checks pass, and nothing needs repair."""
    store = SessionStore(MemoryBackend())
    log = store.create(cwd="/w")
    written = write(log, items)
    log.close()
    loaded = store.load(log.id)
    assert not loaded.report.repaired
    assert list(loaded.log.events) == written
    loaded.log.close()
    check_invariants(written, closed=True)
    assert unanswered_calls(derive_messages(written)) == []
    return written


WRAPPER_COMMANDS = frozenset({"fork", "agent"})  # the wrapper's own (acp_bridge.wrap.commands)


def without_offers(live: list[Any]) -> list[Any]:
    """A wrapped session's live updates less the wrapper's offers of its own commands
    (an `available_commands_update` naming only them, sent after `session/new` when the
    child had sent no list yet): not history, so not replayed; the child's own list, when
    it comes, is recorded and replayed with ours in it. Whether the child's list comes
    before or after the answer is the child's timing (opencode's comes either way)."""
    return [u for u in live if not (u.get("sessionUpdate") == "available_commands_update"
                                    and {c.get("name") for c in u.get("availableCommands") or []}
                                    <= WRAPPER_COMMANDS)]
