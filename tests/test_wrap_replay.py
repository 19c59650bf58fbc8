"""`TurnRecorder` over any update stream: the items keep the invariants while the turn is
open and once it ended, however it ends (a crash included, closed by the repair), and
the replay of the log (`updates_for` of a wrapped session) sends the editor exactly the
updates it was sent live, in order, after the prompt; then only the failed closing of
calls the agent never finished, and a crash's notice."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_bridge.host.advertised import ClientSupport
from acp_bridge.host.replay import ReplayEncoder
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.rpc.protocol import UPDATE_HEAD, UPDATE_TAIL
from acp_bridge.wrap.record import TurnRecorder
from session import Event, check_invariants, derive_messages
from session.closers import interrupted_text
from session.items import Item, wrapped_update
from session.transcript import unanswered_calls
from tests.support.acp_schema import validate_update
from tests.support.acp_updates import (
    ALLOW,
    MODE,
    PLAN,
    PROMPT,
    REJECT,
    asked,
    call,
    done,
    logged,
    shown,
    text,
    thought,
)
from tests.support.logs import closers_of

CALL_IDS = ["c1", "c2", "c3"]
GHOST = "ghost"  # never announced: its updates are kept as they came
STATUSES = [None, "pending", "in_progress", "completed", "failed"]
ENDS = ["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "bogus", "failed",
        "cancel", "crash"]
OP_KINDS = st.sampled_from(["text"] * 4 + ["thought"] * 2 + ["image", "plan", "mode", "usage"]
                           + ["call"] * 3 + ["call_update"] * 4 + ["permission"] * 2 + ["request"]
                           + ["compact", "summary_chunk"])
COMPACTION_IDS = ["k1", "k2"]
COMPACTION_STATUSES = ["in_progress", "completed", "failed", "cancelled", "_paused"]
WORDS = st.sampled_from(["a", "b ", "\n", "é", "😀", ""])


def _draw_update(data: st.DataObject, op: str, announced: list[str]) -> dict[str, Any]:
    draw = data.draw
    if op in ("text", "thought"):
        return (text if op == "text" else thought)(draw(WORDS))
    if op == "image":
        return {"sessionUpdate": "agent_message_chunk",
                "content": {"type": "image", "data": "00", "mimeType": "image/png"}}
    if op == "plan":
        return {**PLAN, "entries": [{**PLAN["entries"][0], "content": draw(WORDS)}]}
    if op == "mode":
        return {**MODE, "currentModeId": draw(st.sampled_from(["ask", "code"]))}
    if op == "usage":
        return {"sessionUpdate": "usage_update", "used": draw(st.integers(0, 10**6)),
                "size": draw(st.integers(1, 10**6))}
    if op == "compact":  # ACP v1.25: a patch of one compaction
        compacting: dict[str, Any] = {"sessionUpdate": "compaction_update",
                                      "compactionId": draw(st.sampled_from(COMPACTION_IDS)),
                                      "status": draw(st.sampled_from(COMPACTION_STATUSES))}
        summary: Any = draw(st.sampled_from(["absent", None, [], "one"]))
        if summary != "absent":
            compacting["summary"] = [{"type": "text", "text": "kept"}] if summary == "one" else summary
        if draw(st.booleans()):
            compacting["error"] = draw(st.sampled_from([None, "slow"]))
        return compacting
    if op == "summary_chunk":
        return {"sessionUpdate": "compaction_summary_chunk", "compactionId": draw(st.sampled_from(COMPACTION_IDS)),
                "content": {"type": "text", "text": draw(WORDS)}}
    update: dict[str, Any]
    if op == "call":
        cid = draw(st.sampled_from(CALL_IDS))
        update = {"sessionUpdate": "tool_call", "toolCallId": cid, "title": f"Do {cid} {draw(WORDS)}"}
        if draw(st.booleans()):
            update["kind"] = draw(st.sampled_from(["read", "edit", "execute"]))
        if draw(st.booleans()):
            update["rawInput"] = {"n": draw(st.integers(0, 9))}
        if draw(st.booleans()):
            update["locations"] = [{"path": f"/w/{cid}.txt"}]
    else:
        # ACP announces a call before updating it: updates name an announced call, or
        # one never announced (GHOST), which the recording keeps as it came.
        update = {"sessionUpdate": "tool_call_update",
                  "toolCallId": draw(st.sampled_from([*announced, GHOST]))}
        if draw(st.booleans()):
            update["title"] = f"Now {draw(WORDS)}"
    status = draw(st.sampled_from(STATUSES))
    if status is not None:
        update["status"] = status
    content = draw(st.sampled_from([None, "absent", "one", "diff"]))
    if content == "one":
        update["content"] = shown(draw(WORDS))
    elif content == "diff":
        update["content"] = [{"type": "diff", "path": "/w/a", "newText": draw(WORDS)}]
    elif content is None and draw(st.booleans()):
        update["content"] = None
    if draw(st.booleans()):
        update["rawOutput"] = {"ok": draw(st.booleans())}
    return update


# What a call the agent never finished shows after the turn's end: closed by the
# recorder (cancelled, or not), or by the crash repair (started: a tool/call exists),
# which names the call as the log wrote it: by one of the titles (else kinds) it had.
RECORDER_CLOSING = (
    "The tool call was cancelled before the agent reported its outcome.",
    "The agent ended the turn without reporting this tool call's outcome.",
)


def _names(updates: list[dict[str, Any]], asked_ids: set[str]) -> dict[str, set[str]]:
    """Per call id, every name the call had at some point of the turn."""
    names: dict[str, set[str]] = {cid: {"tool"} for cid in [*CALL_IDS, "asked"]}
    for cid in asked_ids:
        names[cid] |= {"Read a.txt", "read"}  # tests.support.acp_updates.asked
    for update in updates:
        for field in ("title", "kind"):
            if update.get("sessionUpdate") in ("tool_call", "tool_call_update") and update.get(field):
                names.setdefault(update["toolCallId"], set()).add(update[field])
    return names


def _events(items: list[Item]) -> list[Event]:
    return [{"type": t, "seq": i, "time": 1_000 + i, "data": dict(d)} for i, (t, d) in enumerate(items)]


def _end(recorder: TurnRecorder, end: str) -> list[Item]:
    if end == "failed":
        return recorder.failed({"code": -32603, "message": "boom"})
    if end == "cancel":
        return recorder.cancelled("session/cancel")
    if end == "crash":  # the proxy appends the repair closers (close_interrupted)
        return []
    return recorder.answer({"stopReason": end})


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_update_stream_keeps_the_invariants_and_replays_what_was_shown(data: st.DataObject) -> None:
    recorder = TurnRecorder(1, agent="a")
    items = recorder.prompt(PROMPT)
    sent: list[dict[str, Any]] = []  # what the editor was sent, live
    announced: list[str] = []
    permitted: set[str] = set()  # calls known from a permission request only
    asked_ids: set[str] = set()  # calls a permission request was about
    for _ in range(data.draw(st.integers(0, 30), label="updates")):
        op = data.draw(OP_KINDS)
        if op in ("permission", "request"):
            # As the proxy does: the turn's calls written before any request of the
            # agent goes to the editor (a permission, a file, a terminal), so what
            # the answer lets run has its tool/call on disk.
            cid = data.draw(st.sampled_from([*announced, "asked"])) if op == "permission" else None
            if cid is not None:
                asked_ids.add(cid)
            if cid == "asked":
                permitted.add(cid)
            items += recorder.asking(asked(cid) if cid is not None else None)
            check_invariants(_events(items))
            on_disk = {d["callId"] for t, d in items if t == "tool/call"}
            assert set(announced) | ({cid} if cid else set()) <= on_disk
            if cid is not None:
                items += recorder.permission(asked(cid), data.draw(st.sampled_from([ALLOW, REJECT])))
                check_invariants(_events(items))
            continue
        update = _draw_update(data, op, announced)
        if op == "call" and update["toolCallId"] not in announced:
            announced.append(update["toolCallId"])
        sent.append(update)
        items += recorder.update(update)
        check_invariants(_events(items))  # valid while the turn is open
        assert recorder.open
    end = data.draw(st.sampled_from(ENDS), label="end")
    items += _end(recorder, end)
    if end == "crash":  # the proxy writes what the step said, then closes the turn
        items += recorder.known_calls()
    events = _events(items)
    if end == "crash":
        assert recorder.open
        events += closers_of(events)
    else:
        assert not recorder.open
    late = _draw_update(data, data.draw(OP_KINDS.filter(lambda o: o not in ("permission", "request"))), announced)
    if end != "crash":  # after the end, updates stand between turns
        assert recorder.update(late) == [wrapped_update(late)]
    check_invariants(events, closed=True)
    assert unanswered_calls(derive_messages(events)) == []

    # An editor that advertised compaction (the agent sent it its updates: it was sent
    # the editor's `initialize`).
    ctx = UpdateContext(replay=True, wrapped=True, support=ClientSupport(compaction=True))
    replayed = [u for e in events for u in updates_for(e, ctx)]
    # Exactly what the editor was sent, in order, after the prompt; then only what
    # closes the calls and compactions the agent never finished, and a crash's notice.
    assert replayed[0] == {"sessionUpdate": "user_message_chunk", "content": PROMPT[0], "messageId": "t1-user"}
    assert replayed[1:len(sent) + 1] == sent
    closing = replayed[len(sent) + 1:]
    for update in [replayed[0], *closing]:  # ours (the agent's are as it sent them)
        validate_update(update)
    if end != "end_turn":  # the note that says how the turn ended (and why) comes last
        assert closing.pop()["messageId"] == "t1-end"
    # A crash ends a compaction left in progress (the wrapper's own end of one is silent:
    # the editor was sent nothing for it).
    ended = [u for u in closing if u["sessionUpdate"] == "compaction_update"]
    closing = [u for u in closing if u["sessionUpdate"] != "compaction_update"]
    assert all(u["status"] == "failed" and u["error"] == "The agent stopped (crash) before the compaction finished."
               for u in ended) and (end == "crash" or not ended)
    finished = {u["toolCallId"] for u in sent if u["sessionUpdate"] in ("tool_call", "tool_call_update")
                and u.get("status") in ("completed", "failed")}
    names = _names(sent, asked_ids)
    assert all(u["status"] == "failed" and u["rawOutput"]["error"]["code"] in ("unfinished", "cancelled", "interrupted")
               and u["content"][0]["content"]["text"] in {
                   *RECORDER_CLOSING, *(interrupted_text(n, True) for n in names[u["toolCallId"]])}
               for u in closing), closing
    # A closer's failed update only for a call the agent left open.
    assert {u["toolCallId"] for u in closing} <= set(announced) - finished | permitted


def test_replay_of_a_turn_is_what_the_editor_was_sent() -> None:
    sent = [PLAN, thought("Look."), text("Reading."), call("c1", locations=[{"path": "/w/a.txt"}]),
            {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"},
            done("c1"), {"sessionUpdate": "usage_update", "used": 120, "size": 200_000},
            {**text("Done."), "messageId": "m2"}]
    recorder = TurnRecorder(1, agent="a")
    items = recorder.prompt(PROMPT)
    for update in sent[:4]:
        items += recorder.update(update)
    items += recorder.permission(asked("c1"), ALLOW)
    for update in sent[4:]:
        items += recorder.update(update)
    items += recorder.answer({"stopReason": "end_turn", "usage": {"inputTokens": 120, "outputTokens": 7}})
    events = logged(items)
    ctx = UpdateContext(replay=True, wrapped=True)
    replayed = [u for e in events for u in updates_for(e, ctx)]
    assert replayed == [{"sessionUpdate": "user_message_chunk", "content": PROMPT[0], "messageId": "t1-user"},
                        *sent]
    # The encoder's fast path writes the same bytes as the mapping.
    encoder = ReplayEncoder("s1", None, wrapped=True)
    assert encoder.encode(events) == b"".join(
        UPDATE_HEAD + orjson.dumps("s1") + b',"update":' + orjson.dumps(u) + UPDATE_TAIL for u in replayed)
