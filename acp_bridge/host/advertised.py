"""The session updates a client is sent only if it advertised them in `initialize`
(ACP v1.25, `clientCapabilities.session`; docs/protocol.md, "Compaction and notices"):

- `notices: {}`: `notice` updates, information for the person outside the conversation
  (`severity` info, warning or error, a `title`, a `description`). Live events, never
  part of the session's history: nothing here is replayed, and a client that did not
  advertise them is sent nothing in their place.
- `compaction: {}`: `compaction_update`s, one entity per compaction of the model's
  context (`compactionId`), from `in_progress` to the status that ends it, live and on
  replay, made from the log's `context/compaction` (`compaction_update`). A client that
  advertised notices and not compaction is told of a compaction that ended by a notice,
  live only (`compaction_notice`); one that advertised neither, nothing.

Pure: the host's update mapping (acp_bridge.host.updates) and the engines call these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from session.items import CompactionData

Update = dict[str, Any]
"""A `SessionUpdate` object (as acp_bridge.host.updates.SessionUpdate)."""

Severity = Literal["info", "warning", "error"]

# The updates of a compaction (a wrapped agent's, recorded as it sent them).
COMPACTION_UPDATES: Final = frozenset({"compaction_update", "compaction_summary_chunk"})

_META_KEY: Final = "acpBridge"  # acp_bridge.host.updates.META_KEY (which imports this module)


@dataclass(frozen=True)
class ClientSupport:
    """What the client advertised of the session updates it must ask for."""

    notices: bool = False
    compaction: bool = False


NEITHER: Final = ClientSupport()
"""A client that advertised neither (what ACP v1 clients before 1.25 are)."""


def client_support(capabilities: Any) -> ClientSupport:
    """What `clientCapabilities` (as `initialize` gave them) advertise. Omitted and
    `null` mean unsupported, `{}` supported; any other value is malformed and, as ACP
    reads it (`x-deserialize-default-on-error`), unsupported too."""
    session = capabilities.get("session") if isinstance(capabilities, Mapping) else None
    if not isinstance(session, Mapping):
        return ClientSupport()
    return ClientSupport(notices=isinstance(session.get("notices"), Mapping),
                         compaction=isinstance(session.get("compaction"), Mapping))


def sent_from_log(update: Update, support: ClientSupport) -> bool:
    """Whether a wrapped agent's update the log holds (`wrapped/update`) is sent, live
    or on replay: never a notice (a live event: the wrapper passed it on as it came), a
    compaction's only to a client that asked for compaction."""
    kind = update.get("sessionUpdate")
    return kind != "notice" and (kind not in COMPACTION_UPDATES or support.compaction)


def not_asked_for(update: Any, support: ClientSupport) -> str | None:
    """The kind of `update` (a wrapped agent's) if it is a notice or a compaction's that
    the client did not ask for, else None: the agent was sent the client's `initialize`
    as it came and should not send it, and the client is not sent it if it does."""
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    if (kind == "notice" and not support.notices) or (kind in COMPACTION_UPDATES and not support.compaction):
        return str(kind)
    return None


def notice(severity: Severity, title: str, description: str | None = None) -> Update:
    """A `notice` update (`title`: plain text that stands alone)."""
    update: Update = {"sessionUpdate": "notice", "severity": severity, "title": title}
    if description:
        update["description"] = description
    return update


def compaction_updates(data: CompactionData, support: ClientSupport, *, replay: bool) -> list[Update]:
    """What a client is sent for one `context/compaction` (acp_bridge.host.updates):
    its `compaction_update` if it advertised compaction; live, a notice of it if it
    advertised notices instead; else nothing. A `silent` one (the editor was sent
    nothing for it live) nothing either."""
    if data.get("silent"):
        return []
    if support.compaction:
        return [compaction_update(data)]
    told = compaction_notice(data) if support.notices and not replay else None
    return [told] if told is not None else []


def compaction_update(data: CompactionData) -> Update:
    """The `compaction_update` of one `context/compaction`: a wrapped agent's as it sent
    it, else the compaction as the event has it (ACP's patch semantics: an empty summary
    is left out, which leaves the client's as it was: the events of one compaction only
    ever add to it), and `_meta.acpBridge` where it stands and what it replaces."""
    sent = data.get("sent")
    if isinstance(sent, dict):
        return sent
    update: Update = {"sessionUpdate": "compaction_update", "compactionId": data["compactionId"],
                      "status": data["status"]}
    if data["summary"]:
        update["summary"] = data["summary"]
    if "error" in data:
        update["error"] = data["error"]
    update["_meta"] = {_META_KEY: {"turn": data["turn"], "step": data["step"], "replaces": data["replaces"]}}
    return update


def compaction_notice(data: CompactionData) -> Update | None:
    """A notice of the compaction that ended with `data`, for a client that takes notices
    and not compaction updates: one that completed (info) or failed (warning); None for
    anything else (in progress, cancelled with its turn, a wrapped agent's own)."""
    if "sent" in data:
        return None
    replaces = data["replaces"]
    first, last = replaces["fromTurn"], replaces["toTurn"]
    turns = f"turn {last}" if first == last else f"turns {first} to {last}"
    if data["status"] == "completed":
        return notice("info", "Context compacted",
                      f"The conversation up to {turns} was summarized to fit the model's context window; "
                      "the session log keeps it whole.")
    if data["status"] == "failed":
        return notice("warning", "Context compaction failed", data.get("error"))
    return None


def forced_notice(grace: float) -> Update:
    """The notice of a turn the wrapper ended itself (`cancelled {forced}`): the agent
    did not answer its cancelled prompt within the grace (docs/wrap.md, "The cancel grace")."""
    return notice("warning", "The agent did not stop when cancelled",
                  f"It had not answered the cancelled prompt {grace:g} s later: acp-bridge ended the turn. "
                  "What the agent still sends for it is dropped.")


def retry_notice(attempt: int, attempts: int, delay: float, code: str | None, message: str) -> Update:
    """The notice of a model call tried again after its provider failed (try `attempt`
    of `attempts`, in `delay` seconds)."""
    why = f"{code}: {message}" if code else message
    return notice("warning", "The model provider failed; trying again",
                  f"{why.rstrip('.')}. Try {attempt} of {attempts} in {delay:.1f} s.")


def left_out_notice(first: int) -> Update:
    """The notice of a model call shown the conversation from turn `first` on: the turns
    before it fit neither its context window nor a compaction's summary call."""
    return notice("warning", "Older turns left out",
                  f"The model is shown this conversation from turn {first} on: the turns before it do not fit "
                  "its context window and could not be summarized. The session log keeps them.")
