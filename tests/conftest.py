from __future__ import annotations

import compileall
from collections.abc import Iterator
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension
from syrupy.location import PyTestLocation

from session import Backend, SessionStore, open_backend
from tests.support.pg_server import PgServer

# The tiers (unit, integration, long) and the unit guard: tests/support/tiers.py.
pytest_plugins = ["tests.support.tiers", "pytester"]

BACKEND_KINDS = ("memory", "jsonl", "sqlite")
ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session: pytest.Session) -> None:
    """The repository's modules compiled once, before any test starts a process: these
    machines set PYTHONDONTWRITEBYTECODE, so every agent, wrapper and helper process
    the tests start would otherwise compile what it imports of ours again (a fresh
    clone has no bytecode). compileall writes it whatever that variable says, and only
    where it is missing or stale."""
    for package in ("acp_bridge", "session", "tests", "bench"):
        compileall.compile_dir(ROOT / package, quiet=1)


@pytest.fixture(params=BACKEND_KINDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def backend(backend_kind: str, store_dir: Path) -> Iterator[Backend]:
    b = open_backend(backend_kind, store_dir)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return SessionStore(backend)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the whole run (tests.support.pg_server)."""
    from tests.support.pg_server import server_or_skip

    server = server_or_skip()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def pg_database(pg_server: PgServer) -> str:
    return pg_server.new_database()


@pytest.fixture
def pg_dsn(pg_server: PgServer, pg_database: str) -> str:
    """The connection string of an empty database on that server (the run's test
    database, emptied: no store in it, nobody connected)."""
    return pg_server.emptied(pg_database)


# Snapshots live in the top-level snapshots/ folder (DESIGN.md section 1), one folder
# per test module, as JSON.
SNAPSHOT_DIR = Path(__file__).resolve().parent.parent / "snapshots"


class RootJSONSnapshot(JSONSnapshotExtension):
    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        return str(SNAPSHOT_DIR / test_location.basename)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A project folder for a session's cwd, with one small file in it."""
    w = tmp_path / "work"
    w.mkdir()
    (w / "notes.txt").write_text("one\ntwo\n")
    return w


@pytest.fixture
def snapshot_json(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(RootJSONSnapshot)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
