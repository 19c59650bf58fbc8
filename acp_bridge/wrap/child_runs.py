"""The wrapped child's runs, as rules (docs/wrap.md, "The lifecycle").

Pure, as the lifecycle beside it (acp_bridge.wrap.lifecycle) is: what a request that
needs the child does first with its process (`link_plan`: use the run, start it,
restart it), the ways a session is given a child session on the current run, in the
order tried (`restore_ways`), and whether the one it got is seeded with the transcript
(`seeds`). acp_bridge.wrap.driver and acp_bridge.wrap.children perform them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from acp_bridge.wrap.state import Way

__all__ = ["Link", "link_plan", "restore_ways", "seeds"]

Link = Literal["use", "start", "restart", "restart_now"]


def link_plan(*, running: bool, started: bool, troubled: bool, busy: bool) -> Link:
    """What a request that needs the child does first: `use` the run it has; `start` it
    (never started, or stopped when unused); `restart` it (it died); `restart_now` (it
    is `troubled`: it runs a turn the wrapper ended, or did not answer within a cancel's
    grace; it had its grace, it is not waited for), unless a prompt, replay or seed of
    another session runs in it (`busy`): that is not cut, the troubled session gets a
    fresh child session instead."""
    if not started:
        return "start"
    if not running:
        return "restart"
    return "restart_now" if troubled and not busy else "use"


def restore_ways(caps: Mapping[str, Any], last: str | None) -> list[Way]:
    """How to give a session a child session on the current run, in the order tried:
    its own `load` (if the child advertises `loadSession`), else `resume` (if
    `sessionCapabilities.resume`), of the child session it had (`last`, None if it has
    none it may take again); a `fresh` one always comes last."""
    ways: list[Way] = []
    if last is not None:
        if caps.get("loadSession") is True:
            ways.append("load")
        session_caps = caps.get("sessionCapabilities")
        if isinstance(session_caps, dict) and session_caps.get("resume") is not None:
            ways.append("resume")
    ways.append("fresh")
    return ways


def seeds(way: Way, *, seed_fresh: bool, carried: bool) -> bool:
    """Whether a restore that ended `way` is seeded with the transcript: a fresh one,
    with `--seed-fresh`, or when the session's context came to this agent that way
    already (`carried`: it moved here, or it is an emulated fork)."""
    return way == "fresh" and (seed_fresh or carried)
