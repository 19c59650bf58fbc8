"""The PostgreSQL backend against a real server (tests/support/pg_server.py): what the
shared contract suite (tests/test_contract.py) does not say. The schema is created on
first use and versioned; the owner lock is seen across connections and names host and
pid; a dropped connection fails the write in progress with StoreIOError, rolls the
store back to the last durable point, and the next write reconnects; loads stream in
bounded blocks; passwords never reach a message."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import tracemalloc
import uuid
from typing import Any

import pytest

from tests.support.pg_server import required

if not required():  # without the driver: skipped, loudly (under CI: the import fails)
    pytest.importorskip("psycopg", reason="!!! psycopg is not installed: the PostgreSQL backend is NOT tested")
import psycopg

from session import (
    SessionLockedError,
    SessionStore,
    SessionVersionError,
    StoreIOError,
    open_backend,
    open_reader,
)
from session.backends.base import read_stored
from session.backends.postgres import PostgresBackend
from session.backends.postgres_conninfo import problem, redact, scrub, shown
from session.backends.postgres_stream import PostgresStream
from tests.support.logs import Script, write
from tests.support.pg_server import PASSWORD, PgServer


def sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def terminate_agents(dsn: str, purpose: str = "agent") -> int:
    """pg_terminate_backend every acp-bridge connection of `purpose`: what an
    administrator, a failover or a network cut does to the agent's connection."""
    rows = sql(dsn, "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE %s AND datname = current_database()",
               f"acp-bridge {purpose} %")
    pids = [row[0] for row in rows]
    for _ in range(500):  # until those server processes are gone (their sockets closed)
        if not sql(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", pids):
            break
        time.sleep(0.01)
    return len(pids)


def chunk(log: Any, turn: int, text: str) -> None:
    log.append("assistant/chunk", {"turn": turn, "step": 1, "chunk": {"type": "text", "text": text}})


# --- the schema ------------------------------------------------------------------------


def test_schema_is_created_on_first_use_and_versioned(pg_dsn: str) -> None:
    reader = open_reader("postgres", pg_dsn)
    assert reader.ids() == []  # a database without a store is an empty store...
    reader.close()
    assert sql(pg_dsn, "SELECT to_regnamespace('acp_bridge')") == [(None,)]  # ...left untouched
    backend = open_backend("postgres", pg_dsn)
    backend.close()
    assert sql(pg_dsn, "SELECT version FROM acp_bridge.schema_version") == [(3,)]
    open_backend("postgres", pg_dsn).close()  # opened again: nothing created twice
    sql(pg_dsn, "UPDATE acp_bridge.schema_version SET version = 4")
    with pytest.raises(SessionVersionError, match="schema version 4; this build reads only version 3"):
        open_backend("postgres", pg_dsn)
    with pytest.raises(SessionVersionError):
        open_reader("postgres", pg_dsn).ids()


# --- one live owner, across connections ------------------------------------------------


@pytest.mark.integration
def test_second_agent_is_refused_naming_host_and_pid(pg_dsn: str) -> None:
    """The holder is another process (a child: its own connection, its own pid)."""
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    write(log, Script().text_turn())
    log.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_dsn, log.id], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(SessionLockedError) as err:
            store.load(log.id)
        assert err.value.data()["pid"] == holder.pid
        assert err.value.data()["host"] == socket.gethostname()
        assert f"process {holder.pid} on {socket.gethostname()}" in err.value.message
        reader = store.backend.reader()
        assert reader.owner(log.id) == ("live", holder.pid)
        reader.close()
        holder.kill()  # SIGKILL: the server drops the lock with the connection
        holder.wait()
        for _ in range(100):
            try:
                loaded = store.load(log.id)
                break
            except SessionLockedError:
                time.sleep(0.05)
        else:
            raise AssertionError("the killed holder's lock was never released")
        loaded.log.close()
    finally:
        holder.kill()
        holder.communicate()
        store.close()


HOLDER = """
import sys
from session import SessionStore, open_backend
loaded = SessionStore(open_backend("postgres", sys.argv[1])).load(sys.argv[2])
print("ready", flush=True)
sys.stdin.read()
"""


def test_the_same_process_cannot_open_a_session_twice(pg_dsn: str) -> None:
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    with pytest.raises(SessionLockedError, match="this process"):
        store.load(log.id)
    log.close()
    store.load(log.id).log.close()
    store.close()


# --- faults: a dropped connection ------------------------------------------------------


def test_connection_dropped_mid_stream_is_taken_up_again(pg_dsn: str) -> None:
    """Dropped between two streamed writes (the agent waits on the model): the next
    write finds the connection gone, reconnects, takes the lock back, checks the store
    holds all it wrote, and goes on: nothing fails, nothing is lost."""
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    written = write(log, Script().text_turn("one").start_turn("two").start_step().chunk("a"))
    log.flush()  # committed (asynchronously): a reader sees it
    assert sql(pg_dsn, "SELECT count(*) FROM acp_bridge.events")[0][0] == len(written)
    assert terminate_agents(pg_dsn) == 1
    chunk(log, 2, "b")
    log.flush()
    reader = store.backend.reader()
    assert reader.owner(log.id).state == "live"  # the lock was taken back
    reader.close()
    log.close()
    store.close()
    other = SessionStore(open_backend("postgres", pg_dsn))
    loaded = other.load(log.id)
    assert [e["seq"] for e in loaded.log.events] == list(range(len(written) + 3))  # + b, closers
    assert loaded.report.interrupted_turn == 2
    loaded.log.close()
    other.close()


def test_lost_asynchronous_commits_fail_the_write_and_roll_back(pg_dsn: str) -> None:
    """What a server crash does to streamed events (asynchronous commits), done by hand:
    after the reconnection the store holds less than the session wrote, so the write
    fails (StoreIOError, durableSeq), the store is cut back to the durable point, and
    the log goes on from there without a gap."""
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one"))
    durable = log.durable_seq
    write(log, Script(first_turn=2).start_turn("two").start_step().chunk("a"))
    log.flush()
    sql(pg_dsn, "DELETE FROM acp_bridge.events WHERE seq = %s", durable + 3)  # "lost"
    terminate_agents(pg_dsn)
    chunk(log, 2, "b")
    with pytest.raises(StoreIOError) as err:
        log.flush()
    assert err.value.data()["durableSeq"] == durable and "lost its latest" in err.value.message
    assert sql(pg_dsn, "SELECT coalesce(max(seq) + 1, 0) FROM acp_bridge.events")[0][0] == durable
    again = write(log, Script(first_turn=2).text_turn("two again"))
    log.close()
    store.close()
    other = SessionStore(open_backend("postgres", pg_dsn))
    loaded = other.load(log.id)
    assert [e["seq"] for e in loaded.log.events] == list(range(durable + len(again)))
    assert not loaded.report.repaired
    loaded.log.close()
    other.close()


def test_connection_dropped_while_idle_costs_no_failed_write(pg_dsn: str) -> None:
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one"))
    terminate_agents(pg_dsn)
    write(log, Script(first_turn=2).text_turn("two"))  # reconnected before the write
    log.close()
    store.close()


def test_dropped_connection_mid_commit(pg_dsn: str, pg_server: PgServer) -> None:
    """The connection dies while a durable commit waits on a row lock another
    transaction holds: the write fails, nothing of the turn is visible as completed,
    and the next write (reconnected) goes on from the durable point."""
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one"))
    durable = log.durable_seq
    blocker = psycopg.connect(pg_dsn)  # holds the row our next insert needs
    blocker.execute("INSERT INTO acp_bridge.events VALUES (%s, %s, 'x', 0, '{}')", (log.id, durable + 4))
    import threading

    def kill_soon() -> None:
        for _ in range(200):
            waiting = sql(pg_dsn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                  "AND application_name LIKE %s", "acp-bridge agent %")[0][0]
            if waiting:
                terminate_agents(pg_dsn)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    with pytest.raises(StoreIOError) as err:
        write(log, Script(first_turn=2).text_turn("two"))  # one durable batch, blocked
    killer.join()
    blocker.rollback()
    blocker.close()
    assert err.value.data()["durableSeq"] == durable
    turn_ends = sql(pg_dsn, "SELECT count(*) FROM acp_bridge.events WHERE type = 'turn/end'")
    assert turn_ends == [(1,)]  # the second turn is not visible as completed
    write(log, Script(first_turn=2).text_turn("two"))
    log.close()
    store.close()


@pytest.mark.integration
def test_server_restart_between_turns_and_mid_turn(pg_dsn: str, pg_server: PgServer) -> None:
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one"))
    pg_server.restart("fast")
    write(log, Script(first_turn=2).text_turn("two"))  # the dropped idle connection: reconnected
    durable = log.durable_seq
    write(log, Script(first_turn=3).start_turn("three").start_step().chunk("a"))
    log.flush()
    pg_server.restart("immediate")  # a crash of the server: recovery from the WAL
    chunk(log, 3, "b")
    try:
        log.flush()  # the streamed events survived the crash (WAL written in time)...
    except StoreIOError as exc:  # ...or not, and the log is back at its durable point
        assert exc.data()["durableSeq"] == durable == log.tracker.next_seq
        write(log, Script(first_turn=3).start_turn("three").start_step().chunk("a"))
    write(log, [("assistant/message", {"turn": 3, "step": 1, "content": []}),
                ("step/end", {"turn": 3, "step": 1}),
                ("turn/end", {"turn": 3, "reason": {"kind": "completed"}})])
    log.close()
    store.close()
    other = SessionStore(open_backend("postgres", pg_dsn))
    loaded = other.load(log.id)
    assert not loaded.report.repaired and loaded.log.tracker.turn == 3
    loaded.log.close()
    other.close()


def test_a_lock_taken_by_another_agent_while_disconnected_is_lost(pg_dsn: str) -> None:
    first = PostgresBackend(pg_dsn)
    log = SessionStore(first).create(cwd="/w")
    write(log, Script().text_turn("one"))
    terminate_agents(pg_dsn)  # the lock goes with the connection...
    other = SessionStore(open_backend("postgres", pg_dsn))
    taken = other.load(log.id)  # ...and another agent takes the session
    write(taken.log, Script(first_turn=2).text_turn("theirs"))
    taken.log.close()
    with pytest.raises(StoreIOError, match="load the session again"):
        write(log, Script(first_turn=2).text_turn("mine"))
    log.close()
    loaded = other.load(log.id)  # theirs is kept, nothing of ours was written
    assert loaded.log.tracker.turn == 2
    loaded.log.close()
    other.close()
    first.close()


# --- scale -----------------------------------------------------------------------------


def test_load_streams_in_bounded_blocks(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(open_backend("postgres", pg_dsn))
    log = store.create(cwd="/w")
    turns = 120
    for n in range(turns):
        write(log, Script(first_turn=n + 1).start_turn(f"t{n}").start_step().message("r", calls=("c",))
              .call("c").result("c", "x" * 200_000).end_step().end_turn())
    log.close()
    stream = store.backend.read_stream(log.id)
    tracemalloc.start()
    try:
        count = 0
        for block in stream.blocks():
            count += len(block)
            assert sum(len(str(e)) for e in block) < PostgresStream.BLOCK_BYTES + PostgresStream.FETCH_BYTES
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        stream.close()
    assert count == turns * 8
    assert peak < 8_000_000, f"peak {peak / 1e6:.1f} MB reading a {turns * 0.2:.0f} MB log"
    store.close()


def test_list_pages_through_thousands_of_sessions(pg_dsn: str) -> None:
    from acp_bridge.host.listing import LIST_PAGE, list_page

    store = SessionStore(open_backend("postgres", pg_dsn))
    store.create(cwd="/w").close()  # the schema
    many = 5000
    sql(pg_dsn, "INSERT INTO acp_bridge.sessions SELECT gen_random_uuid()::text, '{}', '/w', "
                "'t' || n, n, n FROM generate_series(1, %s) n", many)
    sessions = store.list(cwd="/w")
    assert len(sessions) == many + 1
    seen, cursor = [], None
    while True:
        page = list_page(sessions, cursor)
        seen += [s["sessionId"] for s in page["sessions"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == many + 1 and len(page["sessions"]) <= LIST_PAGE
    store.close()


# --- passwords -------------------------------------------------------------------------


@pytest.mark.parametrize("given", [
    "postgresql://alice:{pw}@db.example:5432/acp",
    "postgres://alice:{pw}@h1,h2/acp?sslmode=require",
    "postgresql://alice@db/acp?password={pw}&sslmode=require",
    "host=db user=alice password={pw} dbname=acp",
    "host=db user=alice password = '{pw} with \\' quote' dbname=acp",
])
def test_redact_takes_every_password_out(given: str) -> None:
    dsn = given.format(pw=PASSWORD)
    for text in (redact(dsn), shown(dsn), scrub(f"failed for {dsn}", dsn)):
        assert PASSWORD not in text and "***" in text
    assert "alice" in redact(dsn) and "acp" in redact(dsn)


def test_a_folder_given_as_the_store_is_refused() -> None:
    assert problem("/home/me/store") is not None and "not a PostgreSQL connection string" in str(problem("/x"))
    assert problem("postgresql:///acp") is None and problem("dbname=acp") is None and problem("") is None


def test_no_password_in_errors(pg_server: PgServer, pg_database: str) -> None:
    dbname = pg_database.split("?")[0].rsplit("/", 1)[1]
    wrong = pg_server.tcp_dsn(dbname, password=PASSWORD + "-wrong")
    with pytest.raises(StoreIOError) as err:
        open_backend("postgres", wrong)
    assert "password authentication failed" in err.value.message
    assert PASSWORD not in err.value.message and "***" in err.value.message
    backend = open_backend("postgres", pg_server.tcp_dsn(dbname))  # the right password works
    assert PASSWORD not in backend.where  # type: ignore[attr-defined]
    backend.close()


@pytest.mark.integration
def test_psycopg_is_imported_only_for_postgres(tmp_path: Any, pg_dsn: str) -> None:
    """The other backends, the agent's start-up and the command line never load the
    driver; the postgres backend does (so this check can fail)."""
    code = ("import sys\nfrom session import SessionStore, open_backend\n"
            "import acp_bridge.agent.serve, acp_bridge.cli.main, acp_bridge.cli.sessions.main\n"
            "kind, where = sys.argv[1:3]\n"
            "store = SessionStore(open_backend(kind, where))\n"
            "log = store.create(cwd='/w'); log.close(); store.list(); store.close()\n"
            "print('psycopg' in sys.modules)")
    for kind, where, imported in (("jsonl", str(tmp_path / "j"), "False"),
                                  ("sqlite", str(tmp_path / "s"), "False"),
                                  ("postgres", pg_dsn, "True")):
        out = subprocess.run([sys.executable, "-c", code, kind, where], capture_output=True,
                             text=True, check=True, env=dict(os.environ))
        assert out.stdout.strip() == imported, (kind, out.stderr)


@pytest.mark.integration
def test_sessions_cli_reads_postgres_without_the_password(pg_server: PgServer, pg_database: str) -> None:
    dbname = pg_database.split("?")[0].rsplit("/", 1)[1]
    pg_server.emptied(pg_database)
    store = SessionStore(open_backend("postgres", pg_database))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("hello from postgres"))
    log.close()
    store.close()
    dsn = pg_server.tcp_dsn(dbname)
    for args in (["list"], ["show", log.id], ["export", log.id, "--format", "jsonl"]):
        out = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--backend", "postgres",
                              "--store", dsn, *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert PASSWORD not in out.stdout + out.stderr
        assert "hello from postgres" in out.stdout
    missing = str(uuid.uuid4())
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--backend", "postgres",
                          "--store", dsn, "show", missing], capture_output=True, text=True)
    assert out.returncode != 0 and "not found" in out.stderr
    assert PASSWORD not in out.stderr and "***" in out.stderr
    reader = open_reader("postgres", dsn)
    assert read_stored(reader.stream(log.id)).events[-1]["type"] == "turn/end"
    reader.close()
    # No --store: libpq's own variables say where (and $ACP_BRIDGE_POSTGRES is unset).
    env = {k: v for k, v in os.environ.items() if k != "ACP_BRIDGE_POSTGRES"}
    env |= {"PGHOST": str(pg_server.root), "PGPORT": str(pg_server.port), "PGUSER": "postgres",
            "PGDATABASE": dbname, "ACP_BRIDGE_BACKEND": "postgres"}
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "list"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "hello from postgres" in out.stdout, out.stderr


# --- a full disk on the database side ----------------------------------------------------


@pytest.mark.integration
def test_a_full_disk_on_the_server_fails_the_write_and_nothing_half_done(
        pg_dsn: str, pg_server: PgServer) -> None:
    """The events table on a tablespace of a 1 MB tmpfs: a turn too big for it fails
    with StoreIOError naming the cause, the store is back at the durable point, and once
    the administrator gives the table room, the agent goes on."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    tiny = pg_server.root / "tiny"
    tiny.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tiny)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    store = None
    try:
        if pg_server.user is not None:
            import pwd

            os.chown(tiny, pwd.getpwnam(pg_server.user).pw_uid, -1)
        sql(pg_dsn, f"CREATE TABLESPACE tiny LOCATION '{tiny}'")
        store = SessionStore(open_backend("postgres", pg_dsn))
        sql(pg_dsn, "ALTER TABLE acp_bridge.events SET TABLESPACE tiny")
        log = store.create(cwd="/w")
        write(log, Script().text_turn("small"))
        durable = log.durable_seq
        big = Script(first_turn=2).start_turn("big").start_step()
        for _ in range(60):  # incompressible: PostgreSQL compresses large values
            big.chunk(base64.b64encode(os.urandom(40_000)).decode())
        with pytest.raises(StoreIOError) as err:
            write(log, big.message("done").end_step().end_turn())
        assert "No space left on device" in err.value.message, err.value.message
        assert err.value.data()["durableSeq"] == durable == log.tracker.next_seq
        sql(pg_dsn, "ALTER TABLE acp_bridge.events SET TABLESPACE pg_default")  # room again
        again = write(log, Script(first_turn=2).text_turn("small again"))
        log.close()
        loaded = store.load(log.id)
        assert [e["seq"] for e in loaded.log.events] == list(range(durable + len(again)))
        assert not loaded.report.repaired
        loaded.log.close()
    finally:
        if store is not None:
            store.close()
        sql(pg_dsn, "DROP SCHEMA IF EXISTS acp_bridge CASCADE")
        sql(pg_dsn, "DROP TABLESPACE IF EXISTS tiny")
        subprocess.run(["umount", "-l", str(tiny)], capture_output=True, check=False)


def test_chat_hands_the_connection_string_over_outside_the_command_line() -> None:
    """`acp-bridge chat --backend postgres --store DSN`: the agent it starts gets the
    string in $ACP_BRIDGE_POSTGRES, not in its argv (the process list shows argv)."""
    import argparse

    from acp_bridge.cli.chat.command_line import agent_command, agent_env, options

    parser = argparse.ArgumentParser()
    options(parser)
    dsn = f"postgresql://alice:{PASSWORD}@db/acp"
    args = parser.parse_args(["--backend", "postgres", "--store", dsn])
    command, env = agent_command(args), agent_env(args)
    assert not any(PASSWORD in part for part in command) and "--backend" in command
    assert env is not None and env["ACP_BRIDGE_POSTGRES"] == dsn
    folder = parser.parse_args(["--backend", "sqlite", "--store", "/tmp/s"])
    assert "/tmp/s" in agent_command(folder) and agent_env(folder) is None


def test_a_failed_load_gives_its_reading_connection_back_clean(pg_dsn: str) -> None:
    """A load that stops inside its row stream (damage in the committed region) leaves
    no cursor behind on the reading connection the next load reuses."""
    import gc

    from session import SessionCorruptError
    from tests.support import tamper

    store = SessionStore(open_backend("postgres", pg_dsn))
    damaged, fine = store.create(cwd="/w"), store.create(cwd="/w")
    for log in (damaged, fine):
        write(log, Script().text_turn().text_turn())
        log.close()
    tamper.delete_event(store.backend, damaged.id, 3)
    for _ in range(2):
        with pytest.raises(SessionCorruptError):
            store.load(damaged.id)
        gc.collect()  # the abandoned row stream is finalized now
        loaded = store.load(fine.id)
        assert loaded.log.tracker.turn == 2
        loaded.log.close()
    store.close()


def test_durability_points_wait_at_least_as_long_as_the_server_asks(pg_dsn: str) -> None:
    """A server (or database) set to `synchronous_commit = remote_apply`, as with a
    synchronous standby, keeps that level at the durability points; anything weaker
    ("off", "local") is raised to "on"."""
    from session.backends.postgres_connect import durable_level

    assert [durable_level(v) for v in ("off", "local", "remote_write", "on", "remote_apply", None)] == \
        ["on", "on", "on", "on", "remote_apply", "on"]
    dbname = pg_dsn.split("?")[0].rsplit("/", 1)[1]
    for configured, expected in (("off", "on"), ("remote_apply", "remote_apply")):
        sql(pg_dsn, f"ALTER DATABASE {dbname} SET synchronous_commit = {configured}")
        backend = PostgresBackend(pg_dsn)
        try:
            assert backend.durable_level == expected
            log = SessionStore(backend).create(cwd="/w")
            write(log, Script().text_turn())  # commits at that level
            log.close()
        finally:
            backend.close()
            sql(pg_dsn, f"ALTER DATABASE {dbname} RESET synchronous_commit")


def test_link_defaults_unless_the_string_says_otherwise(pg_server: PgServer, pg_database: str) -> None:
    """A silent network cut must not hang a write for the TCP default of many minutes:
    keepalives and a TCP user timeout are set unless the connection string sets its own;
    a string libpq cannot parse is refused without quoting it back."""
    from session.backends.postgres_connect import connect

    dbname = pg_database.split("?")[0].rsplit("/", 1)[1]
    defaults = connect(pg_server.tcp_dsn(dbname), purpose="test")
    own = connect(pg_server.tcp_dsn(dbname) + "?tcp_user_timeout=5000", purpose="test")
    try:
        assert "tcp_user_timeout=30000" in defaults.info.dsn and "keepalives_idle=30" in defaults.info.dsn
        assert "tcp_user_timeout=5000" in own.info.dsn
    finally:
        defaults.close()
        own.close()
    with pytest.raises(StoreIOError) as err:
        connect(f"host=db password={PASSWORD} oops trailing", purpose="test")
    assert "cannot be parsed" in err.value.message
    assert PASSWORD not in err.value.message and "oops" not in err.value.message
