"""A PostgreSQL store's schema: its tables and the triggers that keep `sessions` up
to date with `events`, its version, the migrations from older versions, and the check
of a store's version. Made on first use by the owning side (session.backends.postgres),
read as it is by the reading side (postgres_read); connecting is postgres_connect's.

Everything lives in the schema `acp_bridge` of the database the connection string
names, so the store can share a database with other applications. Event data and
headers are `json` columns: PostgreSQL checks them and keeps the text verbatim (key
order, spacing), so `raw` gives back the bytes written, and people can query them.
"""

from __future__ import annotations

from typing import Any

import psycopg

from session.backends.postgres_conninfo import shown
from session.errors import SessionVersionError

SCHEMA = "acp_bridge"
SCHEMA_VERSION = 3
"""2: `sessions.last_seq` and `last_time`, the seq and time of the session's last event,
kept by a trigger on `events` (so a store's stamps are one scan of `sessions`, not an
index seek per session into millions of events: bench/README.md, "At scale").
3: `sessions.checked_seq`, how far the session's rows were written (or read whole) by
an agent that checked every event first (`CHECKED_WRITER`), so `sessions list` can
read a page's facts from a few rows of each log (`PostgresReader.outlines`) instead
of reading and checking each log whole. A store of version 1 or 2 is brought to 3 by
the first agent that opens it (`MIGRATE_FROM_1`, `MIGRATE_FROM_2`); until then a
reader reads it as it is (`READABLE`)."""
READABLE = (1, 2, SCHEMA_VERSION)
# Set ('on') on the agent's own connections, whose every event went through the
# session log's invariant check before it was written (session.log). The triggers move
# `checked_seq` on with `last_seq` only for such a writer, and only while it was
# current; any other write of events (an INSERT, UPDATE or DELETE by hand, an older
# build) leaves it unknown (NULL), and `list` reads that session's log whole again.
CHECKED_WRITER = "acp_bridge.checked_writer"
# The triggers that keep `last_seq`/`last_time` and `checked_seq`, once per statement
# (a COPY of a batch is one), in the writer's own transaction: appended rows move them
# on; deleted ones (a rollback to a durable point, a repair's cut, a deletion) make
# them the last row's that is left. Every write of events goes through them, whoever
# writes. `checked_seq` is -1 for a checked session without events (`insert_session`).
LAST_EVENT_DDL = f"""
CREATE OR REPLACE FUNCTION acp_bridge.events_appended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE checked boolean := coalesce(current_setting('{CHECKED_WRITER}', true), '') = 'on';
BEGIN
    UPDATE acp_bridge.sessions s SET last_seq = n.seq, last_time = n.time,
        checked_seq = CASE WHEN checked AND s.checked_seq = coalesce(s.last_seq, -1) THEN n.seq
                           ELSE s.checked_seq END
    FROM (SELECT DISTINCT ON (session_id) session_id, seq, time FROM appended
          ORDER BY session_id, seq DESC) n
    WHERE s.id = n.session_id AND n.seq > coalesce(s.last_seq, -1);
    IF NOT checked THEN
        UPDATE acp_bridge.sessions s SET checked_seq = NULL
        WHERE s.id IN (SELECT DISTINCT session_id FROM appended) AND s.checked_seq IS NOT NULL;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION acp_bridge.events_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE checked boolean := coalesce(current_setting('{CHECKED_WRITER}', true), '') = 'on';
BEGIN
    UPDATE acp_bridge.sessions s SET (last_seq, last_time) = (SELECT e.seq, e.time FROM acp_bridge.events e
        WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1)
    WHERE s.id IN (SELECT DISTINCT session_id FROM deleted);
    -- a checked writer cuts a tail: what is left was checked as far as it was before
    UPDATE acp_bridge.sessions s SET checked_seq = CASE
        WHEN checked AND s.checked_seq >= coalesce(s.last_seq, -1) THEN coalesce(s.last_seq, -1)
        WHEN checked THEN s.checked_seq END
    WHERE s.id IN (SELECT DISTINCT session_id FROM deleted);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION acp_bridge.events_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE acp_bridge.sessions s SET checked_seq = NULL
    WHERE s.id IN (SELECT DISTINCT session_id FROM changed) AND s.checked_seq IS NOT NULL;
    RETURN NULL;
END $$;
"""
LAST_EVENT_TRIGGERS = """
CREATE TRIGGER events_appended AFTER INSERT ON acp_bridge.events REFERENCING NEW TABLE AS appended
    FOR EACH STATEMENT EXECUTE FUNCTION acp_bridge.events_appended();
CREATE TRIGGER events_deleted AFTER DELETE ON acp_bridge.events REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION acp_bridge.events_deleted();
"""
CHANGED_TRIGGER = """
CREATE TRIGGER events_changed AFTER UPDATE ON acp_bridge.events REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION acp_bridge.events_changed();
"""
MIGRATE_FROM_1 = f"""
ALTER TABLE acp_bridge.sessions ADD COLUMN last_seq bigint, ADD COLUMN last_time bigint;
UPDATE acp_bridge.sessions s SET last_seq = e.seq, last_time = e.time
FROM (SELECT DISTINCT ON (session_id) session_id, seq, time FROM acp_bridge.events
      ORDER BY session_id, seq DESC) e WHERE e.session_id = s.id;
{LAST_EVENT_DDL}
{LAST_EVENT_TRIGGERS}
"""
# Sessions written before version 3 are unknown (NULL) until an agent loads them
# (OwnedPostgresStream.session: a load checks the log whole).
MIGRATE_FROM_2 = f"""
ALTER TABLE acp_bridge.sessions ADD COLUMN checked_seq bigint;
{LAST_EVENT_DDL}
{CHANGED_TRIGGER}
UPDATE acp_bridge.schema_version SET version = {SCHEMA_VERSION};
"""
# The store's schema, made on first use (session.backends.postgres).
DDL = f"""
CREATE SCHEMA IF NOT EXISTS acp_bridge;
CREATE TABLE acp_bridge.schema_version (version integer NOT NULL);
CREATE TABLE acp_bridge.sessions (
    id text PRIMARY KEY,
    header json NOT NULL,
    cwd text NOT NULL,
    title text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    last_seq bigint,
    last_time bigint,
    checked_seq bigint
);
CREATE TABLE acp_bridge.events (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    time bigint NOT NULL,
    data json NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE acp_bridge.torn_events (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    type text,
    time bigint,
    data json,
    cut_at bigint NOT NULL
);
CREATE TABLE acp_bridge.owners (
    session_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    token text NOT NULL,
    since bigint NOT NULL
);
INSERT INTO acp_bridge.schema_version VALUES ({SCHEMA_VERSION});
{LAST_EVENT_DDL}
{LAST_EVENT_TRIGGERS}
{CHANGED_TRIGGER}"""


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The store's schema version, or None where no store was ever made here."""
    exists = conn.execute("SELECT to_regclass('acp_bridge.schema_version')").fetchone()
    if exists is None or exists[0] is None:
        return None
    row = conn.execute("SELECT max(version) FROM acp_bridge.schema_version").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def schema_version_error(conninfo: str, version: int) -> SessionVersionError:
    return SessionVersionError(
        f"store {shown(conninfo)} has schema version {version}; this build reads only "
        f"version {SCHEMA_VERSION} (pre-release: no migration)" if version > SCHEMA_VERSION else
        f"store {shown(conninfo)} has schema version {version}; this build reads only versions "
        f"{', '.join(map(str, READABLE))} (an agent of this build brings older ones to {SCHEMA_VERSION})",
        version=version,
        supported=SCHEMA_VERSION,
    )
