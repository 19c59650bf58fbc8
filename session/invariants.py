"""The log invariants (docs/persistence.md, "The event vocabulary"), checked one event at a time.

`InvariantTracker` is a small state machine: the live log feeds it every event it is
asked to append, so a runner bug is refused before it reaches disk, and tests run
`check_invariants` over every log they write. Pure: no I/O.

Most events of a log are `assistant/chunk`s of the open step, so `feed` and `feed_all`
accept those on a fast path that checks exactly what the general check does (shape,
seq, time, turn, step, chunk) with plain comparisons and nothing else; anything the
fast path does not accept (other types, dict subclasses, any problem) goes through the
general check, which alone words the errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from session.errors import InvariantError
from session.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    COMPACTION_ENDED,
    CONFIG_SET,
    CONTEXT_COMPACTION,
    EVENT_TYPES,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_PERMISSION,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    WRAPPED_UPDATE,
    Event,
    is_synthetic_result,
    tool_calls_of,
)
from session.reason_checks import reason_problem

_BLOCK_TYPES = frozenset({"text", "reasoning", "tool-call"})
_STEP_EVENTS = frozenset({ASSISTANT_CHUNK, ASSISTANT_MESSAGE, TOOL_CALL, TOOL_PERMISSION, TOOL_RESULT, STEP_END,
                          CONTEXT_COMPACTION})
_CHUNK_TYPES = ("text", "reasoning")


@dataclass
class OpenCall:
    """A tool call of the open turn: the step it was asked in, its tool (the closers
    word a result with it), and how far it got: `started` once its `tool/call` is
    recorded, `held` while that `tool/call` said `pending` and no `tool/permission`
    let it run (so it has not run), `answered` once it has a result."""

    step: int
    name: str
    started: bool = False
    answered: bool = False
    held: bool = False

    @property
    def may_have_run(self) -> bool:
        """Whether its tool may have run: recorded, and not held back."""
        return self.started and not self.held


@dataclass(frozen=True)
class OpenCompaction:
    """A compaction of the open turn: the step its last event stands in, the turns it
    replaces (`fromTurn`, `toTurn`: fixed by its first event), and whether its status
    ended it. A step ends only once its compactions have ended, so one not ended is
    always of the open step."""

    step: int
    replaces: tuple[int, int]
    ended: bool


@dataclass
class InvariantTracker:
    """Where a log stands: the next seq, the last turn, the open turn and step, and the
    tool calls of the open turn. `feed` checks an event against that and advances."""

    session_id: str | None = None
    next_seq: int = 0
    turn: int = 0
    in_turn: bool = False
    step: int = 0
    step_open: bool = False
    calls: dict[str, OpenCall] = field(default_factory=dict)
    # The compactions of the open turn, by id. Replaced, never changed in place, when
    # an event changes one (a refused batch puts the dict it had back).
    compactions: dict[str, OpenCompaction] = field(default_factory=dict)

    def feed(self, event: Event) -> None:
        """Check `event` and advance. Raises InvariantError (state unchanged) if it
        breaks an invariant."""
        self.feed_all((event,))

    def feed_all(self, events: Iterable[Event]) -> None:
        """`feed` each event in order. Stops at the first that breaks an invariant,
        raising InvariantError: the events before it stay fed, the tracker stands
        right after them."""
        checked = self._feed_checked
        for event in events:
            # The fast path: an assistant/chunk of the open step with the next seq
            # advances only next_seq. Each test is one the general check makes; when
            # one fails (or the event is not a plain dict), the general check decides
            # and words the error.
            if type(event) is dict and len(event) == 4 and event.get("type") == ASSISTANT_CHUNK \
                    and self.step_open and self.in_turn:
                data = event.get("data")
                seq = event.get("seq")
                when = event.get("time")
                if type(data) is dict and type(seq) is int and seq == self.next_seq \
                        and type(when) is int and when >= 0 \
                        and data.get("turn") == self.turn and data.get("step") == self.step:
                    chunk = data.get("chunk")
                    if type(chunk) is dict and chunk.get("type") in _CHUNK_TYPES \
                            and type(chunk.get("text")) is str:
                        self.next_seq = seq + 1
                        continue
            checked(event)

    def feed_stored(self, events: Sequence[Event]) -> None:
        """`feed_all` for events read back from a store, whose shape the scan already
        checked (`scan.parse_events`: a dict of exactly type, seq, time and data, with
        an event type, int seq and time and dict data): the fast path then checks only
        what the scan does not (seq, time >= 0, turn, step, chunk), with the open step
        held in locals. Events it does not accept go through the general check, as in
        `feed_all`, and raise the same InvariantError."""
        checked = self._feed_checked
        count, index = len(events), 0
        while index < count:
            if self.in_turn and self.step_open:
                turn, step, seq = self.turn, self.step, self.next_seq
                while index < count:
                    event = events[index]
                    if event["type"] != ASSISTANT_CHUNK or event["seq"] != seq or event["time"] < 0:
                        break
                    data = event["data"]
                    chunk = data.get("chunk")
                    if data.get("turn") != turn or data.get("step") != step or type(chunk) is not dict \
                            or chunk.get("type") not in _CHUNK_TYPES or type(chunk.get("text")) is not str:
                        break
                    seq += 1
                    index += 1
                self.next_seq = seq
                if index == count:
                    return
            checked(events[index])
            index += 1

    def _feed_checked(self, event: Event) -> None:
        problem = self._problem(event)
        if problem is not None:
            raise InvariantError(
                f"event seq {event.get('seq')!r} ({event.get('type')!r}): {problem}",
                session_id=self.session_id,
                seq=event.get("seq"),
                eventType=event.get("type"),
            )
        self._apply(event)

    def __deepcopy__(self, memo: dict[int, object]) -> InvariantTracker:
        """A copy that can be fed without touching this one (the live log checks a
        batch on a copy): everything is immutable but the calls, copied one by one."""
        return InvariantTracker(
            session_id=self.session_id,
            next_seq=self.next_seq,
            turn=self.turn,
            in_turn=self.in_turn,
            step=self.step,
            step_open=self.step_open,
            calls={
                cid: OpenCall(call.step, call.name, call.started, call.answered, call.held)
                for cid, call in self.calls.items()
            },
            compactions=dict(self.compactions),
        )

    def unanswered(self) -> list[str]:
        """Call ids of the open turn without a result, in log order."""
        return [cid for cid, call in self.calls.items() if not call.answered]

    def unended(self) -> list[str]:
        """Ids of the open turn's compactions that have not ended, in log order."""
        return [cid for cid, compaction in self.compactions.items() if not compaction.ended]

    def _problem(self, event: Event) -> str | None:
        if not isinstance(event, dict) or len(event) != 4 or not (
            "type" in event and "seq" in event and "time" in event and "data" in event
        ):
            return "an event is exactly {type, seq, time, data}"
        etype, data = event["type"], event["data"]
        if etype not in EVENT_TYPES:
            return "unknown event type"
        if type(event["seq"]) is not int or event["seq"] != self.next_seq:
            return f"seq must be {self.next_seq}"
        if type(event["time"]) is not int or event["time"] < 0:
            return "time must be epoch milliseconds (a non-negative int)"
        if not isinstance(data, dict):
            return "data must be an object"
        turn = data.get("turn")
        if etype == TURN_START:
            if self.in_turn:
                return f"turn {self.turn} is still open (no nested turns)"
            if turn != self.turn + 1:
                return f"turn must be {self.turn + 1}"
            trigger = data.get("trigger")
            if not isinstance(trigger, dict) or not isinstance(trigger.get("kind"), str):
                return "trigger must be an object with a kind"
            return None
        if etype == WRAPPED_UPDATE:
            return self._wrapped_problem(data)
        if etype == CONFIG_SET:
            return self._config_problem(data)
        if not self.in_turn:
            return "outside any turn (turn enclosure)"
        if turn != self.turn:
            return f"names turn {turn!r}, the open turn is {self.turn}"
        if etype == USER_MESSAGE:
            if self.step_open:
                return "a user message cannot sit inside a step"
            return None if isinstance(data.get("content"), list) else "content must be a list"
        if etype == STEP_START:
            if self.step_open:
                return f"step {self.step} is still open (no nested steps)"
            return None if data.get("step") == self.step + 1 else f"step must be {self.step + 1}"
        if etype == TURN_END:
            if self.step_open:
                return f"step {self.step} is still open"
            if self.unanswered():
                return f"tool calls without results: {self.unanswered()}"
            return reason_problem(data.get("reason"))
        if etype == TOOL_RESULT and is_synthetic_result(data):
            return self._synthetic_problem(data)
        if etype in _STEP_EVENTS and (not self.step_open or data.get("step") != self.step):
            return f"names step {data.get('step')!r}, the open step is {self._open_step()}"
        return self._step_event_problem(etype, data)

    def _wrapped_problem(self, data: dict[str, object]) -> str | None:
        # The one event allowed between turns: a wrapped agent sends updates whenever
        # it likes (its commands right after session/new, a late plan). Inside a turn
        # it names the open turn, at any point (a plan may come mid-step); between
        # turns it names none, so it never claims a turn that is not open.
        update = data.get("update")
        if not isinstance(update, dict) or not isinstance(update.get("sessionUpdate"), str):
            return "update must be an ACP SessionUpdate object (with a sessionUpdate string)"
        if self.in_turn:
            turn = data.get("turn")
            return None if turn == self.turn else f"names turn {turn!r}, the open turn is {self.turn}"
        return "between turns it names no turn" if "turn" in data else None

    def _config_problem(self, data: dict[str, object]) -> str | None:
        # A setting may change between turns (the usual case) or while a turn is open;
        # it is placed as a wrapped update is: naming the open turn, or none between.
        if not isinstance(data.get("configId"), str) or not isinstance(data.get("value"), str):
            return "configId and value must be strings"
        if self.in_turn:
            turn = data.get("turn")
            return None if turn == self.turn else f"names turn {turn!r}, the open turn is {self.turn}"
        return "between turns it names no turn" if "turn" in data else None

    def _open_step(self) -> str:
        return str(self.step) if self.step_open else "none"

    def _step_event_problem(self, etype: str, data: dict[str, object]) -> str | None:
        if etype == ASSISTANT_CHUNK:
            chunk = data.get("chunk")
            if not isinstance(chunk, dict) or chunk.get("type") not in ("text", "reasoning"):
                return "chunk must be {type: text|reasoning, text}"
            return None if isinstance(chunk.get("text"), str) else "chunk text must be a string"
        if etype == ASSISTANT_MESSAGE:
            content = data.get("content")
            if not isinstance(content, list):
                return "content must be a list"
            for block in content:
                if type(block) is not dict or block.get("type") not in _BLOCK_TYPES:
                    return f"content block {block!r:.60} is not a text, reasoning or tool-call block"
            for block in tool_calls_of(data):
                if not isinstance(block.get("id"), str) or block["id"] in self.calls:
                    return f"tool-call id {block.get('id')!r} is missing or not unique in the turn"
                if not isinstance(block.get("arguments"), str):
                    return "tool-call arguments must be JSON text"
            return None
        if etype == STEP_END:
            open_calls = [
                c for c, v in self.calls.items() if v.step == self.step and not v.answered
            ]
            if open_calls:
                return f"tool calls without results: {open_calls}"
            return f"compactions that have not ended: {self.unended()}" if self.unended() else None
        if etype == CONTEXT_COMPACTION:
            return self._compaction_problem(data)
        call = self.calls.get(str(data.get("callId")))
        if call is None or call.step != self.step:
            return f"callId {data.get('callId')!r} is not a tool call of step {self.step}"
        if etype == TOOL_CALL:
            if call.started:
                return f"tool call {data['callId']!r} already recorded"
            return "pending must be true when present" if data.get("pending", True) is not True else None
        if etype == TOOL_PERMISSION:
            if not call.held or call.answered:
                return f"tool call {data['callId']!r} is not waiting for a permission (no pending tool/call)"
            permission = data.get("permission")
            if not isinstance(permission, dict) or not isinstance(permission.get("outcome"), str):
                return "permission must be an object with an outcome"
            return None
        # TOOL_RESULT
        if call.answered:
            return f"tool call {data['callId']!r} already has a result"
        if not isinstance(data.get("content"), list) or type(data.get("isError")) is not bool:
            return "a result needs content (list) and isError (bool)"
        return None

    def _compaction_problem(self, data: dict[str, object]) -> str | None:
        # Where it stands was checked (the open step of the open turn); what it says of
        # the compaction is checked here: an id and a status, the turns it replaces
        # (before the open turn, the same for every event of the id), its summary.
        cid, status = data.get("compactionId"), data.get("status")
        if not isinstance(cid, str) or not cid or not isinstance(status, str) or not status:
            return "compactionId and status must be non-empty strings"
        replaces = data.get("replaces")
        if not isinstance(replaces, dict) or type(replaces.get("fromTurn")) is not int \
                or type(replaces.get("toTurn")) is not int:
            return "replaces must be {fromTurn, toTurn}, both integers"
        first, last = replaces["fromTurn"], replaces["toTurn"]
        if not 1 <= first <= last + 1 or last >= self.turn:
            return f"replaces turns {first} to {last}: it replaces turns before the open turn {self.turn}, in order"
        known = self.compactions.get(cid)
        if known is not None and known.replaces != (first, last):
            return f"compaction {cid!r} replaces turns {known.replaces[0]} to {known.replaces[1]}"
        if not isinstance(data.get("summary"), list):
            return "summary must be a list of content blocks"
        if "error" in data and not isinstance(data["error"], str):
            return "error must be a string"
        return None

    def _synthetic_problem(self, data: dict[str, object]) -> str | None:
        # Written by the closers: it may answer a call of any step of the open turn,
        # even after that step ended, but still exactly once and naming the call's step.
        call = self.calls.get(str(data.get("callId")))
        if call is None:
            return f"callId {data.get('callId')!r} is not a tool call of turn {self.turn}"
        if call.answered:
            return f"tool call {data['callId']!r} already has a result"
        if data.get("step") != call.step:
            return f"names step {data.get('step')!r}, the call was made in step {call.step}"
        return None

    def _apply(self, event: Event) -> None:
        etype, data = event["type"], event["data"]
        self.next_seq += 1
        if etype == TURN_START:
            self.turn, self.in_turn, self.step, self.step_open = data["turn"], True, 0, False
            self.calls, self.compactions = {}, {}
        elif etype == TURN_END:
            self.in_turn, self.calls, self.compactions = False, {}, {}
        elif etype == STEP_START:
            self.step, self.step_open = data["step"], True
        elif etype == STEP_END:
            self.step_open = False
        elif etype == ASSISTANT_MESSAGE:
            for block in tool_calls_of(data):
                self.calls[block["id"]] = OpenCall(self.step, block.get("name", "?"))
        elif etype == TOOL_CALL:
            call = self.calls[data["callId"]]
            call.started, call.held = True, "pending" in data
        elif etype == TOOL_PERMISSION:
            self.calls[data["callId"]].held = False
        elif etype == TOOL_RESULT:
            self.calls[data["callId"]].answered = True
        elif etype == CONTEXT_COMPACTION:
            replaces = data["replaces"]
            ended = OpenCompaction(self.step, (replaces["fromTurn"], replaces["toTurn"]),
                                   data["status"] in COMPACTION_ENDED)
            self.compactions = {**self.compactions, data["compactionId"]: ended}


def check_invariants(
    events: Iterable[Event], *, closed: bool = False, session_id: str | None = None
) -> InvariantTracker:
    """Check a whole log from seq 0; with `closed`, it must also end outside a turn.
    Returns the tracker (where the log stands). Raises InvariantError."""
    tracker = InvariantTracker(session_id=session_id)
    tracker.feed_all(events)
    if closed and tracker.in_turn:
        raise InvariantError(f"the log ends inside turn {tracker.turn}", session_id=session_id)
    return tracker
