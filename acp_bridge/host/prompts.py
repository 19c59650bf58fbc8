"""The prompts of a host's live sessions (acp_bridge.host.host.Host hands them here):
one at a time per session, the cancels routed to the turn that runs (`session/cancel`
in the connection's reader as it is read, else in a task; `$/cancel_request` through
the hook the prompt registers with rpc; a close or delete waiting for the answer), and
the answer of each prompt settled from its persisted `turn/end` (`answer_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio

from acp_bridge.errors import PromptInProgressError, TurnFailedError
from acp_bridge.host.engine import TurnEnd, Turns
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import checked
from acp_bridge.host.settlement import TurnFailed, settle, turn_usage
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.rpc.incoming import on_cancel
from session import StoreIOError
from session.events import TURN_END, Event
from session.typed import typed

log = logging.getLogger("acp_bridge.host")  # the host's: these are its prompts

Notify = Callable[[str, Any], None]
"""Queue a `session/update` for a session (the connection's `notify_update`)."""


class Prompts:
    """The prompts running in a host's sessions, by session id."""

    def __init__(self) -> None:
        self._running: dict[str, anyio.Event] = {}  # session id -> set when its prompt returns

    def answering(self, session_id: str) -> bool:
        """Whether the session `session_id` is answering a prompt."""
        return session_id in self._running

    async def run(self, session_id: str, session: Turns, prompt: list[Any], rest: Mapping[str, Any],
                  notify: Notify) -> dict[str, Any]:
        """`session/prompt` of the live `session`: its turn run, its answer."""
        if session_id in self._running:
            raise PromptInProgressError(session_id)
        done = self._running[session_id] = anyio.Event()
        # `$/cancel_request` of this request (rpc's to route) cancels the turn, which is
        # then answered `cancelled`; an engine with no turn to cancel declines, and the
        # request itself is cancelled (-32800).
        on_cancel(lambda: session.cancel("$/cancel_request", None))
        try:
            turn = await session.prompt(prompt, rest)
        except StoreIOError as exc:
            # A full or failing disk, not a bug: one line in the log, not a traceback.
            log.warning("%s", exc.message)
            raise
        finally:
            del self._running[session_id]
            done.set()
        if not turn.shown:  # how the turn ended, as our agent's own stream shows it
            for update in updates_for(turn.end, UpdateContext(replay=False)):
                notify(session_id, update)
        return answer_of(turn, session.log.events if session.log is not None else ())

    async def cancel_and_wait(self, session_id: str, session: Turns) -> None:
        """The running prompt of `session` (if any) cancelled by session/close, and
        answered."""
        done = self._running.get(session_id)
        if done is not None:
            session.cancel("session/close", None)
            await done.wait()

    def cancel_now(self, params: Any, live: Mapping[str, Turns]) -> bool | None:
        """`session/cancel` in the connection's reader, as it is read: it takes effect
        before the reader takes the next message (the client's `cancelled` answer to a
        permission request, which ACP has it send right after), so the cancel wins
        however the two are read (docs/protocol.md). Left to a task (False) when no
        prompt runs yet: a prompt read in the same write has not started, and its task
        runs first."""
        if not isinstance(params, dict):
            log.info("session/cancel ignored: params must be an object")
            return None
        try:
            request = checked("session/cancel", params)
        except Exception as exc:  # a notification: nobody to answer
            log.info("session/cancel ignored: %s", to_rpc_error(exc).message)
            return None
        session = live.get(request["sessionId"])
        if session is None or request["sessionId"] not in self._running:
            return False
        session.cancel("session/cancel", params)
        return None

    def cancel(self, session_id: str, rest: Mapping[str, Any], live: Mapping[str, Turns]) -> None:
        """`session/cancel` in a task (no prompt ran when the reader read it)."""
        session = live.get(session_id)
        if session is None or session_id not in self._running:
            log.info("session/cancel for %s: no running prompt", session_id)
            return
        session.cancel("session/cancel", {**rest, "sessionId": session_id})


def answer_of(turn: TurnEnd, events: Iterable[Event] = ()) -> dict[str, Any]:
    """The prompt's answer: settled from the persisted `turn/end` (its `stopReason` and
    `_meta.acpBridge`), after what the engine adds; a failed turn is an error. `usage`
    is the turn's as `events` (the log's, from the turn's start) recorded it, unless the
    engine's answer has one (a wrapped agent's own, as it sent it)."""
    settled = settle(turn.end)
    if isinstance(settled, TurnFailed):
        raise TurnFailedError(settled.error)
    answer = {k: v for k, v in turn.answer.items() if k not in ("stopReason", "_meta")}
    meta = turn.answer.get("_meta")
    answer["stopReason"] = settled["stopReason"]
    end = typed(turn.end)
    if "usage" not in answer and end["type"] == TURN_END:  # settle() takes no other event
        usage = turn_usage(events, end["data"]["turn"])
        if usage is not None:
            answer["usage"] = usage
    answer["_meta"] = {**(meta if isinstance(meta, dict) else {}), **settled["_meta"]}
    return answer
