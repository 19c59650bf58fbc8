"""Hostile input through the real agent: session ids that try to name paths, and tool
paths that try to leave the session's roots (DESIGN.md sections 3 and 4).

- Session ids with `..`, `/`, NUL, a lookalike or a huge length, in every method that
  takes one: `-32602` naming `sessionId` (`session/cancel`, a notification: ignored),
  and nothing is created anywhere outside the store, nor in it (the tree of tmp_path
  is compared before and after).
- Tool paths outside the roots, through `..`, absolute paths, symbolic links (to a
  file, a directory, a device, a dangling target, a loop, the parent), device files
  (`/dev/zero`, `/dev/null`) and a FIFO inside the root, for read_file, write_file,
  edit_file, list_dir and run_command's `cwd`: every call is an error result, the
  turn completes (no hang on the FIFO or /dev/zero), a canary file outside the root
  is untouched, no file appears or changes outside the store and the root, and no
  `fs/*` or `terminal/*` request reaches the client for them. Run once with local
  tools and once through a client advertising fs and terminal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.support.acp_client import CLIENT_CAPS_ALL, CLIENT_CAPS_NONE, AgentProcess, ClientPolicy

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

Tree = dict[str, tuple[str, int, int]]


def tree(root: Path, *, skip: tuple[Path, ...] = ()) -> Tree:
    """Every entry under `root` (not following links): kind, size, mtime."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            path = here / name
            st = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            out[str(path.relative_to(root))] = (kind, st.st_size if kind == "file" else 0,
                                                st.st_mtime_ns if kind == "file" else 0)
    return out


# --- session ids --------------------------------------------------------------------------

VALID = "0123abcd-0000-4000-8000-00000000abcd"  # well-formed, unknown
HOSTILE_IDS = [
    "..", "../..", "../../outside/evil", "/etc/passwd", "a/b", "sessions/../../x", "x\x00y",
    VALID + "\x00", VALID + "/../..", "../" + VALID, VALID.upper(), VALID + "\n", " " + VALID, "~", ".", "",
    "%2e%2e%2f", "\u2024\u2024/x", "a" * 10_000, "0" * 8 + "-0000-4000-8000-" + "0" * 11 + "/",
]
ID_METHODS: dict[str, dict[str, Any]] = {
    "session/load": {"mcpServers": []},
    "session/resume": {"mcpServers": []},
    "session/prompt": {"prompt": [{"type": "text", "text": "hi"}]},
    "session/close": {},
    "session/delete": {},
    "session/set_mode": {"modeId": "ask"},
    "session/set_config_option": {"configId": "mode", "value": "ask"},
}


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
async def test_hostile_session_ids_are_invalid_params_and_create_nothing(tmp_path: Path, backend: str) -> None:
    work, cwd, store = tmp_path / "work", tmp_path / "cwd", tmp_path / "store"
    work.mkdir()
    cwd.mkdir()
    (tmp_path / "outside").mkdir()
    async with AgentProcess(store, backend=backend, cwd=cwd) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)  # the store exists; snapshot after this
        await agent.prompt(sid, "one real turn")
        before_outside = tree(tmp_path, skip=(store,))
        before_store = tree(store)
        for method, extra in ID_METHODS.items():
            for bad in HOSTILE_IDS:
                params = {"sessionId": bad, **extra}
                if method in ("session/load", "session/resume"):
                    params["cwd"] = str(work)
                answer = await agent.request_raw(method, params)
                assert "error" in answer, (method, bad, answer)
                error = answer["error"]
                assert error["code"] == -32602, (method, bad, error)
                assert (error.get("data") or {}).get("field") == "sessionId", (method, bad, error)
                assert len(error["message"]) < 300, "the error echoes the id cut short"
        for bad in HOSTILE_IDS:  # notifications: ignored, nothing answered
            await agent.notify("session/cancel", {"sessionId": bad})
        # The session and the connection are fine.
        assert (await agent.prompt(sid, "still here"))["_meta"]["acpBridge"]["turn"] == 2
        listed = await agent.request("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    assert agent.returncode == 0
    answers_to_cancel = [m for d, m in agent.transcript if d == "<-" and "method" not in m and m.get("id") is None]
    assert answers_to_cancel == []
    assert tree(tmp_path, skip=(store,)) == before_outside
    after_store = tree(store)
    new = set(after_store) - set(before_store)
    assert new <= {"torn"}, new  # (nothing at all is expected; torn/ only on repair)
    assert all(sid in name or name in ("sessions", "locks", "tails", "sessions.sqlite3", "sessions.sqlite3-wal",
                                       "sessions.sqlite3-shm", "sessions.sqlite3-reserve") for name in after_store), after_store


# --- tool paths -------------------------------------------------------------------------------


def call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


def hostile_calls(outside: Path) -> list[dict[str, Any]]:
    canary = str(outside / "canary.txt")
    return [
        call("r_rel", "read_file", path="../outside/canary.txt"),
        call("r_abs", "read_file", path=canary),
        call("r_etc", "read_file", path="/etc/passwd"),
        call("r_zero", "read_file", path="/dev/zero"),
        call("r_zlink", "read_file", path="zero_link"),
        call("r_link", "read_file", path="link_out"),
        call("r_dlink", "read_file", path="dir_link/canary.txt"),
        call("r_up", "read_file", path="up/outside/canary.txt"),
        call("r_fifo", "read_file", path="fifo"),
        call("r_loop", "read_file", path="loop"),
        call("r_nul", "read_file", path="notes.txt\x00../../outside/canary.txt"),
        call("r_long", "read_file", path="a" * 5000),
        call("r_proc", "read_file", path="/proc/self/environ"),
        call("r_sub_up", "read_file", path="sub/../../outside/canary.txt"),
        call("w_rel", "write_file", path="../outside/canary.txt", content="pwned"),
        call("w_abs", "write_file", path=str(outside / "new.txt"), content="pwned"),
        call("w_link", "write_file", path="link_out", content="pwned"),
        call("w_dlink", "write_file", path="dir_link/new.txt", content="pwned"),
        call("w_dangle", "write_file", path="dangle", content="pwned"),
        call("w_fifo", "write_file", path="fifo", content="x"),
        call("w_null", "write_file", path="/dev/null", content="x"),
        call("w_zlink", "write_file", path="zero_link", content="x"),
        call("w_sub_up", "write_file", path="sub/../../outside/x.txt", content="pwned"),
        call("w_tmp", "write_file", path="/tmp/acp-bridge-hostile-escape.txt", content="pwned"),
        call("e_link", "edit_file", path="link_out", old_text="canary", new_text="pwned"),
        call("e_rel", "edit_file", path="../outside/canary.txt", old_text="canary", new_text="pwned"),
        call("e_fifo", "edit_file", path="fifo", old_text="a", new_text="b"),
        call("l_up", "list_dir", path=".."),
        call("l_root", "list_dir", path="/"),
        call("l_dlink", "list_dir", path="dir_link"),
        call("l_fifo", "list_dir", path="fifo"),
        call("l_dev", "list_dir", path="/dev"),
        call("l_uplink", "list_dir", path="up"),
        call("x_rel", "run_command", command="touch escaped.txt", cwd="../outside"),
        call("x_abs", "run_command", command="touch escaped.txt", cwd=str(outside)),
        call("x_link", "run_command", command="touch escaped.txt", cwd="dir_link"),
        call("x_up", "run_command", command="touch escaped.txt", cwd="up"),
        call("x_fifo", "run_command", command="touch escaped.txt", cwd="fifo"),
        call("x_dev", "run_command", command="touch escaped.txt", cwd="/dev"),
        call("x_file", "run_command", command="touch escaped.txt", cwd="notes.txt"),
        call("x_nul", "run_command", command="touch escaped.txt", cwd="sub\x00/../.."),
    ]


CONTROLS = [  # inside the root: these work, so the turn really ran its tools
    call("ok_read", "read_file", path="notes.txt"),
    call("ok_write", "write_file", path="sub/ok.txt", content="fine\n"),
    call("ok_list", "list_dir", path="sub"),
    call("ok_run", "run_command", command="echo inside > ran.txt", cwd="sub"),
]


def build_root(tmp_path: Path) -> tuple[Path, Path, Path]:
    outside, work = tmp_path / "outside", tmp_path / "work"
    outside.mkdir()
    (outside / "canary.txt").write_text("canary\n")
    (outside / "dir").mkdir()
    work.mkdir()
    (work / "notes.txt").write_text("one\ntwo\n")
    (work / "sub").mkdir()
    (work / "link_out").symlink_to(outside / "canary.txt")
    (work / "dir_link").symlink_to(outside)
    (work / "zero_link").symlink_to("/dev/zero")
    (work / "up").symlink_to("..")
    (work / "loop").symlink_to("loop")
    (work / "dangle").symlink_to(outside / "new2.txt")
    os.mkfifo(work / "fifo")
    return outside, work, tmp_path / "store"


@pytest.mark.parametrize("caps", ["local", "client"])
async def test_tool_paths_outside_the_roots_are_error_results(tmp_path: Path, caps: str) -> None:
    outside, work, store = build_root(tmp_path)
    calls = hostile_calls(outside)
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps({"steps": [
        {"text": "Trying.", "toolCalls": calls + CONTROLS},
        {"text": "All refused."},
    ]}))
    escape = Path("/tmp/acp-bridge-hostile-escape.txt")
    escape.unlink(missing_ok=True)
    canary = (outside / "canary.txt").stat()
    before = tree(tmp_path, skip=(store,))
    policy = ClientPolicy(permissions=["allow_always"] * 20)
    async with AgentProcess(store, model=f"script:{script}", policy=policy, cwd=tmp_path) as agent:
        await agent.initialize(CLIENT_CAPS_ALL if caps == "client" else CLIENT_CAPS_NONE)
        sid = await agent.new_session(work)
        with anyio.fail_after(30):  # /dev/zero and the FIFO must not hang the turn
            answer = await agent.prompt(sid, "escape if you can", timeout=30)
        assert answer["stopReason"] == "end_turn", answer
    assert agent.returncode == 0

    final = {u["toolCallId"]: u for u in agent.updates_of(sid)
             if u["sessionUpdate"] in ("tool_call", "tool_call_update") and u.get("status") in ("completed",
                                                                                                "failed")}
    assert {c["id"]: final[c["id"]]["status"] for c in CONTROLS} == {c["id"]: "completed" for c in CONTROLS}
    escaped = {c["id"]: final[c["id"]]["rawOutput"] for c in calls if final[c["id"]]["status"] != "failed"}
    assert escaped == {}, f"not refused: {escaped}"
    for c in calls:
        error = final[c["id"]]["rawOutput"].get("error") or {}
        assert error.get("code") in ("outside_roots", "invalid_path", "not_a_file", "not_a_directory",
                                     "not_found"), (c["id"], final[c["id"]]["rawOutput"])
    # Nothing outside the root changed; inside it, only the controls' files appeared.
    after = tree(tmp_path, skip=(store,))
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == {"work/sub/ok.txt", "work/sub/ran.txt", "work/sub"} or changed == {
        "work/sub/ok.txt", "work/sub/ran.txt"}, changed
    assert (outside / "canary.txt").read_text() == "canary\n"
    assert (outside / "canary.txt").stat().st_mtime_ns == canary.st_mtime_ns
    assert not escape.exists()
    # The client was asked only about the controls, never about a hostile path.
    roots = (str(work) + os.sep,)
    for method, path in policy.fs_calls:
        assert path.startswith(roots), (method, path)
    for term in policy.terminals.values():
        assert str(term["params"].get("cwd", "")).startswith(str(work)), term["params"]
    asked = {a["toolCall"]["toolCallId"] for a in policy.asked}
    assert asked <= {c["id"] for c in CONTROLS}, asked
    if caps == "client":
        assert {p for _, p in policy.fs_calls} >= {str(work / "notes.txt"), str(work / "sub" / "ok.txt")}
