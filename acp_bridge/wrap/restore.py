"""Restoring the wrapped agent's context of a session of ours on the child's current run.

A session whose child id is stale (the child died and was restarted, or the session was
just loaded from the store) is restored before anything is passed on for it (docs/wrap.md,
"Load"): the child's own `session/load` if it advertises `loadSession` (its replay is kept
from the editor: the editor has ours), else its `session/resume` if advertised, else a
fresh `session/new`. The answer to our `session/load` or `session/resume` says which in
`_meta.acpBridge.wrapped.restored`. With `wrap --seed-fresh`, a fresh session is then
seeded with the transcript (acp_bridge.wrap.seed).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from acp_bridge.errors import AgentProtocolError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.link import ChildLink
from acp_bridge.wrap.sessions import SessionMap, WrappedSession

log = logging.getLogger("acp_bridge.wrap.restore")

Restored = Literal["load", "resume", "fresh"]


async def restore(ws: WrappedSession, link: ChildLink, caps: dict[str, Any],
                  sessions: SessionMap) -> tuple[Restored, dict[str, Any]]:
    """Give `ws` a session on the child's current run; which way, and the child's answer
    (its modes, config options...). A child that refuses to load or resume its old
    session gets a fresh one (it lost it): AgentExitedError and nothing else goes out."""
    old = ws.stored_child_sid()
    session_caps = caps.get("sessionCapabilities") or {}
    ways: list[tuple[Restored, str]] = []
    if old is not None and caps.get("loadSession") is True:
        ways.append(("load", "session/load"))
    if old is not None and isinstance(session_caps, dict) and session_caps.get("resume") is not None:
        ways.append(("resume", "session/resume"))
    for restored, method in ways:
        assert old is not None
        sessions.bind(ws, old, link.generation)
        ws.restoring = restored == "load"
        try:
            result = await link.call(method, {**ws.session_params(), "sessionId": old})
        except ClientError as exc:
            log.info("the wrapped agent refused %s of %s (%s): trying the next way", method, old,
                     to_rpc_error(exc).message)
            continue
        finally:
            ws.restoring = False
        ws.took_state(result)
        return restored, result if isinstance(result, dict) else {}
    result = await link.call("session/new", ws.session_params())
    child_sid = new_session_id(result)
    sessions.bind(ws, child_sid, link.generation)
    ws.took_state(result)
    log.info("session %s: a fresh session %s in the wrapped agent", ws.id, child_sid)
    return "fresh", result


def new_session_id(result: Any) -> str:
    """The child's session id in its answer to `session/new`."""
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        raise AgentProtocolError("the wrapped agent answered session/new without a sessionId")
    child_sid: str = result["sessionId"]
    return child_sid
