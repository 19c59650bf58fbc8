"""A damaged SQLite database is handled as a damaged JSONL log is (issue 13): a load
refuses with SessionCorruptError (-32003 `session_corrupt` through the agent), `sessions
list` marks the damaged session and goes on, and a store that cannot be written (a
read-only mount, a folder without write permission) can still be listed and shown.

The damage is real: pages of `sessions.sqlite3` overwritten with garbage in the middle
(where the big session's rows are), or the file cut in half (the whole store)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from session import SessionCorruptError, SessionStore, open_backend, open_reader
from session.backends.sqlite import DB_NAME
from tests.support.acp_client import AgentError, AgentProcess
from tests.support.logs import Script, write

PAGE = 4096
GARBAGE = b"\xde\xad\xbe\xef" * (PAGE // 4)  # overflow-page links past the end: SQLite sees it


class Damaged:
    """A store of three closed sessions: `good` (small), `victim` (its rows fill the
    middle of the file), `later` (small)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / DB_NAME
        backend = open_backend("sqlite", root)
        store = SessionStore(backend)
        self.good = self._session(store, Script().text_turn("good one"))
        victim = Script().start_turn("the big one").start_step()
        for n in range(60):
            victim.chunk(f"{n} " + "x" * 20_000)
        self.victim = self._session(store, victim.message("big").end_step().end_turn())
        self.later = self._session(store, Script().text_turn("later one"))
        backend.close()

    @staticmethod
    def _session(store: SessionStore, script: Script) -> str:
        log = store.create(cwd="/w")
        write(log, script)
        log.close()
        return log.id

    def overwrite_middle(self) -> None:
        """Three pages half-way through the big session's rows: overflow pages (only its
        rows are big enough to have any), found through SQLite's `dbstat` table."""
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            try:
                pages = [n for (n,) in db.execute(
                    "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'overflow' ORDER BY pageno")]
            except sqlite3.OperationalError as exc:
                pytest.skip(f"this SQLite has no dbstat table to find the pages by ({exc})")
        assert len(pages) > 100
        with open(self.path, "r+b") as f:
            for page in pages[len(pages) // 2 : len(pages) // 2 + 3]:
                f.seek((page - 1) * PAGE)
                f.write(GARBAGE)

    def truncate(self) -> None:
        os.truncate(self.path, self.path.stat().st_size // 2)


@pytest.fixture
def damaged(tmp_path: Path) -> Damaged:
    return Damaged(tmp_path / "store")


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    return subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(root),
                           "--backend", "sqlite", *args], capture_output=True, text=True, timeout=30, env=env)


# --- the store: load and list -----------------------------------------------------------------


def test_a_damaged_session_is_corrupt_and_the_others_load(damaged: Damaged) -> None:
    damaged.overwrite_middle()
    backend = open_backend("sqlite", damaged.root)
    try:
        store = SessionStore(backend)
        with pytest.raises(SessionCorruptError) as refused:
            store.load(damaged.victim)
        assert refused.value.data()["code"] == "session_corrupt"
        assert refused.value.data()["sessionId"] == damaged.victim
        for sid in (damaged.good, damaged.later):
            loaded = store.load(sid)
            assert loaded.log.events[-1]["type"] == "turn/end"
            loaded.log.close()
        assert {s["id"] for s in store.list()} == {damaged.good, damaged.victim, damaged.later}
    finally:
        backend.close()


def test_a_truncated_database_is_a_damaged_store(damaged: Damaged) -> None:
    damaged.truncate()
    with pytest.raises(SessionCorruptError, match=r"the store .* is damaged: SQLite cannot read"):
        open_backend("sqlite", damaged.root)
    reader = open_reader("sqlite", damaged.root)
    try:
        with pytest.raises(SessionCorruptError, match="is damaged"):
            reader.ids()
    finally:
        reader.close()


# --- through the agent ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.integration
async def test_session_load_of_a_damaged_database_is_session_corrupt(damaged: Damaged, tmp_path: Path) -> None:
    damaged.overwrite_middle()
    work = tmp_path / "work"
    work.mkdir()
    async with AgentProcess(damaged.root, backend="sqlite") as agent:
        await agent.initialize()
        load = {"cwd": str(work), "mcpServers": []}
        with pytest.raises(AgentError) as refused:
            await agent.request("session/load", {"sessionId": damaged.victim, **load})
        assert refused.value.code == -32003
        assert refused.value.data == {"code": "session_corrupt", "sessionId": damaged.victim,
                                      "reason": "database disk image is malformed"}
        assert f"session {damaged.victim} is damaged" in str(refused.value.message)
        await agent.request("session/load", {"sessionId": damaged.good, **load})  # the others load
        listed = await agent.request("session/list", {})
        assert len(listed["sessions"]) == 3
    assert agent.returncode == 0


@pytest.mark.anyio
@pytest.mark.integration
async def test_a_damaged_store_is_session_corrupt_through_the_agent(damaged: Damaged, tmp_path: Path) -> None:
    damaged.truncate()
    async with AgentProcess(damaged.root, backend="sqlite") as agent:
        await agent.initialize()
        for method, params in (("session/load", {"sessionId": damaged.good, "cwd": str(tmp_path),
                                                 "mcpServers": []}),
                               ("session/list", {})):
            with pytest.raises(AgentError) as refused:
                await agent.request(method, params)
            assert refused.value.code == -32003, method
            assert refused.value.data == {"code": "session_corrupt", "reason": "database disk image is malformed"}
    assert agent.returncode == 0


# --- through the CLI --------------------------------------------------------------------------


@pytest.mark.integration
def test_sessions_list_marks_the_damaged_session_and_goes_on(damaged: Damaged) -> None:
    damaged.overwrite_middle()
    listed = cli(damaged.root, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in orjson.loads(listed.stdout)}
    assert rows[damaged.victim]["status"] == "damaged"
    assert f"session {damaged.victim} is damaged" in rows[damaged.victim]["error"]
    assert rows[damaged.victim]["cwd"] == "/w"  # what the sessions row still says
    assert rows[damaged.good]["status"] == rows[damaged.later]["status"] == "completed"
    table = cli(damaged.root, "list")
    assert table.returncode == 0
    line = next(r for r in table.stdout.splitlines() if r.startswith(damaged.victim))
    assert line.split()[3:5] == ["?", "damaged"]
    shown = cli(damaged.root, "show", damaged.victim)
    assert shown.returncode == 1 and shown.stdout == ""
    assert f"session {damaged.victim} is damaged: SQLite cannot read" in shown.stderr
    assert cli(damaged.root, "show", damaged.good).returncode == 0


@pytest.mark.integration
def test_sessions_list_of_a_damaged_store_says_so(damaged: Damaged) -> None:
    damaged.truncate()
    listed = cli(damaged.root, "list")
    assert listed.returncode == 1 and listed.stdout == ""
    assert listed.stderr.startswith("acp-bridge sessions: the store ")
    assert "is damaged: SQLite cannot read" in listed.stderr and "Traceback" not in listed.stderr


# --- a store nobody may write -----------------------------------------------------------------


@contextlib.contextmanager
def read_only_copy(source: Path, where: Path) -> Iterator[Path]:
    """`source` copied where it cannot be written: a tmpfs remounted read-only (as
    root, who ignores permission bits), or folders 0500 and files 0400 (otherwise)."""
    where.mkdir()
    if os.geteuid() != 0:
        store = where / "store"
        shutil.copytree(source, store)
        paths = sorted(store.rglob("*"), reverse=True)
        for path in paths:
            path.chmod(0o500 if path.is_dir() else 0o400)
        store.chmod(0o500)
        try:
            yield store
        finally:
            for path in [store, *paths]:
                path.chmod(0o700)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        shutil.copytree(source, where / "store")
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where / "store"
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.integration
def test_a_read_only_store_can_be_listed_and_shown(damaged: Damaged, tmp_path: Path) -> None:
    with read_only_copy(damaged.root, tmp_path / "ro") as store:
        with pytest.raises(OSError):
            (store / "probe").write_bytes(b"")  # it really cannot be written
        before = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()}
        listed = cli(store, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {row["id"]: row for row in orjson.loads(listed.stdout)}
        assert set(rows) == {damaged.good, damaged.victim, damaged.later}
        assert {row["status"] for row in rows.values()} == {"completed"}
        assert rows[damaged.good]["title"] == "good one"
        shown = cli(store, "show", damaged.good)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"Session {damaged.good}\n") and "good one" in shown.stdout
        assert {p.name: p.read_bytes() for p in store.iterdir() if p.is_file()} == before
