"""The suite's tiers, as a pytest plugin (tests/conftest.py loads it; docs/architecture.md,
"Tests", says how to run each).

- `integration`: the test starts a process or opens a socket (given per module, with
  `pytestmark`, or per test). So is every test that uses a fixture in
  `PROCESS_FIXTURES`, runs on the PostgreSQL backend or runs a third-party program
  (`starts_a_server`).
- `unit`: every other test that is not `long` or `soak`. Derived here at collection,
  never written by hand: `pytest -m unit` is the fast loop, and a new test is in it
  until it says otherwise.
- `soak` and `long`: the long runs. `soak` (crash, fuzz and soak runs of minutes) is
  run by hand; `long` (the crash matrices' CI samples, the benches' smoke runs, the
  kill-during-a-fork loop, every kill point of an import: seconds each) is run by
  `.ci/run` as a step of its own.
  The default run (pyproject's addopts) leaves both out.

A unit test runs under tests/support/unit_guard.py: while it sets up and runs, a
process start or a new socket raises, and is recorded; a recorded attempt fails the
test even where the code under test swallowed the exception. So a test wrongly left
in the unit tier fails at once, in the fast loop and in the full run alike.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.support.unit_guard import forbidden

# Fixtures that start a process: a test that uses one is an integration test.
PROCESS_FIXTURES = frozenset({"pg_server", "pg_database", "pg_dsn"})
# Markers of tests that run a third-party program (.ci/run runs each as a step of its
# own): integration tests too, even where they skip for want of the program.
EXTERNAL_MARKERS = ("fast_agent", "opencode", "codex_acp", "qwen_code", "gemini_cli", "mcp_everything", "browser",
                    "sdk_clients")

# What the unit guard saw during a test's set-up and call (test_unit_guard.py reads it).
SEEN = pytest.StashKey[list[str]]()

MARKERS = (
    "unit: starts no process and opens no socket (derived: every test not marked integration, long or soak; "
    "guarded while it runs; `pytest -m unit` is the fast loop)",
    "integration: starts a process or opens a socket (given per module or per test)",
    "long: a long case run by .ci/run as a step of its own (deselected by default; run with -m long)",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def starts_a_server(item: pytest.Item) -> bool:
    """It uses a fixture that starts a process, runs on the PostgreSQL backend (a
    `postgres` parameter: its fixtures ask for `pg_dsn` by name, at run time), or runs
    a third-party program (`EXTERNAL_MARKERS`)."""
    callspec = getattr(item, "callspec", None)
    return bool(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))) or (
        callspec is not None and "postgres" in callspec.params.values()) or any(
        item.get_closest_marker(name) for name in EXTERNAL_MARKERS)


def is_unit(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in ("integration", "long", "soak")):
        return False
    return not starts_a_server(item)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_unit(item):
            item.add_marker(pytest.mark.unit)
        elif starts_a_server(item):
            item.add_marker(pytest.mark.integration)


def _guarded(item: pytest.Item) -> Generator[None, Any, Any]:
    if item.get_closest_marker("unit") is None:
        return (yield)
    seen = item.stash.setdefault(SEEN, [])
    with forbidden(seen.append):
        try:
            result = yield
        except BaseException:
            if seen:  # the guard's refusal, maybe turned into another error on its way up
                pytest.fail(f"a unit test {seen[0]}: mark it (or its module) integration", pytrace=False)
            raise
    if seen:  # refused, and swallowed by the code under test
        pytest.fail(f"a unit test {seen[0]}: mark it (or its module) integration", pytrace=False)
    return result


# Set-up and call; not the teardown, where the last test of a run may stop the session's
# servers (pg_server) that an integration test started.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _guarded(item))
