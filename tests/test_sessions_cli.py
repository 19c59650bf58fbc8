"""`acp-bridge sessions list|show|export` over stores written by real turns (the turn
runner with a scripted model and local tools, in-process, and a real agent process
killed with SIGKILL mid-tool), on both file backends. The CLI runs as a subprocess
through `acp_bridge.cli.sessions.main.main`; read-only means byte-identical stores."""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.agent.runner import TurnRunner
from acp_bridge.cli.sessions.main import add_parser, main, run
from acp_bridge.models.script import ScriptModel
from acp_bridge.tools.base import PermissionOutcome, PermissionRequest
from session import Event, SessionCorruptError, SessionLockedError, SessionStore, open_backend
from tests.support.services import ScriptedClient
from tests.support.tamper import replace_event
from tests.support.waiting import wait_until
from tests.test_runner_crash import CHILD

WRAPPER = "import sys; from acp_bridge.cli.main import main; sys.exit(main(['sessions', *sys.argv[1:]]))"
BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module", params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Result:
    def __init__(self, code: int, out: bytes, err: str) -> None:
        self.code = code
        self.raw = out
        self.out = out.decode()
        self.err = err
        self.lines = self.out.splitlines()


def cli(*args: str, env: dict[str, str] | None = None, process: bool = False) -> Result:
    """Run `acp-bridge sessions ARGS`: in this process through `main` (stdout captured
    as bytes), or, with `env` or `process`, in a fresh interpreter through the wrapper."""
    if env is not None or process:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
        proc = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True,
                              timeout=30, env=base | (env or {}))
        return Result(proc.returncode, proc.stdout, proc.stderr.decode())
    buffer = io.BytesIO()
    out = io.TextIOWrapper(buffer, encoding="utf-8", newline="")
    err = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    out.flush()
    return Result(code, buffer.getvalue(), err.getvalue())


def local(ms: int, fmt: str = "%Y-%m-%d %H:%M") -> str:
    return time.strftime(fmt, time.localtime(ms / 1000))


def store_state(root: Path) -> dict[str, bytes]:
    """Every file of a store and its bytes; SQLite's -shm (readers' marks) left out, and
    an empty -wal counted as no -wal."""
    out = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name.endswith("-shm"):
            continue
        data = path.read_bytes()
        if path.name.endswith("-wal") and not data:
            continue
        out[str(path.relative_to(root))] = data
    return out


# --- recording sessions with the real turn runner ----------------------------------------


def record(root: Path, kind: str, cwd: Path, steps: list[dict[str, Any]], prompts: list[str],
           *, options: list[str] | None = None, cancel: bool = False, base_ms: int = BASE_MS,
           session_id: str | None = None) -> str:
    """Run `prompts` through a TurnRunner on a fresh session (a store clock from
    `base_ms`, 10 ms a tick) and close it; the JSONL file's mtime is set to the time of
    its last event, so both backends agree on `updatedAt`. Returns the session id."""
    backend = open_backend(kind, root)
    store = SessionStore(backend, clock=itertools.count(base_ms, 10).__next__)
    log = store.create(cwd=str(cwd), session_id=session_id)
    seen: list[Event] = []
    answers = list(options or [])

    async def sink(event: Event) -> None:
        seen.append(event)

    def answer(request: PermissionRequest) -> PermissionOutcome:
        return PermissionOutcome("selected", answers.pop(0) if answers else "reject_once")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            services = ScriptedClient(task_group=tg, permission_answer=answer)
            runner = TurnRunner(log, ScriptModel(steps), services, on_event=sink)
            for text in prompts:
                if not cancel:
                    await runner.prompt([{"type": "text", "text": text}])
                    continue
                async with anyio.create_task_group() as inner:
                    inner.start_soon(runner.prompt, [{"type": "text", "text": text}])
                    with anyio.fail_after(5):
                        while not any(e["type"] == "assistant/chunk" for e in seen):
                            await anyio.sleep(0.005)
                    runner.cancel()
            tg.cancel_scope.cancel()

    anyio.run(main)
    last = log.events[-1]["time"]
    log.close()
    backend.close()
    if kind == "jsonl":
        path = root / "sessions" / f"{log.id}.jsonl"
        os.utime(path, ns=(last * 1_000_000, last * 1_000_000))
    return log.id


def write_open_turn(root: Path, kind: str, cwd: Path, base_ms: int) -> str:
    """A turn left open on disk, as a crash leaves it (its owner is gone): a streamed
    text with an escape sequence in it, a message calling two tools, one of which had
    started (its tool/call is recorded)."""
    backend = open_backend(kind, root)
    store = SessionStore(backend, clock=itertools.count(base_ms, 10).__next__)
    log = store.create(cwd=str(cwd))
    t = {"turn": 1}
    s = {"turn": 1, "step": 1}
    log.extend([
        ("turn/start", t | {"trigger": {"kind": "prompt"}, "mode": "ask", "model": "script"}),
        ("user/message", t | {"content": [{"type": "text", "text": "list and read"}]}),
        ("step/start", s),
        ("assistant/chunk", s | {"chunk": {"type": "text", "text": "Looking \x1b[2J now"}}),
        ("assistant/message", s | {
            "content": [{"type": "text", "text": "Looking \x1b[2J now"},
                        {"type": "tool-call", "id": "l1", "name": "list_dir", "arguments": '{"path":"."}'},
                        {"type": "tool-call", "id": "r9", "name": "read_file", "arguments": '{"path":"a.txt"}'}],
            "usage": {"inputTokens": 7, "outputTokens": 3}}),
        ("tool/call", s | {"callId": "l1", "name": "list_dir", "arguments": {"path": "."},
                           "title": "List .", "kind": "read"}),
    ])
    log.sync()
    last = log.events[-1]["time"]
    log.close()  # released without a turn/end: the turn stays open on disk
    backend.close()
    if kind == "jsonl":
        os.utime(root / "sessions" / f"{log.id}.jsonl", ns=(last * 1_000_000,) * 2)
    return log.id


READ_AND_WRITE = {
    "thinking": "look first",
    "text": "Reading.",
    "toolCalls": [
        {"id": "r1", "name": "read_file", "arguments": {"path": "a.txt"}},
        {"id": "w1", "name": "write_file", "arguments": {"path": "b.txt", "content": "new\n"}},
    ],
    "usage": {"inputTokens": 100, "outputTokens": 20},
}


def make_work(where: Path) -> Path:
    where.mkdir()
    (where / "a.txt").write_text("alpha\nbeta\n" + "".join(f"line {i}\n" for i in range(20)))
    return where


@pytest.fixture
def cli_work(tmp_path: Path) -> Path:
    return make_work(tmp_path / "work")


class Recorded(dict[str, str]):
    """Session ids by scenario, and the cwds they were recorded in."""

    cli_work: Path
    other: Path


@pytest.fixture(scope="module")
def recorded(kind: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Recorded]:
    """Four sessions, one minute apart, recorded once per backend: completed (tools, a
    rejected edit), failed in its second turn, cancelled, and interrupted (open on disk,
    unrepaired, in another cwd)."""
    base = tmp_path_factory.mktemp(f"recorded-{kind}")
    root = base / "store"
    ids = Recorded()
    ids.cli_work = make_work(base / "work")
    ids.other = base / "other"
    ids.other.mkdir()
    ids["completed"] = record(root, kind, ids.cli_work, [READ_AND_WRITE, {
        "text": "Done.", "usage": {"inputTokens": 150, "outputTokens": 5}}],
        ["please read a.txt"], options=["reject_once"], base_ms=BASE_MS)
    ids["failed"] = record(root, kind, ids.cli_work, [
        {"text": "hello", "usage": {"inputTokens": 3, "outputTokens": 1}},
        {"text": "partial", "error": {"message": "rate limited", "code": "rate_limit",
                                      "retryable": True}}],
        ["first", "second"], base_ms=BASE_MS + 60_000)
    ids["cancelled"] = record(root, kind, ids.cli_work, [{"text": "slow words", "hang": True}],
                              ["wait"], cancel=True, base_ms=BASE_MS + 120_000)
    ids["interrupted"] = write_open_turn(root, kind, ids.other, BASE_MS + 180_000)
    return root, ids


@pytest.fixture
def sessions(recorded: tuple[Path, Recorded], tmp_path: Path) -> Recorded:
    """A private copy of the recorded store at tmp_path/store (mtimes kept)."""
    root, ids = recorded
    shutil.copytree(root, tmp_path / "store")
    return ids


def store_args(tmp_path: Path, kind: str) -> list[str]:
    return ["--store", str(tmp_path / "store"), "--backend", kind]


# --- list ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_list_table_and_json(tmp_path: Path, kind: str, sessions: Recorded) -> None:
    before = store_state(tmp_path / "store")
    res = cli(*store_args(tmp_path, kind), "list", process=True)
    assert res.code == 0, res.err
    assert res.lines[0].split() == ["ID", "UPDATED", "TURNS", "LAST", "TURN", "TOKENS", "IN/OUT",
                                    "CWD", "TITLE"]
    rows = res.lines[1:]
    order = ["interrupted", "cancelled", "failed", "completed"]  # newest first
    assert [r.split()[0] for r in rows] == [sessions[n] for n in order]
    by_name = dict(zip(order, rows, strict=True))
    cli_work = str(sessions.cli_work)
    shown_cwd = cli_work if len(cli_work) <= 40 else "…" + cli_work[-39:]  # long paths keep their end
    assert by_name["completed"].split()[1:7] == [
        local(BASE_MS).split()[0], local(BASE_MS).split()[1], "1", "completed", "250/25", shown_cwd]
    assert by_name["completed"].endswith("please read a.txt")
    assert "  2  error: rate limited  " in by_name["failed"]
    assert by_name["failed"].rstrip().endswith("first")
    assert "  1  cancelled  " in by_name["cancelled"]
    assert "  1  interrupted (unrepaired)  " in by_name["interrupted"]
    assert " 7/3 " in by_name["interrupted"]

    res = cli(*store_args(tmp_path, kind), "list", "--json")
    assert res.code == 0, res.err
    listed = {item["id"]: item for item in orjson.loads(res.raw)}
    completed = listed[sessions["completed"]]
    assert completed == {
        "id": sessions["completed"], "title": "please read a.txt", "cwd": str(sessions.cli_work),
        "createdAt": BASE_MS, "updatedAt": completed["updatedAt"], "updated": completed["updated"],
        "turns": 1, "status": "completed", "statusText": "completed",
        "lastTurn": {"turn": 1, "reason": {"kind": "completed"}, "onDisk": True},
        "tokens": {"inputTokens": 250, "outputTokens": 25}, "live": False,
    }
    assert completed["updated"].startswith(local(completed["updatedAt"], "%Y-%m-%dT%H:%M:%S"))
    failed = listed[sessions["failed"]]
    assert (failed["turns"], failed["status"], failed["statusText"]) == (2, "error", "error: rate limited")
    assert failed["lastTurn"]["reason"] == {"kind": "error", "step": 1, "message": "rate limited",
                                            "code": "rate_limit", "retryable": True}
    assert failed["tokens"] == {"inputTokens": 3, "outputTokens": 1}
    assert listed[sessions["cancelled"]]["lastTurn"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    interrupted = listed[sessions["interrupted"]]
    assert (interrupted["status"], interrupted["live"]) == ("interrupted", False)
    assert interrupted["lastTurn"] == {"turn": 1, "reason": {"kind": "interrupted", "cause": "crash"},
                                       "onDisk": False}
    updated = [item["updatedAt"] for item in orjson.loads(res.raw)]
    assert updated == sorted(updated, reverse=True)

    res = cli(*store_args(tmp_path, kind), "list", "--cwd", str(sessions.other), "--json")
    assert [item["id"] for item in orjson.loads(res.raw)] == [sessions["interrupted"]]
    res = cli(*store_args(tmp_path, kind), "ls", "-n", "1")
    assert [r.split()[0] for r in res.lines[1:]] == [sessions["interrupted"]]
    res = cli(*store_args(tmp_path, kind), "list", "--cwd", str(tmp_path / "nowhere"))
    assert (res.code, res.out) == (0, f"No sessions for {tmp_path / 'nowhere'} in {tmp_path / 'store'} ({kind} backend).\n")
    assert store_state(tmp_path / "store") == before


@pytest.mark.integration
def test_empty_or_missing_store_is_not_created(tmp_path: Path, kind: str) -> None:
    missing = tmp_path / "nothing" / "here"
    res = cli("--store", str(missing), "--backend", kind, "list", process=True)
    assert (res.code, res.out) == (2, "")
    assert res.err == f"acp-bridge sessions: --store: no store at {missing}: the folder does not exist\n"
    assert not (tmp_path / "nothing").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli("--store", str(empty), "--backend", kind, "list")
    assert (res.code, res.out, res.err) == (0, f"No sessions in {empty} ({kind} backend).\n", "")
    assert cli("--store", str(empty), "--backend", kind, "list", "--json").out == "[]\n"
    res = cli("--store", str(empty), "--backend", kind, "show", "00000000-0000-4000-8000-000000000000")
    assert res.code == 1 and "00000000-0000-4000-8000-000000000000 not found" in res.err
    assert list(empty.iterdir()) == []
    # The store location defaults like the agent's: $ACP_BRIDGE_HOME, and the backend
    # comes from $ACP_BRIDGE_BACKEND.
    res = cli("list", env={"ACP_BRIDGE_HOME": str(empty), "ACP_BRIDGE_BACKEND": kind})
    assert res.out == f"No sessions in {empty} ({kind} backend).\n"


# --- show ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_show_completed_failed_cancelled(tmp_path: Path, kind: str, sessions: Recorded) -> None:
    before = store_state(tmp_path / "store")
    res = cli(*store_args(tmp_path, kind), "show", sessions["completed"], process=True)
    assert res.code == 0, res.err
    assert res.lines[:3] == [f"Session {sessions['completed']}", "  title    please read a.txt",
                             f"  cwd      {sessions.cli_work}"]
    assert "  turns    1 (last: completed)" in res.lines
    assert res.lines[-1] == "Total tokens: 250 in / 25 out"
    turn = res.out[res.out.index("\nTurn 1"):]
    assert turn.splitlines()[1:] == [
        "Turn 1 — completed",
        f"  started {local(BASE_MS + 10, '%Y-%m-%d %H:%M:%S')} · took {turn.split('took ')[1].split(' s')[0]} s"
        " · mode ask · model script",
        "",
        "  User:",
        "    please read a.txt",
        "",
        "  Step 1 · tokens 100 in / 20 out",
        "    Thinking:",
        "      | look first",
        "    Assistant:",
        "      Reading.",
        "    Tool read_file (read) — Read a.txt [r1]",
        '      arguments: {"path":"a.txt"}',
        "      result:",
        "        alpha",
        "        beta",
        *[f"        line {i}" for i in range(10)],
        "        … (10 more lines; --full shows all)",
        "    Tool write_file (edit) — Write b.txt [w1]",
        '      arguments: {"path":"b.txt","content":"new\\n"}',
        "      permission: reject_once, by the user",
        "      result [error: rejected]:",
        "        The user rejected this tool call.",
        "",
        "  Step 2 · tokens 150 in / 5 out",
        "    Assistant:",
        "      Done.",
        "",
        "  End: completed · tokens 250 in / 25 out",
        "",
        "  turns    1 (last: completed)",
        "",
        "Total tokens: 250 in / 25 out",
    ]
    full = cli(*store_args(tmp_path, kind), "show", sessions["completed"], "--full")
    assert "        line 19" in full.lines and "--full shows all" not in full.out

    res = cli(*store_args(tmp_path, kind), "show", sessions["failed"])
    assert res.code == 0, res.err
    assert "Turn 1 — completed" in res.lines
    assert "Turn 2 — error: rate limited (step 1, code rate_limit, retryable)" in res.lines
    assert "  End: error: rate limited (step 1, code rate_limit, retryable)" in res.lines
    assert res.lines[res.lines.index("Turn 2 — error: rate limited (step 1, code rate_limit, retryable)") + 4] == "    second"
    assert "  End: completed · tokens 3 in / 1 out" in res.lines
    assert res.lines[-1] == "Total tokens: 3 in / 1 out"

    res = cli(*store_args(tmp_path, kind), "show", sessions["cancelled"])
    assert "Turn 1 — cancelled (by session/cancel)" in res.lines
    assert "      slow words" in res.lines
    assert "  End: cancelled (by session/cancel)" in res.lines
    assert store_state(tmp_path / "store") == before


def _turns_part(text: str) -> str:
    """The transcript from the first turn on, with the 'not yet on disk' marks removed."""
    body = text[text.index("\nTurn 1"):text.index("\n\n  turns ")]  # the turns, not the summary
    return body.replace("; not yet repaired on disk", "").replace(" (synthetic, not yet on disk)", "")


def test_show_unrepaired_crash_predicts_the_repair(tmp_path: Path, kind: str,
                                                   sessions: Recorded) -> None:
    root = tmp_path / "store"
    sid = sessions["interrupted"]
    before = store_state(root)
    res = cli(*store_args(tmp_path, kind), "show", sid)
    assert res.code == 0, res.err
    assert store_state(root) == before  # nothing written: no repair, no torn/, no lock taken
    assert not (root / "torn").exists()
    assert "  turns    1 (last: interrupted (unrepaired))" in res.lines
    assert ("  note: turn 1 was cut short and has not been repaired on disk yet; it is shown as "
            "loading will close it. Nothing was written.") in res.lines
    assert "Turn 1 — interrupted (crash; not yet repaired on disk)" in res.lines
    assert "\x1b" not in res.out and "      Looking \\x1b[2J now" in res.lines
    tools = res.out[res.out.index("    Tool list_dir"):]
    assert tools.splitlines()[:9] == [
        "    Tool list_dir (read) — List . [l1]",
        '      arguments: {"path":"."}',
        "      result [error: interrupted] (synthetic, not yet on disk):",
        "        The list_dir call was interrupted: the agent stopped while it was running. Its outcome is unknown; it may have run, fully or in part.",
        "    Tool read_file [r9]",
        '      arguments: {"path":"a.txt"}',
        "      result [error: interrupted] (synthetic, not yet on disk):",
        "        The read_file call was interrupted before it started; it did not run.",
        "",
    ]
    assert "  End: interrupted (crash; not yet repaired on disk) · tokens 7 in / 3 out" in res.lines
    md = cli(*store_args(tmp_path, kind), "export", sid, "--format", "md")
    assert "## Turn 1 — interrupted (crash; not yet repaired on disk)" in md.lines
    assert store_state(root) == before

    # Now a real load repairs it durably; show then reads the same transcript from disk.
    backend = open_backend(kind, root)
    loaded = SessionStore(backend).load(sid)
    assert loaded.report.closers == 4
    loaded.log.close()
    backend.close()
    after = cli(*store_args(tmp_path, kind), "show", sid)
    assert "Turn 1 — interrupted (crash)" in after.lines
    assert "not yet" not in after.out
    assert _turns_part(after.out) == _turns_part(res.out)
    listed = orjson.loads(cli(*store_args(tmp_path, kind), "list", "--json").raw)
    assert [i["statusText"] for i in listed if i["id"] == sid] == ["interrupted"]


@pytest.mark.integration
def test_show_while_an_agent_owns_the_session(tmp_path: Path, kind: str, cli_work: Path) -> None:
    """A real agent process mid-tool: list and show work and write nothing, the owner keeps
    its lock; after kill -9, the same turn shows as an unrepaired crash."""
    root = tmp_path / "store"
    pid_file = cli_work / "tool.pid"
    steps = tmp_path / "steps.json"
    steps.write_bytes(orjson.dumps({"steps": [
        {"text": "hello", "usage": {"inputTokens": 2, "outputTokens": 1}},
        {"text": "running it", "toolCalls": [{"id": "slow", "name": "run_command", "arguments": {
            "command": f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 30"}}]},
    ]}))
    child = subprocess.Popen([sys.executable, "-c", CHILD, kind, str(root), str(cli_work), str(steps)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        wait_until(lambda: pid_file.exists() or child.poll() is not None, "the tool's start", timeout=20)
        assert child.poll() is None, "the child died before its tool started"
        before = store_state(root)
        listed = orjson.loads(cli(*store_args(tmp_path, kind), "list", "--json").raw)
        assert [(i["status"], i["live"], i["ownerPid"]) for i in listed] == [("running", True, child.pid)]
        res = cli(*store_args(tmp_path, kind), "show", sid, process=True)
        assert res.code == 0, res.err
        assert f"  owner    process {child.pid} (live: an agent has it open)" in res.lines
        assert f"Turn 2 — running (in process {child.pid})" in res.lines
        assert "    Tool run_command (execute) — " in res.out
        assert "      result: (no result yet)" in res.lines
        assert "  (the turn is still running; shown as far as it is on disk)" in res.lines
        assert "note:" not in res.out
        assert cli(*store_args(tmp_path, kind), "export", sid, "--format", "md").code == 0
        assert store_state(root) == before
        assert child.poll() is None
        backend = open_backend(kind, root)
        with pytest.raises(SessionLockedError):  # still the agent's
            SessionStore(backend).load(sid)
        backend.close()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
        if pid_file.exists():
            _kill(int(pid_file.read_text()))
    res = cli(*store_args(tmp_path, kind), "show", sid)
    assert "Turn 2 — interrupted (crash; not yet repaired on disk)" in res.lines
    assert "may have run" in res.out and "owner" not in res.out
    assert store_state(root) == before


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)



# --- export ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_export_jsonl_is_the_stored_log(tmp_path: Path, kind: str, sessions: Recorded) -> None:
    root = tmp_path / "store"
    for name in ("completed", "interrupted"):
        sid = sessions[name]
        res = cli(*store_args(tmp_path, kind), "export", sid, "--format", "jsonl",
                  process=name == "completed")
        assert res.code == 0, res.err
        if kind == "jsonl":
            assert res.raw == (root / "sessions" / f"{sid}.jsonl").read_bytes()
        lines = res.raw.split(b"\n")
        assert lines.pop() == b""
        header, *events = (orjson.loads(line) for line in lines)
        backend = open_backend(kind, root)
        try:
            if name == "completed":  # closed: load changes nothing
                loaded = SessionStore(backend).load(sid)
                assert header == loaded.log.header
                assert events == list(loaded.log.events)
                loaded.log.close()
            else:  # open: raw means without the closers
                assert events[-1]["type"] == "tool/call"
        finally:
            backend.close()
        # One line per record in the JSONL backend's own format.
        assert all(line.startswith(b'{"type":"') for line in lines[1:])


def test_export_markdown(tmp_path: Path, kind: str, sessions: Recorded) -> None:
    res = cli(*store_args(tmp_path, kind), "export", sessions["completed"][:8])  # md is the default
    assert res.code == 0, res.err
    lines = res.lines
    assert lines[0] == "# please read a.txt"
    assert f"- **id**: `{sessions['completed']}`" in lines
    assert "- **turns**: 1 (last: completed)" in lines
    assert "## Turn 1 — completed" in lines
    assert "### Step 1 · tokens 100 in / 20 out" in lines
    assert "> look first" in lines
    i = lines.index("**Tool** `read_file` (read) — Read a.txt · `r1`")
    assert lines[i + 2:i + 7] == ["Arguments:", "", "```json", '{"path":"a.txt"}', "```"]
    assert lines[i + 8:i + 12] == ["Result:", "", "```text", "alpha"]
    assert "line 19" in lines  # nothing cut in an export
    assert "Permission: reject_once, by the user" in lines
    assert "Result **\\[error: rejected\\]**:" in lines
    assert "**End:** completed · tokens 250 in / 25 out" in lines
    assert lines[-1] == "**Total tokens:** 250 in / 25 out"
    failed = cli(*store_args(tmp_path, kind), "export", sessions["failed"], "--format", "md")
    assert "## Turn 2 — error: rate limited (step 1, code rate_limit, retryable)" in failed.lines


# --- ids and errors -------------------------------------------------------------------------


@pytest.mark.integration
def test_ids_and_errors(tmp_path: Path, kind: str, sessions: Recorded, cli_work: Path) -> None:
    args = store_args(tmp_path, kind)
    res = cli(*args, "show", "../../etc/passwd", process=True)
    assert res.code == 2 and "invalid session id '../../etc/passwd'" in res.err and not res.out
    assert cli(*args, "show", "ABC").code == 2
    unknown = "00000000-0000-4000-8000-00000000beef"
    res = cli(*args, "show", unknown)
    assert res.code == 1 and res.out == ""
    assert res.err == (f"acp-bridge sessions: session {unknown} not found "
                       f"(store {tmp_path / 'store'}, {kind} backend)\n")
    assert cli(*args, "export", "ffffffff").code == 1  # a prefix nobody has
    assert cli(*args, "export", unknown, "--format", "jsonl").code == 1
    assert cli(*args, "show", sessions["failed"][:6]).lines[0] == f"Session {sessions['failed']}"
    # An ambiguous prefix names the candidates.
    root = tmp_path / "store"
    a = record(root, kind, cli_work, [{"text": "a"}], ["a"], session_id="abcdabcd-0000-4000-8000-000000000001")
    b = record(root, kind, cli_work, [{"text": "b"}], ["b"], session_id="abcdabcd-0000-4000-8000-000000000002")
    res = cli(*args, "show", "abcdabcd")
    assert res.code == 2 and a in res.err and b in res.err
    assert cli(*args, "show", "abcdabcd-0000-4000-8000-000000000002").code == 0


@pytest.mark.parametrize("damage", ["unparsable", "breaks invariants"])
def test_damaged_log(tmp_path: Path, kind: str, sessions: Recorded, damage: str) -> None:
    """Damage before a turn/end: show/export md refuse with load's own message; list
    still lists (status damaged); the raw export still gives the bytes out."""
    root = tmp_path / "store"
    sid = sessions["failed"]
    backend = open_backend(kind, root)
    if damage == "unparsable":
        raw = b'{"type": "assistant/chu'
    else:  # well-formed, but step 1 of turn 1 claims to be step 9
        raw = b'{"turn":1,"step":9}'
        if kind == "jsonl":
            raw = b'{"type":"step/start","seq":2,"time":0,"data":%s}' % raw
    replace_event(backend, sid, 3 if damage == "unparsable" else 2, raw)
    with pytest.raises(SessionCorruptError) as refused:
        SessionStore(backend).load(sid)
    backend.close()
    gc.collect()  # tamper's connection is closed (and checkpoints) now, not at random later
    before = store_state(root)
    for command in (["show", sid], ["export", sid, "--format", "md"]):
        res = cli(*store_args(tmp_path, kind), *command)
        assert (res.code, res.out) == (1, "")
        assert res.err == f"acp-bridge sessions: {refused.value}\n"
    res = cli(*store_args(tmp_path, kind), "list")
    assert res.code == 0
    assert next(r.split()[:5] for r in res.lines if r.startswith(sid))[3:] == ["?", "damaged"]
    listed = {i["id"]: i for i in orjson.loads(cli(*store_args(tmp_path, kind), "list", "--json").raw)}
    assert listed[sid]["status"] == "damaged" and listed[sid]["error"] == str(refused.value)
    assert listed[sessions["completed"]]["status"] == "completed"
    exported = cli(*store_args(tmp_path, kind), "export", sid, "--format", "jsonl")
    assert exported.code == 0 and raw in exported.raw
    assert store_state(root) == before


# --- the parser -------------------------------------------------------------------------------


def test_add_parser_into_the_agent_cli(tmp_path: Path, kind: str, sessions: Recorded,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="acp-bridge")
    parser.add_argument("--store")
    commands = parser.add_subparsers(dest="command")
    add_parser(commands)
    store = str(tmp_path / "store")
    for argv in (["sessions", "--store", store, "--backend", kind, "show", sessions["completed"]],
                 ["sessions", "show", sessions["completed"], "--store", store, "--backend", kind],
                 ["--store", store, "sessions", "--backend", kind, "show", sessions["completed"]]):
        args = parser.parse_args(argv)
        assert run(args) == 0
        assert capsys.readouterr().out.startswith(f"Session {sessions['completed']}\n")
    args = parser.parse_args(["sessions", "--store", store, "--backend", kind])  # list by default
    assert run(args) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5


@pytest.mark.integration
def test_import_is_lean() -> None:
    """`acp-bridge` builds its parser on every start: adding `sessions` imports nothing
    heavy (the agent's start-up path stays lean)."""
    code = ("import argparse, sys; from acp_bridge.cli.sessions import main as sessions_cli; "
            "p = argparse.ArgumentParser(); sessions_cli.add_parser(p.add_subparsers()); "
            "print(sorted(m for m in ('session', 'orjson', 'sqlite3', 'typing', 'dataclasses', 'anyio') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


def test_list_titles_a_big_first_prompt(tmp_path: Path, kind: str, cli_work: Path) -> None:
    """A first prompt embedding a 100 KB file before its text keeps its title."""
    root = tmp_path / "store"
    backend = open_backend(kind, root)
    log = SessionStore(backend).create(cwd=str(cli_work))
    resource = {"uri": f"file://{cli_work}/a.txt", "text": "x" * 100_000}
    log.extend([("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}}),
                ("user/message", {"turn": 1, "content": [{"type": "resource", "resource": resource},
                                                         {"type": "text", "text": "what is in it?"}]})])
    log.sync()
    log.close()
    backend.close()
    (listed,) = orjson.loads(cli(*store_args(tmp_path, kind), "list", "--json").raw)
    assert listed["title"] == "what is in it?"
    res = cli(*store_args(tmp_path, kind), "list")
    assert res.lines[1].endswith("what is in it?"), res.out
