"""What the fake agent (acp_bridge.snapshot.fake_agent) reads from a recording besides
its turns: the modes and config options the recorded agent offered, and the options and
tool call of each permission request it asked.

A wrapped agent's session (`acp-bridge wrap`) keeps the agent's own updates that no
event holds as `wrapped/update`s (docs/wrap.md): its modes (`current_mode_update`) and
config options (`config_option_update`) are read from those, and the modes of its turns
from `turn/start.mode`. A session of our own agent offers our modes and the `model`
option (with `thought_level` where the model took one) over the models it ran
(acp_bridge.models.replay_models), as the agent did.

A permission decision rides on its call's `tool/result` (`permission: {outcome,
optionId?}`), and one that let the call run on its `tool/permission` first; the request
is asked again with the recorded `tool/call`'s fields (title, kind, rawInput, locations)
and our options for that call (the "always" one named by what it allows,
acp_bridge.tools.permissions.options_for), the recorded agent's option standing in for
ours of the same kind where its id is not one of ours (the log keeps the chosen option
only: the kind is read from its id, else allow_once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.models import options
from acp_bridge.models.catalog import ModelEntry
from acp_bridge.models.recording import ReadLog, derive_calls
from acp_bridge.models.replay_models import stand_ins
from acp_bridge.tools import permissions
from session import Event
from session.events import CONFIG_SET, TOOL_CALL, TURN_END, TURN_START, WRAPPED_UPDATE
from session.typed import typed, typed_all


@dataclass
class FakeRecording:
    """A recorded session cut into turns, and what it offered."""

    log: ReadLog
    source: str
    turns: dict[int, list[Event]] = field(default_factory=dict)
    between: dict[int, list[Event]] = field(default_factory=dict)  # after turn N (0: before the first)
    modes: list[str] = field(default_factory=list)  # a wrapped agent's, in order of first sight
    options: list[dict[str, Any]] = field(default_factory=list)  # the config options first offered
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)  # call id -> its tool/call fields
    rules: dict[str, permissions.Rule] = field(default_factory=dict)  # call id -> what "always" allows

    @property
    def wrapped(self) -> bool:
        return bool(self.log.header.get("wrapped"))

    @property
    def first_mode(self) -> str | None:
        first = self.turns.get(1, [])
        start = typed(first[0]) if first else None  # turn 1's turn/start
        mode = start["data"].get("mode") if start is not None and start["type"] == TURN_START else None
        return mode if isinstance(mode, str) else (self.modes[0] if self.modes else None)

    def mode_state(self, mode: str | None) -> dict[str, Any]:
        """`modes` (and `configOptions`) of a session in `mode`, as the agent showed them."""
        if mode is None:
            return {}
        if not self.wrapped:
            return {"modes": permissions.mode_state(mode)["modes"]}
        return {"modes": {"currentModeId": mode,
                          "availableModes": [{"id": m, "name": m} for m in self.modes or [mode]]}}

    def mode_ids(self) -> list[str]:
        return list(self.modes) if self.wrapped else list(permissions.MODES)


def read_fake(log: ReadLog, source: str) -> FakeRecording:
    out = FakeRecording(log, source)
    turn = 0
    last_options: list[dict[str, Any]] | None = None
    for event in log.events:
        ev = typed(event)
        if ev["type"] == TURN_START:
            turn = ev["data"]["turn"]
            out.turns[turn] = []
            mode = ev["data"].get("mode")
            if isinstance(mode, str) and mode not in out.modes:
                out.modes.append(mode)
        if turn in out.turns and (not out.turns[turn] or out.turns[turn][-1]["type"] != TURN_END):
            out.turns[turn].append(event)
        else:
            out.between.setdefault(turn, []).append(event)
        if ev["type"] == TOOL_CALL and ev["data"].get("silent"):  # a wrapped agent's call, as it last described it
            data = ev["data"]
            out.calls[data["callId"]] = {"title": data["title"], "kind": data["kind"], "rawInput": data["arguments"],
                                         **({"locations": data["locations"]} if data.get("locations") else {})}
        elif ev["type"] == TOOL_CALL:
            data = ev["data"]
            call = next((u for u in updates_for(event, UpdateContext(replay=True))
                         if u.get("sessionUpdate") == "tool_call"), None)
            if call is not None:
                out.calls[data["callId"]] = {k: v for k, v in call.items() if k not in ("sessionUpdate", "status")}
            if not out.wrapped:  # our agent's options were made per call; a wrapped agent's are not kept
                out.rules[data["callId"]] = permissions.always_rule(data["name"], data["kind"], data["arguments"])
        elif ev["type"] == WRAPPED_UPDATE and isinstance(ev["data"].get("update"), dict):
            update = ev["data"]["update"]
            if update.get("sessionUpdate") == "current_mode_update" and isinstance(update.get("currentModeId"), str) \
                    and update["currentModeId"] not in out.modes:
                out.modes.append(update["currentModeId"])
            if update.get("sessionUpdate") == "config_option_update" and isinstance(update.get("configOptions"), list):
                last_options = last_options or update["configOptions"]
    if out.wrapped:
        out.options = list(last_options or [])
    else:
        out.options = _our_options(log, source, out.first_mode or "ask")
    return out


def _our_options(log: ReadLog, source: str, mode: str) -> list[dict[str, Any]]:
    """Our agent's config options at the start of the recorded session."""
    recording = derive_calls(source, log.header, log.events)
    models = [ModelEntry(e.spec, images=e.images, reasoning=e.reasoning) for e in stand_ins(recording, {})]
    effort = next((e["data"]["value"] for e in typed_all(log.events)
                   if e["type"] == CONFIG_SET and e["data"]["configId"] == options.THOUGHT_OPTION), None)
    return [*permissions.mode_state(mode)["configOptions"],
            *options.model_options(models, options.choice_for(models[0], effort))]


def permission_request(recording: FakeRecording, sid: str, result: dict[str, Any]) -> dict[str, Any]:
    """The `session/request_permission` params for the recorded `tool/result` data."""
    call_id = result["callId"]
    tool_call = {"toolCallId": call_id, **recording.calls.get(call_id, {})}
    return {"sessionId": sid, "toolCall": tool_call,
            "options": permission_options(result.get("permission", {}), recording.rules.get(call_id))}


def permission_options(permission: dict[str, Any], rule: permissions.Rule | None = None) -> list[dict[str, Any]]:
    """Our options for a call whose "always" allows `rule` (without one: named plainly),
    with the recorded agent's chosen option in place of ours of its kind."""
    options: list[dict[str, Any]] = permissions.options_for(rule) if rule is not None \
        else [dict(o) for o in permissions.OPTIONS]
    chosen = permission.get("optionId")
    if not isinstance(chosen, str) or any(o["optionId"] == chosen for o in options):
        return options
    kind = option_kind(chosen)
    theirs = {"optionId": chosen, "name": chosen, "kind": kind}
    index = next((i for i, o in enumerate(options) if o["kind"] == kind), None)
    if index is None:
        return [*options, theirs]
    options[index] = theirs
    return options


def option_kind(option_id: str) -> str:
    """An option's kind as its id says it (`reject-always`, `deny`, `allow_always`...)."""
    words = set(re.split(r"[^a-z]+", option_id.lower()))
    refused = bool(words & {"reject", "deny", "refuse", "disallow", "decline", "no", "never"})
    forever = bool(words & {"always", "forever", "never"})
    return f"{'reject' if refused else 'allow'}_{'always' if forever else 'once'}"
