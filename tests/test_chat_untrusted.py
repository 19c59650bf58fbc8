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
