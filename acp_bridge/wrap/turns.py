"""One `session/prompt` through the wrapper: recorded, passed on, settled.

The prompt opens a turn in our log (`TurnRecorder.prompt`), goes to the child under
its session id, and while it runs the child's updates are recorded by the same
recorder (acp_bridge.wrap.upstream). The child's answer closes the turn:
`TurnRecorder.answer` for a result, `.failed` for an error answer, `.cancelled` when
the editor cancelled and the child said so. A child that dies first closes it with
the crash closers (`SessionLog.close_interrupted(cause="crash")`), and the end of our
stdin with the shutdown ones, as our own agent does: a live crash and one found on
load are written the same way.

Then, as for our own agent, the editor's answer is settled from the persisted
`turn/end` (acp_bridge.agent.settlement): its `stopReason` and `_meta.acpBridge` are
ours, whatever else the child's answer carries (its own `_meta`, usage) is kept.

The turn's closing events are appended on the event loop, not in a worker thread as
the agent does: the child's updates are recorded in its connection's reader, and the
turn's end must sit after every update that came before the answer and before every
one after it. That costs the loop one fsync per turn (and one per step end).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from acp_bridge.agent.errors import PromptInProgressError
from acp_bridge.agent.settlement import TurnFailed, settle
from acp_bridge.rpc.protocol import RpcError
from acp_bridge.wrap.link import ChildDiedError, ChildLink, obj
from acp_bridge.wrap.record import TurnRecorder
from acp_bridge.wrap.sessions import WrappedSession
from session.events import TURN_END, Event

ChildSession = Callable[[WrappedSession], Awaitable[tuple[ChildLink, str]]]


async def run_prompt(ws: WrappedSession, prompt: list[Any], rest: dict[str, Any], *,
                     child_session: ChildSession, agent: str) -> dict[str, Any]:
    """Record and pass on one prompt of `ws`; the settled answer (or RpcError)."""
    if ws.recorder is not None:
        raise PromptInProgressError(ws.id)
    recorder = TurnRecorder(ws.log.tracker.turn + 1, agent=agent, mode=ws.mode)
    ws.recorder, ws.cancelled_by, ws.cancelling = recorder, None, False
    result: dict[str, Any] = {}
    try:
        link, child_sid = await child_session(ws)  # a dead child is restarted first
        ws.log.extend(recorder.prompt(prompt))
        with anyio.CancelScope() as scope:
            ws.stopping = scope
            ends = await _ask(ws, recorder, link, {**rest, "sessionId": child_sid, "prompt": prompt}, result)
        if scope.cancelled_caught:  # our stdin ended (WrapAgent.on_eof)
            ends = await anyio.to_thread.run_sync(lambda: ws.log.close_interrupted(cause="shutdown"))
    finally:
        ws.recorder, ws.stopping = None, None
        if ws.log.tracker.in_turn and not ws.log.closed:
            # Anything else that ended the wait (a bug, a failed write): the turn is
            # never left open.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: ws.log.close_interrupted(cause="shutdown"))
    end = ends[-1]
    assert end["type"] == TURN_END, end
    return _answer(end, result)


async def _ask(ws: WrappedSession, recorder: TurnRecorder, link: ChildLink, params: dict[str, Any],
               result: dict[str, Any]) -> list[Event]:
    """The child's answer to the prompt, recorded: the events that closed the turn."""
    try:
        answer = await link.call("session/prompt", params)
    except ChildDiedError:
        return await anyio.to_thread.run_sync(lambda: ws.log.close_interrupted(cause="crash"))
    except RpcError as exc:
        return ws.log.extend(recorder.failed(exc.to_json()))
    if not isinstance(answer, dict):
        answer = {}
    result.update(answer)
    if answer.get("stopReason") == "cancelled" and ws.cancelled_by is not None:
        items = recorder.cancelled(ws.cancelled_by)
    else:
        items = recorder.answer(answer)
    return ws.log.extend(items)


def _answer(end: Event, child: dict[str, Any]) -> dict[str, Any]:
    settled = settle(end)
    if isinstance(settled, TurnFailed):
        raise RpcError(settled.code, settled.message, dict(settled.data))
    answer = {k: v for k, v in child.items() if k not in ("stopReason", "_meta")}
    meta = obj(child.get("_meta"))
    answer["stopReason"] = settled["stopReason"]
    answer["_meta"] = {**meta, **settled["_meta"]}
    return answer
