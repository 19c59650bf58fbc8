"""A wrapped agent's compactions of one turn, as it reports them (ACP v1.25
`compaction_update`, `compaction_summary_chunk`), and the `context/compaction` events
that record them (docs/wrap.md, "Compaction and notices").

Pure; `acp_bridge.wrap.record.TurnRecorder` feeds it the agent's updates and decides
the step. ACP's updates are patches of one entity per `compactionId` (a summary given
replaces the one so far, a chunk appends to it, an error given replaces it, `null`
clears either); the log's event is the compaction as it stands after each
`compaction_update` (its status, its whole summary so far, its error), with the update
as the agent sent it (`sent`: a replay sends that). A summary chunk is kept as it came
(a `wrapped/update`, replayed to an editor that advertised compaction) and counted
into the summary the next `compaction_update` of its compaction records.

What a wrapped agent's compaction replaces in our log: every turn before the one it
happened in (`fromTurn` 1: what the agent read of them, as it was or through its own
earlier summaries, is its own business). One inside the first turn replaces nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from session.closers import Unended
from session.events import COMPACTION_ENDED, Replaces
from session.items import Item, context_compaction


@dataclass
class ChildCompaction:
    """One compaction of the agent's, as its updates so far describe it."""

    replaces: Replaces
    status: str = "in_progress"
    summary: list[Any] = field(default_factory=list)
    error: str | None = None
    recorded: bool = False  # a `context/compaction` holds it (a `compaction_update` came)

    @property
    def ended(self) -> bool:
        return self.status in COMPACTION_ENDED


class ChildCompactions:
    """The compactions the agent reported in turn `turn`."""

    def __init__(self, turn: int) -> None:
        self.turn = turn
        self._known: dict[str, ChildCompaction] = {}

    @staticmethod
    def usable(update: dict[str, Any]) -> bool:
        """Whether a `compaction_update` has an id and a status (else it is kept as it
        came, a `wrapped/update`, and describes no compaction)."""
        cid, status = update.get("compactionId"), update.get("status")
        return isinstance(cid, str) and bool(cid) and isinstance(status, str) and bool(status)

    def update(self, update: dict[str, Any], step: int) -> Item:
        """The `context/compaction` of a `usable` `compaction_update` standing in `step`."""
        cid, status = update["compactionId"], update["status"]
        known = self._entity(cid)
        known.status = status
        if "summary" in update:
            summary = update["summary"]
            known.summary = list(summary) if isinstance(summary, list) else []
        if "error" in update:
            error = update["error"]
            known.error = error if isinstance(error, str) else None
        known.recorded = True
        return context_compaction(self.turn, step, cid, replaces=known.replaces, summary=list(known.summary),
                                  status=status, error=known.error, sent=update)

    def chunk(self, update: dict[str, Any]) -> None:
        """A `compaction_summary_chunk`: its content appended to its compaction's
        summary (a first-seen id starts one in progress, as ACP has a client do)."""
        cid, content = update.get("compactionId"), update.get("content")
        if isinstance(cid, str) and cid and content is not None:
            self._entity(cid).summary.append(content)

    def unended(self) -> list[Unended]:
        """The recorded compactions that have not ended (the step they stand in may not
        end before they do)."""
        return [Unended(cid, (c.replaces["fromTurn"], c.replaces["toTurn"]))
                for cid, c in self._known.items() if c.recorded and not c.ended]

    def _entity(self, cid: str) -> ChildCompaction:
        known = self._known.get(cid)
        if known is None:
            known = self._known[cid] = ChildCompaction({"fromTurn": 1, "toTurn": self.turn - 1})
        return known
