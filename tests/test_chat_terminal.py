"""`acp-bridge chat` at a real pseudo-terminal (pexpect), as a person runs it: the line
editor (cursor keys, history across runs, multi-line prompts, a 6,000-character paste),
Ctrl-C as a key and as SIGINT, and escape sequences from the model and from a command
shown escaped in the bytes written to the terminal (issue 17, items 2 and 3).

What the agent received is read from the session log, not from the screen: the screen
carries the editor's own cursor movements."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pexpect
import pytest

from tests.support.acp_client import write_script

pytestmark = pytest.mark.integration

READY = "\x1b[?2004h"  # the editor switched bracketed paste on: it is reading a line
LEFT, UP = "\x1b[D", "\x1b[A"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
HIJACK = "\u001b[2J\u001b[H\u001b]0;pwned-title\u0007"


class Terminal:
    """One `acp-bridge chat` in a pseudo-terminal; everything it wrote is in `out`."""

    def __init__(self, store: Path, work: Path, *args: str, env_extra: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
        # No terminal emulator answers here: the editor must not wait for a cursor report.
        env.update(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", PYTHONIOENCODING="utf-8")
        env.pop("NO_COLOR", None)
        env.update(env_extra or {})
        self.store = store
        self.child = pexpect.spawn(
            sys.executable, ["-m", "acp_bridge", "chat", "--store", str(store), "--cwd", str(work), *args],
            env=env, timeout=20, dimensions=(40, 120))
        self.child.delaybeforesend = None
        self.out = b""

    def expect(self, text: str | bytes) -> None:
        self.child.expect_exact(text)
        self.out += self.child.before + self.child.after

    def ready(self) -> None:
        self.expect(READY)

    def send(self, text: str) -> None:
        self.child.send(text)

    def line(self, text: str) -> None:
        """Type `text`, then Enter, once the editor is reading."""
        self.ready()
        self.send(text + "\r")

    def finish(self) -> int:
        self.child.expect(pexpect.EOF)
        self.out += self.child.before
        self.child.close()
        return int(self.child.exitstatus if self.child.exitstatus is not None else -self.child.signalstatus)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)

    def prompts(self) -> list[str]:
        """The text of every prompt stored in the session logs, in order."""
        texts: list[str] = []
        for path in sorted((self.store / "sessions").glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
            for line in path.read_bytes().splitlines()[1:]:
                event: dict[str, Any] = orjson.loads(line)
                if event["type"] == "user/message":
                    texts.append("".join(b.get("text", "") for b in event["data"]["content"]))
        return texts


@pytest.fixture
def terminals(tmp_path: Path) -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for terminal in made:
        terminal.close()


def start(terminals: list[Terminal], root: Path, *args: str, env_extra: dict[str, str] | None = None) -> Terminal:
    (root / "work").mkdir(exist_ok=True)
    terminal = Terminal(root / "store", root / "work", *args, env_extra=env_extra)
    terminals.append(terminal)
    return terminal


def test_cursor_keys_edit_the_line_and_history_survives_a_restart(tmp_path: Path, terminals: list[Terminal]) -> None:
    t = start(terminals, tmp_path)
    t.line(f"abc{LEFT}X")  # one Left: X goes before c
    t.expect("abXc")
    t.line(f"abc{LEFT}{LEFT}X")  # two: before b
    t.expect("aXbc")
    t.line("/quit")
    assert t.finish() == 0
    assert t.prompts() == ["abXc", "aXbc"]
    history = tmp_path / "store" / "chat_history"
    assert history.stat().st_mode & 0o777 == 0o600
    assert b"\\x1b" not in history.read_bytes()  # no raw key codes were kept either

    again = start(terminals, tmp_path)
    again.line(f"{UP}{UP}!")  # the prompt before last, from the earlier run
    again.expect("aXbc!")
    again.line("/quit")
    assert again.finish() == 0
    assert again.prompts()[-1] == "aXbc!"


def test_a_long_multi_line_paste_arrives_whole(tmp_path: Path, terminals: list[Terminal]) -> None:
    t = start(terminals, tmp_path)
    pasted = "first line\n" + "y" * 6_000 + "\nlast line"
    t.ready()
    t.send(PASTE_START + pasted + PASTE_END)
    t.send("\r")
    t.expect("last line")  # the echo model answers with the prompt's words
    t.line("one\x1b\rtwo")  # Esc Enter (Alt-Enter) starts a new line; Enter sends
    t.expect("two")
    t.line("/quit")
    assert t.finish() == 0
    assert t.prompts() == [pasted, "one\ntwo"]


def test_ctrl_c_clears_cancels_and_quits(tmp_path: Path, terminals: list[Terminal]) -> None:
    model = write_script(tmp_path / "script.json", {"text": "Working on it", "hang": True},
                         {"text": "After cancel."},
                         {"toolCalls": [{"id": "w1", "name": "write_file",
                                         "arguments": {"path": "x.txt", "content": "x"}}]},
                         {"text": "Stopped asking."})
    t = start(terminals, tmp_path, "--model", model)
    t.line("typed but not sent\x03long task")  # Ctrl-C on a line with text clears it
    t.expect("Working on it")
    t.send("\x03")  # the agent is working: the terminal sends SIGINT
    t.expect("[This turn was cancelled: it was stopped before it finished.]")
    t.line("next")
    t.expect("After cancel.")
    t.line("write it")
    t.expect("[r]eject")  # the question (the editor is reading already)
    t.send("\x03")  # at the permission question: cancels the prompt
    t.expect("[This turn was cancelled: it was stopped before it finished.]")
    t.ready()
    t.send("\x03")  # idle, empty line: quits
    assert t.finish() == 130
    assert t.prompts() == ["long task", "next", "write it"]
    assert not (tmp_path / "work" / "x.txt").exists()


def test_agent_output_during_a_question_is_printed_above_it(tmp_path: Path, terminals: list[Terminal]) -> None:
    go = tmp_path / "go"
    agent = Path(__file__).parent / "support" / "talking_agent.py"
    t = start(terminals, tmp_path, "--wrap", "--", sys.executable, str(agent),
              env_extra={"TALKING_AGENT_GO": str(go)})
    t.line("do it")
    t.expect("[r]eject")  # the editor's line: it is reading the answer
    go.touch()  # now the agent talks
    t.expect("LATE LINE ONE")
    t.expect("LATE PART TWO")
    # The question is drawn again below what came, on a line of its own: before, the
    # text was written into the question's line and the question was not seen again.
    t.child.expect_exact("[r]eject", timeout=5)
    t.out += t.child.before + t.child.after
    redrawn = t.out.rpartition(b"LATE PART TWO")[2]
    assert b"\n" in redrawn.partition(b"[r]eject")[0]
    t.expect("LATE LOG LINE")  # the agent's stderr, relayed: above the question too
    t.child.expect_exact("[r]eject", timeout=5)
    t.send("y\r")
    t.line("/quit")
    assert t.finish() == 0


def test_escape_sequences_from_the_model_and_a_command_are_shown_escaped(
        tmp_path: Path, terminals: list[Terminal]) -> None:
    model = write_script(
        tmp_path / "script.json",
        {"thinking": f"hmm{HIJACK}", "text": f"text{HIJACK}"},
        {"toolCalls": [{"id": "x1", "name": "run_command",
                        "arguments": {"command": "printf 'a\\033[2Jb\\033]0;cmd-title\\007c\\n'"}}]},
        {"text": "done"},
    )
    t = start(terminals, tmp_path, "--model", model)
    t.line("show me")
    t.expect("text")
    t.line("run it")
    t.expect("[r]eject")
    t.send("a\r")
    t.expect("done")
    t.line("/quit")
    assert t.finish() == 0
    out = t.out
    # Nothing the model or the command sent reached the terminal as a sequence...
    for raw in (b"\x1b[2J", b"\x1b[H", b"\x1b]0;", b"\x07"):
        assert raw not in out, raw
    # ...each is shown escaped: thought, text, and the command's output.
    assert out.count(b"\\x1b[2J\\x1b[H\\x1b]0;pwned-title\\x07") == 2
    assert b"a\\x1b[2Jb\\x1b]0;cmd-title\\x07c" in out
    assert b"\x1b[2mhmm" in out  # thoughts dimmed: the chat's own style passes


def test_no_color_at_a_terminal(tmp_path: Path, terminals: list[Terminal]) -> None:
    model = write_script(tmp_path / "script.json", {"thinking": "pondering", "text": "answer"})
    t = start(terminals, tmp_path, "--model", model, env_extra={"NO_COLOR": "1"})
    t.line("go")
    t.expect("answer")
    t.line("/quit")
    assert t.finish() == 0
    assert b"(thinking) pondering" in t.out and b"\x1b[2m" not in t.out


# --- start-up stays lean -------------------------------------------------------------------

TERMINAL_LIBRARIES = ("prompt_toolkit", "rich", "pexpect")


def imported(argv: list[str], stdin: bytes, cwd: Path) -> set[str]:
    """The top-level packages `python -X importtime -m acp_bridge ARGV` imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "acp_bridge", *argv], input=stdin,
                          capture_output=True, env=env, cwd=cwd, timeout=60)
    names = set()
    for line in proc.stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "acp_bridge" in names, proc.stderr.decode()[-2000:]
    return names


def test_serve_and_piped_chat_import_no_terminal_library(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    turn = b"".join(orjson.dumps(m) + b"\n" for m in [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ])
    served = imported(["serve", "--store", store], turn, tmp_path)
    assert "session" in served
    listed = imported(["sessions", "--store", store, "list"], b"", tmp_path)
    chatted = imported(["chat", "--store", store, "--cwd", str(tmp_path)], b"hello\n/quit\n", tmp_path)
    for names in (served, listed, chatted):  # the chat's editor is for terminals only
        assert not names & set(TERMINAL_LIBRARIES), names & set(TERMINAL_LIBRARIES)
