"""The tests' PostgreSQL server: bench/pg_server.py starts it (PostgreSQL 16 from
`pgserver` in the `test` extra, else `$ACP_BRIDGE_TEST_PG_BIN`, else Debian's package),
in a throw-away folder; here, the tests that need one are skipped loudly where no server
can be started, and failed under CI (`CI=true`, as .ci/run runs): there they are
mandatory.
"""

from __future__ import annotations

import importlib.util
import os

from bench.pg_server import PASSWORD, PgServer, find_bin_dir, missing_reason, start_server

__all__ = ["PASSWORD", "PgServer", "server_or_skip"]


def server_or_skip() -> PgServer:
    """A started server, or a loud skip (a failure under CI, where it is mandatory)."""
    import pytest

    reason = None
    if importlib.util.find_spec("psycopg") is None:
        reason = "psycopg is not installed (pip install -e '.[postgres]'): the PostgreSQL backend is NOT tested"
    elif find_bin_dir() is None:
        reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI requires the PostgreSQL tests: {reason}")
        pytest.skip(f"!!! {reason}")
    return start_server()
