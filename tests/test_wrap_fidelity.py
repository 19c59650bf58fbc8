"""`acp-bridge wrap` in front of real agents, offline: recordings of qwen-code, opencode,
codex-acp and gemini-cli talking to a client (tests/wrapped_agents/, made by
tests/support/record_agent.py against a fake model) are played back by a raw child
(tests/support/replay_child.py) behind a real wrapper, the editor's side of each
recording sent through it. Then:

- `session/load` replays exactly the `session/update`s the editor received live, in
  order, with the same statuses (the prompts, which the editor typed, come in front of
  their turns), from the process that recorded them and from a new one;
- the log holds what the agent said: each call's arguments and title as last
  given (a permission request's included), its result from the latest content it
  sent, the turn's usage as the agent reported it (none from `usage_update`, which says
  how full the context is), the mode the child starts in (its `modes`, else its config
  option of category `mode`) and has after a passed-through `session/set_mode`;
- a prompt's answer carries the agent's own `usage` as it sent it, and none where the
  agent gave no count of the turn's tokens.

Every expected value is read from the recording, none is written here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.acp_client import ClientPolicy
from tests.support.acp_schema import SchemaViolation, validate_agent_message
from tests.support.acp_updates import without_prompts
from tests.support.logs import loaded_events
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FIXTURES = sorted((Path(__file__).parent / "wrapped_agents").glob("*.jsonl"))


def replay_child(fixture: Path) -> list[str]:
    return [sys.executable, "-m", "tests.support.replay_child", str(fixture)]


def script(fixture: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in fixture.read_bytes().splitlines() if line.strip()]


class Recorded:
    """What a recording says, per prompt turn: the agent's updates, and those with its
    permission requests in the order they came (`order`), its answer; and the
    client's requests in order."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.requests = [e["msg"] for e in entries if e["from"] == "client" and "method" in e["msg"]]
        # The agent's own methods that ACP does not have (qwen-code 0.24.4's): passed
        # on as it sent them, so the editor's schema check leaves them be.
        self.foreign = frozenset(e["msg"]["method"] for e in entries if e["from"] == "agent"
                                 and "method" in e["msg"] and not acp_method(e["msg"]))
        self.permissions = [e["msg"]["result"]["outcome"].get("optionId") for e in entries
                            if e["from"] == "client" and "method" not in e["msg"]
                            and isinstance(e["msg"].get("result"), dict) and "outcome" in e["msg"]["result"]]
        self.turns: list[dict[str, Any]] = []
        prompts = {m["id"] for m in self.requests if m["method"] == "session/prompt"}
        self.mode: str | None = None
        modes: dict[Any, str] = {m["id"]: m["params"]["modeId"] for m in self.requests
                                 if m["method"] == "session/set_mode"}
        turn: dict[str, Any] | None = None
        for entry in entries:
            msg = entry["msg"]
            if entry["from"] == "client" and msg.get("id") in prompts and "method" in msg:
                turn = {"updates": [], "order": [], "answer": None, "mode": self.mode}
                self.turns.append(turn)
            elif entry["from"] == "agent" and "method" not in msg and msg.get("id") in modes and "result" in msg:
                self.mode = modes[msg["id"]]
            elif entry["from"] == "agent" and msg.get("method") == "session/update" and turn is not None \
                    and turn["answer"] is None:
                turn["updates"].append(msg["params"]["update"])
                turn["order"].append(("update", msg["params"]["update"]))
            elif entry["from"] == "agent" and msg.get("method") == "session/request_permission" and turn is not None:
                turn["order"].append(("asked", msg["params"]["toolCall"]))
            elif entry["from"] == "agent" and msg.get("id") in prompts and "method" not in msg and turn is not None:
                turn["answer"] = msg.get("result")


def acp_method(msg: dict[str, Any]) -> bool:
    """`msg`, a request or notification of the agent, is one ACP has (or an extension's)."""
    try:
        validate_agent_message(msg, {})
    except SchemaViolation as exc:
        return "may not send" not in str(exc)
    return True


async def run_through_wrapper(fixture: Path, store: Path, work: Path, backend: str,
                              answers: list[Any] | None = None) -> tuple[str, list[Any], list[Any], Recorded]:
    """The editor's side of the recording sent through a wrapper: our session id, the
    updates the editor received live, and those a load in the same process replayed;
    the prompts' answers appended to `answers`."""
    recorded = Recorded(script(fixture))
    policy = ClientPolicy(permissions=list(recorded.permissions), refuse_foreign=True)
    sid = theirs = ""
    async with WrappedProcess(store, replay_child(fixture), backend=backend, policy=policy) as editor:
        editor.unchecked = recorded.foreign
        for request in recorded.requests:
            params = dict(request.get("params") or {})
            if params.get("sessionId") == theirs and theirs:
                params["sessionId"] = sid
            if "cwd" in params:
                params["cwd"] = str(work)
            result = await editor.request(request["method"], params)
            if request["method"] == "session/prompt" and answers is not None:
                answers.append(result)
            if request["method"] == "session/new":
                sid, theirs = result["sessionId"], next(
                    e["msg"]["result"]["sessionId"] for e in script(fixture)
                    if e["from"] == "agent" and isinstance(e["msg"].get("result"), dict)
                    and "sessionId" in e["msg"]["result"])
        # Less the wrapper's own offer of its commands after `session/new`, when the
        # agent had sent none yet: not the agent's, so not recorded (the replay shows
        # the agent's lists with ours, and a load is followed by the offer again).
        def live_now() -> list[Any]:
            return [u for u in editor.updates_of(sid) if not (
                u.get("sessionUpdate") == "available_commands_update"
                and [c["name"] for c in u["availableCommands"]] == ["fork"])]

        # An agent may send updates after its last answer (qwen-code sends its command
        # list after the last prompt's): the editor has them all before the load, or a
        # busy machine lets the load overtake the last of them.
        sent = sum(1 for e in script(fixture) if e["from"] == "agent" and e["msg"].get("method") == "session/update")
        await editor.wait_for(lambda: len(live_now()) >= sent, timeout=10)
        live = live_now()
        # The same process replays the live session from what its log has written.
        await editor.load_session(sid, work)
        again = editor.replayed(sid)
    return sid, live, again, recorded


def without_ours(update: dict[str, Any]) -> dict[str, Any]:
    """An update the editor was shown, less the wrapper's own commands (`/fork`, after
    the agent's: docs/wrap.md) where it shows the agent's list."""
    if update.get("sessionUpdate") != "available_commands_update":
        return update
    return {**update, "availableCommands": [c for c in update["availableCommands"]
                                            if c.get("description") != "Fork this session into a new one"]}


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
async def test_load_replays_what_the_editor_saw_live(fixture: Path, backend: str, tmp_path: Path) -> None:
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    sid, live, again, recorded = await run_through_wrapper(fixture, store, work, backend)
    assert without_prompts(again) == live
    # Everything the agent sent during its turns reached the editor (and between them;
    # its command lists with the wrapper's own after them).
    sent = [without_ours(u) for u in live]
    assert [u for turn in recorded.turns for u in turn["updates"]] == \
        [u for u in sent if u in [x for t in recorded.turns for x in t["updates"]]]
    async with WrappedProcess(store, replay_child(fixture), backend=backend) as second:
        await second.initialize()
        await second.load_session(sid, work)
        replayed = second.replayed(sid)
    assert without_prompts(replayed) == live
    prompts = [u["content"]["text"] for u in replayed if u.get("sessionUpdate") == "user_message_chunk"]
    assert prompts == [r["params"]["prompt"][0]["text"] for r in recorded.requests if r["method"] == "session/prompt"]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
async def test_the_log_holds_what_the_agent_said(fixture: Path, tmp_path: Path) -> None:
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    answers: list[Any] = []
    sid, _, _, recorded = await run_through_wrapper(fixture, store, work, "jsonl", answers)
    for answer, turn in zip(answers, recorded.turns, strict=True):
        if "usage" in turn["answer"]:  # the agent's own, as it sent it
            assert answer["usage"] == turn["answer"]["usage"]
        elif expected_usage(turn) is None:  # it said no count (codex-acp: only how full its context is)
            assert "usage" not in answer
    events = loaded_events(store, sid)
    for number, turn in enumerate(recorded.turns, start=1):
        of_turn = [e for e in events if e["data"].get("turn") == number]
        start = next(e for e in of_turn if e["type"] == "turn/start")
        assert start["data"].get("mode") == (turn["mode"] or first_mode(fixture))
        calls = said_of_calls(turn["order"])
        logged = {e["data"]["callId"]: e["data"] for e in of_turn if e["type"] == "tool/call"}
        results = {e["data"]["callId"]: e["data"] for e in of_turn if e["type"] == "tool/result"}
        assert set(logged) >= set(calls)
        for call_id, said in calls.items():
            assert logged[call_id]["arguments"] == said.get("rawInput", {})
            assert logged[call_id]["title"] == said.get("title", logged[call_id]["title"])
            if said.get("status") in ("completed", "failed"):
                assert results[call_id].get("display", []) == said.get("content", [])
                assert results[call_id]["isError"] == (said["status"] == "failed")
        usage = [e["data"]["usage"] for e in of_turn if e["type"] == "assistant/message" and "usage" in e["data"]]
        expected = expected_usage(turn)
        assert usage == ([expected] if expected is not None else [])


def first_mode(fixture: Path) -> str | None:
    new = next(e["msg"]["result"] for e in script(fixture) if e["from"] == "agent"
               and isinstance(e["msg"].get("result"), dict) and "sessionId" in e["msg"]["result"])
    modes = new.get("modes")
    if isinstance(modes, dict):
        return str(modes["currentModeId"])
    return next((o["currentValue"] for o in new.get("configOptions", []) if o.get("category") == "mode"), None)


def said_of_calls(order: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each call's fields as the log must hold them: as the agent last gave them (ACP: an
    update replaces the fields it gives; null gives none), a permission request's
    description of its call included (never its content, the question, or its status),
    but a call announced before a permission request of its turn keeps the title and
    input it had then (the log writes it before the request reaches the editor)."""
    calls: dict[str, dict[str, Any]] = {}
    frozen: set[str] = set()
    described = ("title", "kind", "rawInput", "locations")
    for what, said in order:
        if what == "update" and said.get("sessionUpdate") in ("tool_call", "tool_call_update"):
            fields = calls.setdefault(said["toolCallId"], {})
            fields.update({k: v for k, v in said.items() if v is not None and k not in ("sessionUpdate", "toolCallId")
                           and not (said["toolCallId"] in frozen and k in described)})
        elif what == "asked":
            fields = calls.setdefault(said["toolCallId"], {})
            for key, value in said.items():
                if key not in ("toolCallId", "content", "status") and value is not None \
                        and said["toolCallId"] not in frozen:
                    fields[key] = value
            frozen |= set(calls)
    return calls


# ACP's Usage names -> the log's.
OUR_NAMES = {"inputTokens": "inputTokens", "outputTokens": "outputTokens", "cachedReadTokens": "cacheReadTokens",
             "cachedWriteTokens": "cacheWriteTokens", "thoughtTokens": "reasoningTokens"}


def acp_usage(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict) or not any(name in value for name in OUR_NAMES):
        return None
    return {"inputTokens": 0, "outputTokens": 0,
            **{ours: value[theirs] for theirs, ours in OUR_NAMES.items() if theirs in value}}


def expected_usage(turn: dict[str, Any]) -> dict[str, Any] | None:
    """The agent's own: its answer's (ACP's `usage`, else gemini-cli's `_meta.quota.
    token_count`), else its updates' `_meta.usage` summed; a `usage_update` says how full
    the context is, not what the turn cost: none."""
    answer = turn["answer"] or {}
    answered = acp_usage(answer.get("usage"))
    if answered is not None:
        return dict(answered)
    count = ((answer.get("_meta") or {}).get("quota") or {}).get("token_count")
    if count is not None:
        return {"inputTokens": count["input_tokens"], "outputTokens": count["output_tokens"]}
    total: dict[str, int] = {}
    for update in turn["updates"]:
        meta = acp_usage((update.get("_meta") or {}).get("usage"))
        for name, count in (meta or {}).items():
            total[name] = total.get(name, 0) + count
    return total or None


async def test_extension_methods_have_the_session_id_mapped_both_ways(tmp_path: Path) -> None:
    """An editor's extension request names our session and gets the answer naming it
    too (the child's own id never reaches the editor); the child's extension
    notification reaches the editor naming ours."""
    child_sid = "child-session-1"
    entries = [
        {"from": "client", "msg": {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}},
        {"from": "agent", "msg": {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1,
                                                                        "agentCapabilities": {}}}},
        {"from": "client", "msg": {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}}},
        {"from": "agent", "msg": {"jsonrpc": "2.0", "id": 2, "result": {"sessionId": child_sid}}},
        {"from": "client", "msg": {"jsonrpc": "2.0", "id": 3, "method": "_acme/echo", "params": {}}},
        {"from": "agent", "msg": {"jsonrpc": "2.0", "method": "_acme/note", "params": {"sessionId": child_sid}}},
        {"from": "agent", "msg": {"jsonrpc": "2.0", "id": 3, "result": {"sessionId": child_sid, "ok": True}}},
    ]
    fixture = tmp_path / "extension.jsonl"
    fixture.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    work = tmp_path / "work"
    work.mkdir()
    async with WrappedProcess(tmp_path / "store", replay_child(fixture)) as editor:
        await editor.initialize()
        sid = await editor.new_session(work)
        assert sid != child_sid
        assert await editor.request("_acme/echo", {"sessionId": sid}) == {"sessionId": sid, "ok": True}
        await editor.wait_for(lambda: any(m.get("method") == "_acme/note" for d, m in editor.transcript if d == "<-"))
        [note] = [m for d, m in editor.transcript if d == "<-" and m.get("method") == "_acme/note"]
        assert note["params"] == {"sessionId": sid}
