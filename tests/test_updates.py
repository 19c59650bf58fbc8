"""The event -> session/update mapping (DESIGN.md section 5): exact shapes per event
kind, live vs replay, and schema validity of everything produced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.host.updates import (
    DEFAULT_CONTEXT_WINDOW,
    UpdateContext,
    call_progress,
    interrupted_notice,
    message_id,
    updates_for,
)
from session import Event
from session.events import EventType
from tests.support.acp_schema import validate_def
from tests.support.logs import Script, closers_of, events_of

SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshots"
RUNNER_LOG = SNAPSHOTS / "test_runner" / "test_multi_step_tool_turn_log_snapshot.json"


def ev(etype: EventType, **data: Any) -> Event:
    return {"type": etype, "seq": 0, "time": 0, "data": data}


def valid(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for update in updates:
        validate_def("SessionUpdate", update)
        validate_def("SessionNotification", {"sessionId": "s-1", "update": update})
    return updates


def live() -> UpdateContext:
    return UpdateContext(replay=False)


def run(events: list[Event], ctx: UpdateContext) -> list[dict[str, Any]]:
    return valid([u for e in events for u in updates_for(e, ctx)])


def replay_updates(events: list[Event]) -> list[dict[str, Any]]:
    """Every update of a whole log, as `session/load` replays it (one fresh context)."""
    ctx = UpdateContext(replay=True)
    return [u for e in events for u in updates_for(e, ctx)]


PROMPT = [{"type": "text", "text": "hi"}, {"type": "resource_link", "uri": "file:///a", "name": "a"}]
LOCATION = [{"path": "/w/a.txt", "line": 2}]
# Updates of a wrapped agent that no other event records, with their _meta kept.
PLAN = {"sessionUpdate": "plan", "entries": [
    {"content": "Read the file", "priority": "high", "status": "in_progress"}],
    "_meta": {"vendor": {"x": 1}}}
COMMANDS = {"sessionUpdate": "available_commands_update", "availableCommands": [
    {"name": "review", "description": "Review the changes", "input": {"hint": "what"}}]}
INTERIM = {"sessionUpdate": "tool_call_update", "toolCallId": "c9", "status": "in_progress",
           "content": [{"type": "content", "content": {"type": "text", "text": "50%"}}]}

# (event, updates live); replay differs only for user/message (tested separately).
TABLE: list[tuple[str, Event, list[dict[str, Any]]]] = [
    ("turn/start", ev("turn/start", turn=1, trigger={"kind": "prompt"}, mode="ask"), []),
    ("step/start", ev("step/start", turn=1, step=1), []),
    ("step/end", ev("step/end", turn=1, step=1), []),
    ("turn/end", ev("turn/end", turn=1, reason={"kind": "completed"}), []),
    (
        "turn/end cancelled by the client",
        ev("turn/end", turn=2, reason={"kind": "cancelled", "by": "session/cancel"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t2-end",
          "content": {"type": "text", "text": "\n\n[This turn was cancelled: it was stopped before it finished.]"},
          "_meta": {"acpBridge": {"turn": 2, "reason": {"kind": "cancelled", "by": "session/cancel"}}}}],
    ),
    (
        "turn/end cancelled by a permission answer",
        ev("turn/end", turn=2, reason={"kind": "cancelled", "by": "session/request_permission"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t2-end",
          "content": {"type": "text", "text": "\n\n[This turn was cancelled: a permission request was answered \"cancelled\".]"},
          "_meta": {"acpBridge": {"turn": 2, "reason": {"kind": "cancelled", "by": "session/request_permission"}}}}],
    ),
    (
        "turn/end cancelled by session/close",
        ev("turn/end", turn=2, reason={"kind": "cancelled", "by": "session/close"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t2-end",
          "content": {"type": "text", "text": "\n\n[This turn was cancelled: the session was closed before it finished.]"},
          "_meta": {"acpBridge": {"turn": 2, "reason": {"kind": "cancelled", "by": "session/close"}}}}],
    ),
    (
        "turn/end error",
        ev("turn/end", turn=1, reason={"kind": "error", "step": 1, "message": "HTTP 500: upstream down."}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t1-end",
          "content": {"type": "text", "text": "\n\n[This turn failed: HTTP 500: upstream down.]"},
          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "error", "step": 1, "message": "HTTP 500: upstream down."}}}}],
    ),
    (
        "turn/end max_tokens",
        ev("turn/end", turn=1, reason={"kind": "max_tokens"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t1-end",
          "content": {"type": "text", "text": "\n\n[This turn stopped: the model reached its output limit.]"},
          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "max_tokens"}}}}],
    ),
    (
        "turn/end max_steps",
        ev("turn/end", turn=1, reason={"kind": "max_steps", "limit": 3}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t1-end",
          "content": {"type": "text", "text": "\n\n[This turn stopped: it reached the agent's limit of 3 steps in one turn.]"},
          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "max_steps", "limit": 3}}}}],
    ),
    (
        "turn/end max_steps of a wrapped agent that does not say its limit",
        ev("turn/end", turn=1, reason={"kind": "max_steps", "limit": None}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t1-end",
          "content": {"type": "text", "text": "\n\n[This turn stopped: it reached the agent's limit of steps in one turn.]"},
          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "max_steps", "limit": None}}}}],
    ),
    (
        "turn/end refusal",
        ev("turn/end", turn=1, reason={"kind": "refusal"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t1-end",
          "content": {"type": "text", "text": "\n\n[This turn stopped: the model refused to answer.]"},
          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "refusal"}}}}],
    ),
    (
        "turn/end interrupted by a crash",
        ev("turn/end", turn=3, reason={"kind": "interrupted", "cause": "crash"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t3-end",
          "content": {"type": "text", "text": "\n\n[This turn was interrupted: the agent stopped unexpectedly "
                                              "(crash) before it finished.]"},
          "_meta": {"acpBridge": {"turn": 3, "reason": {"kind": "interrupted", "cause": "crash"}}}}],
    ),
    (
        "turn/end interrupted by a shutdown",
        ev("turn/end", turn=1, reason={"kind": "interrupted", "cause": "shutdown"}),
        [{"sessionUpdate": "agent_message_chunk", "messageId": "t1-end",
          "content": {"type": "text", "text": "\n\n[This turn was interrupted: the agent was shut down "
                                              "before it finished.]"},
          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "interrupted", "cause": "shutdown"}}}}],
    ),
    ("user/message live", ev("user/message", turn=1, content=PROMPT), []),
    (
        "text chunk",
        ev("assistant/chunk", turn=2, step=3, chunk={"type": "text", "text": "Hi "}),
        [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi "},
          "messageId": "t2s3"}],
    ),
    (
        "reasoning chunk",
        ev("assistant/chunk", turn=2, step=3, chunk={"type": "reasoning", "text": "hmm"}),
        [{"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"},
          "messageId": "t2s3-thought"}],
    ),
    (
        "message without usage",
        ev("assistant/message", turn=1, step=1, content=[{"type": "text", "text": "x"}]),
        [],
    ),
    (
        # Each token once: the cached tokens are part of inputTokens, the reasoning of outputTokens.
        "message with usage",
        ev("assistant/message", turn=1, step=2, content=[],
           usage={"inputTokens": 100, "outputTokens": 20, "cacheReadTokens": 5,
                  "cacheWriteTokens": 2, "reasoningTokens": 7}),
        [{"sessionUpdate": "usage_update", "used": 120, "size": DEFAULT_CONTEXT_WINDOW,
          "_meta": {"acpBridge": {"turn": 1, "step": 2, "usage": {
              "inputTokens": 100, "outputTokens": 20, "cacheReadTokens": 5,
              "cacheWriteTokens": 2, "reasoningTokens": 7}}}}],
    ),
    (
        "tool/call",
        ev("tool/call", turn=1, step=1, callId="c1", name="read_file",
           arguments={"path": "a.txt", "line": 2}, title="Read a.txt", kind="read",
           locations=LOCATION),
        [{"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a.txt", "name": "read_file",
          "kind": "read", "status": "pending", "rawInput": {"path": "a.txt", "line": 2},
          "locations": LOCATION},
         {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"}],
    ),
    (
        "tool/call without locations",
        ev("tool/call", turn=1, step=1, callId="c2", name="git__log", arguments={"n": 1},
           title="git: log", kind="other"),
        [{"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "git: log", "name": "git__log", "kind": "other",
          "status": "pending", "rawInput": {"n": 1}},
         {"sessionUpdate": "tool_call_update", "toolCallId": "c2", "status": "in_progress"}],
    ),
    (
        "tool/call pending: awaiting approval (or refused), so no in_progress",
        ev("tool/call", turn=1, step=1, callId="c3", name="nope", arguments="{bad",
           title="nope", kind="other", pending=True),
        [{"sessionUpdate": "tool_call", "toolCallId": "c3", "title": "nope", "name": "nope", "kind": "other",
          "status": "pending", "rawInput": "{bad"}],
    ),
    (
        "tool/permission: the answer lets the call run",
        ev("tool/permission", turn=1, step=1, callId="c3",
           permission={"outcome": "selected", "optionId": "allow_once"}),
        [{"sessionUpdate": "tool_call_update", "toolCallId": "c3", "status": "in_progress",
          "_meta": {"acpBridge": {"permission": {"outcome": "selected", "optionId": "allow_once"}}}}],
    ),
    (
        "wrapped/update in a turn: the update as it came",
        ev("wrapped/update", turn=2, update=PLAN),
        [PLAN],
    ),
    (
        "wrapped/update between turns",
        ev("wrapped/update", update=COMMANDS),
        [COMMANDS],
    ),
    (
        "wrapped/update of an interim tool call update",
        ev("wrapped/update", turn=1, update=INTERIM),
        [INTERIM],
    ),
]


@pytest.mark.parametrize(("name", "event", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_event_to_updates(name: str, event: Event, expected: list[dict[str, Any]]) -> None:
    assert valid(updates_for(event, live())) == expected


@pytest.mark.parametrize(("name", "event", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_replay_equals_live_except_the_prompt(
    name: str, event: Event, expected: list[dict[str, Any]]
) -> None:
    if event["type"] == "user/message":
        return
    assert updates_for(event, UpdateContext(replay=True)) == expected


def test_user_message_is_replayed_one_chunk_per_block() -> None:
    updates = valid(updates_for(ev("user/message", turn=4, content=PROMPT), UpdateContext(replay=True)))
    assert updates == [
        {"sessionUpdate": "user_message_chunk", "content": block, "messageId": "t4-user"}
        for block in PROMPT
    ]


def test_usage_size_is_the_model_window() -> None:
    event = ev("assistant/message", turn=1, step=1, content=[],
               usage={"inputTokens": 3, "outputTokens": 4})
    [update] = valid(updates_for(event, UpdateContext(replay=False, context_window=8192)))
    assert (update["used"], update["size"]) == (7, 8192)


def test_usage_size_is_the_wrapped_agents_own_window() -> None:
    # A wrapped agent's usage_update.size is recorded as contextWindow: it wins over the
    # context's window, so a replay shows the size the agent showed.
    usage = {"inputTokens": 900, "outputTokens": 0, "contextWindow": 200_000}
    event = ev("assistant/message", turn=1, step=1, content=[], usage=usage)
    [update] = valid(updates_for(event, UpdateContext(replay=True, context_window=8192)))
    assert (update["used"], update["size"]) == (900, 200_000)


def announced(call_id: str = "c1") -> UpdateContext:
    ctx = live()
    updates_for(ev("tool/call", turn=1, step=1, callId=call_id, name="read_file",
                   arguments={}, title="Read", kind="read"), ctx)
    return ctx


RESULTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "completed, result blocks wrapped",
        {"content": [{"type": "text", "text": "beta\n"}], "isError": False},
        {"status": "completed",
         "content": [{"type": "content", "content": {"type": "text", "text": "beta\n"}}],
         "rawOutput": {"content": [{"type": "text", "text": "beta\n"}], "isError": False}},
    ),
    (
        "display replaces content",
        {"content": [{"type": "text", "text": "Edited"}], "isError": False,
         "display": [{"type": "diff", "path": "/w/a", "oldText": "a", "newText": "b"}]},
        {"status": "completed",
         "content": [{"type": "diff", "path": "/w/a", "oldText": "a", "newText": "b"}],
         "rawOutput": {"content": [{"type": "text", "text": "Edited"}], "isError": False}},
    ),
    (
        "failed with error and permission",
        {"content": [{"type": "text", "text": "rejected"}], "isError": True,
         "error": {"name": "PermissionDenied", "code": "rejected"},
         "permission": {"outcome": "selected", "optionId": "reject_once"}},
        {"status": "failed",
         "content": [{"type": "content", "content": {"type": "text", "text": "rejected"}}],
         "rawOutput": {"content": [{"type": "text", "text": "rejected"}], "isError": True,
                       "error": {"name": "PermissionDenied", "code": "rejected"}},
         "_meta": {"acpBridge": {"permission": {"outcome": "selected", "optionId": "reject_once"}}}},
    ),
    (
        "empty display falls back to content",
        {"content": [{"type": "text", "text": "x"}], "isError": False, "display": []},
        {"status": "completed",
         "content": [{"type": "content", "content": {"type": "text", "text": "x"}}],
         "rawOutput": {"content": [{"type": "text", "text": "x"}], "isError": False}},
    ),
]


@pytest.mark.parametrize(("name", "result", "expected"), RESULTS, ids=[r[0] for r in RESULTS])
def test_tool_result(name: str, result: dict[str, Any], expected: dict[str, Any]) -> None:
    event = ev("tool/result", turn=1, step=1, callId="c1", **result)
    assert valid(updates_for(event, announced())) == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", **expected}
    ]


TERMINAL_DISPLAY = [
    {"type": "terminal", "terminalId": "term-1"},
    {"type": "content", "content": {"type": "text", "text": "out\nexit code 0"}},
]


def test_terminal_embed_is_kept_live_and_dropped_on_replay() -> None:
    result = ev("tool/result", turn=1, step=1, callId="c1", isError=False,
                content=[{"type": "text", "text": "out"}], display=TERMINAL_DISPLAY)
    [live_update] = valid(updates_for(result, announced()))
    assert live_update["content"] == TERMINAL_DISPLAY
    ctx = UpdateContext(replay=True)
    updates_for(ev("tool/call", turn=1, step=1, callId="c1", name="run_command",
                   arguments={}, title="Run", kind="execute"), ctx)
    [replayed] = valid(updates_for(result, ctx))
    assert replayed["content"] == TERMINAL_DISPLAY[1:]
    only_terminal = ev("tool/result", turn=1, step=1, callId="c1", isError=False,
                       content=[{"type": "text", "text": "out"}], display=TERMINAL_DISPLAY[:1])
    [fallback] = valid(updates_for(only_terminal, ctx))
    assert fallback["content"] == [{"type": "content", "content": {"type": "text", "text": "out"}}]


def test_result_for_an_unannounced_call_creates_the_call() -> None:
    ctx = live()
    message = ev("assistant/message", turn=1, step=1, content=[
        {"type": "tool-call", "id": "w1", "name": "write_file",
         "arguments": '{"path": "a", "content": "x"}'},
        {"type": "tool-call", "id": "w2", "name": "edit_file", "arguments": "{not json"},
    ])
    assert updates_for(message, ctx) == []
    failure = {"content": [{"type": "text", "text": "interrupted"}], "isError": True,
               "error": {"name": "InterruptedError", "code": "interrupted"}}
    raw_output = {"content": failure["content"], "isError": True, "error": failure["error"]}
    content = [{"type": "content", "content": {"type": "text", "text": "interrupted"}}]
    updates = run([ev("tool/result", turn=1, step=1, callId=c, **failure)
                   for c in ("w1", "w2", "w9")], ctx)
    assert updates == [
        {"sessionUpdate": "tool_call", "title": "write_file", "kind": "other", "toolCallId": "w1",
         "status": "failed", "content": content, "rawOutput": raw_output,
         "rawInput": {"path": "a", "content": "x"}, "name": "write_file"},
        {"sessionUpdate": "tool_call", "title": "edit_file", "kind": "other", "toolCallId": "w2",
         "status": "failed", "content": content, "rawOutput": raw_output, "rawInput": "{not json",
         "name": "edit_file"},
        {"sessionUpdate": "tool_call", "title": "tool call", "kind": "other", "toolCallId": "w9",
         "status": "failed", "content": content, "rawOutput": raw_output},
    ]


def test_call_state_is_turn_local() -> None:
    # The same callId in a later turn (models reuse ids) must not count as announced.
    ctx = announced("c1")
    updates_for(ev("turn/start", turn=2, trigger={"kind": "prompt"}), ctx)
    [update] = run([ev("tool/result", turn=2, step=1, callId="c1", isError=True,
                       content=[{"type": "text", "text": "x"}])], ctx)
    assert update["sessionUpdate"] == "tool_call"


def test_message_ids_are_stable_per_turn_step_and_kind() -> None:
    script = Script().start_turn().start_step().chunk("a", "reasoning").chunk("b ").chunk("c")
    script.message("bc").end_step().start_step().chunk("d").message("d").end_step().end_turn()
    script.start_turn().start_step().chunk("e").message("e").end_step().end_turn()
    updates = replay_updates(events_of(script))
    ids = [(u["sessionUpdate"], u["messageId"]) for u in updates if "messageId" in u]
    assert ids == [
        ("user_message_chunk", "t1-user"),
        ("agent_thought_chunk", "t1s1-thought"),
        ("agent_message_chunk", "t1s1"),
        ("agent_message_chunk", "t1s1"),
        ("agent_message_chunk", "t1s2"),
        ("user_message_chunk", "t2-user"),
        ("agent_message_chunk", "t2s1"),
    ]
    assert message_id(1, 1, "text") == "t1s1"
    assert message_id(1, 1, "reasoning") == "t1s1-thought"


def live_and_replay(events: list[Event]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ctx = live()
    streamed = run(events, ctx)
    replayed = valid(replay_updates(events))
    return streamed, replayed


def without_prompt(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] != "user_message_chunk"]


def test_runner_log_replays_as_it_streamed() -> None:
    # A real log written by the turn runner (multi-step, diff display, failed command).
    lines = json.loads(RUNNER_LOG.read_text())
    events: list[Event] = lines[1:]
    streamed, replayed = live_and_replay(events)
    assert without_prompt(replayed) == streamed
    kinds = [u["sessionUpdate"] for u in replayed]
    assert kinds.count("user_message_chunk") == 1
    assert kinds.count("tool_call") == 4
    assert kinds.count("usage_update") == 3
    statuses = [(u["toolCallId"], u["status"]) for u in replayed if u["sessionUpdate"] == "tool_call_update"]
    assert statuses == [
        ("r1", "in_progress"), ("r1", "completed"), ("l1", "in_progress"), ("l1", "completed"),
        ("e1", "in_progress"), ("e1", "completed"), ("x1", "in_progress"), ("x1", "failed"),
    ]


def test_repaired_turn_replays_as_it_streamed() -> None:
    # c1 started (tool/call written), c2 never did: after repair both have results.
    script = Script().text_turn().start_turn("go").start_step().chunk("working")
    script.message("working", calls=("c1", "c2")).call("c1")
    events = events_of(script)
    events += closers_of(events)
    streamed, replayed = live_and_replay(events)
    assert without_prompt(replayed) == streamed
    c1, c2, notice = streamed[-3:]
    assert notice["sessionUpdate"] == "agent_message_chunk"
    assert notice["content"]["text"].strip() == (
        "[This turn was interrupted: the agent stopped unexpectedly (crash) before it finished.]")
    assert (c1["sessionUpdate"], c1["toolCallId"], c1["status"]) == ("tool_call_update", "c1", "failed")
    assert (c2["sessionUpdate"], c2["toolCallId"], c2["status"]) == ("tool_call", "c2", "failed")
    assert c2["title"] == "read_file"
    assert c2["rawInput"] == {"path": "c2.txt"}


def test_unknown_chunk_type_is_skipped() -> None:
    event = ev("assistant/chunk", turn=1, step=1, chunk={"type": "image", "data": ""})
    assert updates_for(event, live()) == []


def test_live_only_call_updates() -> None:
    # Sent by the tool calls, not derived from an event: a running tool's interim content.
    content = [{"type": "terminal", "terminalId": "term-1"}]
    assert valid([call_progress("c1", content)]) == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": content},
    ]


@pytest.mark.parametrize("cause", ["crash", "shutdown", "something new"])
def test_interrupted_notice_says_why_apart_from_the_last_words(cause: str) -> None:
    text = interrupted_notice(cause)
    assert text.startswith("\n\n[This turn was interrupted")  # not glued to the last streamed word
    assert text.endswith(".]")
    assert ("crash" in text) == (cause == "crash")
    assert ("shut down" in text) == (cause == "shutdown")


def test_interrupted_turn_notice_comes_last_and_replays_as_streamed() -> None:
    # A turn cut off mid-sentence, closed by the crash-repair closers: the reader of the
    # replay sees the partial text, then why it stopped, after everything else.
    script = Script().start_turn("go").start_step().chunk("half a sen")
    events = events_of(script)
    events += closers_of(events)
    streamed, replayed = live_and_replay(events)
    assert without_prompt(replayed) == streamed
    texts = [(u["messageId"], u["content"]["text"]) for u in replayed if u["sessionUpdate"] == "agent_message_chunk"]
    assert texts == [("t1s1", "half a sen"), ("t1-end", interrupted_notice("crash"))]
    assert replayed[-1]["messageId"] == "t1-end"
