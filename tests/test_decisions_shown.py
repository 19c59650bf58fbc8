"""Every decision shown (issue 35, point 4): wherever a transcript is shown (`sessions
show`, `show --full`, `export --format md` and `html`, the page `sessions serve` serves)
each tool call's decision says the option chosen and who chose it: the person (the
client's answer), an "always allow" rule and which, or the mode, whether the call
completed, failed, was cancelled or was cut off after it was allowed (the demo's turn
3: "may have run"). And our agent records who decided where it decides without asking
(`tool/call.permission` with `by`: docs/persistence.md)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.agent.runner import TurnRunner
from acp_bridge.cli.sessions.serve import Site
from session import SessionStore, open_backend
from session.backends.jsonl import JsonlBackend
from tests.support.logs import Script
from tests.support.search_store import add_session
from tests.support.services import ScriptedClient
from tests.test_runner import Answers, script
from tests.test_sessions_cli import cli

USER = {"outcome": "selected", "optionId": "allow_once"}
RULE = {"outcome": "selected", "optionId": "allow_always", "by": "rule",
        "rule": {"name": "run_command", "command": "make test"}}
MODE = {"outcome": "allowed", "by": "mode", "mode": "accept_edits"}
REFUSED = {"outcome": "refused", "by": "mode", "mode": "read_only"}

# call id -> what every transcript must say of its decision
SHOWN = {
    "done": "allow_once, by the user",
    "failed": "allow_always, by the user",
    "ruled": "allow_always, by the rule allowing the command `make test` (an earlier answer)",
    "moded": "allowed, by the mode accept_edits",
    "refused": "refused, by the mode read_only",
    "rejected": "reject_once, by the user",
    "cancelled": "allow_once, by the user",
    "cut": "allow_once, by the user",
}


def call(s: Script, call_id: str, *, kind: str = "execute", pending: bool = False,
         permission: dict[str, Any] | None = None) -> None:
    data: dict[str, Any] = {"turn": s.turn, "step": s.step, "callId": call_id, "name": "run_command",
                            "arguments": {"command": "make test"}, "title": "make test", "kind": kind}
    if pending:
        data["pending"] = True
    if permission is not None:
        data["permission"] = permission
    s.add("tool/call", data)


def result(s: Script, call_id: str, *, error: str | None = None, permission: dict[str, Any] | None = None) -> None:
    data: dict[str, Any] = {"turn": s.turn, "step": s.step, "callId": call_id,
                            "content": [{"type": "text", "text": f"{call_id} output"}], "isError": error is not None}
    if error is not None:
        data["error"] = {"name": "ToolError", "code": error}
    if permission is not None:
        data["permission"] = permission
    s.add("tool/result", data)


def calls_message(s: Script, *ids: str) -> None:
    s.add("assistant/message", {"turn": s.turn, "step": s.step, "content": [
        {"type": "tool-call", "id": i, "name": "run_command", "arguments": '{"command":"make test"}'} for i in ids]})


def session_log() -> Script:
    s = Script()
    # Turn 1: completed calls, each decided otherwise.
    s.start_turn("run the tests").start_step()
    calls_message(s, "done", "failed", "ruled", "moded", "refused", "rejected")
    call(s, "done", pending=True)
    s.grant("done")
    result(s, "done", permission=USER)
    call(s, "failed", pending=True)
    s.grant("failed", "allow_always")
    result(s, "failed", error="tool_failed", permission={"outcome": "selected", "optionId": "allow_always"})
    call(s, "ruled", permission=RULE)
    result(s, "ruled")
    call(s, "moded", kind="edit", permission=MODE)
    result(s, "moded")
    call(s, "refused", kind="edit", pending=True, permission=REFUSED)
    result(s, "refused", error="read_only")
    call(s, "rejected", pending=True)
    result(s, "rejected", error="rejected", permission={"outcome": "selected", "optionId": "reject_once"})
    s.end_step().end_turn()
    # Turn 2: allowed, then the turn cancelled while it ran (its closer's result holds no answer).
    s.start_turn("again").start_step()
    calls_message(s, "cancelled")
    call(s, "cancelled", pending=True)
    s.grant("cancelled")
    result(s, "cancelled", error="cancelled")
    s.end_step().end_turn("cancelled", by="session/cancel")
    # Turn 3: allowed, then the agent killed while it ran: no result, no turn/end.
    s.start_turn("and once more").start_step()
    calls_message(s, "cut")
    call(s, "cut", pending=True)
    s.grant("cut")
    return s


def check_text(text: str, where: str) -> None:
    for call_id, said in SHOWN.items():
        assert said in text, (where, call_id, said)
    assert text.count("by the user") == 5, where  # done, failed, rejected, cancelled, cut


@pytest.fixture(params=["jsonl", "sqlite"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    root = str(tmp_path / "store")
    sid = add_session(root, request.param, str(tmp_path), session_log(), 1_767_000_000_000)
    return root, request.param, sid


@pytest.mark.parametrize("args", [("show",), ("show", "--full"), ("export", "--format", "md"),
                                  ("export", "--format", "html")], ids=["show", "full", "md", "html"])
def test_every_decision_in_every_transcript(stored: tuple[str, str, str], args: tuple[str, ...]) -> None:
    root, backend, sid = stored
    res = cli("--store", root, "--backend", backend, args[0], sid, *args[1:])
    assert res.code == 0, res.err
    text = html.unescape(res.out) if "html" in args else res.out.replace("\\`", "`")  # md escapes backticks
    check_text(text, " ".join(args))
    assert "may have run" in text  # the cut-off call, closed in memory as a load would


def test_the_served_page_and_after_repair(stored: tuple[str, str, str]) -> None:
    root, backend, sid = stored
    status, chunks = Site(backend, root, "token").session_page(sid, {})
    assert status == 200
    check_text(html.unescape("".join(chunks)), "serve")
    store = SessionStore(open_backend(backend, root))
    try:
        store.load(sid).log.close()  # the crash repaired on disk: the closers' result has no answer
    finally:
        store.close()
    res = cli("--store", root, "--backend", backend, "show", sid)
    check_text(res.out, "show after repair")


def test_our_agent_records_who_decided(tmp_path: Path) -> None:
    """A rule, the mode, the person: each on the log, as the transcripts read it."""
    work = tmp_path / "work"
    work.mkdir()
    write = {"name": "write_file", "arguments": {"path": "b.txt", "content": "b\n"}}
    edit = {"name": "edit_file", "arguments": {"path": "b.txt", "old_text": "b", "new_text": "c"}}
    model = script({"toolCalls": [{**write, "id": "w1"}]}, {"toolCalls": [{**write, "id": "w2"}]}, {"text": "ok"},
                   {"toolCalls": [{**edit, "id": "e1"}]}, {"text": "ok"},
                   {"toolCalls": [{**write, "id": "w3"}]}, {"text": "ok"})
    store = SessionStore(JsonlBackend(tmp_path / "store"))
    log = store.create(cwd=str(work))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            services = ScriptedClient(task_group=tg, permission_answer=Answers(options=["allow_always"]))
            runner = TurnRunner(log, model, services, mode="ask")
            await runner.prompt([{"type": "text", "text": "write it twice"}])
            runner.mode = "accept_edits"
            await runner.prompt([{"type": "text", "text": "edit"}])
            runner.mode = "read_only"
            await runner.prompt([{"type": "text", "text": "write again"}])
            tg.cancel_scope.cancel()

    anyio.run(main)
    decided = {e["data"]["callId"]: e["data"].get("permission") for e in log.events if e["type"] == "tool/call"}
    answered = {e["data"]["callId"]: e["data"]["permission"] for e in log.events if e["type"] == "tool/permission"}
    log.close()
    store.close()
    assert answered == {"w1": {"outcome": "selected", "optionId": "allow_always"}}  # the person's
    assert decided == {"w1": None,
                       "w2": {"outcome": "selected", "optionId": "allow_always", "by": "rule",
                              "rule": {"name": "write_file"}},
                       "e1": {"outcome": "allowed", "by": "mode", "mode": "accept_edits"},
                       "w3": {"outcome": "refused", "by": "mode", "mode": "read_only"}}
    assert (work / "b.txt").read_text() == "c\n"
    shown = cli("--store", str(tmp_path / "store"), "show", log.id).out
    assert "permission: allow_always, by the user" in shown
    assert "permission: allow_always, by the rule allowing every write_file call (an earlier answer)" in shown
    assert "permission: allowed, by the mode accept_edits" in shown
    assert "permission: refused, by the mode read_only" in shown
