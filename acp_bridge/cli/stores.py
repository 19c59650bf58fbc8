"""Which store a command means, found or named (issue 36, point 3; docs/cli.md, "The
store").

A person who types a folder that does not exist, reads an SQLite store without
`--backend sqlite`, or points at the folder the demo made (whose store is `DIR/store`)
used to be told "No sessions", exit status 0. Now:

- **The backend of an existing store is recognised from what is in it**: an SQLite
  store is the file `sessions.sqlite3`, a JSONL store the folders `sessions/`,
  `titles/` or `torn/`. With no `--backend` (nor `$ACP_BRIDGE_BACKEND`) the
  one found is used; an explicit one that disagrees is an error saying what was found,
  for the agent as for `sessions` (an agent that wrote JSONL beside an SQLite store
  would split it in two).
- **A store that does not exist is an error naming it** for `sessions` (nothing to
  read), when it was named (`--store`, `$ACP_BRIDGE_HOME`); the default store
  (`$XDG_STATE_HOME/acp-bridge`, `~/.local/state/acp-bridge`) that does not exist yet is
  an empty one: nothing was recorded yet. The agent makes its store, as always.
- **A folder that holds no store** but files of its own is an error, naming the
  store folder inside it when there is one (`demo --store D` keeps its store in
  `D/store`).

PostgreSQL stores are connection strings: nothing to recognise from a folder.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from acp_bridge.errors import ConfigError

SQLITE_MARK = "sessions.sqlite3"
JSONL_MARKS = ("sessions", "titles", "torn")  # both backends keep their locks in locks/
# What a store folder may hold besides a backend's own files: the search index
# (acp_bridge.cli.sessions.indexer), a price file, SQLite's side files.
NEUTRAL = ("search.sqlite3", "prices.toml", "locks")
DEFAULT_STORE_LABEL = "the default store (--store)"  # where a store nobody named came from


def accessible(path: Path, mode: int) -> bool:
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def found_backend(folder: Path) -> str | None:
    """The file backend whose store `folder` holds: "sqlite", "jsonl", or None (no store,
    or not a folder). ConfigError if it holds both."""
    if not folder.is_dir():
        return None
    sqlite = (folder / SQLITE_MARK).is_file()
    jsonl = [mark for mark in JSONL_MARKS if (folder / mark).is_dir()]
    if sqlite and jsonl:
        raise ConfigError("--store", f"{folder} holds both an SQLite store ({SQLITE_MARK}) and a JSONL one "
                          f"({jsonl[0]}/): give each its own folder")
    return "sqlite" if sqlite else "jsonl" if jsonl else None


def recognised(folder: Path, backend: str, given: str | None, option: str) -> str:
    """The backend to use for the store in `folder`: the one found there when none was
    `given` (else `backend`, the default); ConfigError naming `option` when the one
    given disagrees with the one found."""
    if backend == "postgres":
        return backend
    found = found_backend(folder)
    if found is None or found == backend:
        return backend
    if given is None:
        return found
    what = f"an SQLite store ({SQLITE_MARK})" if found == "sqlite" else "a JSONL store (sessions/)"
    raise ConfigError(option, f"{folder} holds {what}, not a {backend} one: give --backend {found}, "
                              f"or another --store")


def check_readable(folder: Path, label: str) -> None:
    """The store `sessions` reads exists, is a folder, is readable and holds a store or
    nothing; ConfigError naming `label` (where the folder came from) otherwise. The
    default store that does not exist yet passes: it is empty."""
    if os.path.lexists(folder) and not folder.is_dir():
        raise ConfigError(label, f"store {folder} is not a folder")
    if not folder.exists():
        if label in (DEFAULT_STORE_LABEL, "$XDG_STATE_HOME"):  # nobody named acp-bridge's folder
            return
        raise ConfigError(label, f"no store at {folder}: the folder does not exist")
    if not accessible(folder, os.R_OK | os.X_OK):
        raise ConfigError(label, f"store {folder} is not readable: {os.strerror(errno.EACCES)}")
    if found_backend(folder) is not None:
        return
    own = sorted(entry.name for entry in folder.iterdir()
                 if entry.name not in NEUTRAL and not entry.name.startswith(NEUTRAL))
    if not own:
        return  # an empty folder is an empty store
    inside = [entry for entry in sorted(folder.iterdir()) if entry.is_dir() and found_backend(entry)]
    hint = f"; {inside[0]} is one: give --store {inside[0]}" if inside else ""
    raise ConfigError(label, f"{folder} holds no session store (no sessions/ folder, no {SQLITE_MARK}){hint}")
