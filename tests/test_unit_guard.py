"""The unit tier is enforced, not just a label (tests/support/tiers.py,
tests/support/unit_guard.py): in a unit test every way of starting a process or opening
a socket raises, and is recorded so that a test swallowing the error still fails; the
marker is derived from the others; and a test wrongly left in the tier fails.

The tests here are unit tests themselves (this module is not marked): each attempt
below runs under the real guard. Each reads the guard's record of its test and empties
it, or the test would fail for the attempts it makes on purpose.
"""

from __future__ import annotations

import asyncio
import os
import pty
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tests.support.tiers import SEEN, is_unit
from tests.support.unit_guard import NotInUnitTier


def refused(request: pytest.FixtureRequest, attempt: Callable[[], Any]) -> str:
    """What the guard recorded for `attempt`, which must raise NotInUnitTier; the record
    is then emptied."""
    seen = request.node.stash[SEEN]
    with pytest.raises(Exception) as info:
        attempt()
    assert info.group_contains(NotInUnitTier) if isinstance(info.value, BaseExceptionGroup) else \
        isinstance(info.value, NotInUnitTier) or isinstance(info.value.__cause__, NotInUnitTier), info.value
    assert seen, "the guard raised without recording the attempt"
    what: str = seen[0]
    seen.clear()
    return what


def fork_or_refuse() -> None:
    if os.fork() == 0:  # the guard failed: the child must not run the rest of pytest
        os._exit(0)


SPAWNS: dict[str, Callable[[], Any]] = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
    "subprocess.Popen": lambda: subprocess.Popen(["true"]),
    "os.fork": fork_or_refuse,
    "pty.fork": lambda: pty.fork() == (0, 0) and os._exit(0),
    "os.posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], dict(os.environ)),
    "os.posix_spawnp": lambda: os.posix_spawnp("true", ["true"], dict(os.environ)),
    "os.system": lambda: os.system("true"),
    "asyncio": lambda: asyncio.run(asyncio.create_subprocess_exec("true")),
    "anyio": lambda: anyio.run(anyio.run_process, ["true"]),
}


@pytest.mark.parametrize("how", SPAWNS)
def test_a_unit_test_cannot_start_a_process(request: pytest.FixtureRequest, how: str) -> None:
    assert request.node.get_closest_marker("unit") is not None
    what = refused(request, SPAWNS[how])
    assert "process" in what or "fork" in what or "shell" in what, what


SOCKETS: dict[str, Callable[[], Any]] = {
    "socket.socket": lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
    "unix socket": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
    "create_connection": lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
    "anyio.connect_tcp": lambda: anyio.run(anyio.connect_tcp, "127.0.0.1", 9),
}


@pytest.mark.parametrize("how", SOCKETS)
def test_a_unit_test_cannot_open_a_socket(request: pytest.FixtureRequest, how: str) -> None:
    assert refused(request, SOCKETS[how]).startswith("opens a socket (tests/test_unit_guard.py:")


@pytest.mark.anyio
async def test_an_event_loop_still_runs_in_a_unit_test() -> None:
    # asyncio's loop wakes itself through a socketpair(): that pair stays allowed, and
    # so does everything in-process, threads included.
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x")
        assert b.recv(1) == b"x"
    assert await anyio.to_thread.run_sync(lambda: 6 * 7) == 42


def test_the_tiers_are_derived_from_the_markers(request: pytest.FixtureRequest) -> None:
    items = {item.nodeid: item for item in request.session.items}
    ours = [item for nodeid, item in items.items() if nodeid.startswith("tests/test_unit_guard.py::test_a_unit")]
    assert ours and all(item.get_closest_marker("unit") for item in ours)
    assert all(is_unit(item) for item in ours)
    # Every test that runs is in exactly one of the tiers the default run holds.
    for item in items.values():
        unit, integration = item.get_closest_marker("unit"), item.get_closest_marker("integration")
        assert (unit is None) != (integration is None) or item.get_closest_marker("long") \
            or item.get_closest_marker("soak"), item.nodeid


INNER = '''
import subprocess

import pytest


def test_swallows_the_refusal():
    try:
        subprocess.run(["true"], check=True)
    except Exception:
        pass  # as code under test might


@pytest.mark.integration
def test_marked_integration():
    subprocess.run(["true"], check=True)


def test_starts_nothing():
    assert sum(range(4)) == 6
'''


@pytest.mark.integration  # the inner run's integration test really starts a process
def test_a_test_left_in_the_unit_tier_that_starts_a_process_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=INNER)
    plugin = ("-p", "tests.support.tiers", "-p", "no:cacheprovider")
    full = pytester.runpytest_inprocess(*plugin)
    full.assert_outcomes(passed=2, failed=1)
    full.stdout.fnmatch_lines(["*test_swallows_the_refusal*", "*a unit test starts a process*"])
    fast = pytester.runpytest_inprocess(*plugin, "-m", "unit")
    fast.assert_outcomes(passed=1, failed=1, deselected=1)
