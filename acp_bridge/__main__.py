"""`acp-bridge` / `python -m acp_bridge`: the command line (DESIGN.md section 6).

Only argparse is imported here: the agent's start-up path stays lean, and each
subcommand imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import sys

from acp_bridge import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-bridge", description="An ACP agent with a durable session log."
    )
    parser.add_argument("--version", action="version", version=f"acp-bridge {__version__}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="the stdio ACP agent (the default)")
    demo = commands.add_parser("demo", help="show the durable log surviving a kill -9")
    demo.add_argument("--store", help="keep the demo store under this folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "demo":
        from acp_bridge.demo import run

        return run(args.store)
    # serve: the ACP server is the next issue; say so rather than pretend.
    print("acp-bridge: the stdio ACP server is not built yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
