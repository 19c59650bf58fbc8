"""`acp-bridge serve`: wire the stdio transport, the connection and the agent."""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from acp_bridge import __version__
from acp_bridge.agent.errors import to_rpc_error
from acp_bridge.agent.open_sessions import Config
from acp_bridge.agent.server import Agent
from acp_bridge.models.catalog import parse_specs
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
    """Serve until the editor closes stdin. `args` holds values the command line has
    already checked (acp_bridge.cli.startup.agent_settings)."""
    configure_logging(args.log_file, args.log_level)
    models = parse_specs(args.model)  # checked at start-up: a list of one or more specs
    if any(m.kind == "replay" for m in models):
        from acp_bridge.models.replay_models import offered

        # A recording is offered as the models it ran (checked at start-up too).
        models = offered(models, store_dir=store_location(args.backend, args.store), backend=args.backend)
    config = Config(store_dir=store_location(args.backend, args.store),
                    backend=args.backend, models=models, max_steps=args.max_steps)
    # One line on stderr, never stdout (stdout carries protocol messages only).
    print(f"acp-bridge {__version__}: store {shown_store(config.store_dir)} ({config.backend}), "
          f"model {', '.join(m.spec for m in models)}", file=sys.stderr, flush=True)
    reader, writer = FdLineReader(sys.stdin.fileno()), FdWriter(sys.stdout.fileno())
    agent = Agent(config)

    def connect(agent: Agent) -> Connection:
        return Connection(reader, writer, agent.methods(), on_eof=agent.on_eof, error_for=to_rpc_error,
                          before_write=agent.before_write, inline=agent.inline())

    try:
        anyio.run(agent.serve, connect)
    except KeyboardInterrupt:
        return 130
    finally:
        reader.close()
        writer.close()
    return 0
