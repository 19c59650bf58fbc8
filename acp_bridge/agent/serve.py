"""`acp-bridge serve`: wire the stdio transport, the connection and the agent."""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from acp_bridge import __version__
from acp_bridge.agent.errors import to_rpc_error
from acp_bridge.agent.server import Agent, Config
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.transport import FdLineReader, FdWriter
from session import shown_store, store_location


def configure_logging(log_file: str | None, level: str) -> None:
    """Our logs to `log_file` or stderr (never stdout: it carries protocol messages)."""
    handler: logging.Handler = (logging.FileHandler(log_file) if log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("acp_bridge")
    root.addHandler(handler)
    root.setLevel(level.upper())


def serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_file, args.log_level)
    if args.max_steps < 1:
        print("acp-bridge: --max-steps must be at least 1", file=sys.stderr)
        return 2
    kind = args.model.partition(":")[0]
    if args.model != "echo" and (kind not in ("script", "openai") or not args.model.partition(":")[2]):
        print(f"acp-bridge: unknown model {args.model!r}: use echo, script:PATH or openai:NAME", file=sys.stderr)
        return 2
    config = Config(store_dir=store_location(args.backend, args.store),
                    backend=args.backend, model=args.model, max_steps=args.max_steps)
    # One line on stderr, never stdout (stdout carries protocol messages only).
    print(f"acp-bridge {__version__}: store {shown_store(config.store_dir)} ({config.backend}), model {config.model}",
          file=sys.stderr, flush=True)
    reader, writer = FdLineReader(sys.stdin.fileno()), FdWriter(sys.stdout.fileno())
    agent = Agent(config)

    def connect(agent: Agent) -> Connection:
        return Connection(reader, writer, agent.methods(), on_eof=agent.on_eof,
                          on_cancel_request=agent.on_cancel_request, error_for=to_rpc_error,
                          before_write=agent.before_write)

    try:
        anyio.run(agent.serve, connect)
    except KeyboardInterrupt:
        return 130
    finally:
        reader.close()
        writer.close()
    return 0
