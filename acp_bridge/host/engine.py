"""What the host needs of each live session, whatever runs its turns: its `Turns`
(our agent's runner, the wrapped agent's turn, a recording's turn), and what those
answer with. The `Engine` that makes sessions is in acp_bridge.host.host; the whole
picture is docs/architecture.md, "The host, the engines and the one peer"."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from session import Event, SessionLog

Send = Callable[[bytes], Awaitable[None]]
"""Write already-encoded notification lines to the client (and wait for it to read)."""


@dataclass(frozen=True)
class TurnEnd:
    """How a prompt's turn ended: its `turn/end`, persisted before this is returned
    (the answer is settled from it), what the engine adds to the answer (a wrapped
    agent's own fields and `_meta`; the host's `stopReason` and `_meta.acpBridge` win),
    and whether the engine's live stream showed the end already (our agent maps every
    event it writes; a wrapped or recorded turn's end is the host's to show, so the
    person reads the same note live as on a reload)."""

    end: Event
    answer: Mapping[str, Any] = field(default_factory=dict)
    shown: bool = True


@dataclass(frozen=True)
class OpenAnswer:
    """The answer of a `session/load` or `session/resume`, as the engine makes it: its
    fields, other `_meta` members (a wrapped agent's own), and what it adds to
    `_meta.acpBridge` after the host's report of the load."""

    fields: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=dict)
    ours: Mapping[str, Any] = field(default_factory=dict)

    def answer(self, host_ours: Mapping[str, Any]) -> dict[str, Any]:
        """The answer: the fields, and `_meta` (if any) with `acpBridge` holding what the
        host says of the opening (`host_ours`), then what the engine adds."""
        answer = dict(self.fields)
        ours = {**host_ours, **self.ours}
        if ours or self.meta:
            answer["_meta"] = {**self.meta, "acpBridge": ours}
        return answer


class Turns(Protocol):
    """One live session's turns. The host calls `prompt` one at a time (a second prompt
    is refused before it gets here) and `cancel` or `stop` while it runs."""

    @property
    def log(self) -> SessionLog | None:
        """The session's log (None: an engine that keeps no log, the fake agent)."""

    async def prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        """Run one turn; its durable `turn/end`. `params`: the request's other fields."""

    def cancel(self, by: str, params: Mapping[str, Any] | None) -> bool:
        """Cancel the running turn, which then ends as `cancelled {by}` (`params`: the
        client's `session/cancel`, for an engine that passes it on). False if the
        engine has no turn to cancel (for `$/cancel_request`: the request's task is
        then cancelled instead, -32800)."""

    def stop(self) -> None:
        """The host is stopping (stdin closed): end the running turn, if any, as
        `interrupted {cause: "shutdown"}`; `prompt` still returns its `turn/end`."""

    async def close(self, *, stopping: bool) -> None:
        """The session ends here: `session/close` or `session/delete` (`stopping`
        False), or the host is stopping. No turn runs. Its log is closed."""


S = TypeVar("S", bound=Turns)
