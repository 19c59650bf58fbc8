"""Waiting for something to happen, never for a fixed time: the one bounded poll of the
tests (sync and async).

A test that sleeps a fixed time and then looks is slow where the event comes early and
flaky where the machine is loaded and it comes late. These poll a condition every
`every` seconds until it holds, and fail after `timeout` with `why`: what was awaited,
so a failure says which event never came. Use them only where there is nothing to
await directly (a file another process writes, a process's exit seen through /proc, a
line in another process's log); an event, a pipe's line or a process's `wait()` is
awaited as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

TIMEOUT_S = 10.0  # long enough for a loaded 2-core machine; a wait that ends early costs nothing
EVERY_S = 0.01


def wait_until(ready: Callable[[], T | None], why: str, *, timeout: float = TIMEOUT_S, every: float = EVERY_S) -> T:
    """`ready()`'s first true value, polled; AssertionError naming `why` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {why}")
        time.sleep(every)


async def until(ready: Callable[[], T | None], why: str, *, timeout: float = TIMEOUT_S, every: float = EVERY_S) -> T:
    """`wait_until` for async tests: the loop runs on meanwhile."""
    deadline = anyio.current_time() + timeout
    while True:
        value = ready()
        if value:
            return value
        if anyio.current_time() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {why}")
        await anyio.sleep(every)
