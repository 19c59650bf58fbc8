"""The editor's answer to `initialize`, made from the wrapped agent's: its capabilities
with the session methods the wrapper serves itself added, and `_meta.acpBridge.wrapped`
naming the agent. Pure: one copy for the engine (`WrapEngine.initialize`) and for the
start-up handshake that answers before the engine is imported
(acp_bridge.wrap.handshake), so the editor gets the same bytes either way.
"""

from __future__ import annotations

from typing import Any, NamedTuple


def obj(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (what a peer sent is not
    trusted to have the shape the schema gives it)."""
    return value if isinstance(value, dict) else {}


class Initialized(NamedTuple):
    """What the child's `initialize` answer gives: the child's own capabilities and
    `agentInfo` (what the wrapper acts on), and the editor's answer."""

    caps: dict[str, Any]
    info: dict[str, Any] | None
    answer: dict[str, Any]


def initialized(child_answer: Any, agents: list[str] | None = None) -> Initialized:
    """The child's answer to `initialize` read, and the editor's made of it; `agents`:
    the agents' names with `wrap --agent` (`_meta.acpBridge.agents`), None without."""
    result = dict(obj(child_answer))
    caps = dict(obj(result.get("agentCapabilities")))
    found = result.get("agentInfo")
    info = found if isinstance(found, dict) else None
    ours_caps = dict(caps)
    ours_caps["loadSession"] = True
    ours_caps["sessionCapabilities"] = {**obj(ours_caps.get("sessionCapabilities")),
                                        "list": {}, "resume": {}, "close": {}, "delete": {}, "fork": {}}
    result["agentCapabilities"] = ours_caps
    meta = obj(result.get("_meta"))
    ours: dict[str, Any] = {**obj(meta.get("acpBridge")), "wrapped": {"agentInfo": info}}
    if agents is not None:
        ours["agents"] = list(agents)
    result["_meta"] = {**meta, "acpBridge": ours}
    return Initialized(caps, info, result)
