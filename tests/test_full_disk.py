"""A full disk, for real: the stdio agent on tmpfs file systems of 400 KB, 2 MB and
10 MB (issues 13 and 24), both file backends, a model that streams at once and one that
streams slowly.

A turn too big for the disk fails with `store_io` naming the real cause and is undone:
the next small prompt works at once, without anything being freed, and a reload never
brings back what was answered as rolled back (JSONL truncates its file; SQLite keeps
streamed events in a tail file that it truncates, session.backends.sqlite_tail). A
store whose disk is full to the last byte still lists, shows, exports and deletes, and
a delete gives the space back so that the next prompt works. No lock file of a session
that was never made stays, and nothing ends in a traceback.

Mounting needs root; the tests are skipped, saying why, where they cannot mount.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from session.backends.sqlite_space import reserve_size
from tests.support.acp_client import AgentProcess, write_script
from tests.support.logs import stored_clean

pytestmark = pytest.mark.integration

SIZES = {"400k": 400 << 10, "2m": 2 << 20, "10m": 10 << 20}
REAL_CAUSES = ("No space left on device", "database or disk is full")


@pytest.fixture(params=list(SIZES))
def tiny_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param},mode=0700", "tmpfs",
                           str(mount_point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def disk_size(mount_point: Path) -> int:
    stat = os.statvfs(mount_point)
    return stat.f_blocks * stat.f_frsize


def fill_up(mount_point: Path) -> Path:
    """A file that takes every last byte of the disk."""
    filler = mount_point / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for piece in (1 << 20, 4096, 64, 1):
            while True:
                try:
                    os.write(fd, b"\xa5" * piece)
                except OSError:
                    break
    finally:
        os.close(fd)
    assert os.statvfs(mount_point).f_bavail == 0
    return filler


def text_of(size: int, marker: str, words: int = 400) -> str:
    """About `size` bytes of text in `words` words, each made of `marker`."""
    word = max(size // words, 8)
    return " ".join(f"{i:05d}" + marker * (word - 6) for i in range(words))


def prompt(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def check_failure(answer: dict[str, Any]) -> str:
    error = answer["error"]
    message = str(error["message"])
    assert error["code"] == -32603 and (error.get("data") or {}).get("code") == "store_io", answer
    assert any(cause in message for cause in REAL_CAUSES), message  # the disk, said as it is
    assert "no transaction is active" not in message and "rolled back to seq" in message, message
    return message


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("delay", [0, 1], ids=["fast", "slow"])
@pytest.mark.long
def test_a_turn_too_big_for_the_disk_is_undone_and_the_next_prompt_works(
    tiny_fs: Path, tmp_path: Path, backend: str, delay: int
) -> None:
    store, work = tiny_fs / "store", tmp_path / "work"
    work.mkdir()
    size = disk_size(tiny_fs)
    # One turn more than the disk holds (it fails while it streams), one of about half
    # of it (for SQLite: its durable commit fails, once the stream fit in the tail).
    turns = [("first", "hello there"), ("too big", text_of(size * 13 // 10, "x")),
             ("small", "small again"), ("half", text_of(size * 45 // 100, "y")),
             ("small 2", "and again"), ("small 3", "still fine")]
    model = write_script(tmp_path / "model.json", *({"text": text} for _, text in turns),
                         chunk_delay_ms=delay)
    answers: dict[str, dict[str, Any]] = {}

    async def main() -> str:
        async with AgentProcess(store, model=model, backend=backend) as agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            for name, _ in turns:
                answers[name] = await agent.request_raw(
                    "session/prompt", {"sessionId": sid, "prompt": prompt(name)}, timeout=60)
        assert agent.returncode == 0, agent.stderr.decode()[-3000:]
        assert b"Traceback" not in agent.stderr, agent.stderr.decode()[-3000:]
        return sid

    sid = anyio.run(main)
    check_failure(answers["too big"])
    for name in ("first", "small", "small 2", "small 3"):  # nothing was freed in between
        assert answers[name]["result"]["stopReason"] == "end_turn", (name, answers[name])

    events = stored_clean(store, sid, backend)
    prompts = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    ends = {e["data"]["turn"]: e["data"]["reason"] for e in events if e["type"] == "turn/end"}
    turn_of = {text: turn for turn, text in enumerate(prompts, start=1)}
    for name, text in turns:
        answer = answers[name]
        if "result" in answer:
            assert ends[turn_of[name]]["kind"] == "completed", (name, ends)
            continue
        message = check_failure(answer)
        # What was answered as rolled back is not on disk, in any form.
        assert text.split()[0][5:40] not in orjson.dumps(events).decode(), name
        if name in turn_of:  # the prompt was durable: the turn is closed as answered
            reason = ends[turn_of[name]]
            assert (reason["kind"], reason["code"]) == ("error", "store_io"), reason
            assert reason["message"] == message.removeprefix("turn failed: ")
        else:  # nothing of it was durable: rolled back whole
            assert "turn" not in answer["error"]["data"], answer
    assert prompts[-1] == "small 3"


def cli(store: Path, backend: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store),
                           "--backend", backend, *args], capture_output=True, text=True, timeout=60)


def check_reads(store: Path, backend: str, sid: str, text: str) -> None:
    """`sessions list`, `show` and `export` of a store on a disk with no byte free."""
    listed = cli(store, backend, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sid in [item["id"] for item in orjson.loads(listed.stdout)]
    shown = cli(store, backend, "show", sid)
    assert shown.returncode == 0 and text in shown.stdout, shown.stderr
    exported = cli(store, backend, "export", sid, "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    lines = [orjson.loads(line) for line in exported.stdout.splitlines()]
    assert lines[0]["type"] == "session" and lines[-1]["type"] == "turn/end"


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_a_full_store_still_lists_shows_exports_and_deletes(tiny_fs: Path, tmp_path: Path, backend: str) -> None:
    store, work = tiny_fs / "store", tmp_path / "work"
    work.mkdir()
    big = text_of(disk_size(tiny_fs) // 24, "z")  # in SQLite, with its chunks and WAL: a third of the disk
    model = write_script(tmp_path / "model.json", {"text": big}, {"text": "kept"},
                         *({"text": f"answer {n}"} for n in range(8)))
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with AgentProcess(store, model=model, backend=backend) as agent:
            await agent.initialize()
            doomed, kept = await agent.new_session(work), await agent.new_session(work)
            seen.update(doomed=doomed, kept=kept)
            await agent.prompt(doomed, "the big one")
            await agent.prompt(kept, "the one to keep")
            fill_up(tiny_fs)
            # Full to the last byte: a prompt or a new session may still fit where the
            # store has room already; if not, it fails saying why, and leaves nothing.
            answer = await agent.request_raw("session/prompt", {"sessionId": kept, "prompt": prompt("full")})
            if "error" in answer:
                check_failure(answer)
            made = await agent.request_raw("session/new", {"cwd": str(work), "mcpServers": []})
            if "error" in made:
                assert any(cause in made["error"]["message"] for cause in REAL_CAUSES), made
            ids = {doomed, kept} | ({made["result"]["sessionId"]} if "result" in made else set())
            assert {p.stem for p in (store / "locks").iterdir()} == ids  # no lock file of a failed one
            check_reads(store, backend, doomed, big.split()[0])
            assert await agent.request("session/delete", {"sessionId": doomed}) == {}
            # The delete gave the space back: the next prompt works, nothing else freed.
            after = await agent.prompt(kept, "after the delete")
            assert after["stopReason"] == "end_turn"
            listed = await agent.request("session/list", {})
            assert doomed not in [s["sessionId"] for s in listed["sessions"]]
            fill_up(tiny_fs)
        assert agent.returncode == 0, agent.stderr.decode()[-3000:]
        assert b"Traceback" not in agent.stderr, agent.stderr.decode()[-3000:]

    anyio.run(main)
    check_reads(store, backend, seen["kept"], "the one to keep")  # the agent gone, still full
    events = stored_clean(store, seen["kept"], backend)
    prompts = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert prompts[0] == "the one to keep" and prompts[-1] == "after the delete"


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_a_new_store_on_a_full_disk_fails_cleanly_and_works_once_there_is_space(
    tiny_fs: Path, tmp_path: Path, backend: str
) -> None:
    store, work = tiny_fs / "store", tmp_path / "work"
    work.mkdir()
    filler = fill_up(tiny_fs)

    async def main() -> None:
        async with AgentProcess(store, model="echo", backend=backend) as agent:
            await agent.initialize()
            made = await agent.request_raw("session/new", {"cwd": str(work), "mcpServers": []})
            assert "error" in made, made
            assert any(cause in made["error"]["message"] for cause in REAL_CAUSES), made
            assert made["error"]["data"]["code"] in ("store_io", "store_unavailable"), made
            locks = store / "locks"
            assert not locks.exists() or list(locks.iterdir()) == []
            filler.unlink()
            sid = await agent.new_session(work)
            assert (await agent.prompt(sid, "works now"))["stopReason"] == "end_turn"
        assert agent.returncode == 0, agent.stderr.decode()[-3000:]
        assert b"Traceback" not in agent.stderr, agent.stderr.decode()[-3000:]

    anyio.run(main)


@pytest.mark.parametrize("tiny_fs", ["10m"], indirect=True)
def test_a_sqlite_reserve_the_disk_had_no_room_for_is_made_once_space_returns(
    tiny_fs: Path, tmp_path: Path
) -> None:
    store, work = tiny_fs / "store", tmp_path / "work"
    work.mkdir()
    reserve = store / "sessions.sqlite3-reserve"
    need = reserve_size(tiny_fs)
    filler = fill_up(tiny_fs)
    os.truncate(filler, filler.stat().st_size - need * 3 // 4)  # room for a store, not its reserve
    model = write_script(tmp_path / "model.json", {"text": text_of(need // 40, "d")},
                         *({"text": f"answer {n}"} for n in range(4)))

    async def main() -> None:
        async with AgentProcess(store, model=model, backend="sqlite") as agent:
            await agent.initialize()
            doomed, kept = await agent.new_session(work), await agent.new_session(work)
            await agent.prompt(doomed, "the one to delete")
            assert reserve.stat().st_size < need  # made on a disk without room for it
            filler.unlink()
            await agent.prompt(kept, "space is back")
            assert reserve.stat().st_size == need  # at the first commit with room
            fill_up(tiny_fs)
            # Full to the last byte: the reserve is what the delete works with.
            assert await agent.request("session/delete", {"sessionId": doomed}) == {}
            assert (await agent.prompt(kept, "after the delete"))["stopReason"] == "end_turn"
        assert agent.returncode == 0, agent.stderr.decode()[-3000:]
        assert b"Traceback" not in agent.stderr, agent.stderr.decode()[-3000:]

    anyio.run(main)


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("tiny_fs", ["2m"], indirect=True)
def test_the_search_index_on_a_full_disk_answers_from_what_it_has_and_the_watcher_waits(
    tiny_fs: Path, tmp_path: Path, backend: str
) -> None:
    """Issue 34, point 5: writing the index hits ENOSPC. `search` answers from the index
    it has (saying it could not bring it up to date), `index` says it cannot write the
    index (not "cannot read the store"), and `index --watch` says so once and goes on
    watching: once there is space it catches up. Nothing of the store is lost."""
    from tests.support.logs import Script
    from tests.support.search_store import DAY0, DAY1, add_session
    from tests.support.waiting import wait_until

    store = tiny_fs / "store"
    first = add_session(store, backend, str(tmp_path), Script().text_turn("alpha question", "alpha answer"), DAY0)
    assert cli(store, backend, "index").returncode == 0
    # A session the index has not read: writing its texts needs room the disk lacks.
    second = add_session(store, backend, str(tmp_path),
                         Script().text_turn("omega question", text_of(disk_size(tiny_fs) // 8, "w")), DAY1)
    filler = fill_up(tiny_fs)

    found = cli(store, backend, "search", "alpha", "--json")
    assert found.returncode == 0, found.stderr
    assert [hit["sessionId"] for hit in orjson.loads(found.stdout)] == [first]
    assert "could not be brought up to date" in found.stderr and "Traceback" not in found.stderr, found.stderr
    assert any(cause in found.stderr for cause in REAL_CAUSES), found.stderr
    stats = cli(store, backend, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    once = cli(store, backend, "index")
    assert once.returncode == 1 and "cannot write the search index" in once.stderr, once.stderr
    assert "cannot read the store" not in once.stderr and "Traceback" not in once.stderr, once.stderr

    watcher = subprocess.Popen([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store),
                                "--backend", backend, "index", "--watch", "--every", "0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watcher.stderr.readline, "")),  # type: ignore[union-attr]
                              daemon=True)
    reader.start()

    def said(text: str) -> bool:
        assert watcher.poll() is None, "".join(lines)
        return any(text in line for line in list(lines))

    try:
        wait_until(lambda: said("cannot write the search index"), "the watcher to say the disk is full", timeout=30)
        filler.unlink()
        # After its first pass a watcher names what each pass indexed (issue 36).
        wait_until(lambda: said("1 log(s) read") or said("indexed 1 session(s)"), "the watcher to catch up",
                   timeout=30)
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
        reader.join(timeout=30)
        watcher.stderr.close()  # type: ignore[union-attr]
    text = "".join(lines)
    assert watcher.returncode == 0, text
    assert text.count("cannot write the search index") == 1, text  # said once, not every pass
    assert "Traceback" not in text and "cannot read the store" not in text, text
    found = cli(store, backend, "search", "omega", "--json")
    assert found.returncode == 0 and [hit["sessionId"] for hit in orjson.loads(found.stdout)] == [second]
    assert found.stderr == "", found.stderr
