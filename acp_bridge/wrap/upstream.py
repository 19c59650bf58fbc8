"""What the wrapped agent sends us, passed on to the editor (docs/wrap.md, "Pass-through").

- `session/update` is handled in the connection's reader, in the order it came
  (rpc.Connection's inline notifications): recorded in our log (the running turn's
  `TurnRecorder`, else a `wrapped/update` between turns), then queued for the editor
  under our session id; a notice or a compaction's update only if the editor
  advertised them (it is recorded all the same). The editor connection's `before_write` hands the log's events
  to the OS before the update is written: log before send, as for our own agent. An
  update for a child session we do not know yet (it may come before the answer that
  names the session) waits for it, in a small bounded buffer. What the child sends
  after the answer of our load or resume of a session is recorded and held from the
  editor until its next request on that session (`release`): a load ends with its
  answer (docs/wrap.md, "Load").
- Its requests (`session/request_permission`, `fs/*`, `terminal/*`, extension methods)
  are re-issued to the editor with our ids once the log is durable (a permission, a
  file write or a command may be the last thing before a crash), and answered back
  with the editor's result or error. A permission's outcome is recorded on the turn,
  unless the editor cancelled the turn before its answer was acted on: the child is
  then answered `cancelled` and nothing is recorded (docs/wrap.md, "Cancel and a
  permission answer").
  If the child dies meanwhile, the request to the editor is cancelled
  (`$/cancel_request`).
- Its other notifications go to the editor as they are, the session id mapped (not its
  `$/cancel_request`, which names its own id: acp_bridge.wrap.link handles it).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from acp_bridge.errors import RequestRefusedError
from acp_bridge.host.advertised import NEITHER, not_asked_for
from acp_bridge.rpc.connection import Connection, Fallback, Inline
from acp_bridge.wrap.children import SessionMap
from acp_bridge.wrap.commands import their_commands
from acp_bridge.wrap.link import ChildLink, permission_cancelled
from acp_bridge.wrap.record import StreamedChunk
from acp_bridge.wrap.sessions import WrappedSession, mode_of
from acp_bridge.wrap.signals import Act, ChildRequest, ChildUpdate, PermissionAnswered
from acp_bridge.wrap.subagents import Subagents
from acp_bridge.wrap.turns import WrappedTurns
from session.items import assistant_chunk, config_set, wrapped_update

log = logging.getLogger("acp_bridge.wrap.upstream")

EARLY_SESSIONS: Final = 16  # child sessions whose early updates are held
EARLY_UPDATES: Final = 256  # updates held per such session (more are dropped)
# Updates of a loaded session held from the editor until its next request on it; more
# are recorded but not sent (the next load replays them): a child that streams on after
# its load does not grow the wrapper without bound.
HELD_UPDATES: Final = 4096
PERMISSION: Final = "session/request_permission"
CHILD_UPDATE: Final = ChildUpdate()


class ChildSide:
    """The handlers of the child's connection (one per agent, serving every run)."""

    def __init__(self, sessions: SessionMap, editor: Callable[[], Connection],
                 shown: Callable[[WrappedSession, Any], Any]) -> None:
        self._sessions = sessions
        self._editor = editor
        self._early: OrderedDict[str, list[Any]] = OrderedDict()
        # What the editor is shown of an update (our commands added to the child's
        # list; `wrap --agent`: our `agent` option added to the child's config options).
        # It never changes a message or thought chunk, which the fast path (`_stream`)
        # passes on without it.
        self._shown = shown
        # A subagent's session of ours, made as the parent's agent announces it
        # (acp_bridge.wrap.subagents); None: not recorded apart.
        self.subagents: Subagents | None = None
        # What the editor advertised of notices and compaction (the engine sets it when
        # it has the editor's `initialize`: its own, or the start-up handshake's).
        self.support = NEITHER

    def inline(self) -> dict[str, Inline]:
        return {"session/update": _Updates(self)}

    def fallback_for(self, link: ChildLink) -> Fallback:
        async def fallback(method: str, params: Any, is_request: bool) -> Any:
            return await self.on_message(link, method, params, is_request)

        return fallback

    # --- session/update --------------------------------------------------------------

    def on_update(self, params: Any) -> None:
        if not isinstance(params, dict):
            self._editor().notify("session/update", params)
            return
        child_sid = params.get("sessionId")
        if self._sessions.is_stuck(child_sid):  # of a turn the wrapper ended (the cancel grace)
            self._sessions.drop(child_sid, "updates")
            return
        turns = self._sessions.of_child(child_sid)
        if turns is None:
            self._hold(child_sid, params)
            return
        ws = turns.session
        if Act.RECORD not in ws.to(CHILD_UPDATE):
            return  # the child's own replay of a session we replayed from our log, or the seed's
        update = params.get("update")
        if self.subagents is not None and isinstance(update, dict) \
                and update.get("sessionUpdate") == "subagent_update":
            update = self.subagents.mapped(turns, update)
        self.record(ws, update)
        if kind := not_asked_for(update, self.support):  # recorded all the same (docs/wrap.md)
            log.info("session %s: a %s of the wrapped agent the editor did not ask for: not sent", ws.id, kind)
            return
        if ws.held is not None:  # our load (or resume) of it is answered: until the editor's next request
            if len(ws.held) < HELD_UPDATES:
                ws.held.append(update)
                if len(ws.held) == HELD_UPDATES:  # said once: what follows is not held
                    log.info("session %s: %d updates of the wrapped agent held since its load: the rest are "
                             "recorded, not sent (a load replays them)", ws.id, HELD_UPDATES)
            return
        self._editor().notify_update(ws.id, self._shown(ws, update))

    def release(self, ws: WrappedSession) -> None:
        """The editor's next request on `ws` after its load or resume: what the child
        sent since that answer (recorded already) goes to the editor now, before
        anything the request brings."""
        held, ws.held = ws.held, None
        editor = self._editor()
        for update in held or ():
            editor.notify_update(ws.id, self._shown(ws, update))

    def notice(self, sid: str, update: dict[str, Any]) -> None:
        """The wrapper's own notice for the session `sid` (a `notice` update), sent if
        the editor takes notices; live only, not recorded (docs/wrap.md)."""
        if self.support.notices:
            self._editor().notify_update(sid, update)

    def on_updates(self, batch: list[Any]) -> None:
        """`on_update` of each of `batch` (the params of `session/update`s read
        together), in order; the text and thought chunks of one session's running turn
        that follow each other go on their fast path together (`_stream`)."""
        index, count = 0, len(batch)
        while index < count:
            after = self._stream(batch, index)
            if after == index:
                self.on_update(batch[index])
                after += 1
            index = after

    def _stream(self, batch: list[Any], start: int) -> int:
        """The chunks from `batch[start]` on that go on the open step of one session's
        running turn (most of a stream), recorded and queued for the editor on their
        fast path (`TurnRecorder.streamed`, `SessionLog.append_chunks`, one
        `notify_updates`): the same events, bytes and order as `on_update` one after
        the other (nothing is written out between them either way; `shown` leaves a
        chunk as it is). Returns the index after them (`start`: none)."""
        params = batch[start]
        if not isinstance(params, dict):
            return start
        child_sid = params.get("sessionId")
        if self._sessions.is_stuck(child_sid):
            return start
        turns = self._sessions.of_child(child_sid)
        if turns is None:
            return start
        ws = turns.session
        recorder = ws.recorder
        # The same gate as `on_update`'s (the lifecycle's), a turn open to record on,
        # and nothing held from the editor (`on_update` holds it).
        if Act.RECORD not in ws.to(CHILD_UPDATE) or recorder is None or ws.log.closed or ws.held is not None:
            return start
        updates: list[dict[str, Any]] = []
        index, count = start, len(batch)
        while index < count:
            params = batch[index]
            if not isinstance(params, dict) or params.get("sessionId") != child_sid:
                break
            update = params.get("update")
            if not isinstance(update, dict):
                break
            updates.append(update)
            index += 1
        chunks = recorder.streamed(updates)
        if chunks:
            self._record_chunks(ws, recorder.turn, chunks)
            self._editor().notify_updates(ws.id, updates[:len(chunks)] if len(chunks) < len(updates) else updates)
        return start + len(chunks)

    @staticmethod
    def _record_chunks(ws: WrappedSession, turn: int, chunks: list[StreamedChunk]) -> None:
        """`chunks` appended to the log, each as `record` appends its item: on the
        log's fast path while it takes them, else one at a time (a failure logged, as
        `record` logs it, and the next one appended)."""
        done, count = 0, len(chunks)
        while done < count:
            try:
                done += ws.log.append_chunks(turn, chunks[done:] if done else chunks)
                if done < count:
                    step, kind, text, sent = chunks[done]
                    done += 1
                    ws.log.extend([assistant_chunk(turn, step, kind, text, sent)])
            except Exception:  # the prompt's end meets it again (and answers for it)
                log.exception("session %s: recording an update of the wrapped agent failed", ws.id)

    def record(self, ws: WrappedSession, update: Any) -> None:
        """Append what `update` means to the session's log (not sent: the caller does)."""
        if not isinstance(update, dict) or ws.log.closed:
            return
        if update.get("sessionUpdate") == "current_mode_update" and isinstance(update.get("currentModeId"), str):
            ws.mode = update["currentModeId"]
        elif update.get("sessionUpdate") == "config_option_update":
            ws.mode = mode_of(update) or ws.mode
        elif (theirs := their_commands(update)) is not None:
            ws.commands = theirs  # shown with ours added (acp_bridge.wrap.commands)
        recorder = ws.recorder
        items = recorder.update(update) if recorder is not None and recorder.open else [wrapped_update(update)]
        if not items:
            return
        try:
            ws.log.extend(items)
        except Exception:  # the prompt's end meets it again (and answers for it)
            log.exception("session %s: recording an update of the wrapped agent failed", ws.id)

    def _hold(self, child_sid: Any, params: dict[str, Any]) -> None:
        if not isinstance(child_sid, str):
            log.info("an update of the wrapped agent without a session: dropped")
            return
        held = self._early.get(child_sid)
        if held is None:
            if len(self._early) >= EARLY_SESSIONS:
                self._early.popitem(last=False)
            held = self._early[child_sid] = []
        if len(held) < EARLY_UPDATES:
            held.append(params)

    def drop_early(self, child_sid: str) -> None:
        """What the child sent for a session it forked before it answered the fork: its
        replay of the history (opencode forks by loading), which our log holds already."""
        held = self._early.pop(child_sid, None)
        if held:
            log.info("the wrapped agent's fork %s: %d update(s) sent before its answer dropped (its replay)",
                     child_sid, len(held))

    def adopt(self, ws: WrappedSession) -> None:
        """`ws` is now bound to its child session: its early updates go through."""
        held = self._early.pop(ws.state.child_sid or "", None)
        for params in held or ():
            self.on_update(params)

    # --- requests and other notifications --------------------------------------------

    async def on_message(self, link: ChildLink, method: str, params: Any, is_request: bool) -> Any:
        child_sid = params.get("sessionId") if isinstance(params, dict) else None
        if self.subagents is not None:  # a subagent's request before its session of ours is made
            await self.subagents.wait(child_sid)
        if self._sessions.is_stuck(child_sid):
            self._sessions.drop(child_sid, method)
            return kept(method, is_request, "cancelled", "after acp-bridge ended the session's turn")
        turns = self._sessions.of_child(child_sid)
        if turns is None:
            acts: tuple[Act, ...] = (Act.ASK_EDITOR,)
        else:
            acts = turns.session.to(ChildRequest(permission=method == PERMISSION))
        if Act.KEEP_FROM_EDITOR in acts:
            assert turns is not None
            log.info("session %s: %s of the wrapped agent while seeding: kept from the editor", turns.id, method)
            return kept(method, is_request, "seeding", "while acp-bridge seeds the session")
        ws = turns.session if turns is not None else None
        out = {**params, "sessionId": ws.id} if ws is not None else params
        editor = self._editor()
        if not is_request:
            editor.notify(method, out)
            return None
        if Act.ANSWER_CANCELLED in acts:  # a permission asked after the editor's cancel was read
            return permission_cancelled()

        async def ask() -> Any:
            if ws is not None and not ws.log.closed:
                # Durable before the editor acts on it (docs/wrap.md, DESIGN.md section 3),
                # the calls it may let run included (a failed write refuses the request).
                self._asking(ws, method, params)
                await anyio.to_thread.run_sync(ws.log.sync)
            result = await editor.request(method, out)  # its error is relayed as it came (ClientError)
            child_sid = ws.state.child_sid if ws is not None else None
            return mapped_session(result, ws.id, child_sid) if ws is not None and child_sid else result

        if Act.RECORD_PERMISSION in acts:
            assert turns is not None
            return await self._ask_permission(turns, link, params, ask)
        return await link.guarded(ask)

    async def _ask_permission(self, turns: WrappedTurns, link: ChildLink, params: dict[str, Any],
                              ask: Callable[[], Awaitable[Any]]) -> Any:
        """A permission request of the running turn: the editor's answer, recorded,
        unless the editor cancelled the turn before that answer was acted on (its
        cancel read first, or in the same read: the reader handles it at once, and
        this task runs after). The child is then answered `cancelled`, as ACP has a
        client answer the permission requests of a cancelled turn, and nothing is
        recorded: the cancel wins, as in our own agent (docs/wrap.md)."""
        result: Any = None
        with anyio.CancelScope() as scope:
            turns.asking.add(scope)
            try:
                result = await link.guarded(ask)
            finally:
                turns.asking.discard(scope)
        ws = turns.session
        tool_call = params.get("toolCall")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        # The editor ended the turn through its answer, not a session/cancel: the turn
        # says so, as our own agent's does (docs/protocol.md).
        cancelled = (isinstance(tool_call, dict) and isinstance(outcome, dict) and outcome.get("outcome") == "cancelled"
                     and ws.recorder is not None and ws.recorder.open and not ws.log.closed)
        if Act.ANSWER_CANCELLED in ws.to(PermissionAnswered(cancelled=cancelled, interrupted=scope.cancelled_caught)):
            return permission_cancelled()
        self._permission(ws, params, result)
        return result

    @staticmethod
    def _asking(ws: WrappedSession, method: str, params: dict[str, Any]) -> None:
        """The running turn's calls so far written, before the child's request goes to
        the editor (TurnRecorder.asking)."""
        recorder = ws.recorder
        if recorder is None or not recorder.open:
            return
        tool_call = params.get("toolCall") if method == PERMISSION else None
        items = recorder.asking(tool_call if isinstance(tool_call, dict) else None)
        if items:
            ws.log.extend(items)

    @staticmethod
    def _permission(ws: WrappedSession, params: dict[str, Any], result: Any) -> None:
        recorder = ws.recorder
        if recorder is None or not recorder.open or not isinstance(result, dict) or ws.log.closed:
            return
        tool_call, outcome = params.get("toolCall"), result.get("outcome")
        if isinstance(tool_call, dict) and isinstance(outcome, dict):
            items = recorder.permission(tool_call, outcome)
            if items:
                ws.log.extend(items)


def kept(method: str, is_request: bool, code: str, why: str) -> Any:
    """What the child is answered for a message kept from the editor (of a stuck session,
    or of one being seeded): a permission `cancelled`, another request refused, a
    notification dropped."""
    if not is_request:
        return None
    if method == PERMISSION:
        return permission_cancelled()
    raise RequestRefusedError(f"{method} is not available {why}", code=code)


def mapped_session(result: Any, ours: str, theirs: str) -> Any:
    """`result` with its `sessionId` `ours` replaced by `theirs` (extension methods pass
    through with the session ids mapped both ways: docs/wrap.md, "Pass-through")."""
    if isinstance(result, dict) and result.get("sessionId") == ours:
        return {**result, "sessionId": theirs}
    return result


def took_setting(ws: WrappedSession, method: str, params: dict[str, Any], result: Any) -> None:
    """The editor changed a setting of the child's session and the child took it: the
    log's next `turn/start` names the mode the child now has, and a config option's new
    value is recorded (`config/set`), as the child reports it in its answer (qwen-code
    sends no `current_mode_update` for the editor's own switch)."""
    if method == "session/set_mode" and isinstance(params.get("modeId"), str):
        ws.mode = params["modeId"]
        return
    if method != "session/set_config_option" or not isinstance(result, dict):
        return
    options = result.get("configOptions")
    chosen = next((o for o in options if isinstance(o, dict) and o.get("id") == params.get("configId")), None) \
        if isinstance(options, list) else None
    if chosen is None or not isinstance(chosen.get("currentValue"), str) or ws.log.closed:
        return
    if chosen.get("category") == "mode":
        ws.mode = chosen["currentValue"]
    tracker = ws.log.tracker
    try:
        ws.log.extend([config_set(chosen["id"], chosen["currentValue"], tracker.turn if tracker.in_turn else None)])
    except Exception:  # a setting that cannot be recorded does not undo the switch the child made
        log.exception("session %s: recording a config option of the wrapped agent failed", ws.id)


class _Updates:
    """The child's `session/update`s in its connection's reader (an `InlineRun`): one
    at a time, or a run of them read together."""

    __slots__ = ("_side",)

    def __init__(self, side: ChildSide) -> None:
        self._side = side

    def __call__(self, params: Any) -> None:
        self._side.on_update(params)

    def run(self, params: list[Any]) -> None:
        self._side.on_updates(params)
