"""What happens to a wrapped session (`Event`s) and what the wrapper does about it
(`Act`s): the vocabulary of acp_bridge.wrap.lifecycle's `step` (docs/wrap.md, "The
lifecycle").

Events come from the editor (`Prompted`, `Cancel`, `Stop`, `Close`, `SwitchAsked`), the
child (`ChildUpdate`, `ChildRequest`, `Answered`, `LateAnswer`, `PermissionAnswered`) and
the driver's own waits and timers (`Began`, `Reached`, `ReachFailed`, `Asking`,
`GraceOver`, `Interrupted`, `Finished`, `RestoreBegan`, `RestoreRefused`,
`RestoreAbandoned`, `Bound`,
`SeedBegan`, `SeedEnded`, `Moved`, `MoveFailed`). `Act`s are what the driver then
performs, in order.

Pure: data only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal

from acp_bridge.wrap.state import Bare, Way


class Prompted(Bare):
    """The editor's prompt arrived."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Began:
    """The prompt starts: a command of the wrapper's (`own`), or a turn of the child's."""

    own: bool


class Reached(Bare):
    """The child runs and the session is placed in it."""

    __slots__ = ()


class ReachFailed(Bare):
    """The child cannot be started, or died on the way."""

    __slots__ = ()


class Asking(Bare):
    """The prompt is about to be sent to the child."""

    __slots__ = ()


Answer = Literal["result", "result_cancelled", "error", "exited", "exited_unread"]


@dataclass(frozen=True, slots=True)
class Answered:
    """The child's answer to the prompt: a result (`result_cancelled`: its stopReason is
    `cancelled`), an error, or its death before it answered (`exited_unread`: it never
    read a byte of the prompt); `resend`: the prompt may be sent again to a restarted
    child."""

    answer: Answer
    resend: bool = False


class GraceOver(Bare):
    """The cancel grace ended before the child answered (or was reached)."""

    __slots__ = ()


class Interrupted(Bare):
    """The wait on the child was stopped (`Stop`): our stdin ended."""

    __slots__ = ()


class Finished(Bare):
    """The prompt returned (its turn's end written, or it failed before a turn)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Cancel:
    """The editor cancelled the running turn (`session/cancel`, `$/cancel_request`,
    `session/close`); `deadline`: the end of the grace if this cancel starts it."""

    by: str
    deadline: float


class Stop(Bare):
    """Our stdin ended: the host stops."""

    __slots__ = ()


class Close(Bare):
    __slots__ = ()


class ChildUpdate(Bare):
    """A `session/update` of the child's session."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ChildRequest:
    """A request or notification of the child naming the session (`permission`: a
    `session/request_permission`)."""

    permission: bool = False


@dataclass(frozen=True, slots=True)
class PermissionAnswered:
    """The editor answered a permission request of the running turn (`cancelled`: with
    the outcome `cancelled`); `interrupted`: its wait was stopped by a cancel."""

    cancelled: bool = False
    interrupted: bool = False


@dataclass(frozen=True, slots=True)
class LateAnswer:
    """The child answered the prompt of a turn the wrapper ended (`ok`: not an error)."""

    child_sid: str
    ok: bool


@dataclass(frozen=True, slots=True)
class RestoreBegan:
    way: Way
    child_sid: str | None
    generation: int


class RestoreRefused(Bare):
    """The child refused to load or resume the session: the next way is tried."""

    __slots__ = ()


class RestoreAbandoned(Bare):
    """The wait for the child's load, resume or new session was stopped (a cancel's
    grace, the editor's cancel of its load): the child may still be at it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Bound:
    """The child's session `child_sid` on the run `generation` of the agent `agent` is
    the session's."""

    child_sid: str
    generation: int
    agent: str


class SeedBegan(Bare):
    __slots__ = ()


class SeedEnded(Bare):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class SwitchAsked:
    """Hand the session to the agent `target` (`in_command`: `/agent`, from the
    session's own prompt); `kept`: the session's mode and commands, for a failed move."""

    target: str
    in_command: bool = False
    kept: Any = None


class Moved(Bare):
    """The move is recorded (durable): the session is the target's."""

    __slots__ = ()


class MoveFailed(Bare):
    __slots__ = ()


Event = (Prompted | Began | Reached | ReachFailed | Asking | Answered | GraceOver | Interrupted | Finished
         | Cancel | Stop | Close | ChildUpdate | ChildRequest | PermissionAnswered | LateAnswer | RestoreBegan
         | RestoreRefused | RestoreAbandoned | Bound | SeedBegan | SeedEnded | SwitchAsked | Moved | MoveFailed)


class Act(enum.Enum):
    """What the driver does after a step, in the order given."""

    AWAIT_MOVE = "wait for the move to end"
    RUN_OWN = "run the wrapper's command"
    REACH = "start the child and place the session if need be"
    RECORD_PROMPT = "record turn/start and the prompt"
    SEND = "send the prompt"
    RESEND = "reach the restarted child, to send the prompt again"
    WAIT_UNTIL_GRACE = "end the waits on the child at the grace"
    CANCEL_ASKS = "stop the turn's permission requests waiting on the editor"
    TELL_CHILD = "send the child session/cancel"
    STOP_WAITING = "stop the wait on the child"
    END_ANSWER = "end the turn as the child answered"
    END_FAILED = "end the turn error, with the child's error"
    END_CANCELLED = "end the turn cancelled {by}"
    END_FORCED = "end the turn cancelled {by, forced}"
    END_CRASH = "write the known calls, end the turn interrupted {crash}"
    END_SHUTDOWN = "write the known calls, end the turn interrupted {shutdown}"
    STICK = "drop the child session's traffic until it answers"
    OVERDUE = "restart the child at its next use"
    UNSTICK = "take the child session's traffic again"
    RECORD = "record the update"
    FORWARD = "pass it on to the editor"
    DROP = "drop it"
    ASK_EDITOR = "write the turn's calls, sync, pass it on to the editor"
    KEEP_FROM_EDITOR = "answer a permission cancelled, refuse a request, drop a notification"
    ANSWER_CANCELLED = "answer the child's permission request cancelled"
    RECORD_PERMISSION = "record the editor's answer on the call"
    REFUSE_BUSY = "refuse: a prompt runs (-32001)"
    REFUSE_MOVING = "refuse: a move runs already"
    UNCHANGED = "answer: the agent is the current one"
    PLACE = "place the session in the target agent, seeded"
    LEAVE_SOURCE = "close the source's child session, stop its process if unused"
    GO_BACK = "forget the session in the target, stop the target if unused"
    WAKE = "wake the prompt waiting for the move"
    CLOSE_CHILD = "close the child session, waited for until close_by"
    CLOSE_CHILD_NOW = "close the child session, not waited for"
    FORGET = "forget its child session id, close the log"


