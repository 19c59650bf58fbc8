"""`acp-bridge chat`: the terminal client run as a subprocess with piped stdin against the
real agent (a scripted model), checked on its printed transcript; plus its pure
rendering, its line input and its client-side fs/terminal methods in-process."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from acp_bridge.cli.chat.command_line import add_parser, agent_command, split_wrapped, wrap_problem
from acp_bridge.cli.chat.render import (
    DIM,
    RESET,
    Renderer,
    diff_counts,
    diff_summary,
    sessions_table,
)
from acp_bridge.cli.chat.stdio import LineInput
from acp_bridge.client.methods import Terminals, read_text_file, write_text_file
from acp_bridge.errors import ClientResourceNotFoundError, ClientServiceError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.protocol import INTERNAL_ERROR
from tests.support.acp_client import write_script

CHAT = [sys.executable, "-m", "acp_bridge", "chat"]  # through the real entry, as a person runs it
SID = re.compile(r"session ([0-9a-f-]{36}) \(mode ask\)")


def chat_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    return {**env, "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}


def run_chat(store: Path, work: Path, lines: list[str], *args: str) -> tuple[int, str, str, int]:
    """Run a chat with these stdin lines; (exit code, stdout, stderr, chat pid)."""
    proc = subprocess.Popen([*CHAT, "--store", str(store), "--cwd", str(work), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, encoding="utf-8", env=chat_env())
    out, err = proc.communicate("".join(line + "\n" for line in lines), timeout=20)
    return proc.returncode, out, err, proc.pid


class First:
    """The first chat run, shared by the tests that read its transcript."""

    def __init__(self, root: Path) -> None:
        self.store, self.work = root / "store", root / "work"
        self.work.mkdir()
        (self.work / "notes.txt").write_text("one\ntwo\n")
        model = write_script(
            root / "script.json",
            {"thinking": "Let me think.", "text": "Hello there."},
            {"text": "Writing.", "toolCalls": [{"id": "w1", "name": "write_file",
                                                "arguments": {"path": "out.txt", "content": "hi\nthere\n"}}]},
            {"text": "Written."},
            {"toolCalls": [{"id": "w2", "name": "write_file", "arguments": {"path": "no.txt", "content": "x"}}]},
            {"text": "Fine, not written."},
            {"toolCalls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}},
                           {"id": "e1", "name": "edit_file",
                            "arguments": {"path": "notes.txt", "old_text": "two", "new_text": "2"}},
                           {"id": "x1", "name": "run_command", "arguments": {"command": "echo ppid=$PPID"}}]},
            {"text": "Ran."},
            {"toolCalls": [{"id": "w3", "name": "write_file", "arguments": {"path": "ro.txt", "content": "x"}}]},
            {"text": "Cannot write."},
            {"error": {"message": "boom"}},
        )
        self.code, self.out, self.err, self.pid = run_chat(self.store, self.work, [
            "hello",
            "write it", "maybe", "a",  # an unclear answer is asked again
            "write another", "r",
            "read, edit and run", "a", "l",
            "/mode read_only",
            "write in read only",  # refused without asking: no answer line is taken
            "fail",
            "/sessions",
            "/quit",
            "never sent",
        ], "--model", model)
        match = SID.search(self.out)
        assert match, self.out
        self.sid = match.group(1)


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> First:
    return First(tmp_path_factory.mktemp("chat"))


@pytest.mark.integration
def test_text_answer_and_thinking(first: First) -> None:
    assert first.code == 0, first.err
    # The session is made by the first prompt, not at start-up (so a /load leaves no empty one).
    assert first.out.startswith("a new session starts with your first prompt")
    assert f"> hello\n[new session {first.sid} (mode ask)]\n[session: hello]\n(thinking) Let me think.\n"\
           "Hello there.\n> write it\n" in first.out
    assert "\x1b[" not in first.out  # no styling when stdout is not a terminal


@pytest.mark.integration
def test_permission_allowed_writes_the_file(first: First) -> None:
    assert (first.work / "out.txt").read_text() == "hi\nthere\n"
    assert ("Writing.\n⚙ Write out.txt [pending]\n? Write out.txt (edit)\n    out.txt +2 -0 (new file)\n"
            "    a[l]ways: Always allow all write_file calls\n"
            "  [a]llow once / allow a[l]ways / [r]eject: maybe\n"
            "  [a]llow once / allow a[l]ways / [r]eject: a\n"
            "  ✓ completed: out.txt +2 -0 (new file)\nWritten.\n") in first.out


@pytest.mark.integration
def test_rejected_call_fails(first: First) -> None:
    assert not (first.work / "no.txt").exists()
    assert ("  [a]llow once / allow a[l]ways / [r]eject: r\n  ✗ failed: The user rejected this tool call.\n"
            "Fine, not written.\n") in first.out


@pytest.mark.integration
def test_tools_go_through_the_client(first: First) -> None:
    assert (first.work / "notes.txt").read_text() == "one\n2\n"
    assert "⚙ Read notes.txt [pending]\n  ✓ completed\n" in first.out
    assert "  ✓ completed: notes.txt +1 -1\n" in first.out
    assert "? Run echo ppid=$PPID (execute)\n" in first.out
    # The command's parent is the chat process: it ran in the chat's terminal.
    assert f"  ✓ completed: exit code 0\n  │ ppid={first.pid}\nRan.\n" in first.out


@pytest.mark.integration
def test_read_only_mode_refuses_without_asking(first: First) -> None:
    assert "> /mode read_only\n[mode: read_only]\n" in first.out
    assert ("> write in read only\n⚙ Write ro.txt [pending]\n"
            "  ✗ failed: write_file is not allowed in read_only mode\nCannot write.\n") in first.out
    assert not (first.work / "ro.txt").exists()


@pytest.mark.integration
def test_failed_turn_shows_the_error(first: First) -> None:
    # The agent's note of how the turn ended, said once (not again from the error answer).
    assert "> fail\n[This turn failed: boom.]\n> " in first.out
    assert "[error:" not in first.out


@pytest.mark.integration
def test_sessions_lists_the_session_and_quit_stops(first: First) -> None:
    table = first.out.split("> /sessions\n", 1)[1]
    header, row = table.splitlines()[:2]
    assert header.split() == ["SESSION", "UPDATED", "TITLE"]
    assert row.split()[0] == "*" and row.split()[1] == first.sid and row.endswith("  hello")
    assert first.out.endswith("> /quit\n")
    assert "never sent" not in first.out


@pytest.mark.integration
def test_load_replays_a_previous_session(first: First) -> None:
    model = write_script(first.work.parent / "script2.json", {"text": "Back again."})
    code, out, err, _ = run_chat(first.store, first.work, [f"/load {first.sid}", "again"], "--model", model)
    assert code == 0, err  # end of input quits cleanly
    replay = out.split(f"> /load {first.sid}\n[loading session {first.sid}]\n", 1)[1]
    assert replay.startswith("> hello\n(thinking) Let me think.\nHello there.\n> write it\nWriting.\n"
                             "⚙ Write out.txt [pending]\n  ✓ completed: out.txt +2 -0 (new file)\n")
    assert "  ✗ failed: The user rejected this tool call.\n" in replay
    assert f"[loaded session {first.sid}: 6 turns, mode read_only]\n> again\nBack again.\n" in replay


@pytest.mark.integration
def test_load_takes_a_prefix_as_sessions_show_does(first: First) -> None:
    """`chat --load 5f37` and `/load 5f37` demanded all 36 characters (issue 36, point 5)."""
    model = write_script(first.work.parent / "script3.json", {"text": "Back again."})
    code, out, err, _ = run_chat(first.store, first.work, ["again"], "--model", model, "--load", first.sid[:6])
    assert code == 0, err
    assert f"[loaded session {first.sid}: " in out  # (other tests add turns to `first`)
    assert out.endswith("> again\nBack again.\n> \n")
    code, out, err, _ = run_chat(first.store, first.work, [f"/load {first.sid[:5].upper()}", "/load 5f3",
                                                           "/load zzzz"], "--model", model)
    assert f"[loaded session {first.sid}: " in out
    assert "cannot load '5f3': session id prefix '5f3' is too short: a prefix needs at least 4 characters" in err
    assert "cannot load 'zzzz': invalid session id 'zzzz'" in err


@pytest.mark.integration
def test_load_option_unknown_session(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    code, out, err, _ = run_chat(tmp_path / "store", tmp_path / "work", ["hello"],
                                 "--load", "00000000-0000-4000-8000-000000000000")
    assert code == 1
    assert "cannot load session 00000000-0000-4000-8000-000000000000" in err
    assert "hello" not in out


@pytest.mark.anyio
@pytest.mark.integration
async def test_ctrl_c_cancels_then_a_second_quits(tmp_path: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "Working on it", "hang": True},
                         {"text": "After cancel."}, {"text": "Again", "hang": True})
    (tmp_path / "work").mkdir()
    command = [*CHAT, "--store", str(tmp_path / "store"), "--cwd", str(tmp_path / "work"), "--model", model]
    async with await anyio.open_process(command, env=chat_env()) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        out = b""

        async def until(text: str) -> None:
            nonlocal out
            assert proc.stdout is not None
            while text.encode() not in out:
                out += await proc.stdout.receive()

        with anyio.move_on_after(15) as timer:
            await proc.stdin.send(b"long task\n")
            await until("Working on it")
            proc.send_signal(signal.SIGINT)
            await until("[This turn was cancelled: it was stopped before it finished.]\n")
            await proc.stdin.send(b"next\n")
            await until("After cancel.")
            await proc.stdin.send(b"third\n")
            await until("Again")
            proc.send_signal(signal.SIGINT)
            # Wait for the first to land (two signals sent at once may arrive as one).
            while out.count(b"[cancelling") < 2:
                out += await proc.stdout.receive()
            proc.send_signal(signal.SIGINT)  # quits, whether the prompt has ended or not
            assert await proc.wait() == 130
        assert not timer.cancelled_caught, out.decode()
    text = re.sub(r"\[new session [0-9a-f-]{36} \(mode ask\)\]\n", "", out.decode(), count=1)
    assert ("> long task\n[session: long task]\nWorking on it\n[cancelling: Ctrl-C again quits]\n"
            "[This turn was cancelled: it was stopped before it finished.]\n> next\nAfter cancel.") in text


def test_subcommand_options_pass_through_to_the_agent() -> None:
    parser = argparse.ArgumentParser(prog="acp-bridge")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["chat", "--store", "s", "--backend", "sqlite", "--model", "echo",
                              "--max-steps", "3", "--load", "ID"])
    assert args.command == "chat" and args.load == "ID" and args.cwd == "."
    assert agent_command(args) == [sys.executable, "-m", "acp_bridge", "serve", "--store", "s",
                                   "--backend", "sqlite", "--model", "echo", "--max-steps", "3"]
    bare = parser.parse_args(["chat"])
    assert agent_command(bare) == [sys.executable, "-m", "acp_bridge", "serve"]  # the agent's own defaults


def test_wrap_starts_acp_bridge_wrap_with_the_command_after_the_dashes() -> None:
    parser = argparse.ArgumentParser(prog="acp-bridge")
    add_parser(parser.add_subparsers(dest="command"))
    own, wrapped = split_wrapped(["--store", "s", "--wrap", "--backend", "sqlite", "--",
                                  "agent", "--model", "x", "--", "-m"])
    assert wrapped == ["agent", "--model", "x", "--", "-m"]  # everything after the first --, as is
    args = parser.parse_args(["chat", *own])
    args.wrapped = wrapped
    assert wrap_problem(args) is None
    assert agent_command(args) == [sys.executable, "-m", "acp_bridge", "wrap", "--store", "s",
                                   "--backend", "sqlite", "--", "agent", "--model", "x", "--", "-m"]


def test_seed_fresh_is_passed_to_the_wrapper() -> None:
    parser = argparse.ArgumentParser(prog="acp-bridge")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["chat", "--wrap", "--seed-fresh", "--store", "s"])
    args.wrapped = ["agent", "--seed-fresh"]  # the agent's own, as is
    assert wrap_problem(args) is None
    assert agent_command(args) == [sys.executable, "-m", "acp_bridge", "wrap", "--store", "s", "--seed-fresh",
                                   "--", "agent", "--seed-fresh"]


def test_the_cancel_grace_is_passed_to_the_wrapper() -> None:
    parser = argparse.ArgumentParser(prog="acp-bridge")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["chat", "--wrap", "--cancel-grace", "1.5"])
    args.wrapped = ["agent"]
    assert wrap_problem(args) is None
    assert agent_command(args) == [sys.executable, "-m", "acp_bridge", "wrap", "--cancel-grace", "1.5", "--", "agent"]


@pytest.mark.parametrize(("argv", "problem"), [
    (["--seed-fresh"], "--seed-fresh is the wrapper's: it is only taken with --wrap"),
    (["--cancel-grace", "2"], "--cancel-grace is the wrapper's: it is only taken with --wrap"),
    (["--wrap"], "--wrap needs the agent's command after --"),
    (["--wrap", "--"], "--wrap needs the agent's command after --"),
    (["--", "agent"], "a command after -- is only taken with --wrap"),
    (["--wrap", "--model", "echo", "--", "agent"], "--model and --max-steps are acp-bridge's own"),
    (["--wrap", "--max-steps", "2", "--", "agent"], "--model and --max-steps are acp-bridge's own"),
])
@pytest.mark.integration
def test_wrap_usage_errors(argv: list[str], problem: str) -> None:
    proc = subprocess.run([*CHAT, *argv], capture_output=True, text=True, timeout=30, env=chat_env(),
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == ""
    assert problem in proc.stderr and proc.stderr.startswith("usage: acp-bridge chat")


# --- in-process: rendering -----------------------------------------------------------


def test_render_streams_and_statuses() -> None:
    r = Renderer(color=True, cwd="/w")
    text = r.update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"},
                     "messageId": "t1s1-thought"})
    text += r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a "},
                      "messageId": "t1s1"})
    text += r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "b"},
                      "messageId": "t1s1"})
    text += r.update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "Run ls", "kind": "execute",
                      "status": "pending"})
    text += r.update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "in_progress"})
    text += r.update({"sessionUpdate": "usage_update", "used": 1, "size": 2})
    text += r.update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "failed", "content": [
        {"type": "content", "content": {"type": "text", "text": "oops\nexit code 2"}}]})
    text += r.answer({"stopReason": "cancelled"})
    assert text == (f"{DIM}hm{RESET}\na b\n⚙ Run ls [pending]\n  ✗ failed: exit code 2\n"
                    f"{DIM}  │ oops{RESET}\n[cancelled]\n")
    assert r.answer({"stopReason": "end_turn"}) == ""
    assert r.update({"sessionUpdate": "session_info_update", "title": "x"}) == f"{DIM}[session: x]{RESET}\n"
    assert r.update({"sessionUpdate": "session_info_update", "title": "x"}) == ""  # once


def test_render_permission_and_diffs() -> None:
    assert diff_counts(None, "a\nb\n") == (2, 0)
    assert diff_counts("a\nb\nc\n", "a\nB\nc\nd\n") == (2, 1)
    assert diff_summary({"type": "diff", "path": "/w/src/x.py", "oldText": "a", "newText": "b"}, "/w") \
        == "src/x.py +1 -1"
    r = Renderer(cwd="/w")
    question = r.permission({"toolCallId": "c", "title": "Edit x.py", "kind": "edit", "content": [
        {"type": "diff", "path": "/w/x.py", "oldText": "a\n", "newText": "a\nb\n"}]})
    assert question == "? Edit x.py (edit)\n    x.py +1 -0\n  [a]llow once / allow a[l]ways / [r]eject: "
    assert r.open and r.typed("a", echo=True) == "a\n" and not r.open
    # What "always" allows, as the agent names it (a plain "Always allow" says nothing more).
    options = [{"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
               {"optionId": "allow_always", "name": "Always allow `echo one`", "kind": "allow_always"}]
    question = r.permission({"toolCallId": "d", "title": "Run echo one", "kind": "execute"}, options)
    assert question == ("? Run echo one (execute)\n    a[l]ways: Always allow `echo one`\n"
                        "  [a]llow once / allow a[l]ways / [r]eject: ")
    plain = [{"optionId": "x", "name": "Always allow", "kind": "allow_always"}]
    assert "a[l]ways:" not in r.permission({"toolCallId": "e", "title": "t"}, plain)
    evil = [{"optionId": "x", "name": "Always \x1b[2Jallow", "kind": "allow_always"}]
    assert "\x1b" not in r.permission({"toolCallId": "f", "title": "t"}, evil)


def test_sessions_table() -> None:
    assert sessions_table([]) == "(no sessions)\n"
    table = sessions_table([{"sessionId": "s1", "updatedAt": "2025-01-02T03:04:05.678Z", "title": "hi"},
                            {"sessionId": "s22", "updatedAt": "2025-01-01T00:00:00Z", "title": None}], "s22")
    assert table.splitlines() == ["   SESSION  UPDATED              TITLE",
                                  "   s1       2025-01-02 03:04:05  hi",
                                  "*  s22      2025-01-01 00:00:00"]


# --- in-process: input and client methods ---------------------------------------------


@pytest.mark.anyio
async def test_line_input_loses_nothing_when_a_read_is_cancelled() -> None:
    read_fd, write_fd = os.pipe()
    try:
        lines = LineInput(read_fd)
        with anyio.move_on_after(0.05):
            await lines.readline()  # nothing to read yet: cancelled while waiting
        os.write(write_fd, b"one\ntwo\r\nthr")
        assert await lines.readline() == "one"
        assert await lines.readline() == "two"
        os.write(write_fd, b"ee")
        os.close(write_fd)
        write_fd = -1
        assert await lines.readline() == "three"  # a last line without newline
        assert await lines.readline() is None
        assert await lines.readline() is None
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


@pytest.mark.anyio
async def test_client_fs_methods(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    await write_text_file(sessionId="s", path=str(path), content="a\r\nb\nc\n")
    assert path.read_bytes() == b"a\r\nb\nc\n"  # no newline translation
    assert await read_text_file(sessionId="s", path=str(path), line=2, limit=1) == {"content": "b\n"}
    with pytest.raises(Exception, match="does not exist"):
        await read_text_file(sessionId="s", path=str(tmp_path / "missing"))


@pytest.mark.anyio
@pytest.mark.integration
async def test_client_terminals(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        terminals = Terminals(tg)
        created = await terminals.create(sessionId="s", command="/bin/sh", args=["-c", "printf 0123456789; exit 3"],
                                         cwd=str(tmp_path), outputByteLimit=4)
        tid = created["terminalId"]
        assert await terminals.wait_for_exit(terminalId=tid) == {"exitCode": 3, "signal": None}
        assert await terminals.output(terminalId=tid) == {
            "output": "6789", "truncated": True, "exitStatus": {"exitCode": 3, "signal": None}}
        await terminals.release(terminalId=tid)

        slow = (await terminals.create(sessionId="s", command="sleep", args=["30"]))["terminalId"]
        await terminals.kill(terminalId=slow)
        with anyio.fail_after(5):
            assert await terminals.wait_for_exit(terminalId=slow) == {"exitCode": None, "signal": "SIGKILL"}
        await terminals.close_all()
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.integration
async def test_client_terminal_without_a_limit_keeps_everything_and_reports_spawn_failures(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        terminals = Terminals(tg)
        tid = (await terminals.create(sessionId="s", command="/bin/sh", args=["-c", "echo X=$X; seq 20000; kill -TERM $$"],
                                      env=[{"name": "X", "value": "1"}]))["terminalId"]
        assert await terminals.wait_for_exit(terminalId=tid) == {"exitCode": None, "signal": "SIGTERM"}
        output = await terminals.output(terminalId=tid)
        assert not output["truncated"] and output["output"].startswith("X=1\n1\n")
        assert output["output"].endswith("\n19999\n20000\n")
        await terminals.release(terminalId=tid)
        with pytest.raises(ClientResourceNotFoundError, match="unknown terminal"):
            await terminals.output(terminalId=tid)
        with pytest.raises(ClientServiceError, match="cannot start /no/such/program") as failed:
            await terminals.create(sessionId="s", command="/no/such/program", cwd=str(tmp_path))
        assert to_rpc_error(failed.value).code == INTERNAL_ERROR
        tg.cancel_scope.cancel()


# --- untrusted output (issue 17: a terminal that cannot be hijacked) -------------------

HIJACK = "\u001b[2J\u001b[H\u001b]0;pwned-title\u0007"


def test_render_shows_control_characters_instead_of_running_them() -> None:
    r = Renderer(cwd="/w")
    text = r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"hi {HIJACK}"},
                     "messageId": "t1s1"})
    text += r.update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": f"Run {HIJACK}",
                      "kind": "execute", "status": "pending"})
    text += r.update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "failed", "content": [
        {"type": "content", "content": {"type": "text", "text": f"out {HIJACK}\nexit code 1"}}]})
    text += r.permission({"toolCallId": "d", "title": f"Edit {HIJACK}", "kind": "edit"})
    text += r.failed(f"boom {HIJACK}")
    assert "\u001b" not in text and "\u0007" not in text
    assert text.count("\\x1b[2J\\x1b[H\\x1b]0;pwned-title\\x07") == 5


@pytest.mark.integration
def test_a_model_or_a_command_cannot_write_escape_sequences_to_the_terminal(tmp_path: Path) -> None:
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    model = write_script(tmp_path / "script.json", {"text": HIJACK},
                         {"toolCalls": [{"id": "x1", "name": "run_command",
                                         "arguments": {"command": "printf '\\033[2J\\033]0;cmd-title\\007'"}}]},
                         {"text": "done"})
    code, out, err, _ = run_chat(store, work, ["show me", "/mode accept_edits", "run it", "a", "/quit"],
                                 "--model", model)
    assert code == 0, err
    assert "\u001b" not in out and "\u0007" not in out  # no colour either: stdout is a pipe
    assert "\\x1b[2J" in out and "\\x1b]0;cmd-title\\x07" in out


def stored_ids(store: Path) -> list[str]:
    listed = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "list", "--json"],
                            capture_output=True, text=True, timeout=30, env=chat_env())
    assert listed.returncode == 0, listed.stderr
    return sorted(item["id"] for item in orjson.loads(listed.stdout))


@pytest.mark.integration
def test_a_chat_makes_its_session_only_when_something_needs_it(first: First, tmp_path: Path) -> None:
    # Going on with a stored session, asking for help, or leaving before a prompt: no
    # empty session is left behind (the chat used to make one at every start).
    before = stored_ids(first.store)
    for lines in (["/help", "/sessions", "/quit"], [f"/load {first.sid}", "/quit"], ["/mode", "/model"]):
        code, out, err, _ = run_chat(first.store, first.work, lines)
        assert code == 0, err
        assert stored_ids(first.store) == before, (lines, out)
    code, out, err, _ = run_chat(first.store, first.work, ["/mode", "/model"])
    assert out.count("no session yet: your first prompt starts one") == 2, out
    # /mode NAME starts the session with that mode, and the prompt after it runs there.
    model = write_script(tmp_path / "script.json", {"text": "Read only here."})
    code, out, err, _ = run_chat(first.store, first.work, ["/mode read_only", "go"], "--model", model)
    assert code == 0, err
    (new,) = set(stored_ids(first.store)) - set(before)
    assert f"> /mode read_only\n[new session {new} (mode ask)]\n[mode: read_only]\n> go\n" in out
    assert "Read only here.\n" in out


@pytest.mark.integration
def test_mode_with_a_wrapped_agent_that_has_none_says_so(tmp_path: Path) -> None:
    agent = Path(__file__).parent / "support" / "talking_agent.py"
    (tmp_path / "work").mkdir()
    code, out, err, _ = run_chat(tmp_path / "store", tmp_path / "work", ["/mode read_only", "/mode", "/quit"],
                                 "--wrap", "--", sys.executable, str(agent))
    assert code == 0, err
    assert out.count("this agent offers no session modes\n") == 2, out
    assert "not here" not in out + err  # nothing was asked of an agent that has no modes
