"""A host on this process's stdio: how `acp-bridge serve`, `acp-bridge wrap` and
`acp-bridge snapshot fake-agent` run. stdout carries protocol messages only; our logs go
to stderr or a file."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import anyio

from acp_bridge.host.host import Host
from acp_bridge.rpc.transport import FdLineReader, FdWriter


def configure_logging(log_file: str | None, level: str) -> None:
    """Our logs to `log_file` or stderr (never stdout: it carries protocol messages)."""
    handler: logging.Handler = (logging.FileHandler(log_file) if log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("acp_bridge")
    root.addHandler(handler)
    root.setLevel(level.upper())


def serve_stdio(host: Host[Any], *, not_started: Callable[[OSError], int] | None = None, prefix: bytes = b"",
                answered_first: bool = False) -> int:
    """Serve `host` on stdin/stdout until stdin ends; the exit status. An engine that
    cannot start (OSError) gets `not_started`'s status (the error is raised without).
    `prefix`: what was read from stdin before, read first; `answered_first`: the first
    message was answered before (the wrapper's start-up handshake, which read both)."""
    reader, writer = FdLineReader(sys.stdin.fileno(), prefix=prefix), FdWriter(sys.stdout.fileno())
    try:
        anyio.run(functools.partial(host.run, reader, writer, answered_first=answered_first))
    except OSError as exc:  # Host.run raises it only when the engine cannot start
        if not_started is None:
            raise
        return not_started(exc)
    except KeyboardInterrupt:
        return 130
    finally:
        reader.close()
        writer.close()
    return 0
