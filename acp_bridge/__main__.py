"""`python -m acp_bridge`: the command line (acp_bridge.cli.main)."""

from __future__ import annotations

import sys

from acp_bridge.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
