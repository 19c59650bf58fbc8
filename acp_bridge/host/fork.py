"""`session/fork` (unstable in the ACP schema v1.25.0: `ForkSessionRequest`, answered
like `session/new`) for every engine with a store, once (docs/protocol.md, "Fork").

The store copies the original's turns (`SessionStore.plan_fork`, `SessionStore.fork`:
read without its owner lock, published whole or not at all, an interrupted last turn
closed in the fork as a load would close it, the original untouched), and the copy is
opened as any stored session is (the engine's `open_session`: a live session of the
host, its replay on `session/load` the same), so a fork goes on like any session. What
else a fork takes is the engine's (`Engine.fork`): our agent connects the MCP servers
the request gives; the wrapper forks the wrapped agent's session too, or gives it a
fresh one seeded with the transcript (docs/wrap.md, "Fork").

`_meta.acpBridge` of the request: `atTurn` (the last turn the fork holds; default: the
last that ended) and `replay` (true: the fork's history is sent as `session/update`s
before the answer, as `session/load` sends it; default false: ACP answers a fork like
`session/new`, and an update would name a session id the client is not told until the
answer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio

from acp_bridge.errors import CommandError, InvalidParamsError, PromptInProgressError
from acp_bridge.host.engine import OpenAnswer, S, Send
from session import SessionLog, SessionStore, validate_session_id
from session.events import Header, WrappedInfo
from session.fork import ForkPlan
from session.repair import RepairReport


class Forker(Protocol[S]):
    """What a fork needs of the engine (acp_bridge.host.host.Engine)."""

    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: S | None) -> tuple[S, RepairReport | None]: ...

    async def fork(self, source: str, params: Mapping[str, Any], plan: ForkPlan,
                   make: Callable[[WrappedInfo | None], Awaitable[S]]) -> OpenAnswer: ...


class Sessions(Protocol[S]):
    """What a fork needs of the host (acp_bridge.host.host.Host, which imports this
    module: a protocol, not an import, keeps the two apart)."""

    @property
    def engine(self) -> Forker[S]: ...

    def store(self) -> SessionStore: ...

    def find(self, session_id: Any) -> S | None: ...

    def answering(self, session_id: str) -> bool: ...

    async def send_replay(self, payload: bytes) -> None: ...


def fork_options(params: Mapping[str, Any]) -> tuple[int | None, bool]:
    """`_meta.acpBridge.atTurn` and `.replay` of a fork request, checked (-32602)."""
    meta = params.get("_meta")
    ours = meta.get("acpBridge") if isinstance(meta, dict) else None
    if ours is None:
        return None, False
    if not isinstance(ours, dict):
        raise InvalidParamsError("invalid params: _meta.acpBridge must be an object", field="_meta.acpBridge")
    at_turn, replay = ours.get("atTurn"), ours.get("replay", False)
    if at_turn is not None and (type(at_turn) is not int or at_turn < 0):
        raise InvalidParamsError("invalid params: _meta.acpBridge.atTurn must be a turn number (0 or more)",
                                 field="_meta.acpBridge.atTurn")
    if not isinstance(replay, bool):
        raise InvalidParamsError("invalid params: _meta.acpBridge.replay must be a boolean",
                                 field="_meta.acpBridge.replay")
    return at_turn, replay


async def fork_session(host: Sessions[S], source: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Fork `source` for the client: the answer (`sessionId`, the engine's fields, and
    `_meta.acpBridge`: `forkedFrom`, `turns`, `events`, `repair`, the engine's own)."""
    validate_session_id(source)
    at_turn, replay = fork_options(params)
    if host.answering(source):  # as a load or resume: its turn is not over
        raise PromptInProgressError(source)
    answer, _ = await fork_opened(host, source, params, at_turn=at_turn, replay=replay)
    return answer


async def fork_opened(host: Sessions[S], source: str, params: Mapping[str, Any], *, at_turn: int | None,
                      replay: bool = False) -> tuple[dict[str, Any], ForkPlan]:
    """The fork of `source` made and opened as `session/fork` makes it (`params`: its
    `cwd`, `mcpServers`, `additionalDirectories`, `_meta`), without its checks: the
    answer and what the fork holds. `session/fork`'s, and the wrapper's `/fork` (a
    command of the source's own running turn, which holds turns up to the last ended)."""
    live = host.find(source)
    if live is not None and live.log is not None:
        await anyio.to_thread.run_sync(live.log.flush)  # every event it has, in the store
    store = host.store()
    plan = await anyio.to_thread.run_sync(lambda: store.plan_fork(source, at_turn=at_turn))
    made: list[tuple[Header, S]] = []

    async def make(wrapped: WrappedInfo | None) -> S:
        extra = params.get("additionalDirectories") or ()
        header = await anyio.to_thread.run_sync(lambda: store.fork(
            plan, cwd=params["cwd"], additional_directories=extra, wrapped=wrapped))
        session, _ = await host.engine.open_session(header["id"], params, host.send_replay if replay else None,
                                                    None)
        made.append((header, session))
        return session

    opened = await host.engine.fork(source, params, plan, make)
    header, session = made[0]
    assert session.log is not None  # a stored session
    tracker = session.log.tracker
    answer = opened.answer({"forkedFrom": header["forkedFrom"], "repair": plan.report.to_meta(),
                            "turns": tracker.turn, "events": tracker.next_seq})
    return {"sessionId": header["id"], **answer}, plan


def fork_at(given: str) -> int | None:
    """The input of a `/fork [N]` command: the last turn the fork holds (None: the last
    that ended); CommandError for anything but a number."""
    if given and not given.isdigit():
        raise CommandError(f"/fork takes the number of the last turn the fork holds, not {given!r}")
    return int(given) if given else None


def forked_text(fork_id: str, plan: ForkPlan) -> str:
    """The answer of a `/fork` command (our agent's and the wrapper's)."""
    held = f"its turns 1-{plan.turn}" if plan.turn else "none of its turns"
    return f"Forked this session into {fork_id}, with {held}; open it from the session list (session/load)."


async def fork_stored(store: SessionStore, log: SessionLog, at_turn: int | None) -> tuple[Header, ForkPlan]:
    """A fork of our agent's live session `log` in the store, not made live (`/fork`,
    a slash command of a running session: the client opens it with `session/load`);
    its header and what it holds. The SessionError family as `plan_fork` raises it."""
    await anyio.to_thread.run_sync(log.flush)  # every event it has, in the store
    plan = await anyio.to_thread.run_sync(lambda: store.plan_fork(log.id, at_turn=at_turn))
    source = log.header
    header = await anyio.to_thread.run_sync(lambda: store.fork(
        plan, cwd=source["cwd"], additional_directories=source.get("additionalDirectories") or ()))
    return header, plan
