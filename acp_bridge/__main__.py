"""`acp-bridge` / `python -m acp_bridge`. The stdio agent arrives with the ACP server;
until then the command says so instead of pretending."""

from __future__ import annotations

import sys

from acp_bridge import __version__


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--version"]:
        print(f"acp-bridge {__version__}")
        return 0
    print("acp-bridge: the stdio agent is not built yet (see the issues)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
