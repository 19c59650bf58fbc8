"""The local PostgreSQL server of the benchmarks' postgres figures: one server per run
(bench/pg_server.py, fsync on: a durable commit costs what it costs on this
disk), started at the first use and removed at exit, and one database per store folder
the benchmarks would otherwise use (named after the folder's path)."""

from __future__ import annotations

import atexit
import hashlib
from pathlib import Path
from typing import Any

_SERVER: Any = None


def server() -> Any:
    """The server (its folder in the system's temporary folder, not `--tmp`: when we
    are root it runs as another user, who must be able to reach it)."""
    global _SERVER
    if _SERVER is None:
        from bench.pg_server import start_server

        _SERVER = start_server(fsync=True)
        atexit.register(_SERVER.remove)
    return _SERVER


def name_of(folder: Path | str) -> str:
    return "b_" + hashlib.sha1(str(folder).encode()).hexdigest()[:16]


def location(kind: str, folder: Path, *, fresh: bool = False) -> Path | str:
    """Where a store of `kind` goes for `folder`: the folder itself, or for postgres the
    connection string of the folder's database (made if missing; emptied if `fresh`)."""
    if kind != "postgres":
        return folder
    name = name_of(folder)
    with server().admin() as db:
        if fresh:
            db.execute(f"DROP DATABASE IF EXISTS {name}")
        if fresh or db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            db.execute(f"CREATE DATABASE {name}")
    return str(server().dsn(name))


def copy(source: Path | str, folder: Path) -> str:
    """A copy of a postgres store (a database made from it as a template)."""
    name, template = name_of(folder), str(source).split("?")[0].rsplit("/", 1)[1]
    with server().admin() as db:
        db.execute(f"DROP DATABASE IF EXISTS {name}")
        db.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    return str(server().dsn(name))


def drop(where: Path | str) -> None:
    name = str(where).split("?")[0].rsplit("/", 1)[1]
    with server().admin() as db:
        db.execute(f"DROP DATABASE IF EXISTS {name}")
