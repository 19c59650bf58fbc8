"""The wrapper's start-up handshake (acp_bridge.wrap.handshake; issue 32, start-up): the
editor's `initialize` answered by a thread while the wrapper imports, with the bytes the
host's path writes, and every case that is not the plain one handed back to the host's
path with nothing sent twice and every request answered once, with its id.

Each test runs the real wrapper in front of tests/support/handshake_agent.py, a raw
child whose way with `initialize` its command line names, and which records what it
reads (with its pid: a restarted child is another process). The host's path is forced
where a test needs it: the child answers (or the editor asks) only once the wrapper has
logged that its host started the child's connection, which it does after the handshake
has ended (acp_bridge.wrap.serve).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.host.tuning import Tuning
from acp_bridge.rpc.transport import FdLineReader
from acp_bridge.wrap.handshake import FIRST_ID, Greeting, Handshake
from acp_bridge.wrap.initialize import initialized
from tests.support.acp_client import AgentProcess
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

AGENT = Path(__file__).resolve().parent / "support" / "handshake_agent.py"
INIT = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}},
        "clientInfo": {"name": "editor", "version": "9"}}
HOST_STARTED = b"started the wrapped agent"  # the host's link to the child runs (after the handshake)
DONE, SENT, NOT_USED = (b"the start-up handshake: initialize answered", b"the start-up handshake: initialize sent",
                        b"the start-up handshake: not used")


def child(mode: str, tmp: Path, *, when: Path | None = None) -> list[str]:
    return [sys.executable, str(AGENT), mode, "--record", str(tmp / "child.jsonl"),
            *(["--when", str(when)] if when is not None else [])]


def wrapper(tmp: Path, mode: str, *, when: Path | None = None, name: str = "store") -> WrappedProcess:
    return WrappedProcess(tmp / name, child(mode, tmp, when=when), wrap_args=("--log-level", "debug"))


def child_read(tmp: Path) -> list[dict[str, Any]]:
    """What the children read, in order ({"pid", "msg"})."""
    path = tmp / "child.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def answer_line(agent: AgentProcess, rid: Any) -> bytes:
    """The bytes of the one answer the editor got to its request `rid`."""
    found = [line for line in agent.lines if orjson.loads(line).get("id") == rid and "method" not in orjson.loads(line)]
    assert len(found) == 1, found
    return found[0]


def expected_answer(rid: Any) -> bytes:
    """The host's answer to the first `initialize`, made as the engine makes it: JSON-RPC's
    member order, ours added to the child's answer (tests/support/handshake_agent.py)."""
    from tests.support.handshake_agent import INIT_ANSWER

    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": initialized(INIT_ANSWER).answer})


def only_protocol(agent: AgentProcess) -> None:
    """stdout carries protocol messages only: every line a JSON-RPC message."""
    assert agent.lines and all(orjson.loads(line)["jsonrpc"] == "2.0" for line in agent.lines)


async def test_initialize_answered_by_the_handshake_as_the_host_answers_it(tmp_path: Path) -> None:
    """The handshake's answer and the host's (the child answers only after the host has
    started) are the same bytes; the child is sent one `initialize`, our first request
    id, and our next request goes on from it."""
    lines = {}
    for how in ("handshake", "host"):
        tmp = tmp_path / how
        tmp.mkdir()
        when = tmp / "go" if how == "host" else None
        async with wrapper(tmp, "answer", when=when) as agent:
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.request, "initialize", INIT)
                if when is not None:
                    await agent.wait_for(lambda: HOST_STARTED in agent.stderr)
                    when.touch()
            await agent.new_session(tmp_path)
            lines[how] = answer_line(agent, 1)
            only_protocol(agent)
        assert (DONE if how == "handshake" else SENT) in agent.stderr
        read = [entry["msg"] for entry in child_read(tmp)]
        assert [(m["method"], m["id"]) for m in read] == [("initialize", FIRST_ID), ("session/new", "acp-bridge:2")]
        assert read[0]["params"] == INIT
    assert lines["handshake"] == lines["host"] == expected_answer(1)


async def test_the_childs_error_answer_goes_the_hosts_way(tmp_path: Path) -> None:
    """An error answer to the handshake's `initialize` is the host's to relay, as the
    child sent it, to the editor's request: answered once, with its id; the child was
    sent `initialize` once."""
    async with wrapper(tmp_path, "error") as agent:
        answer = await agent.request_raw("initialize", INIT, request_id="init-1")
        only_protocol(agent)
    assert answer["error"] == {"code": -32000, "message": "authentication required"}
    assert answer_line(agent, "init-1") == orjson.dumps(
        {"jsonrpc": "2.0", "id": "init-1", "error": {"code": -32000, "message": "authentication required"}})
    assert SENT in agent.stderr
    assert [m["msg"]["id"] for m in child_read(tmp_path)] == [FIRST_ID]


async def test_a_child_that_dies_before_answering(tmp_path: Path) -> None:
    """The editor's `initialize` is answered once, with an error naming the exit; no
    process of the child was sent `initialize` twice."""
    async with wrapper(tmp_path, "die") as agent:
        answer = await agent.request_raw("initialize", INIT)
        only_protocol(agent)
    assert "error" in answer and "exited" in answer["error"]["message"], answer
    assert len([line for line in agent.lines if orjson.loads(line).get("id") == 1]) == 1
    pids = [entry["pid"] for entry in child_read(tmp_path)]
    assert pids and len(pids) == len(set(pids))  # one initialize per process (a restart is another)
    assert SENT in agent.stderr


@pytest.mark.parametrize("mode", ["notify", "garbage"])
async def test_anything_the_child_sends_before_its_answer_goes_the_hosts_way(tmp_path: Path, mode: str) -> None:
    """A notification, or a line that is not JSON, before the child's answer: the host's
    link reads them first, as it always did, then the answer, which the editor gets as
    the handshake would have given it."""
    async with wrapper(tmp_path, mode) as agent:
        await agent.request("initialize", INIT)
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "hello there"))["stopReason"] == "end_turn"
        only_protocol(agent)
    assert answer_line(agent, 1) == expected_answer(1)
    assert SENT in agent.stderr
    read = [entry["msg"] for entry in child_read(tmp_path)]
    assert [m.get("method") for m in read if m.get("method") == "initialize"] == ["initialize"]
    if mode == "garbage":  # the link answered the line it could not parse, as it always did
        assert any(m.get("error", {}).get("code") == -32700 for m in read), read


async def test_the_childs_stderr_is_drained_and_logged(tmp_path: Path) -> None:
    """A child that writes more to its stderr than a pipe holds before it answers: the
    handshake reads it meanwhile (the child never blocks), and the host logs every line
    of it, what the handshake read first."""
    async with wrapper(tmp_path, "stderr") as agent:
        with anyio.fail_after(20):
            await agent.request("initialize", INIT)
        await agent.wait_for(lambda: b"line 1999: " in agent.stderr)
    assert DONE in agent.stderr
    assert answer_line(agent, 1) == expected_answer(1)
    logged = [line for line in agent.stderr.splitlines() if b"] line " in line]
    assert [int(line.split(b"] line ")[1].split(b":")[0]) for line in logged] == list(range(2000))


async def test_an_editor_whose_first_line_is_not_initialize(tmp_path: Path) -> None:
    """The host reads it, and everything after it, as before: the handshake sent the
    child nothing."""
    async with wrapper(tmp_path, "answer") as agent:
        other = await agent.request_raw("_editor/first", {"x": 1})
        await agent.request("initialize", INIT)
        only_protocol(agent)
    assert other["error"]["code"] == -32601
    assert NOT_USED in agent.stderr
    read = [entry["msg"] for entry in child_read(tmp_path)]
    assert [(m["method"], m["id"]) for m in read] == [("_editor/first", FIRST_ID), ("initialize", "acp-bridge:2")]


async def test_an_initialize_the_host_refuses_is_the_hosts(tmp_path: Path) -> None:
    """Params the host's check refuses: answered -32602 by the host; nothing reached the
    child."""
    async with wrapper(tmp_path, "answer") as agent:
        answer = await agent.request_raw("initialize", {"clientCapabilities": {}})
        await agent.request("initialize", INIT)
    assert answer["error"]["code"] == -32602
    assert NOT_USED in agent.stderr
    assert [entry["msg"]["id"] for entry in child_read(tmp_path)] == [FIRST_ID]


async def test_initialize_and_session_new_in_one_write(tmp_path: Path) -> None:
    """The handshake takes the first line; the host reads the second first of all."""
    async with wrapper(tmp_path, "answer") as agent:
        new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}}
        agent._requested.update({1: "initialize", 2: "session/new"})  # (sent raw: validated as answers)
        await agent.send_raw(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}) + b"\n"
                             + orjson.dumps(new) + b"\n")
        await agent.wait_for(lambda: len([line for line in agent.lines if b'"id":2' in line]) == 1)
        only_protocol(agent)
    assert DONE in agent.stderr
    assert answer_line(agent, 1) == expected_answer(1)
    # The host's answers are in the library's member order from the first on.
    assert orjson.loads(answer_line(agent, 2))["result"]["sessionId"]
    assert list(orjson.loads(answer_line(agent, 2))) == ["jsonrpc", "result", "id"]
    read = [entry["msg"] for entry in child_read(tmp_path)]
    assert [(m["method"], m["id"]) for m in read] == [("initialize", FIRST_ID), ("session/new", "acp-bridge:2")]


async def test_an_initialize_that_comes_after_the_host_started(tmp_path: Path) -> None:
    """No line within the handshake's time (the host was ready first): the host's path,
    the same answer."""
    async with wrapper(tmp_path, "answer") as agent:
        await agent.wait_for(lambda: HOST_STARTED in agent.stderr)
        await agent.request("initialize", INIT)
    assert NOT_USED in agent.stderr
    assert answer_line(agent, 1) == expected_answer(1)


# --- the handshake itself, with a real child and pipes for the editor -------------------


def greet(tmp: Path, mode: str, editor_says: bytes, *, wait_s: float = 10.0, until: bytes | None = None,
          held: bool = False, release_after_s: float | None = None) -> tuple[Greeting, bytes, subprocess.Popen[bytes]]:
    """Run a handshake between pipes standing for the editor and a real child; stop it
    once the editor has read `until` (or after `wait_s`); what it did, and what the
    editor read. `held`: released after `release_after_s` (never if None)."""
    proc = subprocess.Popen(child(mode, tmp), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    editor_in_r, editor_in_w = os.pipe()
    editor_out_r, editor_out_w = os.pipe()
    shake = Handshake(proc, None, Tuning(), held=held, editor_in=editor_in_r, editor_out=editor_out_w)
    shake.start()
    os.write(editor_in_w, editor_says)
    got, deadline = b"", time.monotonic() + wait_s
    release_at = None if release_after_s is None else time.monotonic() + release_after_s
    os.set_blocking(editor_out_r, False)
    while time.monotonic() < deadline and (until is None or until not in got):
        if release_at is not None and time.monotonic() >= release_at:
            assert got == b""  # nothing before the release
            shake.release()
            release_at = None
        try:
            got += os.read(editor_out_r, 1 << 16)
        except BlockingIOError:
            time.sleep(0.01)
    greeting = shake.finish()
    for fd in (editor_in_r, editor_in_w, editor_out_r, editor_out_w):
        os.close(fd)
    return greeting, got, proc


def stop(proc: subprocess.Popen[bytes]) -> bytes:
    """The child's stdout from here to its end (its stdin closed)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    rest = proc.stdout.read()
    proc.wait(10)
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()
    return rest


REQUEST = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": INIT}) + b"\n"


def test_done_hands_over_what_follows_the_first_line(tmp_path: Path) -> None:
    later = b'{"jsonrpc":"2.0","id":8,"method":"session/new"}\n{"jsonrpc":"2.0","method":"x"'
    greeting, got, proc = greet(tmp_path, "answer", REQUEST + later, until=b"\n")
    assert greeting.state == "done" and greeting.failure is None
    assert got == expected_answer(7) + b"\n"
    assert greeting.editor_rest == later
    assert greeting.params == INIT and greeting.child_in == len(
        orjson.dumps({"jsonrpc": "2.0", "id": FIRST_ID, "method": "initialize", "params": INIT}) + b"\n")
    assert greeting.child_out + stop(proc) == b""


def test_a_held_handshake_answers_once_released(tmp_path: Path) -> None:
    """Started before the options are read, it answers the editor only once they were
    taken (`release`), with the same bytes."""
    greeting, got, proc = greet(tmp_path, "answer", REQUEST, until=b"\n", held=True, release_after_s=1.0)
    assert greeting.state == "done" and got == expected_answer(7) + b"\n"
    assert greeting.child_out + stop(proc) == b""


def test_a_handshake_never_released_answers_nothing(tmp_path: Path) -> None:
    """The options were refused: the editor is told nothing; what the child answered is
    handed over unread, as for any handshake that did not answer."""
    greeting, got, proc = greet(tmp_path, "answer", REQUEST, wait_s=1.0, held=True)
    assert (greeting.state, got, greeting.editor_rest) == ("sent", b"", REQUEST)
    assert orjson.loads(greeting.child_out)["id"] == FIRST_ID
    assert stop(proc) == b""


@pytest.mark.parametrize("mode", ["error", "notify", "garbage", "die"])
def test_sent_hands_over_every_byte_the_child_wrote(tmp_path: Path, mode: str) -> None:
    """Whatever the child wrote reaches the host's reader once, in order: what the
    handshake read (`child_out`), then the pipe; the editor got nothing from it."""
    greeting, got, proc = greet(tmp_path, mode, REQUEST, wait_s=1.0)
    assert greeting.state == "sent" and got == b""
    assert greeting.editor_rest == REQUEST  # the host reads the editor's initialize again
    everything = greeting.child_out + stop(proc)
    if mode == "die":
        assert everything == b"" and proc.returncode == 3
    else:
        assert orjson.loads(everything.splitlines()[-1])["id"] == FIRST_ID


def test_not_an_initialize_request_is_left_whole(tmp_path: Path) -> None:
    first = b'{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}\n'
    greeting, got, proc = greet(tmp_path, "answer", first, wait_s=0.5)
    assert (greeting.state, greeting.editor_rest, greeting.child_in, got) == ("none", first, 0, b"")
    assert stop(proc) == b""


def test_a_line_the_editor_has_not_ended_is_left_whole(tmp_path: Path) -> None:
    greeting, got, proc = greet(tmp_path, "answer", REQUEST[:20], wait_s=0.5)
    assert (greeting.state, greeting.editor_rest, got) == ("none", REQUEST[:20], b"")
    stop(proc)


def test_the_prefix_is_read_first(tmp_path: Path) -> None:
    """FdLineReader's `prefix`: its lines, then the descriptor's."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'ne"}\n{"c": 3}\n')
    os.close(write_fd)

    async def lines() -> list[bytes]:
        reader = FdLineReader(read_fd, prefix=b'{"a": 1}\n{"b": "o')
        try:
            return [line async for line in reader.lines() if isinstance(line, bytes)]
        finally:
            reader.close()

    assert anyio.run(lines) == [b'{"a": 1}', b'{"b": "one"}', b'{"c": 3}']
    os.close(read_fd)


def test_the_handshake_tunes_the_process_only_through_its_policy(tmp_path: Path) -> None:
    """While it runs, `ProcessTuning` has threads switch every 0.1 ms (its thread gets the
    GIL from the importing main thread at once); the interval is back after `finish`.
    The neutral `Tuning` changes nothing."""
    import sys

    from acp_bridge.host.tuning import HANDSHAKE_SWITCH_INTERVAL, ProcessTuning

    before = sys.getswitchinterval()
    for tuning, during in ((Tuning(), before), (ProcessTuning(), HANDSHAKE_SWITCH_INTERVAL)):
        proc = subprocess.Popen(child("answer", tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        editor_in_r, editor_in_w = os.pipe()
        editor_out = os.open(os.devnull, os.O_WRONLY)
        shake = Handshake(proc, None, tuning, editor_in=editor_in_r, editor_out=editor_out)
        shake.start()
        assert sys.getswitchinterval() == pytest.approx(during)
        shake.finish()
        assert sys.getswitchinterval() == before
        for fd in (editor_in_r, editor_in_w, editor_out):
            os.close(fd)
        stop(proc)
