"""`acp-bridge wrap`: wire our stdio, the editor's connection, the wrapper and its child.

The child is spawned before anything is read from the editor, so a command that cannot
be run is refused at once (one line on stderr, exit status 2), as any bad start-up
value is (DESIGN.md section 6).
"""

from __future__ import annotations

import argparse
import sys

import anyio

from acp_bridge import __version__
from acp_bridge.agent.errors import to_rpc_error
from acp_bridge.agent.serve import configure_logging
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.transport import FdLineReader, FdWriter
from acp_bridge.wrap.proxy import WrapAgent, WrapConfig
from session import shown_store, store_location


def serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_file, args.log_level)
    config = WrapConfig(store_dir=store_location(args.backend, args.store),
                        command=list(args.wrapped), backend=args.backend,
                        seed_fresh=bool(getattr(args, "seed_fresh", False)))
    # One line on stderr, never stdout (stdout carries protocol messages only).
    print(f"acp-bridge {__version__}: wrapping {' '.join(config.command)}, store {shown_store(config.store_dir)} "
          f"({config.backend})", file=sys.stderr, flush=True)
    reader, writer = FdLineReader(sys.stdin.fileno()), FdWriter(sys.stdout.fileno())
    agent = WrapAgent(config)

    def connect(agent: WrapAgent) -> Connection:
        return Connection(reader, writer, agent.methods(), on_eof=agent.on_eof, error_for=to_rpc_error,
                          before_write=agent.before_write, fallback=agent.forward, inline=agent.inline())

    async def main() -> int:
        async with anyio.create_task_group() as tg:
            try:
                await agent.start(tg)
            except OSError as exc:
                print(f"acp-bridge: cannot run {config.command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
                return 2
            await agent.serve(connect)
            tg.cancel_scope.cancel()  # the child's watchers end with it
        return 0

    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        return 130
    finally:
        reader.close()
        writer.close()
