"""A session's turns as a person reads them, for `acp-bridge sessions`: the view model
built from a stored log (with the crash-repair closers of an unrepaired turn applied in
memory), and the wording of its states that both renderings share. The turns themselves
are built in acp_bridge.cli.sessions.turns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acp_bridge.cli.sessions.text import add_usage, cut, json_text, local_time, one_line
from acp_bridge.cli.sessions.turns import Compaction, Tool, Turn, TurnBuilder
from session.events import failed_command
from session.reason_checks import checked_reason
from session.typed import typed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, Protocol

    from acp_bridge.cli.sessions.source import Stored
    from session import Owner
    from session.events import Event
    from session.scan import TornTail

    class Ended(Protocol):
        """What a last turn's status is worded from: a `Turn`, or what `list` keeps of one."""

        @property
        def reason(self) -> Mapping[str, Any] | None: ...

        @property
        def end_on_disk(self) -> bool: ...

AGENT_DATA_LIMIT = 500  # characters of a wrapped agent's error data `show` prints

class States:
    """The wording of a session's turn states, for a view of it whole (`View`) or
    streamed (`walk.Walk`): both know the owner and their last turn."""

    owner: str
    owner_pid: int | None

    @property
    def last(self) -> Turn | None:
        raise NotImplementedError

    def turn_status(self, turn: Turn) -> str:
        """The long form, for a turn's header line."""
        if turn.reason is None:
            who = f" (in process {self.owner_pid})" if self.owner_pid else ""
            return f"running{who}"
        text = reason_text(turn.reason, long=True)
        if not turn.end_on_disk:
            cause = one_line(str(turn.reason.get("cause", "crash")))
            if self.owner == "unknown":
                return f"interrupted ({cause}, or still running; not yet repaired on disk)"
            return f"interrupted ({cause}; not yet repaired on disk)"
        return text

    def status(self) -> tuple[str | None, str]:
        """(machine status, short text) of the last turn, for `list`."""
        return last_status(self.last, self.owner)


def last_status(turn: Ended | None, owner: str) -> tuple[str | None, str]:
    """(machine status, short text) of a session's last turn, for `list`; `owner` as
    `session.Owner` says it (live, none, unknown)."""
    if turn is None:
        return None, "no turns"
    if turn.reason is None:
        return "running", "running"
    if not turn.end_on_disk:
        if owner == "unknown":
            return "open", "open (running or interrupted)"
        return "interrupted", "interrupted (unrepaired)"
    kind = str(turn.reason.get("kind"))
    return kind, reason_text(turn.reason, long=False)


class View(States):
    """A stored session, with the closers of an unrepaired open turn applied in memory."""

    def __init__(self, stored: Stored, owner: Owner) -> None:
        from session import interrupted_turn_closers

        self.stored = stored
        self.owner, self.owner_pid = owner
        events = stored.events
        self.closers: list[Event] = []
        self.running = False
        tracker = stored.tracker
        assert tracker is not None, "a view is of a checked log (Source.summary, check_stored)"
        if tracker.in_turn:
            if self.owner == "live":
                self.running = True
            else:
                self.closers = interrupted_turn_closers(tracker, time=events[-1]["time"])
        on_disk = events[-1]["seq"] + 1 if events else 0  # events may be the last turn only
        self.turns = _build_turns([*events, *self.closers], on_disk=on_disk)
        self.turn_count = stored.earlier_turns + len(self.turns)
        self.usage: dict[str, int] = dict(stored.earlier_usage)
        for turn in self.turns:
            add_usage(self.usage, turn.usage)

    @property
    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None


def check_stored(stored: Stored) -> None:
    """Refuse, as `load` does, a log that breaks the invariants (SessionCorruptError);
    else keep where it stands (`stored.tracker`), for its view."""
    from session import InvariantError, InvariantTracker
    from session.loading import invariant_corruption

    tracker = InvariantTracker(session_id=stored.id)
    try:
        tracker.feed_all(stored.events)
    except InvariantError as exc:  # the same error, word for word, as SessionStore.load
        raise invariant_corruption(stored.id, exc, stored.locate) from None
    stored.tracker = tracker


def _build_turns(events: Iterable[Event], *, on_disk: int) -> list[Turn]:
    builder = TurnBuilder(on_disk=on_disk)
    for event in events:
        builder.feed(event)
    return builder.turns


def reason_text(reason: Mapping[str, Any], *, long: bool) -> str:
    """How a turn ended, in words; `reason` as the log or the search index holds it."""
    known = checked_reason(reason)
    if known is None:  # not a reason the invariants admit (a refused log, as the index keeps it)
        return one_line(str(reason.get("kind")))
    # Every value from the log is shown through one_line: control characters escaped. The
    # invariants check a reason's fields are there, not each one's type: str() them.
    if known["kind"] == "error" and failed_command(known):  # a slash command's answer, not a failed turn
        return f"the command could not run: {one_line(str(known['message']))}"
    if known["kind"] == "error":
        text = f"error: {one_line(str(known['message']))}"
        if long:
            details = [f"step {one_line(str(known['step']))}"]
            if known.get("code"):
                details.append(f"code {one_line(str(known.get('code')))}")
            if known.get("retryable"):
                details.append("retryable")
            text += f" ({', '.join(details)})"
            sent = known.get("agentError")
            if sent is not None:  # a wrapped agent's own error: its code and data say why
                text += f"; the agent answered {sent['code']}"
                if "data" in sent:
                    text += f", data: {cut(one_line(json_text(sent['data'])), AGENT_DATA_LIMIT)}"
        return text
    if not long:
        return known["kind"]
    if known["kind"] == "cancelled":
        # forced: a wrapped agent that did not stop within the cancel grace (docs/wrap.md).
        forced = "; the agent did not stop, acp-bridge ended the turn" if known.get("forced") else ""
        said = known.get("agentStopReason")
        if said is not None:  # the wrapped agent had the cancel and answered this (untrusted text)
            forced += f"; the agent answered {cut(one_line(said), AGENT_DATA_LIMIT)}"
        return f"cancelled (by {known['by']}{forced})"
    if known["kind"] == "interrupted":
        return f"interrupted ({known['cause']})"
    if known["kind"] == "max_steps":
        return f"max_steps (limit {one_line(str(known['limit']))})"
    if known["kind"] == "max_tokens":
        return "max_tokens (the model hit its output limit)"
    return known["kind"]


def turn_duration(turn: Turn) -> str | None:
    if turn.ended_at is None:
        return None
    seconds = max(0, turn.ended_at - turn.started_at) / 1000
    if seconds < 60:
        return f"took {seconds:.1f} s"
    return f"took {int(seconds // 60)} min {int(seconds % 60)} s"


def turn_info(turn: Turn) -> str:
    parts = [f"started {local_time(turn.started_at)}"]
    took = turn_duration(turn)
    if took:
        parts.append(took)
    if turn.mode:
        parts.append(f"mode {one_line(turn.mode)}")
    if turn.agent:
        parts.append(f"agent {one_line(turn.agent)}")
    if turn.model:
        parts.append(f"model {one_line(turn.model)}")
    return " · ".join(parts)


def compaction_heading(compaction: Compaction) -> str:
    """What a compaction of the model's context did, in words (every value from the log
    shown through one_line)."""
    status = one_line(compaction.status).replace("_", " ")
    last = compaction.to_turn
    if type(last) is not int or last < 1:
        what = "nothing of this log replaced"
    else:
        what = f"the conversation up to turn {last} summarized for the model"
        if type(compaction.from_turn) is int and compaction.from_turn > 1:
            what += f" (read from turn {compaction.from_turn} on)"
    heading = f"Compaction, {status}: {what}"
    return heading + (f"; error: {one_line(compaction.error)}" if compaction.error else "")


def notice_text(notice: Mapping[str, Any]) -> str:
    """A wrapped agent's notice on one line: its severity, title and description (every
    value from the log shown through one_line; a malformed one as far as it reads)."""
    severity, title = notice.get("severity"), notice.get("title")
    text = f"Notice ({one_line(severity) if isinstance(severity, str) else 'info'}): "
    text += one_line(title) if isinstance(title, str) else "(untitled)"
    description = notice.get("description")
    return text + (f" — {one_line(description)}" if isinstance(description, str) and description else "")


def result_mark(tool: Tool) -> str:
    result = tool.result
    if result is None or not result.get("isError"):
        return ""
    error = result.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return f"[error: {one_line(str(code))}]" if code else "[error]"


def tool_diffs(tool: Tool) -> list[tuple[str, str | None, str]]:
    """(path, old text, new text) of the diffs a tool result displays."""
    display = tool.result.get("display") if tool.result is not None else None
    out = []
    for item in display if isinstance(display, list) else []:
        if isinstance(item, dict) and item.get("type") == "diff":
            old = item.get("oldText")
            out.append((str(item.get("path", "")), old if isinstance(old, str) else None,
                        str(item.get("newText", ""))))
    return out


class WrappedAgent:
    """Who recorded a session through `acp-bridge wrap`, from the header's `wrapped` field
    (docs/wrap.md): the command line, the agent's own name and version (its `agentInfo`,
    else the command's file name) and its own session id. Every part is shown with
    control characters escaped: they come from the wrapped agent."""

    __slots__ = ("command", "name", "product", "session_id")

    def __init__(self, command: str, name: str, session_id: str | None, product: str = "") -> None:
        self.command = command
        self.name = name
        self.session_id = session_id
        self.product = product or name  # the name without its version (search filters, stats groups)


def wrapped_agent(header: Mapping[str, object]) -> WrappedAgent | None:
    """The wrapped agent of a session, or None for a session of acp-bridge's own agent."""
    import shlex

    wrapped = header.get("wrapped")
    if not isinstance(wrapped, dict):
        return None
    argv = wrapped.get("command")
    argv = [str(a) for a in argv] if isinstance(argv, list) else []
    command = one_line(shlex.join(argv)) if argv else "?"
    info = wrapped.get("agentInfo")
    name = product = ""
    if isinstance(info, dict) and info.get("name"):
        name = product = one_line(str(info["name"]))
        if info.get("version"):
            name += f" {one_line(str(info['version']))}"
    elif argv:
        name = product = one_line(argv[0].rsplit("/", 1)[-1])
    sid = wrapped.get("sessionId")
    return WrappedAgent(command, name or "?", one_line(str(sid)) if sid else None, product or "?")


def view_notes(torn: TornTail | None, running: bool, closers: list[Event]) -> list[str]:
    notes = []
    if torn is not None and not running:
        place = ", ".join(f"{k} {v}" for k, v in torn.where.items())
        notes.append(
            f"{torn.records} damaged record(s) at the end ({place}: {one_line(torn.reason)}) "
            "would be cut (and kept aside) when the session is next loaded."
        )
    end = typed(closers[-1]) if closers else None
    if end is not None and end["type"] == "turn/end":  # the closers end with it
        turn = end["data"]["turn"]
        notes.append(
            f"turn {turn} was cut short and has not been repaired on disk yet; it is shown "
            "as loading will close it. Nothing was written."
        )
    return notes
