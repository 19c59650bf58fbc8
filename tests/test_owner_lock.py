"""One live owner per session, session-id validation and store permissions
(DESIGN.md section 3), with real processes and real files.

A second process that loads a live session gets a clear error naming the owner's pid;
`kill -9` of the owner frees the session (the kernel drops the flock). Session ids are
validated before any path is built, and every store folder is 0700, every file 0600.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from session import (
    Backend,
    InvalidSessionIdError,
    LoadedSession,
    SessionLockedError,
    SessionStore,
    check_invariants,
    open_backend,
)
from session.backends.jsonl import JsonlBackend
from session.backends.sqlite import DB_NAME
from tests.support.logs import Script, write
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
FILE_BACKENDS = ("jsonl", "sqlite")
ALL_BACKENDS = ("memory", "jsonl", "sqlite")

# The child owns the session until killed: it loads it, says so, and waits on stdin.
HOLDER = """
import sys
from session import SessionStore, open_backend
kind, root, sid, mode = sys.argv[1:5]
store = SessionStore(open_backend(kind, root))
loaded = store.load(sid)
if mode == "mid-turn":
    log = loaded.log
    turn = log.tracker.turn + 1
    log.append("turn/start", {"turn": turn, "trigger": {"kind": "prompt"}})
    log.append("user/message", {"turn": turn, "content": [{"type": "text", "text": "go"}]})
    log.append("step/start", {"turn": turn, "step": 1})
    log.append("assistant/chunk", {"turn": turn, "step": 1, "chunk": {"type": "text", "text": "x"}})
    log.sync()
extra = ""
if mode == "spawn":  # a tool's process that outlives the agent, fds not closed
    import subprocess
    tool = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        close_fds=False,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    extra = f" {tool.pid}"
print("ready", len(loaded.log.events), extra, flush=True)
sys.stdin.read()
"""

# The child tries to load a session the test owns; the error goes unhandled.
CONTENDER = """
import sys
from session import SessionStore, open_backend
kind, root, sid = sys.argv[1:4]
loaded = SessionStore(open_backend(kind, root)).load(sid)
print("loaded", len(loaded.log.events), flush=True)
loaded.log.close()
"""


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def new_session(store: SessionStore) -> tuple[str, int]:
    """A closed session with two complete turns: (id, number of events)."""
    log = store.create(cwd="/w")
    events = write(log, Script().text_turn().tool_turn(("a1",)))
    log.close()
    return log.id, len(events)


def stored_session(kind: str, root: Path) -> tuple[Backend, SessionStore, str, int]:
    """A backend of that kind at root, its store and a session of new_session's."""
    backend = open_backend(kind, root)
    store = SessionStore(backend)
    return (backend, store, *new_session(store))


@contextlib.contextmanager
def holding(
    kind: str, root: Path, sid: str, mode: str = "idle"
) -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    """A holder child that owns the session, stopped (if still running) on the way out."""
    proc, fields = start_holder(kind, root, sid, mode)
    try:
        yield proc, fields
    finally:
        stop(proc)


def start_holder(
    kind: str, root: Path, sid: str, mode: str = "idle"
) -> tuple[subprocess.Popen[bytes], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind, str(root), sid, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=child_env(),
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline() if ready else b""
    if not line.startswith(b"ready"):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"the holder did not start: {line!r} {err.decode(errors='replace')}")
    return proc, line.decode().split()[1:]


def refused_then_killed(store: SessionStore, sid: str, proc: subprocess.Popen[bytes]) -> None:
    """The live owner's session is refused to us; then the owner gets SIGKILL."""
    with pytest.raises(SessionLockedError):
        store.load(sid)
    proc.kill()
    proc.wait(timeout=10)


def load_when_released(store: SessionStore, sid: str) -> LoadedSession:
    """The session, loaded once the killed owner's flock is gone. The kernel drops it as
    it closes the dead process's files, which may be a moment after the process was
    reaped (seen: under load, `wait()` had returned and the lock was still held for a
    few milliseconds). Ten seconds: a lock held for good (a tool process that inherited
    it, a bug) still fails the test."""

    def attempt() -> LoadedSession | None:
        try:
            return store.load(sid)
        except SessionLockedError:
            return None

    return wait_until(attempt, "the killed owner's lock to be released")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


# --------------------------------------------------------------------------------------
# Two processes


@pytest.mark.parametrize("kind", FILE_BACKENDS)
@pytest.mark.integration
def test_second_process_is_refused_until_owner_is_killed(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    backend, store, sid, count = stored_session(kind, root)
    with holding(kind, root, sid) as (proc, _):
        with pytest.raises(SessionLockedError) as info:
            store.load(sid)
        err = info.value
        assert sid in str(err)
        assert str(proc.pid) in str(err)
        assert err.details["pid"] == proc.pid
        assert err.session_id == sid

        with pytest.raises(SessionLockedError) as deleting:
            store.delete(sid)
        assert deleting.value.details["pid"] == proc.pid

        # A fresh backend (another connection / open file) is refused the same way.
        other = open_backend(kind, root)
        try:
            with pytest.raises(SessionLockedError):
                SessionStore(other).load(sid)
        finally:
            other.close()

        proc.kill()  # SIGKILL: no cleanup runs in the owner
        assert proc.wait(timeout=10) == -signal.SIGKILL

    loaded = load_when_released(store, sid)  # the kernel dropped the lock with the process
    assert loaded.report.repaired is False
    assert len(loaded.log.events) == count
    loaded.log.close()
    store.delete(sid)  # and nobody owns it now
    backend.close()


@pytest.mark.parametrize("kind", FILE_BACKENDS)
@pytest.mark.integration
def test_owner_killed_mid_turn_leaves_a_repairable_log(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    backend, store, sid, count = stored_session(kind, root)
    with holding(kind, root, sid, mode="mid-turn") as (proc, _):
        refused_then_killed(store, sid, proc)
    loaded = load_when_released(store, sid)
    events = list(loaded.log.events)
    loaded.log.close()
    assert loaded.report.interrupted_turn == 3
    assert [e["type"] for e in events[count:]] == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/chunk",
        "step/end",
        "turn/end",
    ]
    assert events[-1]["data"]["reason"] == {"kind": "interrupted", "cause": "crash"}
    check_invariants(events, closed=True)
    backend.close()


@pytest.mark.parametrize("kind", FILE_BACKENDS)
@pytest.mark.integration
def test_owner_killed_while_its_tool_process_lives_on(tmp_path: Path, kind: str) -> None:
    # The owner started a long-running tool process, then got SIGKILL: the tool process
    # must not have inherited the lock, or the session would stay locked while it runs.
    root = tmp_path / "store"
    backend, store, sid, count = stored_session(kind, root)
    with holding(kind, root, sid, mode="spawn") as (proc, fields):
        tool_pid = int(fields[1])
        try:
            refused_then_killed(store, sid, proc)
            os.kill(tool_pid, 0)  # the tool process is still running
            loaded = load_when_released(store, sid)
            assert len(loaded.log.events) == count
            loaded.log.close()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(tool_pid, signal.SIGKILL)
    backend.close()


@pytest.mark.parametrize("kind", FILE_BACKENDS)
@pytest.mark.integration
def test_child_is_refused_while_this_process_owns_the_session(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    backend, store, sid, count = stored_session(kind, root)
    owned = store.load(sid)

    def contend() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", CONTENDER, kind, str(root), sid],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
            env=child_env(),
        )

    refused = contend()
    assert refused.returncode == 1, refused
    assert "loaded" not in refused.stdout
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("session.errors.SessionLockedError: "), refused.stderr
    assert sid in last
    assert f"process {os.getpid()}" in last

    owned.log.close()
    allowed = contend()
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.split() == ["loaded", str(count)]
    backend.close()


# --------------------------------------------------------------------------------------
# One process


@pytest.mark.parametrize("kind", ALL_BACKENDS)
def test_two_loads_in_one_process_conflict(tmp_path: Path, kind: str) -> None:
    backend, store, sid, count = stored_session(kind, tmp_path / "store")
    first = store.load(sid)
    with pytest.raises(SessionLockedError) as info:
        store.load(sid)
    assert sid in str(info.value)
    assert info.value.session_id == sid
    if kind != "memory":
        assert info.value.details["pid"] == os.getpid()
    with pytest.raises(SessionLockedError):
        store.delete(sid)
    # The refused load and delete left the owner's handle working.
    first.log.append("turn/start", {"turn": 3, "trigger": {"kind": "prompt"}})
    first.log.close()

    second = store.load(sid)
    assert second.report.interrupted_turn == 3
    assert len(second.log.events) == count + 2
    with pytest.raises(SessionLockedError):
        store.load(sid)
    second.log.close()
    third = store.load(sid)
    second.log.close()  # idempotent: it does not free the lock the third load took
    with pytest.raises(SessionLockedError):
        store.load(sid)
    third.log.close()
    backend.close()


@pytest.mark.parametrize("kind", ALL_BACKENDS)
def test_a_created_session_is_owned_until_closed(tmp_path: Path, kind: str) -> None:
    backend = open_backend(kind, tmp_path / "store")
    store = SessionStore(backend)
    log = store.create(cwd="/w")
    with pytest.raises(SessionLockedError):
        store.load(log.id)
    log.close()
    store.load(log.id).log.close()
    backend.close()


@pytest.mark.parametrize("kind", FILE_BACKENDS)
def test_two_backends_in_one_process_conflict(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    one, two = open_backend(kind, root), open_backend(kind, root)
    sid, _ = new_session(SessionStore(one))
    held = SessionStore(one).load(sid)
    with pytest.raises(SessionLockedError):
        SessionStore(two).load(sid)
    held.log.close()
    SessionStore(two).load(sid).log.close()
    one.close()
    two.close()


# --------------------------------------------------------------------------------------
# Session ids

BAD_IDS: list[Any] = [
    "../../etc/passwd",
    "../../../../../../tmp/escape",
    "a/b",
    "x\x00y",
    "a" * 10_000,
    str(uuid.uuid4()).upper(),
    None,
    "",
    123,
    str(uuid.uuid4()) + "\n",
    " " + str(uuid.uuid4()),
    str(uuid.uuid4()) + "/../" + str(uuid.uuid4()),
    "/" + str(uuid.uuid4()),
    str(uuid.uuid4()).replace("-", ""),
]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("kind", ALL_BACKENDS)
def test_invalid_session_ids_are_refused_without_touching_files(tmp_path: Path, kind: str) -> None:
    backend, store, sid, _ = stored_session(kind, tmp_path / "store")
    escape = Path("/tmp/escape.jsonl")
    before, around, escaped = tree(tmp_path), sorted(os.listdir(tmp_path.parent)), escape.exists()
    for bad in BAD_IDS:
        shown = repr(bad)[:40]
        # create(session_id=None) means "issue a fresh id", so None is not tried there.
        for attempt in ("load", "delete") if bad is None else ("load", "delete", "create"):
            with pytest.raises(InvalidSessionIdError) as info:
                if attempt == "load":
                    store.load(cast(str, bad))
                elif attempt == "delete":
                    store.delete(cast(str, bad))
                else:
                    store.create(cwd="/w", session_id=cast(str, bad))
            message = str(info.value)
            assert "invalid session id" in message, f"{attempt} {shown}"
            assert len(message) < 300, f"{shown}: the message repeats a huge id"
            assert "\x00" not in message, shown
    assert tree(tmp_path) == before
    assert sorted(os.listdir(tmp_path.parent)) == around
    assert escape.exists() == escaped
    # The valid session is untouched.
    loaded = store.load(sid)
    assert loaded.report.repaired is False
    loaded.log.close()
    backend.close()


def test_jsonl_paths_are_never_built_from_invalid_ids(tmp_path: Path) -> None:
    backend = JsonlBackend(tmp_path / "store")
    for bad in BAD_IDS:
        with pytest.raises(InvalidSessionIdError):
            backend.path_of(cast(str, bad))
    sid = str(uuid.uuid4())
    assert backend.path_of(sid).parent == backend.sessions_dir


# --------------------------------------------------------------------------------------
# Permissions


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Permission bits of the store folder and of everything in it."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def assert_private(root: Path) -> None:
    for name, mode in modes(root).items():
        path = root / name
        want = 0o700 if path.is_dir() else 0o600
        assert mode == want, f"{name} is {mode:o}, not {want:o}"


@pytest.mark.usefixtures("umask022")
def test_jsonl_store_is_private(tmp_path: Path) -> None:
    root = tmp_path / "store"
    backend = JsonlBackend(root)
    store = SessionStore(backend)
    sid, _ = new_session(store)
    with backend.path_of(sid).open("ab") as f:  # a torn tail, so repair keeps one aside
        f.write(b'{"torn')
    loaded = store.load(sid)
    assert loaded.report.kept_aside is not None
    loaded.log.close()

    found = modes(root)
    for name in ("sessions", "locks", "torn", f"sessions/{sid}.jsonl", f"locks/{sid}.lock"):
        assert name in found, name
    assert str(Path(loaded.report.kept_aside).relative_to(root)) in found
    assert found["."] == 0o700
    assert_private(root)


@pytest.mark.usefixtures("umask022")
def test_sqlite_store_is_private(tmp_path: Path) -> None:
    root = tmp_path / "store"
    backend = open_backend("sqlite", root)
    store = SessionStore(backend)
    sid, _ = new_session(store)
    loaded = store.load(sid)  # the backend's connection is open: -wal and -shm exist
    found = modes(root)
    for name in ("locks", DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"locks/{sid}.lock"):
        assert name in found, name
    assert_private(root)
    loaded.log.close()
    backend.close()
    assert_private(root)


@pytest.mark.usefixtures("umask022")
@pytest.mark.parametrize("kind", FILE_BACKENDS)
def test_existing_store_folders_keep_their_mode(tmp_path: Path, kind: str) -> None:
    # Their owner chose the mode (issue 13): only what the agent creates is made private.
    root = tmp_path / "store"
    (root / "sessions").mkdir(parents=True, mode=0o755)
    (root / "locks").mkdir(mode=0o755)
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    backend = open_backend(kind, root)
    sid, _ = new_session(SessionStore(backend))
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "locks").stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "locks" / f"{sid}.lock").stat().st_mode) == 0o600
    if kind == "jsonl":
        assert stat.S_IMODE((root / "sessions").stat().st_mode) == 0o755
    backend.close()
