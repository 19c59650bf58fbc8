"""`/export [FILE]`: the session's transcript as a Markdown file in its folder, exactly as
`acp-bridge sessions export ID --format md` writes it.

It is that command, run as a program (`python -m acp_bridge sessions ... export`) with
its output going to the file: one renderer of a transcript (acp_bridge.cli.sessions),
which the agent and the wrapper do not import (cli is the layer above them), and a
reader that opens the store read-only as it does for any session a live agent owns.
The log is made durable first, so the file holds every turn answered so far (not the
command's own, which is recorded once the file is written).

The file is new, always: `session-<first 8 of the id>.md`, or the name given (a plain
file name in the session's folder; `.md` added when it has no suffix). A name already
taken is never overwritten: the next free one (`NAME-2.md`, `NAME-3.md`...) is created
instead (O_EXCL, so a file made meanwhile is not overwritten either), and the answer
says which name was taken.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio

from acp_bridge.errors import CommandError
from acp_bridge.host.commands import Command, Outcome
from session import SessionLog

MAX_TRIES: Final = 1000  # NAME-2 ... NAME-1000: past that, say so rather than search on
TIMEOUT_S: Final = 300.0  # a store's worth of Markdown; the turn waits for it


@dataclass(frozen=True)
class Exported:
    path: Path
    size: int
    taken: str | None  # the name asked for (or the default) when it was taken already


def wanted_name(session_id: str, given: str) -> str:
    """The file name to try first; CommandError for one that is not a plain name."""
    name = given.strip() or f"session-{session_id[:8]}.md"
    if name in (".", "..") or "/" in name or "\0" in name or name.startswith("-"):
        raise CommandError(f"/export takes a file name in the session's folder, not {name!r}")
    return name if Path(name).suffix else f"{name}.md"


def _create(folder: Path, name: str) -> tuple[Path, int]:
    """A new file, `name` or the next free name after it: (its path, its open fd)."""
    stem, suffix = Path(name).stem, Path(name).suffix
    for n in range(1, MAX_TRIES + 1):
        path = folder / (name if n == 1 else f"{stem}-{n}{suffix}")
        try:
            return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        except OSError as exc:
            raise CommandError(f"cannot create {path}: {exc.strerror or exc}") from None
    raise CommandError(f"{folder / name} and the next {MAX_TRIES - 1} names after it exist already")


def _command(store: Path | str, backend: str, session_id: str) -> tuple[list[str], dict[str, str]]:
    """The `sessions export` command line and environment for this store: a PostgreSQL
    connection string (it may hold a password) goes in the environment, never argv."""
    env = dict(os.environ)
    store_args: list[str] = []
    if backend == "postgres":
        env["ACP_BRIDGE_POSTGRES"] = str(store)
    else:
        store_args = ["--store", str(store)]
    argv = [sys.executable, "-m", "acp_bridge", "sessions", *store_args, "--backend", backend,
            "export", session_id, "--format", "md"]
    return argv, env


async def export_markdown(log: SessionLog, store: Path | str, backend: str, given: str) -> Exported:
    """Write the transcript of `log`'s session (module docstring); CommandError if it
    cannot be written (the file is not left behind then)."""
    name = wanted_name(log.id, given)
    folder = Path(log.header["cwd"])
    await anyio.to_thread.run_sync(log.sync)
    path, fd = _create(folder, name)
    argv, env = _command(store, backend, log.id)
    try:
        with anyio.fail_after(TIMEOUT_S):
            done = await anyio.run_process(argv, stdin=subprocess.DEVNULL, stdout=fd, check=False, env=env)
    except BaseException as exc:  # a cancel, a timeout: no half-written file stays
        with contextlib.suppress(OSError):
            path.unlink()
        if isinstance(exc, TimeoutError):
            raise CommandError(f"the export took longer than {TIMEOUT_S:g} s and was stopped") from None
        raise
    finally:
        os.close(fd)
    if done.returncode != 0:
        with contextlib.suppress(OSError):
            path.unlink()
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise CommandError(f"the transcript could not be exported: {why[-1] if why else f'exit {done.returncode}'}")
    return Exported(path, path.stat().st_size, None if path.name == name else name)


def exported_text(done: Exported) -> str:
    """The command's answer: the file, and the name it did not overwrite."""
    kept = f" ({done.taken} exists already and was left as it was)" if done.taken else ""
    return f"Exported the transcript to {done.path}{kept}: {done.size} bytes of Markdown."


def export_command(log: SessionLog, store: Path | str, backend: str) -> Command:
    """`/export [FILE]` of the session `log` holds, in the store it is in."""
    async def run(given: str) -> Outcome:
        return Outcome(exported_text(await export_markdown(log, store, backend, given)))

    return Command("export", "Export this session's transcript to a Markdown file in its folder", run,
                   hint="a file name (optional)")
