"""Untrusted text never drives the terminal (issue 17, item 3): an agent whose every
string carries escape sequences (tests/support/hostile_agent.py, behind `acp-bridge
chat --wrap`) and the demo's printing, checked on the bytes written. The pseudo-terminal
run (a script model, a command's output) is in tests/test_chat_terminal.py; `sessions
show` and `export` in tests/test_sessions_cli.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.cli import demo
from acp_bridge.cli.chat.render import DIM, RESET
from acp_bridge.cli.safe_text import guarded
from tests.support.hostile_agent import HIJACK
from tests.test_chat import CHAT, chat_env

HOSTILE_AGENT = Path(__file__).parent / "support" / "hostile_agent.py"
ESCAPED = r"\x1b[2J\x1b[H\x1b]0;pwned\x07\x9b31m"
RAW = [b"\x1b", b"\x07", "\u009b".encode()]  # ESC, BEL and the one-byte CSI (as UTF-8)


@pytest.mark.integration
def test_every_string_from_an_agent_is_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    proc = subprocess.run(
        [*CHAT, "--store", str(tmp_path / "store"), "--cwd", str(tmp_path / "work"),
         "--wrap", "--", sys.executable, str(HOSTILE_AGENT)],
        input=b"go\na\n/mode other\n/quit\n", capture_output=True, env=chat_env(), timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    for raw in RAW:
        assert raw not in proc.stdout and raw not in proc.stderr, raw
    out, err = proc.stdout.decode(), proc.stderr.decode()
    for seen in ["(thinking) thought", "said", "[session: title", "[ ] plan", "[mode: mode",
                 "tool", "? asks", "/w/file", "output", "odd"]:
        assert f"{seen}{ESCAPED}" in out, (seen, out)
    assert f"(mode ask{ESCAPED})" in out  # the mode the agent named at session/new
    assert f"no such mode{ESCAPED}" in err  # an error the agent answered
    assert f"starting{ESCAPED}" in err  # the agent's own stderr, relayed by the chat


def test_the_chats_own_styling_is_the_only_sequence_that_passes() -> None:
    text = f"{DIM}thinking{RESET} {HIJACK} \x1b[31mred"
    assert guarded(text, (DIM, RESET)) == f"{DIM}thinking{RESET} {ESCAPED} \\x1b[31mred"
    assert guarded(text) == f"\\x1b[2mthinking\\x1b[0m {ESCAPED} \\x1b[31mred"


def test_the_demo_prints_what_the_agent_sends_escaped(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    text = {"type": "text", "text": f"text{HIJACK}"}
    updates: list[dict[str, Any]] = [
        {"sessionUpdate": "agent_message_chunk", "content": text},
        {"sessionUpdate": "agent_thought_chunk", "content": text},
        {"sessionUpdate": "tool_call", "toolCallId": "t", "title": f"tool{HIJACK}", "status": "pending"},
        {"sessionUpdate": "tool_call_update", "toolCallId": f"t{HIJACK}", "status": "failed",
         "content": [{"type": "content", "content": {"type": "text", "text": f"output{HIJACK}"}}]},
        {"sessionUpdate": "session_info_update", "title": f"title{HIJACK}"},
    ]
    for update in updates:
        demo._show_update(update)
    demo._say(f"? permission asked: asks{HIJACK}")
    out = capsysbinary.readouterr().out
    for raw in RAW:
        assert raw not in out, raw
    for seen in ["text", "tool", "output", "title", "asks"]:
        assert f"{seen}{ESCAPED}".encode() in out, seen


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.integration
def test_sessions_show_export_and_list_escape_every_string_from_the_log(tmp_path: Path, backend: str) -> None:
    """A log whose every string carries escape sequences (as a tampered log, or a
    wrapped agent's recording, may): nothing reaches stdout or stderr as a sequence."""
    from session import SessionStore, open_backend
    from tests.support.logs import Script

    h = HIJACK
    store = SessionStore(open_backend(backend, tmp_path))
    log = store.create(cwd=f"/w{h}", title=f"title{h}")
    s = Script()
    s.add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}, "mode": f"mode{h}", "model": f"model{h}"})
    s.turn = 1
    s.add("user/message", {"turn": 1, "content": [{"type": "text", "text": f"prompt{h}"},
                                                  {"type": "resource_link", "uri": f"file:///x{h}", "name": f"n{h}"}]})
    s.start_step().chunk(f"thinking{h}", "reasoning").chunk(f"text{h}")
    s.add("assistant/message", {"turn": 1, "step": 1, "content": [
        {"type": "reasoning", "text": f"thinking{h}"}, {"type": "text", "text": f"text{h}"},
        {"type": "tool-call", "id": f"c1{h}", "name": f"tool{h}", "arguments": f'{{"arg":"{h}"}}'}]})
    s.add("tool/call", {"turn": 1, "step": 1, "callId": f"c1{h}", "name": f"tool{h}", "arguments": {"a": h},
                        "title": f"title{h}", "kind": f"kind{h}"})
    s.add("tool/result", {"turn": 1, "step": 1, "callId": f"c1{h}", "isError": True,
                          "content": [{"type": "text", "text": f"output{h}"}],
                          "error": {"code": f"code{h}", "message": f"m{h}"},
                          "permission": {"outcome": "selected", "optionId": f"opt{h}"},
                          "display": [{"type": "diff", "path": f"/w/f{h}", "oldText": f"old{h}\n",
                                       "newText": f"new{h}\n"}]})
    s.end_step().end_turn("error", message=f"failed{h}", code=f"code{h}", step=1)
    s.start_turn(f"again{h}").start_step().message(f"answer{h}").end_step().end_turn("cancelled", by="session/cancel")
    log.extend(s.items)
    log.close()
    store.close()
    base = [*CHAT[:-1], "sessions", "--store", str(tmp_path), "--backend", backend]
    for command in (["show", log.id], ["show", log.id, "--full"], ["export", log.id], ["list"]):
        proc = subprocess.run([*base, *command], capture_output=True, env=chat_env(), timeout=30)
        assert proc.returncode == 0, proc.stderr.decode()
        for raw in RAW:
            assert raw not in proc.stdout and raw not in proc.stderr, (command, raw)
        assert ESCAPED in proc.stdout.decode()
    shown = subprocess.run([*base, "show", log.id, "--full"], capture_output=True, env=chat_env(),
                           timeout=30).stdout.decode()
    for seen in ["title", "/w", "mode", "model", "prompt", "thinking", "text", "tool", "kind", "output",
                 "code", "opt", "/w/f", "old", "new", "failed", "again", "answer"]:
        assert f"{seen}{ESCAPED}" in shown, seen
