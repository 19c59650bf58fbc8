"""An imported session in a real agent, and a real import killed: `session/load` of a
Claude Code session imported on JSONL, SQLite and PostgreSQL replays what the native
file says, and `serve` goes on with it; `acp-bridge import` killed with SIGKILL at
several moments leaves each session whole or absent, and the import run again makes
the same store as one never killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from session.backends.base import read_stored
from tests.support.acp_client import AgentProcess

FIXTURE = next((Path(__file__).parent / "recorded" / "native" / "claude-code-2.1.197").glob("*.jsonl"))
RECORDS = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]

pytestmark = pytest.mark.integration


def run_import(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    return subprocess.run([sys.executable, "-m", "acp_bridge", "import", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def location(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_dsn")) if kind == "postgres" else str(tmp_path / "store")


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
async def test_an_imported_session_loads_as_the_native_file_says_and_goes_on(
        kind: str, tmp_path: Path, work: Path, request: pytest.FixtureRequest) -> None:
    where = location(kind, tmp_path, request)
    made = run_import(str(FIXTURE), "--store", where, "--backend", kind)
    assert made.returncode == 0, made.stderr
    sid = made.stdout.split("imported as session ")[1].split()[0]
    async with AgentProcess(where, backend=kind) as agent:
        await agent.initialize()
        loaded = await agent.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["turns"] == 2
        updates = agent.updates_of(sid)
        prompts = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"]
        assert prompts == [r["message"]["content"] for r in RECORDS
                           if r["type"] == "user" and isinstance(r["message"]["content"], str)]
        said = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
        assert said == "".join(b["text"] for r in RECORDS if r["type"] == "assistant"
                               for b in r["message"]["content"] if b["type"] == "text")
        thought = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_thought_chunk"]
        assert thought == ["The user wants a short answer."] * 2
        calls = [u for u in updates if u["sessionUpdate"] == "tool_call"]
        assert [(c["toolCallId"], c["name"], c["rawInput"]) for c in calls] == [
            (b["id"], b["name"], b["input"]) for r in RECORDS if r["type"] == "assistant"
            for b in r["message"]["content"] if b["type"] == "tool_use"]
        done = [u for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"]
        assert done[0]["rawOutput"]["content"] == [{"type": "text", "text": "notes from the fixture\nsecond line"}]
        usage = [u["_meta"]["acpBridge"]["usage"] for u in updates if u["sessionUpdate"] == "usage_update"]
        assert sum(u["outputTokens"] for u in usage) == 39  # 9 + 21 + 9: once per message
        answer = await agent.prompt(sid, "and now?")  # our agent goes on with it
        assert answer["_meta"]["acpBridge"]["turn"] == 3
    again = run_import(str(FIXTURE), "--store", where, "--backend", kind)
    assert again.returncode == 1 and "not changed" in again.stdout  # continued here: nothing added, nothing imported
    assert "continued here" in again.stdout


@pytest.mark.anyio
async def test_an_imported_codex_session_loads_as_its_rollout_says(tmp_path: Path, work: Path) -> None:
    rollout = next((FIXTURE.parent.parent / "codex-0.171.0").glob("*.jsonl"))
    records = [orjson.loads(line) for line in rollout.read_bytes().splitlines()]
    where = str(tmp_path / "store")
    made = run_import(str(rollout), "--store", where)
    assert made.returncode == 0, made.stderr
    sid = made.stdout.split("imported as session ")[1].split()[0]
    async with AgentProcess(where) as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        updates = agent.updates_of(sid)
    assert [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"] == [
        "Say hello.", "RUN: cat notes.txt"]
    assert [(u["toolCallId"], u["rawInput"]) for u in updates if u["sessionUpdate"] == "tool_call"] == [
        (r["payload"]["call_id"], orjson.loads(r["payload"]["arguments"])) for r in records
        if r["payload"].get("type") == "function_call"]
    total = [r["payload"]["thread_token_usage"] for r in records if r["type"] == "token_usage_record"][-1]
    usage = [u["_meta"]["acpBridge"]["usage"] for u in updates if u["sessionUpdate"] == "usage_update"]
    assert sum(u["outputTokens"] for u in usage) == total["output_tokens"]
    assert sum(u["inputTokens"] for u in usage) == total["input_tokens"]

def many_turns(turns: int) -> bytes:
    """A Claude Code transcript of `turns` turns, each the fixture's second turn again
    (its call and result) under fresh uuids and message ids."""
    second = next(i for i, r in enumerate(RECORDS) if r.get("message", {}).get("content") == "RUN: cat notes.txt")
    turn = [r for r in RECORDS[second:] if r["type"] in ("user", "assistant")]
    out: list[bytes] = [orjson.dumps(r) for r in RECORDS[:second]]
    for n in range(turns):
        for record in turn:
            text = orjson.dumps(record).decode()
            for old in {record["uuid"], record.get("parentUuid") or record["uuid"],
                        record.get("message", {}).get("id") or record["uuid"]}:
                text = text.replace(old, f"{old[:-6]}{n:06d}")
            text = text.replace("toolu_fake_1", f"toolu_fake_{n}").replace("notes from the fixture",
                                                                           f"notes of turn {n} " + "x" * 2000)
            out.append(text.encode())
    return b"\n".join(out) + b"\n"


def sessions_of(kind: str, where: str) -> dict[str, list[Any]]:
    store = SessionStore(open_backend(kind, where))
    try:
        return {s["id"]: [(e["type"], e["data"]) for e in read_stored(store.backend.read_stream(s["id"])).events]
                for s in store.list()}
    finally:
        store.close()


# Where the kill lands, as a fraction of a whole import's time: while it starts, reads,
# publishes, goes on. The default run kills at three of them; `-m long` (a step of
# .ci/run) at all eight.
EVERY_POINT = (0.4, 0.8, 1.2, 1.6, 2.0, 2.5, 3.0, 4.0)
SOME_POINTS = (0.8, 2.0, 4.0)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
@pytest.mark.parametrize("points", [SOME_POINTS, pytest.param(EVERY_POINT, marks=pytest.mark.long)],
                         ids=["some", "every"])
def test_a_kill_during_an_import_leaves_each_session_whole_or_absent(
        kind: str, points: tuple[float, ...], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    folder = tmp_path / "native"
    folder.mkdir()
    files = []
    for n in range(6):  # six sessions of 150 turns (about 2 MB each)
        text = many_turns(150).replace(RECORDS[0]["sessionId"].encode(), f"{n:08d}-aaaa-bbbb-cccc-dddddddddddd".encode())
        (folder / f"s{n}.jsonl").write_bytes(text)
        files.append(folder / f"s{n}.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    where = location(kind, tmp_path, request)
    start = time.monotonic()
    whole_run = run_import(str(files[0]), "--store", where, "--backend", kind)
    assert whole_run.returncode == 0, whole_run.stderr
    took = time.monotonic() - start
    expected = sessions_of(kind, where)
    (first_id,) = expected
    assert len([t for t, _ in expected[first_id] if t == "turn/end"]) == 151
    for fraction in points:
        proc = subprocess.Popen([sys.executable, "-m", "acp_bridge", "import", str(folder), "--store", where,
                                 "--backend", kind], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(took * fraction)  # what is tested: a kill at that moment of the import
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        found = sessions_of(kind, where)
        for sid, events in found.items():  # each whole: 151 turns (the fixture's first and 150 more), the last ended
            assert [t for t, _ in events].count("turn/end") == 151, sid
            assert events[-1][0] == "turn/end"
    finished = run_import(str(folder), "--store", where, "--backend", kind)
    assert finished.returncode == 0, finished.stderr
    found = sessions_of(kind, where)
    assert len(found) == len(files) and found[first_id] == expected[first_id]


def test_watch_follows_a_transcript_the_agent_goes_on_writing(tmp_path: Path) -> None:
    from tests.support.waiting import wait_until

    folder, store = tmp_path / "native", tmp_path / "store"
    (folder / "project").mkdir(parents=True)
    native = folder / "project" / FIXTURE.name
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    second = next(i for i, r in enumerate(RECORDS) if r.get("message", {}).get("content") == "RUN: cat notes.txt")
    native.write_bytes(b"".join(lines[:second]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    proc = subprocess.Popen([sys.executable, "-m", "acp_bridge", "import", str(folder), "--store", str(store),
                             "--watch", "--interval", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    try:
        def turns() -> int:
            found = sessions_of("jsonl", str(store)) if (store / "sessions").exists() else {}
            return sum(t == "turn/end" for events in found.values() for t, _ in events)

        wait_until(lambda: turns() == 1 or None, "the first import")
        native.write_bytes(b"".join(lines))  # the agent went on
        wait_until(lambda: turns() == 2 or None, "the watch's import of the new turn")
        other = folder / "other.jsonl"  # a new session appears
        other.write_bytes(many_turns(1).replace(RECORDS[0]["sessionId"].encode(),
                                                b"99999999-aaaa-bbbb-cccc-dddddddddddd"))
        wait_until(lambda: len(sessions_of("jsonl", str(store))) == 2 or None, "the new session's import")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    # The new session's line may not be out yet when the store shows it (published, then
    # said): the store is what the test waited for.
    assert "1 new turn(s) added" in out and "imported as session" in out
