"""A stored session summarized in one streamed pass, for `acp-bridge sessions list`.

`list` needs, per session, the number of turns, the state of the last one and the total
tokens; reading every log whole for that (as `show` does) would take gigabytes for a
session of hundreds of megabytes. This reads a log a block at a time, checks it as a
load would (the torn-tail rule and the invariants: a log the agent would refuse is
listed as damaged), and keeps only the last turn's events, the count of the turns
before it, their tokens and the session's first prompt (its title).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from acp_bridge.cli.sessions.view import _add_usage
from session.backends.base import title_from_content
from session.errors import InvariantError
from session.events import ASSISTANT_MESSAGE, TURN_START, USER_MESSAGE, Event
from session.invariants import InvariantTracker
from session.loading import invariant_corruption
from session.scan import Damage, Locate, TailSplitter, TornTail


@dataclass
class Summary:
    last_turn: list[Event] = field(default_factory=list)  # events since the last turn/start
    earlier_turns: int = 0
    earlier_usage: dict[str, int] = field(default_factory=dict)
    first_title: str | None = None
    torn: TornTail | None = None


def summarize(sid: str, blocks: Iterable[list[Event | Damage]], locate: Locate) -> Summary:
    """Raises SessionCorruptError, worded as `SessionStore.load` words it."""
    splitter = TailSplitter(sid, locate)
    tracker = InvariantTracker(session_id=sid)
    out = Summary()
    usage_all: dict[str, int] = {}
    usage_last: dict[str, int] = {}
    turns = 0
    seen_prompt = False
    for block in blocks:
        events = splitter.feed(block)
        try:
            tracker.feed_stored(events)
        except InvariantError as exc:
            raise invariant_corruption(sid, exc, locate) from None
        for event in events:
            etype = event["type"]
            if etype == TURN_START:
                turns += 1
                out.last_turn = [event]
                usage_last = {}
                continue
            out.last_turn.append(event)
            if etype == ASSISTANT_MESSAGE:
                usage = event["data"].get("usage")
                if isinstance(usage, dict):
                    _add_usage(usage_all, usage)
                    _add_usage(usage_last, usage)
            elif etype == USER_MESSAGE and not seen_prompt:
                seen_prompt = True
                out.first_title = title_from_content(event["data"].get("content"))
    out.torn = splitter.finish()
    out.earlier_turns = turns - 1 if out.last_turn else turns
    out.earlier_usage = {k: v - usage_last.get(k, 0) for k, v in usage_all.items()}
    return out
