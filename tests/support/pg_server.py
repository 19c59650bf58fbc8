"""The tests' side of the PostgreSQL server (bench/pg_server.py starts it): where no
server binaries or no driver are found, the tests that need one are skipped, loudly,
and under CI (`CI=true`, or `ACP_BRIDGE_TEST_POSTGRES=required` as .ci/run sets it)
they fail instead: there they are mandatory."""

from __future__ import annotations

import importlib.util
import os

from bench.pg_server import PASSWORD, PgServer, find_bin_dir, missing_reason, start_server

__all__ = ["PASSWORD", "PgServer", "required", "server_or_skip"]


def required() -> bool:
    """Whether a missing server fails the tests instead of skipping them: under CI, or
    where `ACP_BRIDGE_TEST_POSTGRES=required` (.ci/run sets it)."""
    return (os.environ.get("CI", "").lower() in ("true", "1")
            or os.environ.get("ACP_BRIDGE_TEST_POSTGRES") == "required")


def server_or_skip() -> PgServer:
    """A started server, or a loud skip (a failure under CI, where it is mandatory)."""
    import pytest

    reason = None
    if importlib.util.find_spec("psycopg") is None:
        reason = "psycopg is not installed (pip install -e '.[postgres]'): the PostgreSQL backend is NOT tested"
    elif find_bin_dir() is None:
        reason = missing_reason()
    if reason is not None:
        if required():
            pytest.fail(f"CI requires the PostgreSQL tests: {reason}")
        pytest.skip(f"!!! {reason}")
    return start_server()
